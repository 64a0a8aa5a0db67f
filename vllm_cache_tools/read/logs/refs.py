"""References to one start of a log, as ``log --compare`` and ``explain --logs`` take them:
``FILE`` (the last start) or ``FILE@N`` (the N-th start, 1-based; negative counts from the
end). One place for the syntax, the read and the choice, for every verb that takes them."""

from __future__ import annotations

import os
import re

from vllm_cache_tools.read.logs.inputs import LogInputError
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


__all__ = ["parse_ref", "pick_start", "read_starts"]
