"""vllm-cache-tools: inspect and manage vLLM's torch.compile cache.

Public API (docs/api.md has runnable examples)::

    import vllm_cache_tools as vct
    info = vct.scan("~/.cache/vllm")              # CacheInfo: entries of both trees
    x = vct.explain("28fd362d4e", "39ecaca4bf")   # Explanation: why vLLM compiled again
    report = vct.verify()                         # VerifyReport: broken entries
    plan = vct.plan_prune_root(None, vct.Policies(older_than_s=30 * 86400))
    result = vct.execute_plan(plan)               # PruneResult: what was deleted
    p = vct.predict(["/models/m", "--max-model-len", "128"], python="/venv/bin/python")

Names are imported on first use: the recorder plugin (:mod:`vllm_cache_tools.recorder`) is
loaded in every vLLM process and must not pay for the inspector's imports.

The packages read as the pipeline (docs/architecture.md): ``read`` -> ``store`` -> ``keys``
-> ``live`` -> ``analyze`` -> ``maintain`` -> ``fleet`` -> ``views`` -> ``cli``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "CacheRoot": "store.locate", "resolve_root": "store.locate",
    "AotRank": "store.types", "CacheInfo": "store.types", "Cause": "store.types",
    "Entry": "store.types", "OtherItem": "store.types", "PrefixDir": "store.types",
    "Problem": "store.types", "TreeStats": "store.types",
    "AmbiguousKey": "store.lookup", "EntryNotFound": "store.lookup", "RootError": "store.scan",
    "locate_entry": "store.lookup", "read_entry": "store.entries", "scan": "store.scan",
    "Prediction": "analyze.predict", "PredictError": "analyze.predict",
    "TreePrediction": "analyze.predict", "predict": "analyze.predict",
    "Explanation": "analyze.explain", "Unexplained": "analyze.explain",
    "explain": "analyze.explain",
    "Policies": "maintain.policies", "Protections": "maintain.plan", "PrunePlan": "maintain.plan",
    "PlannedEntry": "maintain.plan", "RootRefused": "maintain.plan", "Skip": "maintain.plan",
    "plan_prune": "maintain.plan", "plan_prune_root": "maintain.plan",
    "PruneResult": "maintain.execute", "execute_plan": "maintain.execute",
    "VerifyProblem": "maintain.verify", "VerifyReport": "maintain.verify",
    "verify": "maintain.verify",
    "AllCaches": "store.caches.listing", "CacheListing": "store.caches.listing",
    "list_all_caches": "store.caches.listing", "CacheLocation": "store.caches.kinds",
    "locate_caches": "store.caches.kinds", "CachePolicies": "maintain.cache_prune",
    "CachePrunePlan": "maintain.cache_prune", "CachePruneResult": "maintain.cache_prune",
    "plan_cache_kind_prune": "maintain.cache_prune",
    "execute_cache_plan": "maintain.cache_prune",
    "DedupPlan": "maintain.dedup", "DedupResult": "maintain.dedup",
    "plan_dedup": "maintain.dedup", "execute_dedup": "maintain.dedup",
    "StatsReport": "analyze.stats", "stats": "analyze.stats",
    "DriftReport": "analyze.drift", "drift": "analyze.drift",
}

if TYPE_CHECKING:
    from vllm_cache_tools.analyze.drift import DriftReport, drift
    from vllm_cache_tools.analyze.explain import Explanation, Unexplained, explain
    from vllm_cache_tools.analyze.predict import PredictError, Prediction, TreePrediction, predict
    from vllm_cache_tools.analyze.stats import StatsReport, stats
    from vllm_cache_tools.maintain.cache_prune import (
        CachePolicies,
        CachePrunePlan,
        CachePruneResult,
        execute_cache_plan,
        plan_cache_kind_prune,
    )
    from vllm_cache_tools.maintain.dedup import DedupPlan, DedupResult, execute_dedup, plan_dedup
    from vllm_cache_tools.maintain.execute import PruneResult, execute_plan
    from vllm_cache_tools.maintain.plan import (
        PlannedEntry,
        Protections,
        PrunePlan,
        RootRefused,
        Skip,
        plan_prune,
        plan_prune_root,
    )
    from vllm_cache_tools.maintain.policies import Policies
    from vllm_cache_tools.maintain.verify import VerifyProblem, VerifyReport, verify
    from vllm_cache_tools.store.caches.kinds import CacheLocation, locate_caches
    from vllm_cache_tools.store.caches.listing import AllCaches, CacheListing, list_all_caches
    from vllm_cache_tools.store.entries import read_entry
    from vllm_cache_tools.store.locate import CacheRoot, resolve_root
    from vllm_cache_tools.store.lookup import AmbiguousKey, EntryNotFound, locate_entry
    from vllm_cache_tools.store.scan import RootError, scan
    from vllm_cache_tools.store.types import (
        AotRank,
        CacheInfo,
        Cause,
        Entry,
        OtherItem,
        PrefixDir,
        Problem,
        TreeStats,
    )


def __getattr__(name: str) -> Any:
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'vllm_cache_tools' has no attribute {name!r}")
    return getattr(importlib.import_module(f"vllm_cache_tools.{mod}"), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})



__all__ = [
    "AllCaches",
    "AmbiguousKey",
    "AotRank",
    "CacheInfo",
    "CacheListing",
    "CacheLocation",
    "CachePolicies",
    "CachePrunePlan",
    "CachePruneResult",
    "CacheRoot",
    "Cause",
    "DedupPlan",
    "DedupResult",
    "DriftReport",
    "Entry",
    "EntryNotFound",
    "Explanation",
    "OtherItem",
    "PlannedEntry",
    "Policies",
    "PredictError",
    "Prediction",
    "PrefixDir",
    "Problem",
    "Protections",
    "PrunePlan",
    "PruneResult",
    "RootError",
    "RootRefused",
    "Skip",
    "StatsReport",
    "TreePrediction",
    "TreeStats",
    "Unexplained",
    "VerifyProblem",
    "VerifyReport",
    "drift",
    "execute_cache_plan",
    "execute_dedup",
    "execute_plan",
    "explain",
    "list_all_caches",
    "locate_caches",
    "locate_entry",
    "plan_cache_kind_prune",
    "plan_dedup",
    "plan_prune",
    "plan_prune_root",
    "predict",
    "read_entry",
    "resolve_root",
    "scan",
    "stats",
    "verify",
]
