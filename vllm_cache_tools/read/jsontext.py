"""JSON from a cache file, read totally: whatever the bytes, the answer is a value within known
bounds or a one-line :class:`ReadError` (issue 12, item 3).

:func:`json.loads` alone raises ``RecursionError`` on deep nesting, ``ValueError`` (not
``JSONDecodeError``) on an integer past 4300 digits, and turns a few MB of ``[{},{},...]``
into hundreds of MB of objects; values nested a few hundred deep pass it but make every
consumer that recurses fail later. So: a cap on containers (counted in the text, before
parsing), any exception of the parser becomes :class:`ReadError`, and nesting is bounded
before the parser runs (:data:`MAX_DEPTH`, measured on the text by :func:`text_depth`; the
parser's own ``RecursionError`` stays caught behind it). Every JSON read from a cache, a
bundle, a store, a ledger, a host profile or a memo goes through :func:`loads` (issue 23,
item 9: a bundle manifest nested 200,000 deep was "internal error: RecursionError", exit 3).

Text that is not JSON is :class:`ReadError` (the file is broken: ``corrupt``); JSON past one
of these limits is :class:`UnreadableError` (see :func:`beyond_limits`): nothing vLLM or the
recorder writes comes near them, but a file that does is not judged rather than called
corrupt, so no policy deletes an entry for being bigger than expected."""

from __future__ import annotations

import json
import math
from typing import Any

from vllm_cache_tools.read.errors import ReadError, UnreadableError

MAX_DEPTH = 64
"""Nesting of arrays/objects (recorder manifests: 5; factors: 3)."""
MAX_CONTAINERS = 100_000
"""``[`` and ``{`` in the text, strings included (real manifests: ~120)."""

_NOT_MARK = bytes(sorted(set(range(256)) - set(b'"[{]}')))
_ONE_BRACKET = bytes.maketrans(b"{}", b"[]")


def loads(raw: bytes | str, what: str, *, max_depth: int = MAX_DEPTH,
          max_containers: int | None = MAX_CONTAINERS) -> Any:
    """Parse ``raw`` (bytes are detected as JSON's UTF-8/16/32; invalid UTF-8 is an error).
    Raises :class:`ReadError` naming ``what`` for anything but JSON within the bounds.
    ``max_containers=None``: no count cap (a bundle manifest lists every file it carries;
    its byte cap bounds it)."""
    open_brackets = (raw.count(b"[") + raw.count(b"{") if isinstance(raw, bytes)
                     else raw.count("[") + raw.count("{"))
    if max_containers is not None and open_brackets > max_containers:
        raise beyond_limits(what, f"over {max_containers} JSON arrays/objects")
    if open_brackets > max_depth and text_depth_over(raw, max_depth):
        raise beyond_limits(what, f"JSON nested more than {max_depth} deep")
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ReadError(f"invalid JSON in {what}: {exc.msg} at line {exc.lineno}") from None
    except UnicodeError as exc:
        raise ReadError(f"invalid JSON in {what}: {one_line(exc)}") from None
    except RecursionError:
        raise beyond_limits(what, "JSON nested too deep") from None
    except (ValueError, TypeError, MemoryError, OverflowError) as exc:
        # ValueError here: an integer past Python's 4300-digit conversion limit.
        raise beyond_limits(what, one_line(exc)) from None
    return data


def text_depth_over(raw: bytes | str, limit: int) -> bool:
    """Whether arrays/objects in JSON text nest deeper than ``limit``, without parsing it, at C
    speed: escaped backslashes and quotes are blanked; everything but quotes and brackets is
    dropped; each run of quotes is cut to its parity (``""`` is an empty string or an empty
    stretch between two strings: no bracket lost, and every later quote keeps its role), so
    only strings holding brackets are left to cut out; every bracket kind is made one, then
    innermost ``[]`` pairs are removed one level per pass. Exact for valid JSON; unbalanced
    text is left to the parser (it refuses it anyway)."""
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogatepass")
    if b"\\" in raw:
        raw = raw.replace(b"\\\\", b"__").replace(b'\\"', b"__")
    marks = raw.translate(None, delete=_NOT_MARK).replace(b'""', b"")
    if b'"' in marks:  # strings holding brackets: keep what is outside them
        marks = b"".join(marks.split(b'"')[::2])
    brackets = marks.translate(_ONE_BRACKET)
    for _ in range(limit):
        if not brackets:
            return False
        fewer = brackets.replace(b"[]", b"")
        if len(fewer) == len(brackets):
            return False  # unbalanced: not JSON
        brackets = fewer
    return bool(brackets)


def beyond_limits(what: str, why: str) -> UnreadableError:
    """The error for a file past a reader's limits: not read, so not judged (``unknown``)."""
    return UnreadableError(f"{what} not read: {why} (past this reader's limits)")


def depth_exceeds(value: Any, limit: int) -> bool:
    """Whether arrays/objects in ``value`` nest deeper than ``limit`` (iterative)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            v = v.values()
        elif not isinstance(v, list):
            continue
        if d >= limit:
            return True
        stack.extend((c, d + 1) for c in v if isinstance(c, dict | list))
    return False


def one_line(exc: BaseException, limit: int = 160) -> str:
    """An exception as one short line (messages may quote hostile input)."""
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[:limit] + "..."


def finite_time(v: Any) -> float | None:
    """A plausible POSIX time (1970 .. 2200) from a JSON number, else ``None``."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    try:
        t = float(v)
    except OverflowError:
        return None
    return t if math.isfinite(t) and 0.0 <= t < 7.3e9 else None
