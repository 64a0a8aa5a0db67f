"""vllm-cache-tools: inspect and manage vLLM's torch.compile cache.

Public API::

    from vllm_cache_tools import scan, read_entry, locate_entry, resolve_root
    info = scan()                       # CacheInfo: entries of both trees, problems, others
    for e in info.entries: print(e.key, e.layout, e.size_bytes, e.state)

Names are imported on first use: the recorder plugin (:mod:`vllm_cache_tools.recorder`) is
loaded in every vLLM process and must not pay for the inspector's imports.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "CacheRoot": "locate", "resolve_root": "locate",
    "AotRank": "model", "CacheInfo": "model", "Entry": "model", "OtherItem": "model",
    "PrefixDir": "model", "Problem": "model", "TreeStats": "model",
    "AmbiguousKey": "store", "EntryNotFound": "store", "RootError": "store",
    "locate_entry": "store", "read_entry": "store", "scan": "store",
}

if TYPE_CHECKING:
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


def __getattr__(name: str) -> Any:
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'vllm_cache_tools' has no attribute {name!r}")
    return getattr(importlib.import_module(f"vllm_cache_tools.{mod}"), name)


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
