"""``warm`` says what vLLM did, as vLLM's own log says it (issue 25, item 2): on a root that
already holds the entries, with the recorder on (it writes a manifest and a ledger event beside
the entry it loads, so the entry's files change), warm must say "loaded, nothing compiled",
name no entry as written, and give the load's time. One real vLLM start; the log reading is
also checked on the harness's logs of starts that compiled, loaded, or failed to load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.realvllm.harness import (
    SCENARIOS,
    ScenarioRun,
    copy_root,
    model_lock,
    restore_pristine_sources,
    run_scenario,
    start_env,
    venv_python,
)
from vllm_cache_tools.fleet import link_proof, prepared, selection
from vllm_cache_tools.fleet.warm import read_warm_log

pytestmark = pytest.mark.realvllm


def _read(run: ScenarioRun, i: int) -> tuple[list[str], list[float | None], list[str | None]]:
    with open(run.records[i].log, "rb") as f:
        fs, _ = read_warm_log(f, str(run.records[i].log))
    return [f.outcome for f in fs], [f.seconds for f in fs], [f.aot_key for f in fs]


@pytest.fixture(scope="module")
def rec() -> ScenarioRun:
    return run_scenario(SCENARIOS["recorder"])


def test_the_log_says_compiled_loaded_or_load_failed(real_compile: ScenarioRun,
                                                    rec: ScenarioRun) -> None:
    aot = next((real_compile.before(1) / "torch_compile_cache" / "torch_aot_compile")
               .iterdir()).name
    outcomes, seconds, keys = _read(real_compile, 0)
    assert outcomes == ["compiled"] and keys == [aot] and seconds[0] and seconds[0] > 0
    outcomes, seconds, keys = _read(real_compile, 1)
    assert outcomes == ["loaded"] and keys == [aot] and seconds[0] is not None
    # llama.py edited after start 0 compiled (same AOT key): the artifact's copy differs, so
    # vLLM's loader refuses it and compiles again into the same folder.
    with open(rec.records[7].log, "rb") as f:
        fs, _ = read_warm_log(f, str(rec.records[7].log))
    assert [f.outcome for f in fs] == ["load-failed"], fs
    assert fs[0].aot_key == _read(rec, 0)[2][0] and "load failed" in fs[0].detail


@pytest.fixture(scope="module")
def sample() -> ScenarioRun:
    return run_scenario(SCENARIOS["sample"])


def test_warm_on_a_warm_root_says_loaded_nothing_compiled(sample: ScenarioRun,
                                                         tmp_path: Path) -> None:
    start = sample.scenario.starts[1]  # the recorder on; start 0's entries in the root
    root = copy_root(sample.before(1), tmp_path / "root")
    before = {p: p.stat().st_mtime for p in root.rglob("*") if p.is_file()}
    log = tmp_path / "warm.log"
    with model_lock():
        restore_pristine_sources()
        res = run_cli("warm", "--root", str(root), "--python", str(venv_python()), "--usage",
                      "llm", "--log", str(log), "--json", "--", *start.serve_args(),
                      env=start_env(root, start), inherit=False)
    text = log.read_text(errors="replace")
    assert res.returncode == 0, (res.stderr, text[-3000:])
    assert "Directly load AOT compilation" in text  # vLLM's own word
    doc = json.loads(res.stdout)
    assert doc["outcome"] == "loaded", doc
    assert doc["entries"] == [] and doc["causes"] == [], doc
    fs = doc["functions"]
    aot = next((root / "torch_compile_cache" / "torch_aot_compile").iterdir()).name
    assert [f["outcome"] for f in fs] == ["loaded"] and fs[0]["aot_key"] == aot, fs
    assert fs[0]["seconds"] is not None and fs[0]["seconds"] >= 0
    # The files did change (the recorder wrote beside the entry): not "written" for all that.
    after = {p for p in root.rglob("*") if p.is_file() and ".vllm-cache-tools" not in p.parts}
    assert after - set(before), "the recorder wrote nothing in an entry: case not exercised"
    print(f"warm on a warm root: {doc['seconds']:.0f} s, load {fs[0]['seconds']} s")


def test_warm_that_compiles_says_so_and_why(sample: ScenarioRun, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Start 2 sets VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 on a root holding start 0's entries: vLLM
    compiles; warm says how many functions, their times, the entries written, and why the
    entries already there were not reused (the variable, old -> new). It has also done the
    next pack's reads: a pack of the entries written reads no pickle and hashes no file, and
    its records are those of a pack that reads everything."""
    start = sample.scenario.starts[2]
    root = copy_root(sample.before(2), tmp_path / "root")
    log = tmp_path / "warm.log"
    with model_lock():
        restore_pristine_sources()
        res = run_cli("warm", "--root", str(root), "--python", str(venv_python()), "--usage",
                      "llm", "--log", str(log), "--json", "--", *start.serve_args(),
                      env=start_env(root, start), inherit=False)
    assert res.returncode == 0, (res.stderr, log.read_text(errors="replace")[-3000:])
    doc = json.loads(res.stdout)
    assert doc["outcome"] == "compiled", doc
    fs = doc["functions"]
    assert [f["outcome"] for f in fs] == ["compiled"] and fs[0]["seconds"] > 0, fs
    assert {(e["layout"], e["new"]) for e in doc["entries"]} == {("backend", True),
                                                                ("aot", True)}, doc
    assert fs[0]["aot_key"] in {e["key"] for e in doc["entries"]}
    assert [(c["component"], c["item"], c["old"], c["new"]) for c in doc["causes"]] == [
        ("env", "VLLM_ALLOW_LONG_MAX_MODEL_LEN", False, True)], doc["causes"]
    written = {e["key"] for e in doc["entries"]}
    assert set(doc["pack_ready"]) == written and doc["prepare_seconds"] >= 0, doc

    def boom(*a: object, **k: object) -> None:
        raise AssertionError("read although warm prepared the entry")

    with monkeypatch.context() as m:
        m.setattr(link_proof, "read_entry", boom)
        m.setattr(prepared, "deep_read", boom)  # where the read-ahead reads
        m.setattr(selection, "_hash_files", boom)
        ready = selection.select(root, sorted(written))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "fresh-cache"))  # no memo
    cold = selection.select(root, sorted(written))
    assert ready.records == cold.records and {r.key for r in cold.records} == written
    print(f"warm that compiles: {doc['seconds']:.0f} s, compile {fs[0]['seconds']} s, "
          f"pack prepared in {doc['prepare_seconds']} s")
