"""Forked readers' answers go through the pool's unnamed answers file
(store/parallel_read.py, shared_file.SharedAppendFile), only their offsets through the pipe:
the entries are the ones one process reads (real vLLM entries from the shipped example), and a
worker killed while the others answer with megabytes ends the pool at once (with answers in
the pipe, a worker blocked sending into the full pipe held its lock, and ``Pool.terminate``
could wait for it forever)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.synth import generate
from tests.fresh_process import ran_in_fresh_process
from tests.spying import spy_on
from vllm_cache_tools.shared_file import SharedAppendFile
from vllm_cache_tools.store import parallel_read
from vllm_cache_tools.store.parallel_read import read_entries
from vllm_cache_tools.store.scan import classify

REPO = Path(__file__).resolve().parent.parent


def test_forked_answers_come_through_the_file_and_read_what_one_process_reads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    if ran_in_fresh_process(request):
        return
    generate(tmp_path / "tree", [REPO / "examples" / "sample_cache"], 1500)
    items = classify(tmp_path / "tree" / "torch_compile_cache", [])
    assert len(items) >= parallel_read.PARALLEL_MIN_ENTRIES
    reads = spy_on(monkeypatch, SharedAppendFile, "read")
    one = list(read_entries(items, workers=1))
    assert reads == []
    two = list(read_entries(items, workers=2))
    assert two == one
    assert len(reads) >= 2  # every chunk of answers came through the file
    assert parallel_read._POOL_ANSWERS == {}  # the file closed with its pool


def big_answer(i: int) -> bytes:
    """A task of the test below: 4 MB each, and the worker given task 40 dies."""
    if i == 40:
        os._exit(9)
    time.sleep(0.01)
    return bytes(4 << 20)


KILLED = """
import sys, time
sys.path.insert(0, sys.argv[1])
from tests.test_parallel_answers import big_answer
from vllm_cache_tools.store.parallel_read import WorkerLost, spread
t = time.monotonic()
try:
    for _ in spread(big_answer, list(range(2000)), 4, chunks_per_worker=500):
        pass
except WorkerLost:
    print("lost", round(time.monotonic() - t, 1))
"""


def test_a_worker_killed_while_the_others_answer_with_megabytes_ends_the_pool(
        tmp_path: Path) -> None:
    """With the answers through the pipe this hung in 2 of 6 runs (the pool's terminate
    waited on the pipe's lock, held by a worker blocked sending 4 MB nobody read)."""
    for _ in range(3):
        r = subprocess.run([sys.executable, "-c", KILLED, str(REPO)], capture_output=True,
                           text=True, timeout=120, cwd=tmp_path,
                           env={**os.environ, "TMPDIR": str(tmp_path)})  # not a small tmpfs
        assert r.returncode == 0, r.stderr[-3000:]
        assert r.stdout.startswith("lost"), r.stdout + r.stderr[-3000:]


KILLED_PARENT = """
import os, signal, sys, time
sys.path.insert(0, sys.argv[1])
from vllm_cache_tools.store.parallel_read import forked_workers, worker_pids
def spin(s):
    t = time.monotonic()
    while time.monotonic() - t < s:
        pass
with forked_workers(3) as pool:
    assert pool is not None
    pool.apply(os.getpid)  # the workers are up
    for _ in range(3):  # each busy for a minute: without the signal they would go on
        pool.apply_async(spin, (60,))
    time.sleep(0.5)
    print(" ".join(map(str, sorted(worker_pids(pool)))), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_forked_workers_die_with_their_parent(tmp_path: Path) -> None:
    """A process killed (SIGKILL) takes its forked workers with it (PR_SET_PDEATHSIG): a
    prune killed stops removing at once instead of its workers finishing what they hold."""
    proc = subprocess.Popen([sys.executable, "-c", KILLED_PARENT, str(REPO)],
                            stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    pids: list[int] = []
    try:
        assert proc.stdout is not None
        pids = [int(p) for p in proc.stdout.readline().split()]
        assert proc.wait(timeout=60) == -9 and len(pids) == 3
        end = time.monotonic() + 5
        while any(_alive(p) for p in pids) and time.monotonic() < end:
            time.sleep(0.05)
        assert not any(_alive(p) for p in pids)
    finally:
        for p in pids:
            if _alive(p):
                os.kill(p, signal.SIGKILL)
        proc.kill()


def test_released_answers_leave_the_others_whole(tmp_path: Path) -> None:
    """An answer read is given back (a hole punched where the file system can): the answers
    beside it, even within the same block, read back whole."""
    f = SharedAppendFile(str(tmp_path))
    try:
        at = [f.append(bytes([i]) * n) for i, n in enumerate((5000, 70000, 3000, 9000), 1)]
        f.release(*at[1])
        f.release(*at[3])
        assert f.read(*at[0]) == b"\x01" * 5000 and f.read(*at[2]) == b"\x03" * 3000
    finally:
        f.close()


ENDED_EARLY = """
import os, sys, threading, time
sys.path.insert(0, sys.argv[1])
from vllm_cache_tools.store.parallel_read import forked_workers
def answer(i):
    return b"x" * 65536
fds = None  # counted after the first pool (multiprocessing's shared-memory arena stays open)
t = time.monotonic()
for _ in range(int(sys.argv[2])):
    fds = fds if fds is not None or _ == 0 else len(os.listdir("/proc/self/fd"))
    try:
        with forked_workers(8) as pool:
            assert pool is not None
            it = pool.imap_unordered(answer, range(100000))
            for _ in range(5):
                next(it)
            raise RuntimeError("stop")  # a pack that failed on a file, say
    except RuntimeError:
        pass
    assert threading.active_count() == 1, threading.enumerate()
print("ended", round(time.monotonic() - t, 1), len(os.listdir("/proc/self/fd")) - fds,
      open(f"/proc/self/task/{os.getpid()}/children").read().strip() or "none")
"""


def test_a_pool_left_while_its_workers_send_large_answers_ends(tmp_path: Path) -> None:
    """A block that leaves its pool (an error) while 8 workers send 64 KB answers: with
    ``Pool.terminate`` this hung within 20 pools (a worker blocked writing into the full pipe
    nobody read, holding the lock terminate waited for; or the reading thread waiting for the
    rest of an answer a killed worker never sent; a pack hung so in CI). Each of 150 pools ends,
    with no thread, descriptor or child process left behind (store/pool_end.py)."""
    r = subprocess.run([sys.executable, "-c", ENDED_EARLY, str(REPO), "150"],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    word, _, fds, children = r.stdout.split()
    assert word == "ended" and fds == "0" and children == "none", r.stdout


OTHER_PYTHON = """
import importlib.util, multiprocessing, os, sys, threading
spec = importlib.util.spec_from_file_location("pool_end", sys.argv[1])
pool_end = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pool_end)
def answer(i):
    return b"x" * 65536
if __name__ == "__main__":
    fds = None
    for k in range(int(sys.argv[2])):
        if k == 1:
            fds = len(os.listdir("/proc/self/fd"))
        pool = multiprocessing.get_context("fork").Pool(8)
        try:
            it = pool.imap_unordered(answer, range(100000))
            for _ in range(5):
                next(it)
        finally:
            pool_end.end_pool(pool)
        assert threading.active_count() == 1, threading.enumerate()
    print("ended", len(os.listdir("/proc/self/fd")) - fds,
          open(f"/proc/self/task/{os.getpid()}/children").read().strip() or "none")
"""


def _python(minor: int) -> str | None:
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    found = sorted(Path(root, "versions").glob(f"3.{minor}.*/bin/python3.{minor}"))
    return str(found[-1]) if found else shutil.which(f"python3.{minor}")


@pytest.mark.parametrize("minor", [10, 11, 12, 13])
def test_pools_end_so_on_each_python_the_package_supports(minor: int, tmp_path: Path) -> None:
    """pool_end reaches into multiprocessing.pool's internals: the same 40 pools, left while
    their workers send 64 KB answers, end on each CPython from 3.10 to 3.13 found here (with
    a broken pipe in the task thread instead of emptying the pipe, 3.13 printed a BufferError
    for each pool when collected), leaving nothing behind and printing nothing."""
    python = _python(minor)
    if python is None:
        pytest.skip(f"no Python 3.{minor} here (on PATH or under pyenv)")
    r = subprocess.run([python, "-c", OTHER_PYTHON,
                        str(REPO / "vllm_cache_tools" / "store" / "pool_end.py"), "40"],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0 and r.stderr == "", r.stderr[-3000:]
    assert r.stdout.split() == ["ended", "0", "none"], r.stdout


INTERRUPTED = """
import sys
sys.path.insert(0, sys.argv[1])
from vllm_cache_tools.store import pool_end
from vllm_cache_tools.store.parallel_read import forked_workers
close_under = pool_end._close_under
calls = []
def interrupted(conn):
    calls.append(1)
    if len(calls) == 1:
        raise KeyboardInterrupt  # a second Ctrl-C while the pool ends
    close_under(conn)
pool_end._close_under = interrupted
try:
    with forked_workers(4) as pool:
        pool.map(abs, range(100))
except KeyboardInterrupt:
    pool_end.end_pool(pool)  # finishes what is left
print("ended", flush=True)
"""


def test_an_end_interrupted_half_way_finishes_and_the_process_exits(tmp_path: Path) -> None:
    """A KeyboardInterrupt inside end_pool (its workers already killed), then end_pool again:
    the process exits. With the pool's finalizer cancelled last, multiprocessing's exit hook
    ran Pool.terminate, which waited forever on a lock a killed worker held."""
    r = subprocess.run([sys.executable, "-c", INTERRUPTED, str(REPO)], capture_output=True,
                       text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout == "ended\n", r.stderr[-3000:]
