"""Running one test again in a fresh interpreter, for code that forks only where the process
has no other thread (forking a threaded process can deadlock): earlier tests of a full run
leave threads in pytest's process (fsspec's IO loop, for one), which would send such code
down its in-process path and leave the forked one untested."""

from __future__ import annotations

import multiprocessing
import multiprocessing.pool
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

FLAG = "VCT_TEST_FRESH_PROCESS"
REPO = Path(__file__).resolve().parent.parent


def ran_in_fresh_process(request: pytest.FixtureRequest) -> bool:
    """Where this process has other threads, run the calling test alone in a new pytest
    process and fail with its output unless it passes; True then (the caller returns). False
    where the test can run here."""
    if threading.active_count() == 1 or os.environ.get(FLAG):
        return False
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        request.node.nodeid], cwd=REPO, env={**os.environ, FLAG: "1"},
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "1 passed" in r.stdout, r.stdout[-4000:]
    return True


def record_forks(monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    """The start methods of the process pools created from now on (a pool of forked readers
    gives ``"fork"`` once), for a test to tell that code forked."""
    forks: list[str | None] = []
    init = multiprocessing.pool.Pool.__init__

    def spy(self: multiprocessing.pool.Pool, *a: Any, **k: Any) -> None:
        ctx = k.get("context") if "context" in k else (a[4] if len(a) > 4 else None)
        forks.append(ctx.get_start_method() if ctx is not None else None)
        init(self, *a, **k)

    monkeypatch.setattr(multiprocessing.pool.Pool, "__init__", spy)
    return forks
