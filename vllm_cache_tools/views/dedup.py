"""The ``dedup --json`` document (schema ``dedup`` in
:data:`vllm_cache_tools.views.payloads.SCHEMAS`): the plan (groups of identical files, the bytes
linking frees), and after ``--yes`` what was linked and what was kept apart, and why. With
``--undo``: the names given their own copy."""

from __future__ import annotations

from typing import Any

from vllm_cache_tools.maintain.dedup import DedupPlan, DedupResult, DedupSkip
from vllm_cache_tools.maintain.dedup_undo import SplitPlan, SplitResult
from vllm_cache_tools.store.locate import display_path


def _skips(skips: tuple[DedupSkip, ...]) -> list[dict[str, str]]:
    return [{"path": s.rel, "reason": s.reason} for s in skips]


def dedup_report(plan: DedupPlan, result: DedupResult | None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "root": display_path(plan.root),
        "mode": "link",
        "dry_run": result is None,
        "grace_s": plan.grace_s,
        "files_seen": plan.files_seen,
        "bytes_seen": plan.bytes_seen,
        "plan": {
            "groups": [{"digest": g.digest, "size_bytes": g.size, "kind": g.kind,
                        "keep": g.keep.rel, "link": [f.rel for f in g.link],
                        "already_linked": list(g.already), "saved_bytes": g.saved_bytes}
                       for g in plan.groups],
            "files_to_link": plan.files_to_link,
            "saved_bytes": plan.saved_bytes,
            "excluded": [{"reason": why, "files": n} for why, n in plan.excluded],
        },
        "linked": list(result.linked) if result is not None else [],
        "saved_bytes": result.saved_bytes if result is not None else 0,
        "skipped": _skips(result.skipped if result is not None else plan.skipped),
    }
    return out


def undo_report(plan: SplitPlan, result: SplitResult | None) -> dict[str, Any]:
    return {
        "root": display_path(plan.root),
        "mode": "undo",
        "dry_run": result is None,
        "grace_s": plan.grace_s,
        "plan": {"split": [{"path": f.rel, "size_bytes": f.size, "links": f.nlink}
                           for f in plan.files],
                 "added_bytes_at_most": plan.added_bytes},
        "split": list(result.split) if result is not None else [],
        "skipped": _skips((*plan.skipped, *result.skipped) if result is not None
                          else plan.skipped),
    }
