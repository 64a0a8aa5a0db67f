"""Running one test again in a fresh interpreter, for code that forks only where the process
has no other thread (forking a threaded process can deadlock): earlier tests of a full run
leave threads in pytest's process (fsspec's IO loop, for one), which would send such code
down its in-process path and leave the forked one untested."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import threading
from pathlib import Path

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
    """The start methods of the multiprocessing contexts asked for from now on (a pool of
    forked readers asks for ``"fork"`` once), for a test to tell that code forked."""
    forks: list[str | None] = []
    get_context = multiprocessing.get_context

    def spy(method: str | None = None) -> object:
        forks.append(method)
        return get_context(method)

    monkeypatch.setattr(multiprocessing, "get_context", spy)
    return forks
