"""One reader per artifact vLLM writes. All are safe on hostile input: they never execute
anything from the cache, and raise :class:`ReadError` (a ``ValueError``) with a one-line
message for anything they cannot read."""

from vllm_cache_tools.read.errors import ReadError

__all__ = ["ReadError"]
