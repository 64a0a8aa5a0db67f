"""The first decision's tracer beside the probe (issue 24): started only on a cold root, and
killed when nobody wants its answer. Real processes, no vLLM (a stand-in interpreter that
waits)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from vllm_cache_tools.analyze.predict import _cold
from vllm_cache_tools.layout import AOT_DIRNAME
from vllm_cache_tools.live.trace_run import run_trace


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
