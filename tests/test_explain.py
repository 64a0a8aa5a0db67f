"""explain over pairs of real vLLM caches and their logs (tests/realvllm scenarios)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.realvllm.harness import SCENARIOS, ScenarioRun, run_scenario
from vllm_cache_tools import read_entry, scan
from vllm_cache_tools.analyze.explain import explain_entries, show_value
from vllm_cache_tools.store.types import Cause

pytestmark = pytest.mark.realvllm


@pytest.fixture(scope="module")
def variants() -> ScenarioRun:
    return run_scenario(SCENARIOS["variants"])


def _keys(run: ScenarioRun, i: int) -> tuple[str, str]:
    log = run.log(i)
    b = log.split("Using cache directory: ", 1)[1].split("/rank_")[0].rsplit("/", 1)[1]
    a = log.split("saved AOT compiled function to ", 1)[1].split("/rank_")[0].rsplit("/", 1)[1]
    return b, a


def _explain(run: ScenarioRun, *args: str) -> tuple[int, dict[str, object]]:
    r = run_cli("explain", *args, "--json", "--root", str(run.vllm_root))
    assert r.returncode in (0, 1), r.stderr
    return r.returncode, json.loads(r.stdout)


def test_env_var_names_the_variable(real_compile: ScenarioRun) -> None:
    rc, d = _explain(real_compile, _keys(real_compile, 0)[0], _keys(real_compile, 2)[0])
    assert rc == 0 and d["unexplained"] == []
    assert [(c["component"], c["item"], c["old"], c["new"]) for c in d["causes"]] == [
        ("env", "VLLM_ALLOW_LONG_MAX_MODEL_LEN", False, True)]
    # One rendering of values for the headline and the detail (issue 11: "0 -> 1" above
    # "False -> True").
    assert d["headline"] == ("recompiled because env VLLM_ALLOW_LONG_MAX_MODEL_LEN changed "
                             "False -> True")
    r = run_cli("explain", _keys(real_compile, 0)[0], _keys(real_compile, 2)[0], "--root",
                str(real_compile.vllm_root))
    assert r.stdout.splitlines()[0] == d["headline"]
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN: False -> True  [cache_key_factors.json]" in r.stdout


def test_identical_second_start(real_compile: ScenarioRun) -> None:
    logs = [str(r.log) for r in real_compile.records]
    r = run_cli("explain", "--logs", logs[0], logs[1], "--json")
    d = json.loads(r.stdout)
    assert r.returncode == 0 and d["causes"] == [] and d["same_key"] is True


def test_logs_name_env_and_config_fields(real_compile: ScenarioRun,
                                         variants: ScenarioRun) -> None:
    logs = [str(r.log) for r in real_compile.records]
    r = run_cli("explain", "--logs", logs[0], logs[2], "--json")
    d = json.loads(r.stdout)
    assert r.returncode == 0
    assert [(c["component"], c["item"]) for c in d["causes"]] == [
        ("env", "VLLM_ALLOW_LONG_MAX_MODEL_LEN")]
    v = [str(r.log) for r in variants.records]
    r = run_cli("explain", "--logs", v[0], v[1], "--json")
    d = json.loads(r.stdout)
    assert r.returncode == 0
    assert [(c["component"], c["item"], c["old"], c["new"]) for c in d["causes"]] == [
        ("config", "model_config.max_model_len", 128, 64)]


def test_config_and_inductor_changes_between_entries_stay_unexplained(
        variants: ScenarioRun) -> None:
    base = _keys(variants, 0)[0]
    rc, d = _explain(variants, base, _keys(variants, 1)[0])
    assert rc == 1 and d["causes"] == []
    assert [u["component"] for u in d["unexplained"]] == ["config"]
    rc, d = _explain(variants, base, _keys(variants, 2)[0])
    assert rc == 1 and d["causes"] == []
    assert [u["component"] for u in d["unexplained"]] == ["compiler"]
    assert "TORCHINDUCTOR_" in d["unexplained"][0]["detail"]


def test_comment_appended_to_traced_file(variants: ScenarioRun) -> None:
    rc, d = _explain(variants, _keys(variants, 0)[0], _keys(variants, 3)[0])
    assert rc == 0 and len(d["causes"]) == 1
    c = d["causes"][0]
    assert c["component"] == "code" and c["item"] == "vllm/model_executor/models/llama.py"
    assert "+# vllm-cache-tools test edit: a trailing comment" in c["detail"]
    # Same AOT folder for starts 0 and 3: the artifact was recompiled and overwritten, which
    # vLLM's log of start 3 shows as a load failure.
    assert _keys(variants, 3)[1] == _keys(variants, 0)[1]
    assert "Source code has changed since the last compilation" in variants.log(3)


def test_line_above_forward_moves_the_aot_key(variants: ScenarioRun) -> None:
    info = {e.key: read_entry(e.path) for e in scan(variants.vllm_root,
                                                     check_in_use=False).entries}
    pristine = info[_keys(variants, 1)[1]]  # pristine sources, only max_model_len differs
    moved = info[_keys(variants, 4)[1]]
    x = explain_entries(pristine, moved)
    items = [(c.component, c.item, c.old, c.new) for c in x.causes]
    assert ("code", "LlamaModel.forward first line", 406, 407) in items
    assert any(c.component == "code" and c.item.endswith("llama.py") and
               "+# vllm-cache-tools test edit: one line above forward" in c.detail
               for c in x.causes)
    assert not any(c.component == "compiler" for c in x.causes)


def test_bad_inputs() -> None:
    r = run_cli("explain", "onlyone")
    assert r.returncode == 2 and "two entries" in r.stderr
    r = run_cli("explain", "--logs", "/nonexistent/a.log", "/nonexistent/b.log")
    assert r.returncode == 2 and "no such log file" in r.stderr


def test_no_arguments_picks_the_latest_start(real_compile: ScenarioRun) -> None:
    r = run_cli("explain", "--root", str(real_compile.vllm_root), "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert (d["old"], d["new"]) == (_keys(real_compile, 0)[0], _keys(real_compile, 2)[0])
    assert d["notes"][0].startswith("chose newest backend entry")
    assert [c["item"] for c in d["causes"]] == ["VLLM_ALLOW_LONG_MAX_MODEL_LEN"]


def test_against_current_environment(real_compile: ScenarioRun) -> None:
    from tests.realvllm.harness import start_env, venv_python

    start = real_compile.scenario.starts[2]  # the VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 start
    env = start_env(real_compile.vllm_root, start)
    r = run_cli("explain", "--against-current", _keys(real_compile, 0)[0], "--root",
                str(real_compile.vllm_root), "--python", str(venv_python()), "--json", "--",
                *start.serve_args(), env=env, inherit=False)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert [(c["component"], c["item"], c["new"]) for c in d["causes"]] == [
        ("env", "VLLM_ALLOW_LONG_MAX_MODEL_LEN", True)]
    assert d["new"] == _keys(real_compile, 2)[0]  # the live key is the folder vLLM used


def test_logs_of_source_edits_name_the_file_and_the_moved_forward(
        variants: ScenarioRun) -> None:
    logs = [str(r.log) for r in variants.records]
    r = run_cli("explain", "--logs", logs[0], logs[3], "--json")
    d = json.loads(r.stdout)
    assert r.returncode == 0, r.stderr
    assert [(c["component"], c["item"]) for c in d["causes"]] == [
        ("code", "vllm/model_executor/models/llama.py")]
    assert any("could not load it (Source code has changed" in n for n in d["notes"])
    r = run_cli("explain", "--logs", logs[1], logs[4], "--json")
    d = json.loads(r.stdout)
    assert r.returncode == 0, r.stderr
    items = {(c["component"], c["item"]) for c in d["causes"]}
    assert items == {("code", "vllm/model_executor/models/llama.py"),
                     ("code", "LlamaModel.forward first line"),
                     ("config", "model_config.max_model_len")}


# --------------------------------------------------------------------------------------------
# Issue 11: headlines that name the whole change or say it is partial; the args line.

SAMPLES = Path(__file__).resolve().parent.parent / "examples" / "sample_logs"


def test_headline_names_every_cause_or_says_partial() -> None:
    from vllm_cache_tools.analyze.explain import Explanation, Unexplained

    env = Cause("env", "VLLM_CPU_OMP_THREADS_BIND", None, "0|1", "e")
    tp = Cause("config", "parallel_config.tensor_parallel_size", 1, 2, "e")
    x = Explanation("a", "b", False, (env,), (Unexplained("config", "config hash a -> b", "m"),
                                              Unexplained("code", "code hash c -> d", "m")))
    assert x.headline == ("recompiled because env VLLM_CPU_OMP_THREADS_BIND changed None -> "
                          "0|1; partial: config/code hashes differ, unexplained")
    x = Explanation("a", "b", False, (env, tp, env))
    assert x.headline == ("recompiled because env VLLM_CPU_OMP_THREADS_BIND changed None -> 0|1 "
                          "and config parallel_config.tensor_parallel_size changed 1 -> 2 "
                          "(+1 more)")
    x = Explanation("a", "b", False, (), (Unexplained("compiler", "compiler hash", "m"),))
    assert x.headline == "recompiled; compiler hash differs, unexplained"
    assert show_value("128") == "'128'" and show_value(128) == "128"
    assert show_value(True) == "True" and show_value("torch.bfloat16") == "torch.bfloat16"


def test_explain_across_roots_tp2(real_compile: ScenarioRun, real_tp2: ScenarioRun) -> None:
    """explain root/../<key> root_tp2/../<key>: TP=2 changes the env (the OMP bind), the
    config and the traced code; the headline names all of it, or says what stayed
    unexplained; never just the env variable."""
    a = real_compile.vllm_root / "torch_compile_cache" / _keys(real_compile, 0)[0]
    b = real_tp2.vllm_root / "torch_compile_cache" / _keys(real_tp2, 0)[0]
    r = run_cli("explain", str(a), str(b), "--json")
    assert r.returncode in (0, 1), r.stderr
    d = json.loads(r.stdout)
    comps = {c["component"] for c in d["causes"]} | {u["component"] for u in d["unexplained"]}
    assert {"env", "config"} <= comps, d
    head = d["headline"]
    assert "VLLM_CPU_OMP_THREADS_BIND" in head
    for u in d["unexplained"]:
        assert "partial" in head and u["component"] in head, d
    named = [c for c in d["causes"] if c["item"] in head]
    assert named or "more" in head
    if not d["unexplained"]:
        assert "partial" not in head


def _with_additional_config(text: str) -> str:
    """The real cold log as if the start had been given additional_config (a per-process id,
    the public report's case): the args line gains the field, and the config hash vLLM logs
    changes with it (edited in this copy; cfg=de926b2dc5 -> 0123456789)."""
    text = text.replace("non-default args: {", "non-default args: {'additional_config': "
                        "{'request_id': 'pod-7', 'hf_token': 'hf_secret'}, ", 1)
    return text.replace("cfg=de926b2dc5", "cfg=0123456789")


def test_logs_name_an_additional_config_field(tmp_path: Path) -> None:
    new = tmp_path / "with-additional-config.log"
    new.write_text(_with_additional_config((SAMPLES / "1-cold-start.log").read_text()))
    r = run_cli("explain", "--logs", str(SAMPLES / "1-cold-start.log"), str(new), "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    causes = [(c["component"], c["item"], c["old"], c["new"]) for c in d["causes"]]
    assert ("config", "additional_config.request_id", None, "pod-7") in causes, d
    secret = next(c for c in d["causes"] if c["item"] == "additional_config.hf_token")
    assert secret["new"].startswith("<redacted") and "hf_secret" not in r.stdout
    assert d["unexplained"] == [] and "additional_config.request_id" in d["headline"]


def test_logs_of_recorded_starts_name_additional_config() -> None:
    """Real logs: the recorder scenario's start 2 was given additional_config={"vct_probe": 1};
    vLLM's "non-default args:" line says so."""
    rec = run_scenario(SCENARIOS["recorder"])
    logs = [str(r.log) for r in rec.records]
    r = run_cli("explain", "--logs", logs[0], logs[2], "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert [(c["component"], c["item"], c["old"], c["new"]) for c in d["causes"]] == [
        ("config", "additional_config.vct_probe", None, 1)], d
    assert d["headline"] == ("recompiled because config additional_config.vct_probe changed "
                             "None -> 1")
