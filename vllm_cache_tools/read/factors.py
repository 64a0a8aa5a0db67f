"""Reader for ``cache_key_factors.json`` (backend tree, vLLM >= 0.11-ish; see docs/recipes.md).

Written by ``VllmBackend.__call__`` beside the backend entry: the three hashes vLLM combined into
the directory key plus the raw env factors (``envs.compile_factors()``), e.g.
``{"code_hash": "<64 hex>", "compiler_hash": "<10 hex>", "config_hash": "<10 hex>",
"env": {...}}``. Older or newer versions may add keys; unknown keys are kept in ``extra``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from vllm_cache_tools.read import jsontext
from vllm_cache_tools.read.errors import ReadError, unreadable
from vllm_cache_tools.read.noatime import read_noatime

MAX_FACTORS_BYTES = 4 * 1024 * 1024
"""Real files are ~10 KB (the env factors); the cap keeps a hostile one's parse small."""


@dataclass(frozen=True)
class CacheKeyFactors:
    code_hash: str | None
    compiler_hash: str | None
    config_hash: str | None
    env_hash: str | None
    env: dict[str, Any] | None = field(default=None, hash=False, compare=True)
    extra: dict[str, Any] = field(default_factory=dict, hash=False, compare=True)


def parse_factors(text: str) -> CacheKeyFactors:
    data = jsontext.loads(text, "cache_key_factors.json")
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
        raw = read_noatime(path, MAX_FACTORS_BYTES + 1)
    except OSError as exc:
        raise unreadable("cache_key_factors.json", exc) from None
    if len(raw) > MAX_FACTORS_BYTES:
        raise jsontext.beyond_limits("cache_key_factors.json",
                                     f"larger than {MAX_FACTORS_BYTES} bytes")
    if not raw:
        raise ReadError("empty cache_key_factors.json")
    return parse_factors(raw.decode("utf-8", errors="replace"))
