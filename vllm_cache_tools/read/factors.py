"""Reader for ``cache_key_factors.json`` (backend tree, vLLM >= 0.11-ish; see docs/recipes.md).

Written by ``VllmBackend.__call__`` beside the backend entry: the three hashes vLLM combined into
the directory key plus the raw env factors (``envs.compile_factors()``), e.g.
``{"code_hash": "<64 hex>", "compiler_hash": "<10 hex>", "config_hash": "<10 hex>",
"env": {...}}``. Older or newer versions may add keys; unknown keys are kept in ``extra``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from vllm_cache_tools.read.errors import ReadError, unreadable
from vllm_cache_tools.read.noatime import read_noatime

MAX_FACTORS_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class CacheKeyFactors:
    code_hash: str | None
    compiler_hash: str | None
    config_hash: str | None
    env_hash: str | None
    env: dict[str, Any] | None = field(default=None, hash=False, compare=True)
    extra: dict[str, Any] = field(default_factory=dict, hash=False, compare=True)


def parse_factors(text: str) -> CacheKeyFactors:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ReadError(f"invalid JSON in cache_key_factors.json: {exc.msg} at line "
                        f"{exc.lineno}") from None
    if not isinstance(data, dict):
        raise ReadError("cache_key_factors.json is not a JSON object")

    def opt_str(key: str) -> str | None:
        v = data.get(key)
        return v if isinstance(v, str) else None

    env = data.get("env")
    known = {"code_hash", "compiler_hash", "config_hash", "env_hash", "env"}
    return CacheKeyFactors(
        code_hash=opt_str("code_hash"),
        compiler_hash=opt_str("compiler_hash"),
        config_hash=opt_str("config_hash"),
        env_hash=opt_str("env_hash"),
        env=env if isinstance(env, dict) else None,
        extra={k: v for k, v in data.items() if k not in known},
    )


def read_factors(path: str | os.PathLike[str]) -> CacheKeyFactors:
    try:
        size = os.path.getsize(path)
        if size > MAX_FACTORS_BYTES:
            raise ReadError(f"cache_key_factors.json is implausibly large ({size} bytes)")
        raw = read_noatime(path)
    except OSError as exc:
        raise unreadable("cache_key_factors.json", exc) from None
    if not raw:
        raise ReadError("empty cache_key_factors.json")
    return parse_factors(raw.decode("utf-8", errors="replace"))
