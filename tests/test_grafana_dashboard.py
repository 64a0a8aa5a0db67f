"""docs/grafana-dashboard.json without vLLM or Prometheus (the real scrape of every expression
is tests/test_metrics.py, marked realvllm): the JSON parses, every panel has a unique id and
targets, and every expression names only metrics we export, from the two tables of names: the
recorder's on vLLM's /metrics (vllm_cache_tools/metric_names.py) and the ledgers' exposition
(``stats --format``, ``serve-metrics``: vllm_cache_tools/views/metrics.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from vllm_cache_tools.metric_names import PREFIX, live_sample_names
from vllm_cache_tools.views.metrics import exported_names

DASHBOARD = Path(__file__).resolve().parent.parent / "docs" / "grafana-dashboard.json"
NAME = re.compile(rf"\b{PREFIX}[a-z_]+\b")


def test_dashboard_parses_and_names_only_our_metrics() -> None:
    d = json.loads(DASHBOARD.read_text())
    panels = d["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    exprs = [t["expr"] for p in panels for t in p["targets"]]
    exprs += [v["definition"] for v in d["templating"]["list"] if "definition" in v]
    assert all(p["targets"] for p in panels) and len(exprs) >= 10
    known = exported_names() | live_sample_names()
    for e in exprs:
        used = set(NAME.findall(e))
        assert used, e
        assert used <= known, (e, used - known)
        assert e.count("(") == e.count(")"), e


def test_guard_warnings_and_load_failures_panels() -> None:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    by_name: dict[str, list[str]] = {}
    for p in panels:
        for t in p["targets"]:
            for n in NAME.findall(t["expr"]):
                by_name.setdefault(n, []).append(p["title"])
    assert any("Guard warnings" in t for t in by_name[PREFIX + "guard_warnings_total"])
    assert any(t == "Load failures" for t in by_name[PREFIX + "load_failures_total"])
    assert len(by_name[PREFIX + "load_failures_total"]) >= 3  # stat, events, per tree
