"""Reading the staged entries for unpack's key proofs (:func:`.key_proof.prove_records`) in
worker processes, each entry as soon as all its files are written and checked, while the
rest of the bundle is still being extracted.

Why: the proof reads every staged entry deep (the AOT artifact's safe pickle read is most of
it: ~20 ms an entry), a pure-Python loop that holds the GIL. Read after the extraction in this
process, it was the larger half of an unpack (profiled at 100 starts / 4,700 files: 3.6 s of
7.7 s). Here it overlaps the extraction and spreads over the cores.

The workers are forked before any thread of the unpack starts (forking a threaded process can
deadlock), so they inherit the imported readers; when the caller already runs threads (the
CLI's progress bar on a terminal), on fewer than 4 cores (:data:`BUSY_CORES`), for a bundle
under 2 MB, or with ``VLLM_CACHE_TOOLS_SCAN_WORKERS`` below 4, nothing is forked and the
proof reads the entries itself, as before. The workers only read: what they return is the same
:class:`~vllm_cache_tools.store.types.Entry` the proof would have read here (sent back
pickled by :mod:`multiprocessing`, our own objects, never a cache artifact), and an entry is
handed to them only once every file of it is in the staging folder with its size and sha256
checked, so it is read in the state the proof would have seen after the extraction."""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import signal
import threading
from collections.abc import Sequence
from multiprocessing.pool import AsyncResult, Pool
from pathlib import Path

from vllm_cache_tools.fleet.key_proof import read_staged
from vllm_cache_tools.fleet.records import EntryRecord
from vllm_cache_tools.store.folders import scan_workers
from vllm_cache_tools.store.types import Entry

BYTES_PER_WORKER = 1 << 20
"""One worker per this many bytes of the bundle (compressed: ~6 starts' entries); none below
two (the proof reads a small bundle's entries itself: a fork costs more than it saves). The
manifest, which counts the entries, is read after the extraction's threads started: too late
to fork."""
MAX_WORKERS = 16
BUSY_CORES = 2
"""Cores the extraction keeps busy (this thread parsing, the decompressing thread; the
writer threads mostly wait on the kernel): workers get the others. On 2 cores there are none
and the proof reads the entries itself, as before: measured there (load 7-10, 100 starts,
medians of 5), two workers beside the extraction made unpack slower (7.53 s against 5.79 s
wall, CPU 3.71 s against 2.10 s: every entry also crosses the pipe pickled)."""
WAIT_S = 120.0
"""How long :meth:`StagedReader.entries` waits for one entry's read; past it (a worker killed,
e.g. by the OOM killer, loses its task and the pool never answers) the proof reads the entry
itself: slower, never a hang and never another answer."""


def _read(path: str) -> Entry | None:
    return read_staged(Path(path))


_PR_SET_PDEATHSIG = 1


def _worker_init() -> None:
    # The parent's Ctrl-C ends the unpack (it terminates the pool); a worker never handles it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A parent killed outright (SIGKILL, the OOM killer) cannot terminate its pool, and a
    # worker blocked on the task pipe would wait forever: the kernel ends it with the parent.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() == 1:  # the parent died before prctl
        os._exit(0)


class StagedReader:
    """Worker processes reading staged entries; :meth:`entry_done` hands one over, and
    :meth:`entries` collects them all (those never handed over are read by the proof)."""

    def __init__(self, bundle_bytes: int, workers: int | None = None) -> None:
        n = min((scan_workers() - BUSY_CORES) if workers is None else workers, MAX_WORKERS,
                bundle_bytes // BYTES_PER_WORKER)
        self.pool: Pool | None = None
        self.pending: dict[str, AsyncResult[Entry | None]] = {}
        if (n > 1 and threading.active_count() == 1
                and "fork" in multiprocessing.get_all_start_methods()):
            self.pool = multiprocessing.get_context("fork").Pool(n, _worker_init)

    def entry_done(self, staged_root: Path, rec: EntryRecord) -> None:
        """``rec``'s files are all staged and checked: read it in a worker."""
        if self.pool is not None and rec.path not in self.pending:
            self.pending[rec.path] = self.pool.apply_async(
                _read, (os.fsdecode(staged_root / rec.path),))

    def entries(self, records: Sequence[EntryRecord]) -> dict[str, Entry | None]:
        """The entries read so far, by record path (a worker's exception is raised here, as
        the proof's own read would have raised it; one not answered within :data:`WAIT_S`
        is left out: the proof reads it)."""
        out: dict[str, Entry | None] = {}
        for r in records:
            got = self.pending.get(r.path)
            if got is None:
                continue
            try:
                out[r.path] = got.get(WAIT_S)
            except multiprocessing.TimeoutError:
                continue
        return out

    def close(self) -> None:
        if self.pool is not None:
            self.pool.terminate()
            self.pool.join()
            self.pool = None

    def __enter__(self) -> StagedReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["StagedReader"]
