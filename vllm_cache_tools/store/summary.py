"""One entry as a row of ``ls --json`` (:func:`entry_summary`), and that row kept as text in
the listing index (:func:`static_row`) so an indexed re-listing writes it without building
the row again (:func:`summary_text`).

Why: on the benchmark tree (200k files, 5.7k entries, docs/store.md) an indexed ``ls --json``
spent about a quarter of its CPU on the rows (the dicts, three ISO times each, the secrets
check, ``json``: 0.128 s), more than on its ``lstat``s (0.085 s). Most of a row is what the
index record already holds (key, layout, sizes, ranks, created, modified, versions, model,
hardware); only :data:`DYNAMIC` fields change without the record changing (the path as the
root was spelt, the state when the entry is in use, the last use from the key files' atimes or
the ledger, the ledger's hits). The row is written once with a placeholder in each of those
(a row with anything the secrets rules would hide is not kept: it is built afresh each time),
and the placeholders are cut out (a NUL marks each place: JSON text never holds one); the rest
is stored with the record and is valid exactly as long as the record is. One string per
entry, not one per piece: a root of 1M files holds ~30-40k of them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from json.encoder import encode_basestring_ascii
from typing import Any

from vllm_cache_tools.redaction import dumps, is_clean, redact_value
from vllm_cache_tools.store.locate import display_path
from vllm_cache_tools.store.types import Entry
from vllm_cache_tools.units import iso

DYNAMIC = ("path", "state", "state_detail", "last_used", "last_used_source", "hits", "misses")
"""The fields of a row that are not in the index record, in the row's order."""

_MARK = "\x00vct-dynamic-{}\x00"
_MARKS = tuple(json.dumps(_MARK.format(i)) for i in range(len(DYNAMIC)))


def entry_summary(e: Entry) -> dict[str, Any]:
    """One row of ``ls --json``."""
    return {
        "key": e.key,
        "layout": e.layout,
        "path": display_path(e.path),
        "size_bytes": e.size_bytes,
        "disk_bytes": e.disk_bytes,
        "files": e.stats.files,
        "ranks": list(e.ranks),
        "prefixes": list(e.prefixes),
        "state": e.state,
        "state_detail": e.state_detail or None,
        "created": iso(e.created),
        "modified": iso(e.modified),
        "last_used": iso(e.last_used),
        "last_used_source": e.last_used_source,
        "hits": e.hits,
        "misses": e.misses,
        "vllm_version": e.vllm_version,
        "torch_version": e.torch_version,
        "model": e.model,
        # The served model (name or path) from manifests or logs; ``model`` is the traced code.
        "checkpoint": getattr(e, "checkpoint", None),
        "checkpoint_detail": getattr(e, "checkpoint_detail", None),
        "hardware": e.hardware,
    }


def _dynamic(e: Entry) -> tuple[Any, ...]:
    """The :data:`DYNAMIC` fields of ``e``'s row, in order (as :func:`entry_summary`)."""
    return (display_path(e.path), e.state, e.state_detail or None, iso(e.last_used),
            e.last_used_source, e.hits, e.misses)


def static_row(e: Entry) -> str:
    """``e``'s row as ``ls --json`` writes it with a NUL in place of each :data:`DYNAMIC`
    value, or ``""`` when it is not to be kept: a value holding a placeholder's text, or one
    the secrets rules would hide (a hidden value shows a digest keyed by this user's
    redaction key, which can change while the record does not: such rows are built afresh
    each time)."""
    row = entry_summary(e)
    for i, name in enumerate(DYNAMIC):
        row[name] = _MARK.format(i)
    if not is_clean([row]):
        return ""
    text = json.dumps([row], separators=(",", ":"))[1:-1]
    pieces = []
    start = 0
    for mark in _MARKS:
        at = text.find(mark, start)
        if at < 0 or text.count(mark) != 1:
            return ""
        pieces.append(text[start:at])
        start = at + len(mark)
    pieces.append(text[start:])
    return "\x00".join(pieces)


_ESCAPE = encode_basestring_ascii  # what json.dumps writes a str as


def _enc(x: Any) -> str:
    """``json.dumps(x)`` of a :data:`DYNAMIC` value (a str, an int or ``None``)."""
    if x is None:
        return "null"
    return _ESCAPE(x) if type(x) is str else json.dumps(x)


def summary_text(entries: Sequence[Entry]) -> str:
    """The rows of ``entries`` joined by commas: exactly the text of
    ``dumps([entry_summary(e) for e in entries], separators=(",", ":"))[1:-1]``; rows kept
    in the index (``Entry.listing``) are spliced, only their :data:`DYNAMIC` values encoded
    (and checked for secrets together, as one batch would be)."""
    if not entries or any(not e.listing for e in entries):
        return dumps([entry_summary(e) for e in entries], separators=(",", ":"))[1:-1]
    values = [_dynamic(e) for e in entries]
    # The test dumps makes of a batch, on its distinct names and strings (each string is
    # judged alone, a name as a value would be).
    if not is_clean([*DYNAMIC, *{x for v in values for x in v if type(x) is str}]):
        values = [tuple(redact_value(n, x) for n, x in zip(DYNAMIC, v, strict=True))
                  for v in values]
    enc = _enc
    out = []
    for e, v in zip(entries, values, strict=True):
        p = e.listing.split("\x00")
        out.append("".join((p[0], enc(v[0]), p[1], enc(v[1]), p[2], enc(v[2]), p[3],
                            enc(v[3]), p[4], enc(v[4]), p[5], enc(v[5]), p[6], enc(v[6]),
                            p[7])))
    return ",".join(out)
