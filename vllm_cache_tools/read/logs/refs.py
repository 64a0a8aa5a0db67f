"""References to one start of a log, as ``log --compare`` and ``explain --logs`` take them:
``FILE`` (the last start) or ``FILE@N`` (the N-th start, 1-based; negative counts from the
end). One place for the syntax, the read and the choice, for every verb that takes them."""

from __future__ import annotations

import os
import re

from vllm_cache_tools.read.logs.inputs import LogInputError, check_inputs
from vllm_cache_tools.read.logs.records import StartLog
from vllm_cache_tools.read.logs.stream import LogStream

_REF = re.compile(r"^(?P<path>.*)@(?P<n>-?\d+)$")


def parse_ref(ref: str) -> tuple[str, int | None]:
    """``(path, n)``: ``n`` None where the reference names no start (a file named ``a@1``
    that exists is a file, not a reference)."""
    m = _REF.match(ref)
    if m is not None and m.group("path") and not os.path.exists(ref):
        return m.group("path"), int(m.group("n"))
    return ref, None


def read_starts(path: str, accelerate: bool) -> tuple[list[StartLog], list[str]]:
    """Every start of one log file, and the reader's warnings."""
    stream = LogStream([path], accelerate=accelerate)
    return list(stream), stream.warnings


def pick_start(starts: list[StartLog], n: int | None, ref: str, default: int) -> StartLog:
    """Start ``n`` (``default`` where the reference named none); :class:`LogInputError` when
    the log has no such start."""
    if not starts:
        raise LogInputError(
            f"{ref}: no vLLM start with compile lines found (VLLM_LOGGING_LEVEL=DEBUG?)")
    idx = default if n is None else n
    pos = idx - 1 if idx > 0 else len(starts) + idx
    if not 0 <= pos < len(starts) or idx == 0:
        raise LogInputError(f"{ref}: there is no start {idx} (the file has {len(starts)})")
    return starts[pos]


def read_pair(old_ref: str, new_ref: str, accelerate: bool
              ) -> tuple[StartLog, StartLog, list[str]]:
    """The two starts ``old_ref`` and ``new_ref`` name, and the reader's warnings; a file
    named twice is read once. The same file twice without ``@N``: its last two starts.
    :class:`LogInputError` (one line) for inputs that cannot be read or starts not there."""
    (op, on), (np_, nn) = parse_ref(old_ref), parse_ref(new_ref)
    if "-" in (op, np_):
        raise LogInputError("comparing needs log files (stdin cannot be read twice)")
    check_inputs([op, np_])
    old_starts, w1 = read_starts(op, accelerate)
    new_starts, w2 = (old_starts, []) if np_ == op else read_starts(np_, accelerate)
    same_file = op == np_ and on is None and nn is None
    if same_file and len(old_starts) < 2:
        raise LogInputError(f"{op}: has {len(old_starts)} start(s); comparing it with itself "
                            "needs two (or say which: FILE@1 FILE@2)")
    old = pick_start(old_starts, on, old_ref, -2 if same_file else -1)
    new = pick_start(new_starts, nn, new_ref, -1)
    return old, new, list(dict.fromkeys([*w1, *w2]))


__all__ = ["parse_ref", "pick_start", "read_pair", "read_starts"]
