"""Every verb that decides names the cause of a miss (issue 25, item 1), on real caches: for
each changed-factor start of the harness (an env variable, a config field, additional_config,
an Inductor option, a traced file edited in place or above forward, two tensor-parallel
ranks), ``predict`` from the root as that start found it, and ``unpack --check`` / ``pull
--if-hit --check`` of that root's entries (a bundle, a local store), all with the start's own
arguments and environment. Each must say MISS with at least one cause,
and where a recorder manifest exists, the field itself, old -> new.

``VCT_CAUSE_TABLE=FILE`` writes every (scenario, start, verb, causes) row as JSON lines: the
table in docs/predict.md comes from it."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli
from tests.realvllm.harness import (
    SCENARIOS,
    ScenarioRun,
    Start,
    applied_edit,
    model_lock,
    run_scenario,
    start_env,
    venv_python,
)

pytestmark = pytest.mark.realvllm

Cause = tuple[str, str, Any, Any]
Want = Callable[[list[dict[str, Any]]], bool]


def _has(component: str, item: str, old: Any = ..., new: Any = ...) -> Want:
    def ok(causes: list[dict[str, Any]]) -> bool:
        return any(c["component"] == component and c["item"] == item
                   and (old is ... or c["old"] == old) and (new is ... or c["new"] == new)
                   for c in causes)
    return ok


def _ends(component: str, suffix: str) -> Want:
    return lambda cs: any(c["component"] == component and str(c["item"]).endswith(suffix)
                          for c in cs)


def _mentions(component: str, text: str) -> Want:
    return lambda cs: any(c["component"] == component and text in str(c["item"]) + " "
                          + str(c["detail"]) for c in cs)


def _named(causes: list[dict[str, Any]]) -> bool:
    """Whether a cause names the item itself (a variable, field, option, file, line), not
    only a hash that differs."""
    return any(not str(c["item"]).endswith(("_hash", "aot key"))
               and not str(c["detail"]).startswith("not itemised") for c in causes)


def _keys(root: Path) -> list[str]:
    cc = root / "torch_compile_cache"
    out = [p.name for p in cc.iterdir() if len(p.name) == 10]
    aot = cc / "torch_aot_compile"
    return out + ([p.name for p in aot.iterdir()] if aot.is_dir() else [])


def _row(scenario: str, i: int, factor: str, verb: str, causes: list[dict[str, Any]],
         field_level: bool) -> None:
    path = os.environ.get("VCT_CAUSE_TABLE")
    if not path:
        return
    with open(path, "a") as f:
        f.write(json.dumps({"scenario": scenario, "start": i, "factor": factor, "verb": verb,
                            "field_level": field_level,
                            "causes": [f"{c['component']}: {c['item']}: {c['old']!r} -> "
                                       f"{c['new']!r}" for c in causes]}) + "\n")


def _verbs(run: ScenarioRun, i: int, factor: str, want: Want, tmp: Path,
           start: Start | None = None) -> None:
    """predict, unpack --check and pull --if-hit --check for start ``i`` (or ``start``, on
    the root start ``i`` found): each a miss whose causes are not empty and satisfy
    ``want``."""
    start = start or run.scenario.starts[i]
    args = start.serve_args()
    py = ["--python", str(venv_python()), "--usage", "llm"]
    src = run.before(i)
    bundle = tmp / f"{run.scenario.name}-{i}.tar.zst"
    store = tmp / f"store-{run.scenario.name}-{i}"
    res = run_cli("pack", "--root", str(src), *_keys(src), "-o", str(bundle))
    assert res.returncode == 0, res.stderr
    res = run_cli("push", "--root", str(src), *_keys(src), f"file://{store}")
    assert res.returncode == 0, res.stderr
    # The checks place nothing: run against the same root as predict, they reuse its probe
    # answer (memo) instead of probing and tracing afresh for an empty root.
    target = src
    with model_lock(), applied_edit(start.edit):
        got: dict[str, list[dict[str, Any]]] = {}
        r = run_cli("predict", "--root", str(src), *py, "--json", "--", *args,
                    env=start_env(src, start), inherit=False)
        assert r.returncode == 1, (r.stdout[-2000:], r.stderr)  # 1: a miss
        d = json.loads(r.stdout)
        assert d["hit"] is False
        got["predict"] = d["causes"]
        env = start_env(target, start)
        r = run_cli("unpack", str(bundle), "--check", "--root", str(target), *py, "--json",
                    "--", *args, env=env, inherit=False)
        d = json.loads(r.stdout)
        assert d["check"]["verdict"] == "miss", d["check"]
        got["unpack --check"] = d["check"]["causes"]
        r = run_cli("pull", f"file://{store}", "--root", str(target), "--if-hit", "--check", *py,
                    "--json", "--", *args, env=env, inherit=False)
        d = json.loads(r.stdout)
        assert d["check"]["verdict"] == "miss", d["check"]
        got["pull --if-hit"] = d["check"]["causes"]
    for verb, causes in got.items():
        _row(run.scenario.name, i, factor, verb, causes, _named(causes))
    for verb, causes in got.items():
        assert causes, (verb, "a miss with an empty cause list")
        assert want(causes), (verb, causes)


@pytest.fixture(scope="module")
def rec() -> ScenarioRun:
    return run_scenario(SCENARIOS["recorder"])


@pytest.fixture(scope="module")
def sample() -> ScenarioRun:
    return run_scenario(SCENARIOS["sample"])


# With the recorder's manifests: the field itself, old -> new, in every verb.
RECORDED = [
    (2, "additional_config", _has("config", "additional_config.vct_probe", None, 1)),
    (3, "config field", _has("config", "model_config.max_model_len", 128, 64)),
    (5, "TP size", _has("config", "parallel_config.tensor_parallel_size", 1, 2)),
    (6, "Inductor option", _mentions("compiler", "benchmark_kernel")),
    (7, "traced file edit", _ends("code", "llama.py")),
]


@pytest.mark.parametrize(("i", "factor", "want"), RECORDED, ids=[r[1] for r in RECORDED])
def test_recorded_miss_names_the_field_in_every_verb(rec: ScenarioRun, tmp_path: Path,
                                                     i: int, factor: str, want: Want) -> None:
    _verbs(rec, i, factor, want, tmp_path)


def test_env_var_miss_names_the_variable(sample: ScenarioRun, tmp_path: Path) -> None:
    _verbs(sample, 2, "env var", _has("env", "VLLM_ALLOW_LONG_MAX_MODEL_LEN", False, True),
           tmp_path)


# Without manifests: what the entry's files reveal, else the hash with what would settle it.
# On the "compile" scenario's root as its start 1 found it (start 0's entries, no recorder),
# with one factor changed: its keys differ from start 0's (test_predict checks predict's keys
# against the folders vLLM used), so these starts would compile.
UNRECORDED = [
    ("config field", Start.make(compile_mode=True, max_model_len=64),
     _mentions("config", "VLLM_CACHE_TOOLS_RECORD=1")),
    ("Inductor option", Start.make(env={"TORCHINDUCTOR_BENCHMARK_KERNEL": "1"},
                                   compile_mode=True),
     _mentions("compiler", "TORCHINDUCTOR_BENCHMARK_KERNEL=1")),
    ("forward moved", Start.make(compile_mode=True, edit="insert-above-forward"),
     _has("code", "LlamaModel.forward first line")),
]


@pytest.mark.parametrize(("factor", "start", "want"), UNRECORDED,
                         ids=[r[0] for r in UNRECORDED])
def test_unrecorded_miss_says_what_would_settle_it(real_compile: ScenarioRun, tmp_path: Path,
                                                   factor: str, start: Start,
                                                   want: Want) -> None:
    _verbs(real_compile, 1, factor, want, tmp_path, start)


def test_after_rm_of_the_aot_entry_the_miss_says_it_is_absent(rec: ScenarioRun,
                                                             tmp_path: Path) -> None:
    """The backend entry of this start's keys stays, its AOT artifact is removed: vLLM
    compiles again; predict used to say "backend tree hit ... vLLM compiles again" with no
    cause."""
    from tests.realvllm.harness import copy_root

    start = rec.scenario.starts[1]  # same arguments as start 0, whose entries are in before(1)
    root = copy_root(rec.before(1), tmp_path / "root")
    aot = [p.name for p in (root / "torch_compile_cache" / "torch_aot_compile").iterdir()]
    res = run_cli("rm", "--root", str(root), "--grace", "0", "--yes", *aot)
    assert res.returncode == 0, res.stderr
    with model_lock(), applied_edit(start.edit):
        r = run_cli("predict", "--root", str(root), "--python", str(venv_python()),
                    "--usage", "llm", "--json", "--", *start.serve_args(),
                    env=start_env(root, start), inherit=False)
    assert r.returncode == 1, (r.stdout[-2000:], r.stderr)
    causes = json.loads(r.stdout)["causes"]
    _row("recorder", 1, "AOT entry removed", "predict", causes, _named(causes))
    assert [(c["component"], c["old"]) for c in causes] == [("cache", "absent")], causes
    assert causes[0]["item"] == f"AOT entry {aot[0][:12]}"
