"""The recorder's hook points in vLLM, patched when their modules are imported:

* ``vllm.compilation.backends.CompilerManager.initialize_cache(cache_dir, disable_cache,
  prefix)``: the backend tree's ``<key>/rank_i_j/<prefix>`` as vLLM decided it, and whether
  ``vllm_compile_cache.py`` was already there (a hit) or not (a miss);
* ``vllm.compilation.backends.VllmBackend.__call__``: around it, the traced files (before vLLM
  clears them), the Inductor factors in the exact context vLLM hashed them, and timings; the
  backend manifest is written when it returns;
* ``vllm.compilation.caching.aot_compile_hash_factors``: the AOT key's factors as computed;
* ``vllm.compilation.backends.CompilerManager.load``: a backend artifact vLLM cannot load
  (vLLM raises and the start fails): counted, and moved aside when allowed
  (:mod:`.quarantine`), so vLLM compiles it again;
* ``vllm.compilation.decorators._try_load_aot_compiled_fn(model, path)``: the AOT tree's
  ``<sha256>/rank_i_j/model``, hit / miss / load failure (with vLLM's own reason).

Each wrapper calls vLLM's function unchanged and records around it; a failure in the recorder
prints one warning line and never reaches vLLM. A hook point that is missing (another vLLM
version) is skipped with a warning: no manifest, vLLM unaffected."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.abc
import inspect
import json
import logging
import os
import socket
import sys
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from vllm_cache_tools import safeio
from vllm_cache_tools.recorder import START_ENV, capture, guard, metrics, quarantine, write

SPENT = [0.0]
"""Seconds this process spent in the recorder (reported in ledger events)."""
_WARNED: set[str] = set()
_AOT_FACTORS: dict[int, list[Any]] = {}
FACTORS_CAP = 16 << 20
"""``cache_key_factors.json`` is a few KB; more is not vLLM's."""


def warn(what: str, exc: BaseException | None = None) -> None:
    if what in _WARNED:
        return
    _WARNED.add(what)
    detail = f": {type(exc).__name__}: {exc}" if exc is not None else ""
    sys.stderr.write(f"WARNING vllm-cache-tools recorder: {what}{detail} "
                     "(nothing recorded for it; vLLM is unaffected)\n")


class _Timed:
    def __enter__(self) -> None:
        self.t0 = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        SPENT[0] += time.perf_counter() - self.t0


def _event(compile_cache: str, t0: float, **fields: Any) -> None:
    """Append one ledger event; ``recorder_s`` counts the recording in flight (since ``t0``)."""
    write.append_event(compile_cache, {
        "v": 1, "time": time.time(), "host": socket.gethostname(), "pid": os.getpid(),
        **({"start": sid} if (sid := os.environ.get(START_ENV)) else {}),
        "argv": capture.redact_argv(list(sys.argv)),
        "recorder_s": round(SPENT[0] + time.perf_counter() - t0, 6),
        **capture.ledger_fields(fields)})


# --- backend tree ---------------------------------------------------------------------------

def patch_backends(mod: ModuleType) -> None:
    backend, manager = mod.VllmBackend, mod.CompilerManager
    orig_init, orig_call = manager.initialize_cache, backend.__call__
    orig_load = manager.load
    sig, load_sig = inspect.signature(orig_init), inspect.signature(orig_load)
    logger = getattr(mod, "logger", None)

    def initialize_cache(self: Any, *args: Any, **kwargs: Any) -> Any:
        verdict: guard.Verdict | None = None
        existed = disabled = False
        d = ""
        with contextlib.suppress(Exception):
            self._vct_failures = []
        try:
            with _Timed():
                ba = sig.bind(self, *args, **kwargs)
                ba.apply_defaults()
                d = str(ba.arguments["cache_dir"])
                disabled = bool(ba.arguments.get("disable_cache", False))
                artifact = os.path.join(d, BACKEND_ARTIFACT)
                existed = os.path.exists(artifact)
                owner = getattr(self, "_vct_backend", None)
                if existed and not disabled and owner is not None:
                    try:
                        verdict = _backend_guard(owner, d, artifact, logger)
                    except Exception as exc:
                        warn("wrong-hit guard", exc)
                self._vct_decision = (d, disabled, existed, verdict)
        except Exception as exc:
            warn("backend cache decision", exc)
        if verdict is not None and verdict.recompile:
            # vLLM's own "cache off" path for this folder: nothing read, nothing saved.
            ba.arguments["disable_cache"] = True
            return orig_init(*ba.args, **ba.kwargs)
        try:
            return orig_init(self, *args, **kwargs)
        except Exception as exc:
            # A table vLLM cannot parse (a cut vllm_compile_cache.py: ast.literal_eval's
            # SyntaxError / ValueError): vLLM 0.32 raises here and the start fails. Moved
            # aside (when allowed), this prefix starts empty. Any other error (a folder it
            # cannot make, the compiler's own set-up) is not the table's.
            if not isinstance(exc, (SyntaxError, ValueError)) \
                    or not (existed and not disabled) or not _backend_failed(
                    self, d, [BACKEND_ARTIFACT], exc, logger):
                raise
        return orig_init(self, *args, **kwargs)

    def load(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return orig_load(self, *args, **kwargs)
        except Exception as exc:
            # An artifact vLLM cannot load (truncated, damaged): vLLM 0.32 does not catch
            # this; the start fails at every start until the folder goes.
            slot, names = None, []
            with contextlib.suppress(Exception):
                ba = load_sig.bind(self, *args, **kwargs)
                slot = (ba.arguments["compile_range"], ba.arguments["graph_index"],
                        self.compiler.name)
                name = str(self.cache[slot]["graph_handle"][0])
                if name and os.path.basename(name) == name and name not in (".", ".."):
                    names = [name]
            if slot is None or not _backend_failed(self, str(self.cache_dir), names, exc,
                                                   logger):
                raise
            # vLLM's own "not in the table" answer: it compiles this graph and saves it
            # (artifact and table) in the entry's folder again.
            self.cache.pop(slot, None)
            return None

    def call(self: Any, graph: Any, example_inputs: Any) -> Any:
        pre: dict[str, Any] | None = None
        with contextlib.suppress(Exception):  # the guard in initialize_cache reads our config
            self.compiler_manager._vct_backend = self
        try:
            with _Timed():
                from vllm.compilation import monitor

                t = time.perf_counter()
                start = getattr(monitor, "torch_compile_start_time", 0.0) or t
                pre = {"traced": sorted(self.compilation_config.traced_files), "t0": t,
                       "dynamo_s": round(t - start, 4)}
        except Exception as exc:
            warn("backend traced files", exc)
        out = orig_call(self, graph, example_inputs)
        if pre is not None:
            try:
                with _Timed():
                    _backend_record(self, pre, time.perf_counter() - pre["t0"])
            except Exception as exc:
                warn("backend manifest", exc)
        return out

    manager.initialize_cache = initialize_cache
    manager.load = load
    backend.__call__ = call


BACKEND_ARTIFACT = "vllm_compile_cache.py"
"""What vLLM loads a backend entry from (``CompilerManager.initialize_cache``): present, a hit."""


def _backend_where(backend: Any, local_dir: str) -> tuple[str, str, str, str]:
    """``(compile_cache, key, rank, prefix)`` of a backend entry folder."""
    key_dir = str(backend.compilation_config.cache_dir)
    parts = os.path.relpath(local_dir, key_dir).split(os.sep)
    return (os.path.dirname(os.path.normpath(key_dir)),
            os.path.basename(os.path.normpath(key_dir)), parts[0], "/".join(parts[1:]))


def _backend_guard(backend: Any, local_dir: str, artifact: str,
                   logger: Any) -> guard.Verdict | None:
    """The wrong-hit guard before a backend-tree load (the entry's ``vllm_compile_cache.py``
    is there): this start's manifest as far as it is known before compiling (config, env,
    versions, and the Inductor options in the context vLLM just hashed them) against the
    manifest of the start that compiled the entry, as for an AOT hit."""
    if guard.mode() == "off":
        return None
    _, key, rank, prefix = _backend_where(backend, local_dir)
    start = capture.base_manifest(backend.vllm_config, "backend", key, rank, prefix)
    try:
        from vllm.compilation.compiler_interface import get_inductor_factors

        start["inductor"] = capture.inductor_json(get_inductor_factors())
    except Exception:
        start["inductor"] = None
    verdict = guard.check(start, artifact, "backend", key, rank)
    if verdict is not None:
        guard.announce(verdict, logger)
        if verdict.recompile:
            guard.compile_afresh()
    return verdict


def _backend_failed(manager: Any, local_dir: str, names: list[str], exc: BaseException,
                    logger: Any) -> bool:
    """vLLM failed to load (part of) the backend entry in ``local_dir``: counted, logged and,
    when ``VLLM_CACHE_TOOLS_GUARD`` allows it and ``names`` (the files it could not load) are
    moved aside, True: the caller lets vLLM compile instead. False: vLLM raises as before
    (the ledger has the failure first: the start is about to stop)."""
    t0 = time.perf_counter()
    try:
        with _Timed():
            owner = getattr(manager, "_vct_backend", None)
            if owner is None:
                return False
            compile_cache, key, rank, prefix = _backend_where(owner, local_dir)
            reason = quarantine.first_line(exc)
            moved = None
            if names and quarantine.allowed() and quarantine.artifact_fault(exc):
                moved = quarantine.move_aside(compile_cache, local_dir, names, tree="backend",
                                              key=key, rank=rank, prefix=prefix, reason=reason)
            rel = os.path.relpath(moved, compile_cache) if moved else None
            metrics.count("load_failures", "backend")
            where = f"backend entry {key} ({rank}{'/' + prefix if prefix else ''})"
            if rel is not None:
                metrics.count("quarantined", "backend")
                manager._vct_failures = [*getattr(manager, "_vct_failures", []),
                                         (reason, rel)]
                line = (f"vllm-cache-tools QUARANTINE: {where} failed to load: {reason}; "
                        f"moved {', '.join(names)} aside to {moved}; vLLM compiles it again "
                        "(VLLM_CACHE_TOOLS_GUARD allows moving it aside)")
            else:
                _event(compile_cache, t0, event="load-failure", tree="backend", key=key,
                       rank=rank, prefix=prefix, manifest=None, reason=reason,
                       quarantined=None)
                line = (f"vllm-cache-tools: {where} failed to load: {reason}; vLLM stops on "
                        "it at every start (VLLM_CACHE_TOOLS_GUARD=warn,quarantine moves it "
                        "aside and lets vLLM compile it again)")
            if logger is not None:
                logger.warning("%s", line)
            else:
                sys.stderr.write(f"WARNING {line}\n")
            return rel is not None
    except Exception as exc2:
        warn("backend load failure", exc2)
        return False


def _backend_record(backend: Any, pre: dict[str, Any], backend_s: float) -> None:
    t0 = time.perf_counter()
    decision = getattr(backend.compiler_manager, "_vct_decision", None)
    if decision is None:
        return
    local_dir, disabled, existed, verdict = decision
    compile_cache, key, rank, prefix = _backend_where(backend, local_dir)
    if verdict is not None and verdict.recompile:
        # Strict: this start compiled with the cache off and did not use the entry (no
        # manifest in its folder: audit must not count it among the entry's users).
        _event(compile_cache, t0, event="disabled", tree="backend", key=key, rank=rank,
               prefix=prefix, manifest=None, seconds=round(backend_s, 4),
               dynamo_s=pre["dynamo_s"], guard=verdict.note())
        return
    manifest = capture.base_manifest(backend.vllm_config, "backend", key, rank, prefix)
    try:
        # Read like every cache read: a FIFO planted here must not hang vLLM.
        stored = json.loads(safeio.read_regular(
            os.path.join(local_dir, "cache_key_factors.json"), cap=FACTORS_CAP))
        manifest["key_parts"] = {k: stored.get(k) for k in
                                 ("config_hash", "code_hash", "compiler_hash")}
    except (OSError, ValueError, AttributeError, RecursionError):
        manifest["key_parts"] = None
    try:
        from vllm.compilation.compiler_interface import get_inductor_factors

        manifest["inductor"] = capture.inductor_json(get_inductor_factors())
    except Exception:
        manifest["inductor"] = None
    manifest["traced_files"] = [write.snapshot_file(compile_cache, p)
                                for p in pre["traced"] if p != "<string>"]
    failures = getattr(backend.compiler_manager, "_vct_failures", None) or []
    event = ("disabled" if disabled else "load-failure" if failures
             else ("hit" if existed else "miss"))
    manifest["timings"] = {"dynamo_s": pre["dynamo_s"], "backend_s": round(backend_s, 4),
                           "event": event}
    metrics.on_backend(event, backend_s, local_dir)
    digest, _ = write.write_manifest(local_dir, manifest, base=compile_cache)
    extra: dict[str, Any] = {"guard": verdict.note()} if verdict else {}
    if failures:
        # The first failure's reason, and every quarantine folder this start made.
        extra |= {"reason": failures[0][0], "quarantined": [q for _, q in failures]}
    _event(compile_cache, t0, event=event, tree="backend", key=manifest["key"], rank=rank,
           prefix=prefix, manifest=digest, seconds=round(backend_s, 4),
           dynamo_s=pre["dynamo_s"], **extra)


# --- AOT tree -------------------------------------------------------------------------------

def patch_caching(mod: ModuleType) -> None:
    orig = mod.aot_compile_hash_factors

    def aot_compile_hash_factors(vllm_config: Any, *args: Any, **kwargs: Any) -> Any:
        factors = orig(vllm_config, *args, **kwargs)
        try:
            _AOT_FACTORS[id(vllm_config)] = list(factors)
        except Exception as exc:
            warn("AOT key factors", exc)
        return factors

    mod.aot_compile_hash_factors = aot_compile_hash_factors  # type: ignore[attr-defined]


class _Reasons(logging.Handler):
    """vLLM's own warning when an AOT artifact fails to load (its reason)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            self.messages.append(record.getMessage())


def patch_decorators(mod: ModuleType) -> None:
    orig = mod._try_load_aot_compiled_fn
    logger = getattr(mod, "logger", None)
    metrics.watch_saves(logger)

    def _try_load_aot_compiled_fn(model: Any, path: str, *args: Any, **kwargs: Any) -> Any:
        pre: dict[str, Any] | None = None
        verdict: guard.Verdict | None = None
        try:
            with _Timed():  # before loading: the config as vLLM hashed it
                pre = _aot_manifest(mod, model, path)
        except Exception as exc:
            warn("AOT manifest", exc)
        if pre is not None:
            try:
                with _Timed():
                    verdict = _aot_guard(pre, path, logger)
            except Exception as exc:
                warn("wrong-hit guard", exc)
        if verdict is not None and verdict.recompile:
            if pre is not None:
                with contextlib.suppress(Exception), _Timed():
                    _guard_event(pre, path, verdict)
            return None  # vLLM's own path for "nothing loaded": it compiles
        handler = _Reasons()
        if logger is not None:
            logger.addHandler(handler)
        t0 = time.perf_counter()
        try:
            result = orig(model, path, *args, **kwargs)
        finally:
            if logger is not None:
                logger.removeHandler(handler)
        seconds = time.perf_counter() - t0
        if pre is not None:
            try:
                with _Timed():
                    _aot_write(pre, path, result is not None, seconds, handler.messages,
                               verdict)
            except Exception as exc:
                warn("AOT manifest", exc)
        return result

    mod._try_load_aot_compiled_fn = _try_load_aot_compiled_fn  # type: ignore[attr-defined]


def _aot_manifest(mod: ModuleType, model: Any, path: str) -> dict[str, Any]:
    rank_dir = os.path.dirname(path)
    key_dir = os.path.dirname(rank_dir)
    cfg = model.vllm_config
    key = os.path.basename(key_dir)
    manifest = capture.base_manifest(cfg, "aot", key, os.path.basename(rank_dir), "")
    factors = _AOT_FACTORS.pop(id(cfg), None)
    fwd = model.forward
    mk = mod._model_hash_key(fwd) if hasattr(mod, "_model_hash_key") else None
    verified = None
    if factors is not None and mk is not None:
        verified = hashlib.sha256(str([*factors, mk]).encode()).hexdigest() == key
    manifest["key_parts"] = None if factors is None else {
        "env_hash": factors[0], "config_hash": factors[1], "model_hash_key": mk,
        "inductor_in_key": len(factors) > 2, "verified": verified,
        # Exactly what enters the key (str of the Inductor factors' list): the named fields
        # under "inductor" are JSON and cannot give it back, so without it a mega AOT key
        # cannot be re-derived from the manifest (keys/entry_proof.py).
        "inductor_repr": str(list(factors[2:])) if len(factors) > 2 else None}
    manifest["inductor"] = (capture.inductor_json(factors[2:])
                            if factors is not None and len(factors) > 2 else None)
    code = getattr(fwd, "__code__", None)
    manifest["forward"] = {"qualname": getattr(fwd, "__qualname__", None),
                           "firstlineno": getattr(code, "co_firstlineno", None),
                           "file": getattr(code, "co_filename", None)}
    manifest["existed"] = os.path.exists(path)
    return manifest


def _aot_guard(manifest: dict[str, Any], path: str, logger: Any) -> guard.Verdict | None:
    """The wrong-hit guard before an AOT load (only where an artifact is there to load)."""
    if not manifest.get("existed"):
        return None
    verdict = guard.check(manifest, path, "aot", manifest["key"], manifest["rank"])
    if verdict is not None:
        guard.announce(verdict, logger)
        if verdict.recompile:
            guard.compile_afresh()
    return verdict


def _guard_event(manifest: dict[str, Any], path: str, verdict: guard.Verdict) -> None:
    """Strict mode: the start did not load this entry and compiles with the cache off (a
    ``disabled`` decision). No manifest goes into the entry's folder: this start did not
    use it, and ``audit`` must not count it among the entry's users."""
    t0 = time.perf_counter()
    compile_cache = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(path))))
    _event(compile_cache, t0, event="disabled", tree="aot", key=manifest["key"],
           rank=manifest["rank"], prefix="", manifest=None, guard=verdict.note())


def _aot_write(manifest: dict[str, Any], path: str, loaded: bool, seconds: float,
               messages: list[str], verdict: guard.Verdict | None = None) -> None:
    t0 = time.perf_counter()
    rank_dir = os.path.dirname(path)
    compile_cache = os.path.dirname(os.path.dirname(os.path.dirname(rank_dir)))
    existed = manifest.pop("existed")
    event = "hit" if loaded else ("load-failure" if existed else "miss")
    reason = next((m.strip().split("\n", 1)[0] for m in messages
                   if "load failure" in m or "Compiling model again" in m), None)
    manifest["timings"] = {"load_s": round(seconds, 4), "event": event}
    metrics.on_aot(event, seconds, path)
    digest, _ = write.write_manifest(rank_dir, manifest, base=compile_cache)
    _event(compile_cache, t0, event=event, tree="aot", key=manifest["key"],
           rank=manifest["rank"], prefix="", manifest=digest, seconds=round(seconds, 4),
           reason=reason, **({"guard": verdict.note()} if verdict is not None else {}))


# --- installation ---------------------------------------------------------------------------

PATCHES: dict[str, Callable[[ModuleType], None]] = {
    "vllm.compilation.backends": patch_backends,
    "vllm.compilation.caching": patch_caching,
    "vllm.compilation.decorators": patch_decorators,
}


def _apply(name: str, module: ModuleType) -> None:
    try:
        PATCHES[name](module)
    except Exception as exc:
        warn(f"hook point in {name} not found", exc)


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader: Any, name: str) -> None:
        self._loader, self._name = loader, name

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        _apply(self._name, module)

    def __getattr__(self, attr: str) -> Any:  # get_source, get_filename, ... for inspect
        return getattr(self._loader, attr)


class _Finder(importlib.abc.MetaPathFinder):
    """Patches a target module right after it is first imported (no import of it here: the
    engine process, which never compiles, pays nothing)."""

    def __init__(self, names: set[str]) -> None:
        self.names = names

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in self.names:
            return None
        self.names.discard(name)
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _PatchingLoader(spec.loader, name)
        return spec


def install() -> None:
    pending = set()
    for name in PATCHES:
        if name in sys.modules:
            _apply(name, sys.modules[name])
        else:
            pending.add(name)
    if pending:
        sys.meta_path.insert(0, _Finder(pending))
