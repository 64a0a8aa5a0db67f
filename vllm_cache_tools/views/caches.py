"""``ls --all-caches --json`` and ``prune --cache KIND --json``: every cache kind with its
summary, and every part we understand as an entry carrying ``cache`` (its kind) and
``path``."""

from __future__ import annotations

from typing import Any

from vllm_cache_tools.maintain.cache_prune import CachePrunePlan, CachePruneResult
from vllm_cache_tools.maintain.evidence import owner_name
from vllm_cache_tools.store.caches.kinds import UNDERSTOOD
from vllm_cache_tools.store.caches.listing import AllCaches, CacheItem, CacheListing
from vllm_cache_tools.store.locate import display_path
from vllm_cache_tools.units import iso
from vllm_cache_tools.views.payloads import entry_summary, with_schema


def cache_summary(c: CacheListing) -> dict[str, Any]:
    s = c.stats
    loc = c.location
    n = len(c.vllm.entries) if c.vllm is not None else len(c.items)
    return {
        "cache": c.kind, "path": display_path(loc.path), "source": loc.source,
        "user": loc.user, "exists": c.exists, "symlink_to": loc.link_target,
        "understood": c.kind in UNDERSTOOD,
        "size_bytes": s.size_bytes if s else None, "disk_bytes": s.disk_bytes if s else None,
        "files": s.files if s else None, "dirs": s.dirs if s else None,
        "oldest_mtime": iso(s.oldest_mtime) if s else None,
        "newest_mtime": iso(s.newest_mtime) if s else None,
        "last_used": iso(_last(s.newest_mtime, s.newest_atime)) if s else None,
        "owners": [owner_name(u) for u in s.owners] if s else [],
        "entries": n if c.exists else 0,
        "problems": list(c.problems),
    }


def _last(m: float | None, a: float | None) -> float | None:
    return max((t for t in (m, a) if t is not None), default=None)


def item_entry(c: CacheListing, item: CacheItem) -> dict[str, Any]:
    s = item.stats
    out: dict[str, Any] = {
        "cache": c.kind, "path": display_path(item.path), "name": item.name,
        "size_bytes": s.size_bytes, "disk_bytes": s.disk_bytes, "files": s.files,
        "modified": iso(s.newest_mtime), "last_used": iso(_last(s.newest_mtime, s.newest_atime)),
        "owners": [owner_name(u) for u in s.owners],
    }
    if c.kind == "triton":
        out.update(kernels=list(item.kernels), target=item.target,
                   triton_version=item.triton_version)
    elif item.what is not None:
        out["what"] = item.what
    return out


def all_caches_report(a: AllCaches) -> dict[str, Any]:
    entries: list[dict[str, Any]] = []
    for c in a.caches:
        if c.vllm is not None:
            entries += [{"cache": "vllm", **entry_summary(e)} for e in c.vllm.entries]
        entries += [item_entry(c, i) for i in c.items]
    return with_schema("ls-all-caches", {
        "made_at": iso(a.made_at),
        "caches": [cache_summary(c) for c in a.caches],
        "entries": entries,
    })


def cache_prune_report(plan: CachePrunePlan, res: CachePruneResult | None) -> dict[str, Any]:
    return with_schema("prune-cache", {
        "cache": plan.kind,
        "paths": [display_path(loc.path) for loc in plan.locations],
        "policies": list(plan.policies), "grace_s": plan.grace_s, "all_users": plan.all_users,
        "made_at": iso(plan.made_at), "total_bytes": plan.total_bytes,
        "parts": plan.part_count, "notes": list(plan.notes),
        "planned": [{"cache": plan.kind, "path": display_path(p.path),
                     "size_bytes": p.size_bytes, "files": p.files,
                     "last_used": iso(p.last_used), "last_used_source": p.last_used_source,
                     "reasons": list(p.reasons)} for p in plan.parts],
        "planned_bytes": plan.bytes,
        "kept": [{"path": display_path(s.path), "reason": s.reason}
                 for s in (res.skipped if res is not None else plan.skipped)],
        "result": None if res is None else {
            "deleted": list(res.deleted), "freed_bytes": res.freed_bytes,
            "errors": list(res.errors)},
    })
