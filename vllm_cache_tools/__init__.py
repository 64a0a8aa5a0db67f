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

``predict``, ``explain`` and ``verify`` are functions here although modules of the same
names exist: the package keeps the function when the module is imported (see
:class:`_Package`). Reach those modules with ``from vllm_cache_tools.predict import ...`` or
``importlib.import_module``, not ``import vllm_cache_tools.predict as m``.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "CacheRoot": "locate", "resolve_root": "locate",
    "AotRank": "model", "CacheInfo": "model", "Cause": "model", "Entry": "model",
    "OtherItem": "model", "PrefixDir": "model", "Problem": "model", "TreeStats": "model",
    "AmbiguousKey": "store", "EntryNotFound": "store", "RootError": "store",
    "locate_entry": "store", "read_entry": "store", "scan": "store",
    "Prediction": "predict", "PredictError": "predict", "TreePrediction": "predict",
    "predict": "predict",
    "Explanation": "explain", "Unexplained": "explain", "explain": "explain",
    "Policies": "prune", "Protections": "prune", "PrunePlan": "prune", "PruneResult": "prune",
    "PlannedEntry": "prune", "RootRefused": "prune", "Skip": "prune",
    "execute_plan": "prune", "plan_prune": "prune", "plan_prune_root": "prune",
    "VerifyProblem": "verify", "VerifyReport": "verify", "verify": "verify",
    "StatsReport": "analyze.stats", "stats": "analyze.stats",
    "DriftReport": "analyze.drift", "drift": "analyze.drift",
}

_SHADOWED = frozenset(n for n, m in _EXPORTS.items() if n == m)
"""Exported functions named like the module that defines them."""

if TYPE_CHECKING:
    from vllm_cache_tools.analyze.drift import DriftReport, drift
    from vllm_cache_tools.analyze.stats import StatsReport, stats
    from vllm_cache_tools.explain import Explanation, Unexplained, explain
    from vllm_cache_tools.locate import CacheRoot, resolve_root
    from vllm_cache_tools.model import (
        AotRank,
        CacheInfo,
        Cause,
        Entry,
        OtherItem,
        PrefixDir,
        Problem,
        TreeStats,
    )
    from vllm_cache_tools.predict import PredictError, Prediction, TreePrediction, predict
    from vllm_cache_tools.prune import (
        PlannedEntry,
        Policies,
        Protections,
        PrunePlan,
        PruneResult,
        RootRefused,
        Skip,
        execute_plan,
        plan_prune,
        plan_prune_root,
    )
    from vllm_cache_tools.store import (
        AmbiguousKey,
        EntryNotFound,
        RootError,
        locate_entry,
        read_entry,
        scan,
    )
    from vllm_cache_tools.verify import VerifyProblem, VerifyReport, verify


def __getattr__(name: str) -> Any:
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'vllm_cache_tools' has no attribute {name!r}")
    return getattr(importlib.import_module(f"vllm_cache_tools.{mod}"), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


class _Package(types.ModuleType):
    """This package, keeping ``predict``, ``explain`` and ``verify`` the functions: importing
    a submodule sets an attribute of its package to it (``vllm_cache_tools.predict`` would
    become the module as soon as anything imported it); that one assignment is skipped, so
    the name falls through to :func:`__getattr__`. The module stays in ``sys.modules``."""

    def __setattr__(self, name: str, value: Any) -> None:
        if (name in _SHADOWED and isinstance(value, types.ModuleType)
                and value.__name__ == f"{__name__}.{name}"):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

__all__ = [
    "AmbiguousKey",
    "AotRank",
    "CacheInfo",
    "CacheRoot",
    "Cause",
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
    "execute_plan",
    "explain",
    "locate_entry",
    "plan_prune",
    "plan_prune_root",
    "predict",
    "read_entry",
    "resolve_root",
    "scan",
    "stats",
    "verify",
]
