"""Fleet insight with real vLLM (issue 15): three starts of one model into one shared root as
two hosts (``fleet`` scenario in tests/realvllm/harness.py). ``drift`` names exactly the
factors that differed, with their entry counts; ``stats`` equals the ledger's events and
vLLM's own hit/miss log lines; ``audit`` names the undeclared ``VLLM_*`` variable that differed
between two starts reusing one entry; ``explain`` says vLLM cannot see it."""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import run_cli
from tests.realvllm.harness import SCENARIOS, ScenarioRun, run_scenario
from vllm_cache_tools.analyze.drift import drift
from vllm_cache_tools.analyze.stats import stats
from vllm_cache_tools.read.manifest import read_ledger

pytestmark = pytest.mark.realvllm

UNDECLARED = "VLLM_VCT_UNDECLARED_KNOB"


@pytest.fixture(scope="module")
def fleet() -> ScenarioRun:
    return run_scenario(SCENARIOS["fleet"])


def _count(run: ScenarioRun, pattern: str) -> int:
    return sum(len(re.findall(pattern, run.log(i))) for i in range(len(run.records)))


def test_ledger_hosts_and_start_ids(fleet: ScenarioRun) -> None:
    events, problems = read_ledger(fleet.compile_cache)
    assert not problems
    assert {e.host for e in events} == {"pod-a", "pod-b"}
    ledgers = sorted(p.name for p in (fleet.compile_cache / ".vllm-cache-tools" /
                                      "ledger").iterdir())
    assert ledgers == ["pod-a.jsonl", "pod-b.jsonl"]
    lines = [json.loads(x) for p in ledgers for x in (fleet.compile_cache / ".vllm-cache-tools"
                                                        / "ledger" / p).read_text().splitlines()]
    assert len({x["start"] for x in lines}) == 3


def test_stats_equal_the_ledger_and_vllms_log_lines(fleet: ScenarioRun) -> None:
    r = stats(fleet.vllm_root, by="host")
    events, _ = read_ledger(fleet.compile_cache)
    by_kind: dict[str, dict[str, int]] = {}
    for e in events:
        by_kind.setdefault(e.tree, {}).setdefault(e.event, 0)
        by_kind[e.tree][e.event] += 1
        if e.guard is not None:  # counted beside its event (docs/guard.md)
            by_kind[e.tree]["guard-warning"] = by_kind[e.tree].get("guard-warning", 0) + 1
    assert r.events == by_kind
    # vLLM's own lines, over the three starts' logs.
    assert r.events["aot"].get("hit", 0) == _count(fleet, r"Directly load AOT compilation") == 1
    assert r.events["aot"].get("miss", 0) == _count(fleet, r"saved AOT compiled function") == 2
    assert r.events["backend"].get("miss", 0) == _count(fleet, r"Using cache directory: ") == 2
    assert _count(fleet, r"Directly load the compiled graph") == 0
    t = r.totals
    assert (t.starts, t.hits, t.misses, t.load_failures) == (3, 1, 2, 0)
    assert t.compile_seconds and t.compile_seconds > 0 and t.saved_unknown == 0
    assert t.saved_seconds and t.saved_seconds > 0
    assert {g.name: (g.counters.starts, g.counters.hits) for g in r.groups} == {
        "pod-a": (2, 1), "pod-b": (1, 0)}


def test_drift_names_exactly_the_factors(fleet: ScenarioRun) -> None:
    r = drift(fleet.vllm_root)
    assert r.basis == "ledger" and len(r.models) == 1
    m = r.models[0]
    assert (m.starts, m.entries) == (3, 4)
    fs = {f"{f.component} {f.item}": f for f in m.factors}
    assert set(fs) == {"config additional_config.worker_id", "env VLLM_HOST_IP",
                       "host name", f"env {UNDECLARED}"}
    w = fs["config additional_config.worker_id"]
    assert (w.entries, w.in_key, w.kind) == (2, True, "per run")
    assert dict(w.values) == {"w2": 2, "w1": 1} and dict(w.entries_by_tree) == {
        "aot": 2, "backend": 2}
    assert w.fix.startswith("drop `additional_config.worker_id`")
    assert w.wasted_starts == 1 and w.wasted_bytes > 0 and w.wasted_seconds > 0
    for name in ("env VLLM_HOST_IP", "host name", f"env {UNDECLARED}"):
        assert (fs[name].entries, fs[name].in_key) == (1, False), name
    assert fs["env VLLM_HOST_IP"].kind == fs["host name"].kind == "per host"
    doc = json.loads(run_cli("drift", str(fleet.vllm_root), "--json").stdout)
    assert doc["models"][0]["factors"][0]["item"] == "additional_config.worker_id"


def test_audit_names_the_undeclared_variable(fleet: ScenarioRun) -> None:
    res = run_cli("audit", "--root", str(fleet.vllm_root), "--json")
    assert res.returncode == 1, res.stderr
    found = {(f["item"], f["verdict"]) for f in json.loads(res.stdout)["findings"]}
    assert (f"env.{UNDECLARED}", "possible false hit") in found
    assert ("env.VLLM_HOST_IP", "ignored by vLLM") in found
    assert {i for i, v in found if v == "possible false hit"} == {f"env.{UNDECLARED}"}
    aot = next(e for e in json.loads(res.stdout)["findings"] if e["layout"] == "aot")["key"]
    x = run_cli("explain", aot[:16], aot[:16], "--root", str(fleet.vllm_root))
    assert "same key: vLLM cannot see this change" in x.stdout, x.stdout + x.stderr
    assert UNDECLARED in x.stdout


def test_over_the_caps_the_real_ledgers_count_the_same(fleet: ScenarioRun,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """Issue 23: the real ledgers counted in parts on disk and with hosts folded past a cap
    of 1 give the same totals, events and seconds; the folded host is one row and each cap
    one line. drift read in parts names the same factors."""
    import vllm_cache_tools.analyze.drift_starts as D
    import vllm_cache_tools.analyze.stats_read as S
    import vllm_cache_tools.analyze.stats_tally as T

    whole = {by: stats(fleet.vllm_root, by=by) for by in ("host", "model", "entry")}
    before = drift(fleet.vllm_root)
    monkeypatch.setattr(S, "MAX_STARTS", 1)
    monkeypatch.setattr(S, "SPILL_PART_BYTES", 1)
    monkeypatch.setattr(T, "MAX_GROUPS", 1)
    monkeypatch.setattr(D, "MAX_STARTS", 1)
    for by, one in whole.items():
        r = stats(fleet.vllm_root, by=by)
        assert (r.totals, r.events, r.hosts, r.never_hit) == (
            one.totals, one.events, one.hosts, one.never_hit), by
        assert any("starts at once; counted in" in c for c in r.caps), r.caps
    r = stats(fleet.vllm_root, by="host")
    assert [(g.name, g.others, g.counters.starts) for g in r.groups] == [
        ("pod-a", 0, 2), ("1 other host", 1, 1)]
    assert r.caps[0].startswith("--by host: 1 host more than the 1 shown one by one")
    parts = drift(fleet.vllm_root)
    assert parts.models == before.models and parts.caps and not before.caps
