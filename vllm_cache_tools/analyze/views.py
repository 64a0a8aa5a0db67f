"""The ``--json`` documents of ``stats`` and ``drift`` (schema ids in
:data:`vllm_cache_tools.serialize.SCHEMAS`). Shapes fixed by issue 15; fields are only
added."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from vllm_cache_tools.analyze.stats import Counters, StatsReport
from vllm_cache_tools.serialize import iso, with_schema


def counters_json(c: Counters) -> dict[str, Any]:
    out = asdict(c)
    out["hit_ratio"] = None if c.hit_ratio is None else round(c.hit_ratio, 4)
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
                    "entries": g.entries, "size_bytes": g.size_bytes} for g in r.groups],
        "events": r.events,
        "ledgers": r.ledgers,
        "hosts": r.hosts,
        "first_event": iso(r.first),
        "last_event": iso(r.last),
        "duplicates": r.duplicates,
        "entries": r.entries,
        "size_bytes": r.size_bytes,
        "untracked_entries": r.untracked,
        "never_hit": [{"key": u.key, "layout": u.layout, "model": u.model,
                       "size_bytes": u.size_bytes, "written": iso(u.written)}
                      for u in r.never_hit],
        "unknown": list(r.unknown),
        "problems": list(r.problems),
    })
