"""vllm-cache-tools: inspect and manage vLLM's torch.compile cache.

Public API::

    from vllm_cache_tools import scan, read_entry, locate_entry, resolve_root
    info = scan()                       # CacheInfo: entries of both trees, problems, others
    for e in info.entries: print(e.key, e.layout, e.size_bytes, e.state)
"""

__version__ = "0.1.0"

from vllm_cache_tools.locate import CacheRoot, resolve_root
from vllm_cache_tools.model import (
    AotRank,
    CacheInfo,
    Entry,
    OtherItem,
    PrefixDir,
    Problem,
    TreeStats,
)
from vllm_cache_tools.store import (
    AmbiguousKey,
    EntryNotFound,
    RootError,
    locate_entry,
    read_entry,
    scan,
)

__all__ = [
    "AmbiguousKey",
    "AotRank",
    "CacheInfo",
    "CacheRoot",
    "Entry",
    "EntryNotFound",
    "OtherItem",
    "PrefixDir",
    "Problem",
    "RootError",
    "TreeStats",
    "locate_entry",
    "read_entry",
    "resolve_root",
    "scan",
]
