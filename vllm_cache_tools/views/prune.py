"""The ``prune --json`` / ``rm --json`` / ``verify --fix --json`` payload of a prune plan and
its result (schema ``prune`` in :data:`vllm_cache_tools.views.payloads.SCHEMAS`)."""

from __future__ import annotations

from typing import Any

from vllm_cache_tools.keys.compat import Environment
from vllm_cache_tools.maintain.execute import PruneResult
from vllm_cache_tools.maintain.plan import PlannedEntry, PrunePlan
from vllm_cache_tools.store.locate import display_path
from vllm_cache_tools.units import iso


def planned_json(p: PlannedEntry) -> dict[str, Any]:
    return {"key": p.key, "layout": p.layout, "path": display_path(p.path),
            "size_bytes": p.size_bytes, "reasons": list(p.reasons),
            "last_used": iso(p.last_used), "last_used_source": p.last_used_source,
            "model": p.model, "checkpoint": p.checkpoint, "files": p.files,
            "same_sources_aot": list(p.same_sources_aot), "same_start": list(p.same_start)}


def prune_report(plan: PrunePlan, result: PruneResult | None) -> dict[str, Any]:
    """The ``prune --json`` / ``rm --json`` document."""
    skipped = result.skipped if result is not None else plan.skipped
    out: dict[str, Any] = {
        "root": display_path(plan.root),
        "plan": {"entries": [planned_json(p) for p in plan.entries], "bytes": plan.bytes,
                 "files": plan.files, "policies": list(plan.policies),
                 "grace_s": plan.protections.grace_s, "total_bytes_before": plan.total_bytes,
                 "total_files_before": plan.total_files, "notes": list(plan.notes)},
        "dry_run": result is None,
        "deleted": list(result.deleted) if result is not None else [],
        "skipped": [{"key": s.key, "reason": s.reason} for s in skipped],
        "freed_bytes": result.freed_bytes if result is not None else 0,
    }
    if result is not None:
        out["finished_trash"] = list(result.finished_trash)
        out["errors"] = list(result.errors)
        out["failed"] = [{"key": s.key, "reason": s.reason} for s in result.failed]
        sw = result.snapshots
        out["snapshots"] = None if sw is None else {
            "removed": list(sw.removed), "freed_bytes": sw.freed_bytes,
            "kept_referenced": sw.kept_referenced, "kept_young": sw.kept_young,
            "restored": list(sw.restored), "stopped": sw.stopped, "errors": list(sw.errors)}
    if plan.environment is not None:
        out["environment"] = describe_env_for_json(plan.environment)
    return out


def describe_env_for_json(env: Environment) -> dict[str, object]:
    return {"python": env.python, "torch": env.torch, "cuda": env.cuda, "triton": env.triton,
            "gpus": list(env.gpus), "interpreter": env.interpreter,
            "torch_source": env.torch_source, "error": env.error}
