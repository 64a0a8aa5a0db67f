"""Does a backend entry's folder name follow from the factors it recorded? (``show``,
``verify``, ``pack``): the recipe applied to ``cache_key_factors.json``."""

from __future__ import annotations

from typing import Any

from vllm_cache_tools.keys import backend_key, env_hash_from_factors
from vllm_cache_tools.store.types import Entry


def key_check(e: Entry) -> dict[str, Any] | None:
    """Re-hash a backend entry's stored factors and compare with its directory name."""
    f = e.factors
    if f is None or f.env is None or not (f.config_hash and f.code_hash and f.compiler_hash):
        return None
    env_hash = env_hash_from_factors(f.env)
    key = backend_key([env_hash, f.config_hash, f.code_hash, f.compiler_hash])
    return {"env_hash": env_hash, "recomputed_key": key, "matches": key == e.key,
            "recipe": "vllm 0.32-0.33 sha256(str([env, config, code, compiler]))[:10]"}
