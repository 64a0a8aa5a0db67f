"""``warm --usage serve`` against a real ``vllm serve``: the OpenAI server's usage context has
its own defaults (vLLM picks some engine defaults per usage context), so the proof that warm
fills the folders a pod's ``vllm serve`` will read needs a real server start. Two real starts:
``vllm serve`` itself (until "Application startup complete", then stopped), and ``warm --usage
serve`` with dummy weights; then ``predict --usage serve`` names a hit in the served root."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.fleet_support import free_port
from tests.realvllm.harness import (
    ScenarioRun,
    model_lock,
    restore_pristine_sources,
    start_env,
    venv_python,
)

pytestmark = pytest.mark.realvllm
READY = "Application startup complete"


def _entries(root: Path) -> set[tuple[str, str]]:
    cc = root / "torch_compile_cache"
    out = {("backend", p.name) for p in cc.iterdir() if len(p.name) == 10}
    aot = cc / "torch_aot_compile"
    out |= {("aot", p.name) for p in aot.iterdir()} if aot.is_dir() else set()
    return out


def _serve(args: list[str], env: dict[str, str], log: Path, timeout: float = 900) -> str:
    """Run the OpenAI API server until its server is up; stop it; its log text."""
    cmd = [str(venv_python()), "-m", "vllm.entrypoints.openai.api_server", "--model", args[0],
           *args[1:], "--host", "127.0.0.1", "--port", str(free_port())]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                cwd=str(log.parent))
        try:
            deadline = time.monotonic() + timeout
            while READY not in log.read_text(errors="replace"):
                if proc.poll() is not None or time.monotonic() > deadline:
                    break
                time.sleep(1)
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return log.read_text(errors="replace")


def test_warm_usage_serve_fills_what_vllm_serve_reads(real_compile: ScenarioRun,
                                                      tmp_path: Path) -> None:
    start = real_compile.scenario.starts[0]
    served, warmed = tmp_path / "served", tmp_path / "warmed"
    with model_lock():
        restore_pristine_sources()
        text = _serve(start.serve_args(), start_env(served, start), tmp_path / "serve.log")
        assert READY in text, text[-3000:]
        res = run_cli("warm", "--root", str(warmed), "--python", str(venv_python()), "--usage",
                      "serve", "--log", str(tmp_path / "warm.log"), "--json", "--",
                      *start.serve_args(), env=start_env(warmed, start), inherit=False)
    assert res.returncode == 0, (res.stderr, (tmp_path / "warm.log").read_text()[-3000:])
    doc = json.loads(res.stdout)
    assert doc["outcome"] == "compiled"
    served_entries = _entries(served)
    assert {"backend", "aot"} <= {layout for layout, _ in served_entries}
    assert {(e["layout"], e["key"]) for e in doc["entries"]} == served_entries
    assert _entries(warmed) == served_entries

    # predict with the server's usage context names the served folders: a hit.
    pred = run_cli("predict", "--root", str(served), "--python",
                   str(venv_python()), "--usage", "serve", "--json", "--", *start.serve_args(),
                   env=start_env(served, start), inherit=False)
    assert pred.returncode == 0, pred.stdout[-2000:] + pred.stderr
