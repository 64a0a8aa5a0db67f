"""One rule for text that reaches a terminal: control characters are shown, never obeyed.

A file name, a log line, a manifest field, a ledger host name, a bundle's or a store's index
metadata are written by someone else; printed raw, an ``ESC ]`` sequence sets the terminal's
title or clipboard, ``ESC [`` moves the cursor over earlier lines, a bidi override turns
``evil.py\\u202e`` into a name that reads otherwise. :func:`escape_controls` replaces each
such character by its visible Python escape (``\\x1b``, ``\\x07``, ``\\u202e``), so what is
printed is still exact, readable and copyable.

What is escaped (:data:`CONTROL_CHARS`): C0 (U+0000-U+001F), DEL (U+007F), C1
(U+0080-U+009F; U+009B is a one-byte CSI on some terminals), the bidi embeddings, overrides and
isolates (U+202A-U+202E, U+2066-U+2069), the marks U+200E, U+200F, U+061C, and the line and
paragraph separators U+2028, U+2029. ``keep`` spares the layout characters a writer emits
itself (the CLI's writers keep ``\\n`` and ``\\t`` of the whole rendered text; a table cell
or a single field keeps nothing).

Every human output of the CLI passes this at its one writer (``cli/common.py``); ``--json``
needs no more than JSON's own escaping (``ensure_ascii``). Standard library only.
"""

from __future__ import annotations

import functools
import re

_RANGES = ((0x00, 0x1F), (0x7F, 0x9F), (0x061C, 0x061C), (0x200E, 0x200F), (0x2028, 0x2029),
           (0x202A, 0x202E), (0x2066, 0x2069))
"""Every character escaped, as inclusive code point ranges."""


def _class_body(keep: str = "") -> str:
    spared = {ord(c) for c in keep}
    return "".join(f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"
                   for lo, hi in _RANGES for c in range(lo, hi + 1) if c not in spared)


CONTROL_CHARS = _class_body()
"""A regular-expression character class body naming every character escaped."""
SGR = re.compile(r"\x1b\[[0-9;]*m")
"""Select Graphic Rendition (bold, colour, reset): the only sequence this tool's own styling
(rich, a bold table header) writes."""


@functools.lru_cache(maxsize=8)
def _pattern(keep: str) -> re.Pattern[str]:
    # A plain class (no look-ahead per character): ~50x faster on a long table.
    return re.compile(f"[{_class_body(keep)}]")


def _visible(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def escape_controls(text: str, keep: str = "") -> str:
    """``text`` with every control or bidi character (:data:`CONTROL_CHARS`) but those in
    ``keep`` replaced by its visible escape (``\\x1b``, ``\\u202e``); ``text`` itself when
    there is none (the common case costs one regex search)."""
    p = _pattern(keep)
    if p.search(text) is None:
        return text
    return p.sub(_visible, text)


def escape_controls_but_sgr(text: str, keep: str = "") -> str:
    """:func:`escape_controls`, sparing whole SGR sequences (:data:`SGR`): for text a styling
    library rendered from data that was escaped before it was styled."""
    if "\x1b" not in text:
        return escape_controls(text, keep)
    out: list[str] = []
    last = 0
    for m in SGR.finditer(text):
        out.append(escape_controls(text[last:m.start()], keep))
        out.append(m.group())
        last = m.end()
    out.append(escape_controls(text[last:], keep))
    return "".join(out)


def has_controls(text: str, keep: str = "") -> bool:
    """Whether ``text`` holds a character :func:`escape_controls` would escape."""
    return _pattern(keep).search(text) is not None


__all__ = ["CONTROL_CHARS", "SGR", "escape_controls", "escape_controls_but_sgr",
           "has_controls"]
