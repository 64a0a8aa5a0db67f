"""Reader for Triton cache metadata (``triton_cache/<hash>/*.json`` on GPU entries).

Triton writes one JSON per compiled kernel with a ``target`` (``{"backend": "cuda", "arch": 90,
"warp_size": 32}``) and the ``triton_version`` — the best on-disk evidence of the GPU an entry
was compiled for."""

from __future__ import annotations

import os
from dataclasses import dataclass

from vllm_cache_tools.read import jsontext
from vllm_cache_tools.read.errors import ReadError, unreadable
from vllm_cache_tools.read.noatime import read_noatime


@dataclass(frozen=True)
class TritonKernelMeta:
    name: str | None
    backend: str | None
    arch: str | None
    triton_version: str | None

    @property
    def target(self) -> str:
        if self.backend and self.arch:
            return f"{self.backend} sm_{self.arch}" if self.backend == "cuda" else (
                f"{self.backend} {self.arch}")
        return self.backend or "unknown"


def parse_triton_meta(text: str) -> TritonKernelMeta:
    data = jsontext.loads(text, "Triton metadata")
    if not isinstance(data, dict):
        raise ReadError("Triton metadata is not a JSON object")
    target = data.get("target")
    backend = arch = None
    if isinstance(target, dict):
        backend, arch = _word(target.get("backend")), _word(target.get("arch"))
    elif isinstance(target, list) and len(target) >= 2:  # older Triton: [backend, arch, ...]
        backend, arch = _word(target[0]), _word(target[1])
    return TritonKernelMeta(_word(data.get("name"), 256), backend, arch,
                            _word(data.get("triton_version")))


def _word(v: object, limit: int = 64) -> str | None:
    """A short string or integer field as text; anything else (lists, huge values) is not
    evidence of a target."""
    if isinstance(v, str) and v and len(v) <= limit:
        return v
    if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 10**9:
        return str(v)
    return None


def read_triton_meta(path: str | os.PathLike[str]) -> TritonKernelMeta:
    try:
        raw = read_noatime(path, 4 * 1024 * 1024)
    except OSError as exc:
        raise unreadable("Triton metadata", exc) from None
    return parse_triton_meta(raw.decode("utf-8", errors="replace"))
