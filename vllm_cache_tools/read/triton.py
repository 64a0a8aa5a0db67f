"""Reader for Triton cache metadata (``triton_cache/<hash>/*.json`` on GPU entries).

Triton writes one JSON per compiled kernel with a ``target`` (``{"backend": "cuda", "arch": 90,
"warp_size": 32}``) and the ``triton_version`` — the best on-disk evidence of the GPU an entry
was compiled for."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

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
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ReadError(f"invalid Triton metadata JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        raise ReadError("Triton metadata is not a JSON object")
    target = data.get("target")
    backend = arch = None
    if isinstance(target, dict):
        backend = str(target["backend"]) if "backend" in target else None
        arch = str(target["arch"]) if "arch" in target else None
    elif isinstance(target, list) and len(target) >= 2:  # older Triton: [backend, arch, ...]
        backend, arch = str(target[0]), str(target[1])
    name = data.get("name")
    tv = data.get("triton_version")
    return TritonKernelMeta(str(name) if name else None, backend, arch,
                            str(tv) if tv else None)


def read_triton_meta(path: str | os.PathLike[str]) -> TritonKernelMeta:
    try:
        raw = read_noatime(path, 4 * 1024 * 1024)
    except OSError as exc:
        raise unreadable("Triton metadata", exc) from None
    return parse_triton_meta(raw.decode("utf-8", errors="replace"))
