"""The first decision's trace (issue 24): a cold root is one without entries; a tracer
process is killed when cancelled; a trace the probe made in its own process is memoized where
a tracer's is found. Real processes and files, no vLLM (a stand-in interpreter that waits)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from vllm_cache_tools.analyze.predict import _cold
from vllm_cache_tools.layout import AOT_DIRNAME
from vllm_cache_tools.live.trace_run import from_probe, run_trace


def _slow_python(tmp_path: Path) -> str:
    exe = tmp_path / "python"
    pid_file = tmp_path / "pid"
    exe.write_text(f"#!/bin/sh\necho $$ > {pid_file}\nexec sleep 60\n")
    exe.chmod(0o755)
    return str(exe)


def test_cold_root_is_one_without_entries(tmp_path: Path) -> None:
    cc = tmp_path / "torch_compile_cache"
    assert _cold(cc)  # not there yet
    (cc / ".vllm-cache-tools").mkdir(parents=True)
    (cc / AOT_DIRNAME).mkdir()
    assert _cold(cc)
    (cc / AOT_DIRNAME / ("a" * 64)).mkdir()
    assert not _cold(cc)
    (cc / AOT_DIRNAME / ("a" * 64)).rmdir()
    (cc / "0123456789").mkdir()
    assert not _cold(cc)


def test_cancelled_trace_kills_its_process(tmp_path: Path) -> None:
    exe = _slow_python(tmp_path)
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    t0 = time.monotonic()
    run = run_trace(["m"], {"PATH": os.environ.get("PATH", "")}, exe, "serve", memo=False,
                    cancel=cancel)
    assert time.monotonic() - t0 < 10
    assert run.error == "cancelled"
    pid = int((tmp_path / "pid").read_text())
    time.sleep(0.2)
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(
        f"/proc/{pid}/status").read_text()


def _deps_of(path: Path) -> dict[str, object]:
    st = path.stat()
    return {"files": {str(path.parent): [[path.name, st.st_mtime_ns, st.st_size, st.st_ino]]},
            "dirs": {}, "network": [], "unstable": []}


def test_the_probes_trace_is_kept_where_a_tracer_finds_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A trace made inside the probe (``from_probe``) is memoized under the tracer's key: the
    next predict's ``run_trace`` answers from the memo without starting a process (the
    interpreter here would hang: a stand-in that sleeps); a failed one is not kept."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    exe = _slow_python(tmp_path)
    model = tmp_path / "model.py"
    model.write_text("x = 1\n")
    env = {"PATH": os.environ.get("PATH", ""), "VLLM_CACHE_ROOT": str(tmp_path / "r1")}
    answer = {"files": [str(model)], "forward": "M.forward", "exact": True, "caveats": [],
              "device": "cpu", "timings": {"total_s": 1.5}, "deps": _deps_of(model)}
    made = from_probe(answer, ["m"], env, exe, "serve", why="no memo for these inputs")
    assert (made.served_by, made.kept, made.seconds) == ("probe", "kept", 1.5)
    assert made.files == (str(model),) and "deps" in answer  # the caller's dict untouched
    # Another root (not a key input): the memo answers, no tracer process.
    other = {**env, "VLLM_CACHE_ROOT": str(tmp_path / "r2")}
    t0 = time.monotonic()
    again = run_trace(["m"], other, exe, "serve")
    assert time.monotonic() - t0 < 10
    assert (again.memo, again.served_by, again.files) == ("hit", "memo", made.files)
    failed = from_probe({"error": "Dynamo could not trace"}, ["m"], env, exe, "serve")
    assert failed.error and failed.kept == "not kept: no answer"
