"""Itemise a compiler-hash difference: the raw Inductor factors vLLM hashes
(``get_inductor_factors()``: ``CacheBase.get_system()``, ``torch_key()``, Inductor and functorch
portable configs), compared field by field. Pure functions over their JSON form (as the live
probe and the GPU fixture in tests/fixtures/gpu record them)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from vllm_cache_tools.keys.hardware import hardware_detail
from vllm_cache_tools.store.types import Cause

_TRITON = re.compile(r"^(\d+\.\d+(?:\.\d+)?)")


# Options torch reads from variables outside the TORCHINDUCTOR_<OPTION> pattern
# (torch/_inductor/config.py). A CI runner's CXX changes cpp.cxx and with it the key.
_OTHER_ENV = {"cpp.cxx": "CXX", "trace.enabled": "TORCH_COMPILE_DEBUG",
              "trace.save_real_tensors": "TORCH_COMPILE_DEBUG_SAVE_REAL"}


def inductor_env_var(option: str) -> str:
    """The env var torch reads for an Inductor option (``benchmark_kernel`` ->
    ``TORCHINDUCTOR_BENCHMARK_KERNEL``; ``cpp.dynamic_threads`` ->
    ``TORCHINDUCTOR_CPP_DYNAMIC_THREADS``; ``cpp.cxx`` -> ``CXX``), the usual way such a value
    changes."""
    return _OTHER_ENV.get(option) or "TORCHINDUCTOR_" + option.upper().replace(".", "_")


def _short_triton(v: Any) -> Any:
    # torch appends a hash of Triton's source files to the version: keep the release.
    if isinstance(v, str) and (m := _TRITON.match(v)):
        return m.group(1) + ("+" + v[len(m.group(1)):][:12] if len(v) > len(m.group(1))
                             else "")
    return v


def diff_inductor_factors(old: Mapping[str, Any], new: Mapping[str, Any],
                          evidence: str) -> list[Cause]:
    out: list[Cause] = []
    so, sn = old.get("system") or {}, new.get("system") or {}
    do, dn = (so.get("device") or {}), (sn.get("device") or {})
    for k in sorted(set(do) | set(dn)):
        if do.get(k) != dn.get(k):
            out.append(Cause("compiler", f"device.{k}", do.get(k), dn.get(k), evidence,
                             hardware_detail("compiler", f"device.{k}")
                             or "another GPU model or a CPU"))
    vo, vn = (so.get("version") or {}), (sn.get("version") or {})
    for k in sorted(set(vo) | set(vn)):
        if vo.get(k) != vn.get(k):
            out.append(Cause("compiler", f"version.{k}", _short_triton(vo.get(k)),
                             _short_triton(vn.get(k)), evidence,
                             hardware_detail("compiler", f"version.{k}") or ""))
    if old.get("torch_key") != new.get("torch_key"):
        out.append(Cause("compiler", "torch_key", str(old.get("torch_key"))[:16],
                         str(new.get("torch_key"))[:16], evidence,
                         "another torch build (torch_key hashes torch's own sources)"))
    for section, label in (("inductor_config", "inductor"), ("functorch_config", "functorch")):
        co, cn = old.get(section) or {}, new.get(section) or {}
        for k in sorted(set(co) | set(cn)):
            if co.get(k) != cn.get(k):
                hint = (f"likely set by {inductor_env_var(k)}" if section == "inductor_config"
                        else "set by torch/vLLM around compilation")
                out.append(Cause("compiler", f"{label}.{k}", co.get(k), cn.get(k), evidence,
                                 hint))
    return out
