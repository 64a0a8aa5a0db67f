"""Exact re-implementations of vLLM's cache-key recipes (pure functions, no vLLM import).
docs/recipes.md holds the version table they come from."""

from vllm_cache_tools.keys.recipes import (
    aot_key,
    aot_source_hash,
    backend_code_hash,
    backend_key,
    compiler_hash,
    env_hash_from_factors,
    model_hash_key,
)

__all__ = ["aot_key", "aot_source_hash", "backend_code_hash", "backend_key", "compiler_hash",
           "env_hash_from_factors", "model_hash_key"]
