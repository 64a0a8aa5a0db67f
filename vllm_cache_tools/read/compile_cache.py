"""Reader for the backend tree's ``vllm_compile_cache.py`` (and its predecessor
``inductor_hash_cache.py``, vLLM 0.6.5-0.7.2: a list of ``(shape, graph_index, hash[, path])``).

vLLM's ``CompilerManager.save_to_file`` writes ``pprint.pformat(self.cache)``: a Python literal
mapping ``(compile_range_or_size, graph_index, compiler_name)`` to a handle (older versions: a
``(key, path)`` tuple; vLLM 0.32 with standalone compile: ``{"cache_key", "graph_handle"}``).
Read with :func:`ast.literal_eval` only: the file is never executed.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass
from typing import Any

from vllm_cache_tools.read.errors import ReadError, unreadable
from vllm_cache_tools.read.noatime import read_noatime

MAX_BYTES = 64 * 1024 * 1024


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
            return str(gh[0])
        ck = handle.get("cache_key")
        return str(ck) if ck is not None else None
    if isinstance(handle, tuple) and handle:
        return str(handle[0])
    return str(handle) if handle is not None else None


def parse_compile_cache(text: str) -> tuple[CompiledGraphRecord, ...]:
    try:
        data = ast.literal_eval(text)
    except (SyntaxError, ValueError, MemoryError, RecursionError, TypeError) as exc:
        raise ReadError(f"vllm_compile_cache.py is not a Python literal "
                        f"({type(exc).__name__})") from None
    if isinstance(data, list):
        # vLLM 0.6.5-0.7.2 inductor_hash_cache.py: [(shape, graph_index, hash[, path]), ...]
        rows = {(t[0], t[1], "inductor"): t[2:] for t in data
                if isinstance(t, tuple) and len(t) >= 3}
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
            compile_range=str(rng),
            graph_index=idx if isinstance(idx, int) else None,
            compiler=str(compiler) if compiler is not None else None,
            artifact=_artifact(handle),
        ))
    out.sort(key=lambda r: (r.compile_range, r.graph_index or 0))
    return tuple(out)


def read_compile_cache(path: str | os.PathLike[str]) -> tuple[CompiledGraphRecord, ...]:
    try:
        if os.path.getsize(path) > MAX_BYTES:
            raise ReadError("vllm_compile_cache.py is implausibly large")
        text = read_noatime(path).decode("utf-8", errors="replace")
    except OSError as exc:
        raise unreadable("vllm_compile_cache.py", exc) from None
    if not text.strip():
        raise ReadError("empty vllm_compile_cache.py")
    return parse_compile_cache(text)
