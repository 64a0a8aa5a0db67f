"""The ``--json`` documents of ``stats`` and ``drift`` (schema ids in
:data:`vllm_cache_tools.views.payloads.SCHEMAS`). Shapes fixed by issue 15; fields are only
added."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from vllm_cache_tools.analyze.drift import DriftReport, Factor
from vllm_cache_tools.analyze.stats import Counters, StatsReport
from vllm_cache_tools.units import iso
from vllm_cache_tools.views.payloads import with_schema


def counters_json(c: Counters) -> dict[str, Any]:
    out = asdict(c)
    out["hit_ratio"] = None if c.hit_ratio is None else round(c.hit_ratio, 4)
    out["net_seconds"] = c.net_seconds
    out["regression"] = c.regression
    return out


def stats_document(r: StatsReport) -> dict[str, Any]:
    return with_schema("stats", {
        "root": r.source,
        "source_kind": r.kind,
        "basis": r.basis,
        "since": iso(r.since),
        "totals": counters_json(r.totals),
        "by": r.by,
        "groups": [{"by": g.by, "name": g.name, **counters_json(g.counters),
                    "entries": g.entries, "size_bytes": g.size_bytes, "others": g.others}
                   for g in r.groups],
        "events": r.events,
        "ledgers": r.ledgers,
        "hosts": r.hosts,
        "first_event": iso(r.first),
        "last_event": iso(r.last),
        "duplicates": r.duplicates,
        "entries": r.entries,
        "size_bytes": r.size_bytes,
        "untracked_entries": r.untracked,
        "placed_entries": r.placed,
        "never_hit": [{"key": u.key, "layout": u.layout, "model": u.model,
                       "size_bytes": u.size_bytes, "written": iso(u.written)}
                      for u in r.never_hit],
        "unknown": list(r.unknown),
        "problems": list(r.problems),
        "caps": list(r.caps),
    })


def factor_json(f: Factor) -> dict[str, Any]:
    return {"component": f.component, "item": f.item, "values": dict(f.values),
            "entries": f.entries, "entries_by_tree": dict(f.entries_by_tree),
            "in_key": f.in_key, "class": f.kind, "fix": f.fix,
            "wasted_bytes": f.wasted_bytes, "wasted_seconds": f.wasted_seconds,
            "wasted_starts": f.wasted_starts}


def drift_document(r: DriftReport) -> dict[str, Any]:
    return with_schema("drift", {
        "root": r.source,
        "source_kind": r.kind,
        "basis": r.basis,
        "models": [{"model": m.model, "starts": m.starts, "entries": m.entries,
                    "size_bytes": m.size_bytes,
                    "factors": [factor_json(f) for f in m.factors]} for m in r.models],
        "problems": list(r.problems),
        "caps": list(r.caps),
    })
