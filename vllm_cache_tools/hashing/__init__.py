"""Exact re-implementations of vLLM's cache-key recipes (pure functions, no vLLM import)."""

from vllm_cache_tools.hashing.recipes import backend_key, env_hash_from_factors

__all__ = ["backend_key", "env_hash_from_factors"]
