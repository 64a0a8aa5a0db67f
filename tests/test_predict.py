"""predict against real vLLM: for each start of each scenario, predict from the root as that
start found it (the harness snapshots it) with the start's arguments and environment, then
compare with what vLLM did (its log): the folders it used and whether it loaded or compiled."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.realvllm.harness import (
    SCENARIOS,
    ScenarioRun,
    applied_edit,
    model_lock,
    run_scenario,
    start_env,
    venv_python,
)
from vllm_cache_tools.analyze.predict import Prediction, predict

pytestmark = pytest.mark.realvllm

USING = re.compile(r"Using cache directory: (\S+) for vLLM's torch\.compile")
AOT_PATH = re.compile(r"(?:saved AOT compiled function to|Directly load AOT compilation from "
                      r"path) (\S+)")


@pytest.fixture(scope="module")
def variants() -> ScenarioRun:
    return run_scenario(SCENARIOS["variants"])


def _predict(run: ScenarioRun, i: int) -> Prediction:
    start = run.scenario.starts[i]
    env = start_env(run.before(i), start)
    with model_lock(), applied_edit(start.edit):
        return predict(start.serve_args(), env=env, root=run.before(i),
                       python=str(venv_python()), usage="llm")


def _vllm_did(run: ScenarioRun, i: int) -> tuple[bool, set[str], set[str]]:
    log = run.log(i)
    hit = "Directly load AOT compilation" in log and "Compiling model again" not in log
    backend = {Path(p).parent.parent.name for p in USING.findall(log)}
    aot = {Path(p).parent.parent.name for p in AOT_PATH.findall(log)}
    return hit, backend, aot


def _check(run: ScenarioRun, i: int) -> Prediction:
    p = _predict(run, i)
    hit, backend, aot = _vllm_did(run, i)
    assert p.hit == hit, (run.scenario.name, i, p.aot, p.backend, p.reasons)
    assert aot == {p.aot.key}, (run.scenario.name, i)
    if backend:  # vLLM ran its backend (no AOT hit): the folder it used
        if p.backend.key is None:
            assert p.backend.evidence == "unknown" and i == 0  # cold root: no evidence
        else:
            assert backend == {p.backend.key}, (run.scenario.name, i, p.backend)
    return p


def test_compile_mode_cold_warm_and_env_change(real_compile: ScenarioRun) -> None:
    p0 = _check(real_compile, 0)
    assert not p0.hit and p0.aot.detail == "no artifact at this key"
    p1 = _check(real_compile, 1)
    assert p1.hit and p1.backend.key is not None
    p2 = _check(real_compile, 2)
    assert not p2.hit
    assert [(c.component, c.item, c.old, c.new) for c in p2.reasons if c.component == "env"] \
        == [("env", "VLLM_ALLOW_LONG_MAX_MODEL_LEN", False, True)]
    assert p2.parts["config_hash"] == p1.parts["config_hash"]


def test_default_cpu_mode(real_cpu_default: ScenarioRun) -> None:
    p0 = _check(real_cpu_default, 0)
    assert p0.backend.key is None and "not VLLM_COMPILE" in p0.backend.detail
    # The warm start finds the artifact but vLLM 0.32 cannot load it (measured): predict says
    # so from the artifact's deserializer, not from a version table.
    p1 = _check(real_cpu_default, 1)
    assert not p1.hit and "finalize_loading" in p1.aot.detail


def test_config_change(variants: ScenarioRun) -> None:
    _check(variants, 0)
    p = _check(variants, 1)
    assert not p.hit
    assert any(c.component == "config" for c in p.reasons)


def test_torchinductor_env_change(variants: ScenarioRun) -> None:
    p = _check(variants, 2)
    assert not p.hit
    comps = {c.component for c in p.reasons}
    assert "compiler" in comps and "env" not in comps and "config" not in comps


def test_edited_traced_file(variants: ScenarioRun) -> None:
    # A trailing comment: same AOT folder (forward did not move) but the pickled source
    # copy differs, so vLLM recompiles and overwrites; the backend key changes (code hash).
    p = _check(variants, 3)
    p0 = _predict(variants, 0)
    assert not p.hit and p.aot.key == p0.aot.key
    assert "sources changed" in p.aot.detail
    assert any(c.component == "code" and c.item.endswith("llama.py") for c in p.reasons)
    assert p.parts["code_hash"] != p0.parts["code_hash"]
    # A line above forward moves co_firstlineno: a new AOT folder.
    p4 = _check(variants, 4)
    assert p4.aot.key != p0.aot.key
    assert any(c.item == "LlamaModel.forward first line" for c in p4.reasons)


def test_predict_cli_exit_codes(real_compile: ScenarioRun) -> None:
    start = real_compile.scenario.starts[1]
    env = start_env(real_compile.before(1), start)
    args = ["predict", "--root", str(real_compile.before(1)), "--python", str(venv_python()),
            "--usage", "llm", "--json", "--", *start.serve_args()]
    r = run_cli(*args, env=env, inherit=False)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["hit"] is True and data["aot"]["hit"] is True
    assert set(data) == {"schema", "hit", "compiled", "backend", "aot", "aot_drafts", "parts",
                         "causes", "reasons", "probe", "trace"}
    assert data["aot_drafts"] == []  # no speculative draft model in these args
    assert {"key", "path", "hit", "code_hash_evidence"} <= set(data["backend"])
    assert {"key", "path", "hit", "source_check"} <= set(data["aot"])
    assert data["aot"]["source_check"].startswith("the artifact's copies of ")  # issue 11
    r = run_cli(*args[:-len(start.serve_args())], *start.serve_args()[:1], "--max-model-len",
                "64", *start.serve_args()[3:], env=env, inherit=False)
    assert r.returncode == 1, r.stderr


def test_predict_bad_inputs() -> None:
    r = run_cli("predict", "--", "some-model")  # this interpreter has no vLLM
    assert r.returncode == 2 and "vLLM is not installed" in r.stderr
    assert r.stderr.count("\n") == 1
    r = run_cli("predict")
    assert r.returncode == 2 and "after --" in r.stderr
    r = run_cli("predict", "--python", "/nonexistent/python", "--", "m")
    assert r.returncode == 2 and "not found" in r.stderr
