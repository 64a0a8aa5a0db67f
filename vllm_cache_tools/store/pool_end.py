"""Ending a pool of forked workers at once, without the hangs of ``Pool.terminate``.

CPython's ``Pool.terminate`` kills workers that may be half-way through a message, or holding
a pipe's lock, and then waits on threads that need that message or lock: each of these hung in
our runs (a failed pack in CI, then a loop of 300 ended pools here):

- the pool's answer-reading thread stops reading when told to end, a worker blocks writing a
  large answer into the full pipe while holding its lock, and ``terminate`` waits for that lock
  forever to write its own end mark;
- a worker killed mid-answer leaves half a message, and the reading thread, draining the pipe
  before it ends, waits forever for the rest.

:func:`end_pool` does the same work in an order where nothing waits on a dead worker: it stops
the thread that replaces workers, kills the workers (SIGKILL) and reaps them, then closes this
process's writing end of the answer pipe *under* the pool's threads (``dup2`` of ``/dev/null``
onto the same descriptor: a thread still using the number writes to ``/dev/null`` instead of a
file opened later with that number), so a read waiting for more gets end-of-file; it empties the
pipes no worker reads any more, so a blocked write ends, and lets go of a lock a killed worker
held (one this process does not count as its own). Both threads then end on their own. The
pool's own ``terminate`` (its finalizer, also run at exit) is cancelled first: it would wait
on those locks again, so an end interrupted half-way (a second Ctrl-C) hung the exit. The
pool's internals used are those of CPython 3.8 to 3.13 (tested: 3.10 to 3.13,
tests/test_parallel_answers.py); where one is missing, ``terminate`` runs instead.
"""

from __future__ import annotations

import contextlib
import os
import time
from multiprocessing.pool import TERMINATE, Pool
from typing import Any

JOIN_S = 10.0
"""How long a pool thread may take to end once its pipes are closed (it ends at once; the
bound only keeps a CPython change from hanging us: the threads are daemons)."""


def end_pool(pool: Pool) -> None:
    """End ``pool`` now, whatever its workers do (their jobs are dropped). Calling it again
    (after an interruption, say) finishes what is left. Where this CPython's pool lacks an
    internal it uses, the pool's own ``terminate`` runs instead."""
    p: Any = pool
    if getattr(p, "_vct_ended", False):
        return
    try:
        parts = (p._terminate, p._worker_handler, p._task_handler, p._result_handler,
                 p._change_notifier, p._inqueue, p._outqueue, p._pool)
    except AttributeError:  # another CPython's pool
        pool.terminate()
        return
    final, workers, tasks, answers, notifier, inq, outq, procs = parts
    # The pool's own terminate (its finalizer, also run at exit) would wait on locks that
    # killed workers hold: cancelled first, so an interrupted end never hangs the exit.
    final.cancel()
    p._state = TERMINATE
    # 1. No replacements: the worker thread ends (and tells the task thread to end).
    workers._state = TERMINATE
    tasks._state = TERMINATE
    answers._state = TERMINATE
    notifier.put(None)
    workers.join(JOIN_S)
    # 2. Kill and reap the workers.
    for w in list(procs):
        if _open(w) and w.exitcode is None:
            with contextlib.suppress(OSError):
                w.kill()
    for w in list(procs):
        if _open(w):
            w.join(JOIN_S)
    # 3. Close this process's end of the answer pipe under the threads (a read waiting for
    # more gets end-of-file), replaced by /dev/null on the same number.
    _close_under(outq._writer)
    # 4. Until both threads end: what is in the task pipe is dropped (no worker reads it: a
    # blocked task write ends; a broken pipe instead left a pickle buffer exported in the
    # error's frames, which Python 3.13 complains of when collected); once the answer thread is
    # gone, so is what is left in the answer pipe (the task thread's end mark may wait for
    # room); and the answer pipe's lock, where a killed worker held it, is let go (the end mark
    # waits for it too).
    lock = getattr(outq, "_wlock", None)
    deadline = time.monotonic() + JOIN_S
    while (tasks.is_alive() or answers.is_alive()) and time.monotonic() < deadline:
        _drain(inq._reader)
        if not answers.is_alive():
            _drain(outq._reader)
        if lock is not None and tasks.is_alive():
            _free_if_dead_held(lock)
        tasks.join(_STEP_S)
        answers.join(_STEP_S)
    threads_done = not (workers.is_alive() or tasks.is_alive() or answers.is_alive())
    if threads_done:  # else a thread may still use them (a join timed out): left to the GC
        for w in list(procs):
            if _open(w) and w.exitcode is not None:
                w.close()  # its sentinel pipes, now rather than when the pool is collected
        for conn in (inq._reader, inq._writer, outq._reader, outq._writer,
                     notifier._reader, notifier._writer):
            conn.close()
    p._vct_ended = True


def _open(w: Any) -> bool:
    """Whether the worker's process object is not closed yet (a second call)."""
    return not getattr(w, "_closed", False)


def _free_if_dead_held(lock: Any) -> None:
    """Let go of ``lock`` (a ``multiprocessing.Lock``) where another process holds it: every
    worker is dead by now, so that one is a killed worker. Taken by a thread of this process
    (the task thread's end mark) it counts 1 here, and is left alone."""
    if lock.acquire(False):
        lock.release()
        return
    semlock = getattr(lock, "_semlock", None)
    if semlock is not None and semlock._count() == 0:
        _release(lock)


def _close_under(conn: Any) -> None:
    """Replace the descriptor of ``conn`` by ``/dev/null`` (closing what it was)."""
    fd = conn.fileno() if not conn.closed else None
    if fd is None:
        return
    null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    try:
        os.dup2(null, fd, inheritable=False)
    finally:
        os.close(null)


def _drain(conn: Any) -> None:
    """Read and drop what the pipe holds now (raw bytes: no one reads messages from it
    any more)."""
    fd = conn.fileno()
    os.set_blocking(fd, False)
    try:
        while os.read(fd, 1 << 16):
            pass
    except (BlockingIOError, OSError):
        pass


def _release(lock: Any) -> None:
    with contextlib.suppress(ValueError):  # let go meanwhile
        lock.release()


_STEP_S = 0.01

__all__ = ["JOIN_S", "end_pool"]
