"""What a manifest holds, read from the live vLLM objects at the moment vLLM decides a cache
directory. Runs inside vLLM's processes; reuses the probe's readers (one recipe for sub-config
hashes and fields, shared with ``predict``)."""

from __future__ import annotations

import os
import socket
import sys
import time
from typing import Any

from vllm_cache_tools import redaction
from vllm_cache_tools.layout import RUNTIME_FIELDS, SCHEMA
from vllm_cache_tools.live.probe import SUB_CONFIGS, _jsonable, config_parts
from vllm_cache_tools.recorder import START_VLLM_ENV, capture_env

REDACTED = redaction.REDACTED


def redact_argv(argv: list[str]) -> list[str]:
    """The command line as manifests and ledger events keep it: see
    :func:`vllm_cache_tools.redaction.redact_argv` (the same rule as every other output)."""
    return redaction.redact_argv(argv)


def ledger_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """A ledger event's own fields (vLLM's load-failure reason among them) with secrets
    hidden, by the same rule."""
    return dict(redaction.redact_value(None, fields))


def versions() -> dict[str, Any]:
    out: dict[str, Any] = {"python": sys.version.split()[0]}
    for name in ("vllm", "torch", "triton"):
        mod = sys.modules.get(name)
        out[name] = getattr(mod, "__version__", None) if mod is not None else None
    return out


def inductor_json(factors: list[Any]) -> dict[str, Any]:
    """vLLM's ``get_inductor_factors()`` list as named fields (device, CUDA/HIP, triton,
    torch_key, Inductor and functorch portable configs)."""
    names = ("system", "torch_key", "inductor_config", "functorch_config")
    return {n: _jsonable(v) for n, v in zip(names, factors, strict=False)}


def model_info(vllm_config: Any) -> dict[str, Any]:
    mc = getattr(vllm_config, "model_config", None)
    pc = getattr(vllm_config, "parallel_config", None)
    def get(o: Any, a: str) -> Any:
        return _jsonable(getattr(o, a, None)) if o is not None else None

    return {
        "model": get(mc, "model"), "served_model_name": get(mc, "served_model_name"),
        "revision": get(mc, "revision"), "dtype": get(mc, "dtype"),
        "architecture": (get(mc, "architectures") or [None])[0]
        if isinstance(get(mc, "architectures"), list) else get(mc, "architectures"),
        "tensor_parallel_size": get(pc, "tensor_parallel_size"),
        "pipeline_parallel_size": get(pc, "pipeline_parallel_size"),
        "data_parallel_size": get(pc, "data_parallel_size"),
        "rank": get(pc, "rank"), "dp_index": get(pc, "data_parallel_index"),
    }


def _without_runtime(parts: dict[str, Any]) -> dict[str, Any]:
    for item in RUNTIME_FIELDS:
        name, fld = item.split(".", 1)
        part = parts.get(name)
        if isinstance(part, dict) and isinstance(part.get("fields"), dict):
            part["fields"].pop(fld, None)
    return parts


def process_env(environ: Any = None) -> dict[str, Any]:
    """Every ``VLLM_*`` variable of the start, declared by vLLM or not (undeclared ones never
    reach its key), secrets redacted; this tool's own switches left out. Without ``environ``:
    as the start was given them (taken by the plugin's first process), else this process's."""
    if environ is None:
        given = capture_env.from_json(os.environ.get(START_VLLM_ENV))
        if given is not None:
            return given
        environ = os.environ
    return capture_env.vllm_env(environ)


def undeclared_env(names: Any) -> list[str]:
    """Of ``names``, those vLLM's ``envs`` does not declare."""
    try:
        from vllm import envs

        declared = envs.environment_variables
    except Exception:
        return []
    return sorted(n for n in names if n not in declared)


def unhashed_fields(vllm_config: Any) -> dict[str, list[str]]:
    """Per sub-config, the fields its ``compute_hash`` leaves out, where the version builds
    that hash with ``get_hash_factors(config, ignored)``: read by running ``compute_hash``
    once with that function wrapped where it is looked up (``vllm.config.utils``, imported
    inside ``compute_hash``, and the config's own module); results pass through unchanged.
    Sub-configs that list their factors by hand are absent: for them only a change of their
    hash tells."""
    import dataclasses

    utils = sys.modules.get("vllm.config.utils")
    out: dict[str, list[str]] = {}
    for name in SUB_CONFIGS:
        cfg: Any = getattr(vllm_config, name, None)
        compute = getattr(cfg, "compute_hash", None)
        if cfg is None or compute is None or not dataclasses.is_dataclass(cfg):
            continue
        mods: list[Any] = [m for m in {id(m): m for m in (
            utils, sys.modules.get(type(cfg).__module__)) if m is not None}.values()
            if hasattr(m, "get_hash_factors")]
        seen: list[set[str]] = []
        saved = [(m, m.get_hash_factors) for m in mods]
        for m, orig in saved:
            def spy(config: Any, *args: Any, _orig: Any = orig, _cfg: Any = cfg,
                    _seen: list[set[str]] = seen, **kwargs: Any) -> Any:
                result = _orig(config, *args, **kwargs)
                if config is _cfg and isinstance(result, dict):
                    _seen.append(set(result))
                return result

            m.get_hash_factors = spy
        try:
            compute()
        except Exception:
            continue
        finally:
            for m, orig in saved:
                m.get_hash_factors = orig
        if seen:
            out[name] = sorted(f.name for f in dataclasses.fields(cfg) if f.name not in seen[0])
    return out


def base_manifest(vllm_config: Any, tree: str, key: str, rank: str, prefix: str) -> dict[str, Any]:
    """The parts every manifest has."""
    from vllm import envs

    try:
        # Older releases hash credentials (VLLM_API_KEY, S3_*) into the env factors.
        env = redaction.redact_env(_jsonable(envs.compile_factors()))
    except Exception:
        env = None  # versions without compile_factors
    proc_env = process_env()
    return {
        "schema": SCHEMA,
        "tree": tree, "key": key, "rank": rank, "prefix": prefix,
        "versions": versions(),
        "env": env,
        "config_hash": vllm_config.compute_hash(),
        "config": _without_runtime(config_parts(vllm_config)),
        # What vLLM's key does not see (issue 15): every VLLM_* variable, and the config
        # fields compute_hash leaves out.
        "process_env": proc_env,
        "undeclared_env": undeclared_env(proc_env),
        "unhashed_fields": unhashed_fields(vllm_config),
        "model": redaction.redact_value(None, model_info(vllm_config)),
        "command_line": redact_argv(list(sys.argv)),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "created": time.time(),
    }
