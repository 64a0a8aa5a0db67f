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
from vllm_cache_tools.live.probe import _jsonable, config_parts
from vllm_cache_tools.recorder.layout import RUNTIME_FIELDS, SCHEMA

REDACTED = redaction.REDACTED


def redact_argv(argv: list[str]) -> list[str]:
    """The command line as manifests and ledger events keep it: see
    :func:`vllm_cache_tools.redaction.redact_argv` (the same rule as every other output)."""
    return redaction.redact_argv(argv)


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


def base_manifest(vllm_config: Any, tree: str, key: str, rank: str, prefix: str) -> dict[str, Any]:
    """The parts every manifest has."""
    from vllm import envs

    try:
        # Older releases hash credentials (VLLM_API_KEY, S3_*) into the env factors.
        env = redaction.redact_env(_jsonable(envs.compile_factors()))
    except Exception:
        env = None  # versions without compile_factors
    return {
        "schema": SCHEMA,
        "tree": tree, "key": key, "rank": rank, "prefix": prefix,
        "versions": versions(),
        "env": env,
        "config_hash": vllm_config.compute_hash(),
        "config": _without_runtime(config_parts(vllm_config)),
        "model": redaction.redact_value(None, model_info(vllm_config)),
        "command_line": redact_argv(list(sys.argv)),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "created": time.time(),
    }
