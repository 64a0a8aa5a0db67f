"""Reading many entries at once, spread over processes.

A listing's cost is one ``lstat`` per file plus parsing a few key files per entry, and both
are Python loops holding the GIL, so threads do not help; processes do. Measured with
benchmarks/bench_scan.py (200k files, 7.9k entries cloned from real caches), walks of sizes
only, as ratios to ``du -sb`` in the same run, on the 16-core device machine (idle): one
``scandir`` + ``lstat`` process 1.17x, ``os.fwalk`` 1.89x (a ``stat`` per name and a file
descriptor per folder; 1.72x vs 1.84x for scandir in an earlier run), a thread pool 6.25x (the
GIL, plus contention), a process pool over the entries 0.24x. So entries are read by a process
pool, one worker per core. The ``scandir-rs`` package was not tried: the issue measured its
``Count`` as slow as one Python walk, and it would still need a Python object per file for
mtimes and owners.

Workers are forked (``fork`` start method) so they inherit the already imported readers: a
``spawn`` worker would import the package again (~0.1 s each). Fork is used only from a
single-threaded process (forking a threaded one can deadlock); otherwise, on small roots, or
when ``VLLM_CACHE_TOOLS_SCAN_WORKERS=1``, entries are read in this process.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from multiprocessing.pool import Pool
from pathlib import Path
from typing import Any, TypeVar, cast

import msgspec

from vllm_cache_tools.libc import libc_fn
from vllm_cache_tools.shared_file import SharedAppendFile
from vllm_cache_tools.store.entries import read_aot_entry, read_backend_entry
from vllm_cache_tools.store.folders import entry_times, scan_workers
from vllm_cache_tools.store.light import light_entry
from vllm_cache_tools.store.listing_index import Unchanged, encode_record, rebuild, reuse
from vllm_cache_tools.store.pool_end import end_pool
from vllm_cache_tools.store.tree_stats import Listing, tree_stats
from vllm_cache_tools.store.types import Entry

A = TypeVar("A")
R = TypeVar("R")

PARALLEL_MIN_ENTRIES = 48
"""Below this many entries to read, starting workers costs more than it saves."""

Item = tuple[str, Path]
_HERE = Path(".")
"""The path a summary crosses the pipe with (one object for a whole chunk, pickled once): the
parent puts back the one it holds (~0.5 KB an entry, ~10 MB on a root of 1M files, and a
``Path`` unpickled and turned back into text per entry)."""


Read = tuple[Entry, msgspec.Raw | None] | tuple[None, Unchanged]
"""What a worker sends: an entry read and its record, or what tells an unchanged one."""


def _summary(item: tuple[str, str, bool, bool, msgspec.Raw | bytes | None]) -> Read:
    layout, path, deep, record, previous = item
    stats = None
    if previous is not None and not deep:
        # A rescan walks every entry afresh, and reads its files only when the walk found
        # something changed since the index's record (listing_index.reuse): then only the
        # walk's news cross the pipe, and the parent builds the entry (_with_paths).
        stats = tree_stats(path)
        found = reuse(previous, stats)
        if found is not None:
            return None, found
    reader = read_aot_entry if layout == "aot" else read_backend_entry
    e = reader(Path(path), deep=deep, stats=stats)
    if not deep:
        # Listings keep no per-rank details (and they would cross the pipe for nothing).
        e = replace(e, prefix_dirs=(), aot_ranks=(), path=_HERE)
    if not record:
        return e, None
    # The index record is built here too (the parent is the serial part of a scan), encoded:
    # a dict per entry held by the parent until the index is saved would cost ~3 KB.
    rec = encode_record(e)
    # A listing needs no per-folder mtimes (prune and verify scan without the index and
    # keep them: they check a folder did not change between plan and removal), nor the key
    # files' stats once its times are derived from them: on a root of 1M files (~40k
    # entries) the parent holds every entry, and these were ~1/4 of each.
    return replace(e, stats=replace(e.stats, dir_mtimes=(), key_files=())), rec


def read_entries(items: Sequence[Item], *, deep: bool = False,
                 workers: int | None = None) -> Iterator[Entry]:
    """Each item's entry, in the order given, read by ``workers`` processes (default
    :func:`scan_workers`). Non-deep reads are summaries (no per-rank details)."""
    return (e for e, _ in read_entries_for_index(items, deep=deep, workers=workers,
                                                 records=False))


def read_entries_for_index(items: Sequence[Item], *, deep: bool = False,
                           workers: int | None = None, records: bool = True,
                           previous: Sequence[msgspec.Raw | None] | None = None
                           ) -> Iterator[tuple[Entry, msgspec.Raw | None]]:
    """:func:`read_entries`, each entry with its listing-index record (``None`` when it is
    not to be indexed, or ``records`` is off). ``previous``: each item's earlier record (or
    ``None``), reused when a fresh walk finds the entry unchanged."""
    prev = previous if previous is not None else [None] * len(items)
    args = [(layout, os.fsdecode(path), deep, records, p)
            for (layout, path), p in zip(items, prev, strict=True)]
    yield from _with_paths(items, prev, spread(_summary, args, workers), deep, records)


def read_deep(items: Sequence[Item], *, workers: int | None = None,
              pool: Pool | None = None) -> Iterator[Entry | None]:
    """Each item's deep read (``layout`` as given), in the order given, spread over
    processes as :func:`read_entries` (``pool``'s when given: :func:`forked_workers`);
    ``None`` for one whose read raised ``OSError`` (the others are still read)."""
    return spread(_deep_or_none, [(layout, os.fsdecode(path)) for layout, path in items],
                   workers, chunks_per_worker=4, pool=pool)


def read_light(items: Sequence[Item], *, workers: int | None = None, pool: Pool | None = None
               ) -> Iterator[tuple[Entry, Listing]]:
    """Each item's light read (:func:`~vllm_cache_tools.store.light.light_entry`) with the
    names its walk saw, in the order given: by ``pool``'s processes when given, else by
    forked processes from :data:`LIGHT_FORK_CORES` cores (as :func:`read_entries`), else in
    this process."""
    n = scan_workers() if workers is None else workers
    args = [(layout, os.fsdecode(path)) for layout, path in items]
    return spread(_light, args, n if n >= LIGHT_FORK_CORES else 1, pool=pool)


LIGHT_FORK_CORES = 2
"""From this many cores a streamed prune's light reads are spread over forked processes,
which then remove the entries moved into the trash (:func:`~vllm_cache_tools.maintain.trash.
remove_in_worker`). A light read is one walk (~0.5 ms an entry), its result ~3 KB; the
removal is one unlink per file. With removal threads instead, this process's checks and moves
and the threads' unlinks shared one interpreter lock (4 was the threshold then: on 2 cores
the reading workers took the core the threads needed); in the workers, prune of 100k files ran
at 1.25-1.56x ``rm -rf`` on 16 cores and ~1.0x on 2 (docs/benchmarks.md, issue 27 session
12)."""


def _light(item: tuple[str, str]) -> tuple[Entry, Listing]:
    layout, path = item
    listing: Listing = {}
    return light_entry(Path(path), layout, listing), listing


def _deep_or_none(item: tuple[str, str]) -> Entry | None:
    return deep_read(item[0], Path(item[1]))


def deep_read(layout: str, path: Path) -> Entry | None:
    """The deep read of one entry folder, ``None`` where it raised ``OSError``; in a forked
    worker its source texts shared with the worker's other reads (:data:`_SOURCES`)."""
    try:
        e = (read_aot_entry if layout == "aot" else read_backend_entry)(path, deep=True)
    except OSError:
        return None
    return _shared_sources(e) if _IN_WORKER and e.aot_ranks else e


_SOURCES: dict[str, str] = {}
"""A worker's traced source texts, one object per text: the AOT entries of one model's starts
hold the same ~0.8 MB of sources, and a chunk of results crosses the pipe pickled as one
object, each shared text once. Kept in forked workers only (they end with the read)."""
_IN_WORKER = False


def _shared_sources(e: Entry) -> Entry:
    ranks = []
    for r in e.aot_ranks:
        if r.info is None or not r.info.inlined_sources:
            ranks.append(r)
            continue
        srcs = tuple(s if s.content is None
                     else replace(s, content=_SOURCES.setdefault(s.content, s.content))
                     for s in r.info.inlined_sources)
        ranks.append(replace(r, info=replace(r.info, inlined_sources=srcs)))
    return replace(e, aot_ranks=tuple(ranks))


def spread(fn: Callable[[A], R], args: Sequence[A], workers: int | None,
           chunks_per_worker: int = 16, pool: Pool | None = None) -> Iterator[R]:
    """``map(fn, args)``, by ``pool``'s processes when given, else by ``workers`` forked
    processes (default :func:`scan_workers`) where there are enough args and this process
    has no other thread."""
    if pool is not None:
        n = pool._processes  # type: ignore[attr-defined]
        yield from _watched(pool, fn, args, max(1, min(64, len(args) // (
            n * chunks_per_worker))))
        return
    n = pool_size(scan_workers() if workers is None else workers, len(args))
    with forked_workers(n) as own:
        if own is None:
            yield from map(fn, args)
            return
        # Small chunks keep every worker busy to the end (entries differ a lot in size); a
        # few per worker keep the pipe traffic low.
        yield from _watched(own, fn, args, max(1, min(64, len(args) // (
            n * chunks_per_worker))))


def pool_size(cores: int, count: int) -> int:
    """How many processes to fork for ``count`` reads on ``cores``: 1 (none: read here) below
    :data:`PARALLEL_MIN_ENTRIES`, and no more than one per 12 reads."""
    if count < PARALLEL_MIN_ENTRIES:
        return 1
    return min(cores, count // (PARALLEL_MIN_ENTRIES // 4) or 1)


WORKER_LOST = ("a worker process ended without answering (killed: out of memory?); "
               "nothing was changed: run again")


class WorkerLost(OSError):
    """A forked worker ended without its answer (:data:`WORKER_LOST`)."""


def worker_pids(pool: Pool) -> frozenset[int]:
    """The pool's worker processes now: a worker killed is replaced by the pool under a new
    pid, and its task is never answered."""
    return frozenset(p.pid for p in pool._pool  # type: ignore[attr-defined]
                     if not getattr(p, "_closed", False))  # closed: the pool was ended


def _watched(pool: Pool, fn: Callable[[A], R], args: Sequence[A], chunk: int) -> Iterator[R]:
    """``pool.imap``, raising :class:`WorkerLost` instead of waiting forever where a worker
    ended without answering."""
    yield from started(pool, fn, args, chunk)


def started(pool: Pool, fn: Callable[[A], R], args: Sequence[A], chunk: int) -> Iterator[R]:
    """:func:`_watched`, the tasks handed to the workers now (not at the first ``next``):
    the caller works on while they run."""
    pids = worker_pids(pool)
    # In chunks of our own: imap's own chunking answers through a generator, which cannot
    # wait with a timeout. One chunk's results cross the pipe as one object, as before.
    chunks = [(fn, args[i:i + chunk]) for i in range(0, len(args), chunk)]
    return _answers(pool, pool.imap(_chunk_call, chunks), pids)


def _answers(pool: Pool, it: Any, pids: frozenset[int]) -> Iterator[Any]:
    while True:
        try:
            got = it.next(timeout=_WATCH_S)
        except StopIteration:
            return
        except multiprocessing.TimeoutError:
            if worker_pids(pool) != pids:
                raise WorkerLost(WORKER_LOST) from None
            continue
        if isinstance(got, _At):
            answers = _POOL_ANSWERS[id(pool)]
            at = got
            got = pickle.loads(answers.read(at.offset, at.length))
            answers.release(at.offset, at.length)
        yield from got


class _At:
    """Where a chunk's answers lie in the pool's answers file: all that crosses the pipe."""

    __slots__ = ("length", "offset")

    def __init__(self, at: tuple[int, int]) -> None:
        self.offset, self.length = at

    def __reduce__(self) -> tuple[type[_At], tuple[tuple[int, int]]]:
        return _At, ((self.offset, self.length),)


def _chunk_call(task: tuple[Callable[[A], R], Sequence[A]]) -> list[R] | _At:
    """One chunk's answers, in the pool's answers file where the worker has one (a full
    file system: through the pipe after all)."""
    fn, args = task
    got = [fn(a) for a in args]
    if _IN_WORKER and _ANSWERS is not None:
        try:
            return _At(_ANSWERS.append(pickle.dumps(got, pickle.HIGHEST_PROTOCOL)))
        except OSError:
            pass
    return got


_ANSWERS: SharedAppendFile | None = None
"""The live pool's answers file: in its forked workers (inherited at the fork) where they
write, and in this process while the pool lives (only so that replacements inherit it)."""
_POOL_ANSWERS: dict[int, SharedAppendFile] = {}
"""In this process: each live pool's answers file, by ``id`` of the pool."""


_WATCH_S = 1.0


@contextmanager
def forked_workers(n: int) -> Iterator[Pool | None]:
    """A pool of ``n`` forked worker processes for the block (ended, whatever they still do,
    when it ends), or ``None`` where this process may not fork them: one worker asked, another
    thread running (forking a threaded process can deadlock), no ``fork`` here."""
    if (n <= 1 or threading.active_count() > 1
            or "fork" not in multiprocessing.get_all_start_methods()):
        yield None
        return
    # SIGTERM and SIGINT wait while the workers are forked, until each has set its own
    # handlers (_worker_start): the parent's may raise SystemExit in a worker.
    global _ANSWERS
    try:
        answers: SharedAppendFile | None = SharedAppendFile()
    except OSError:  # no temporary folder to write: answers through the pipe
        answers = None
    # What the workers inherit, replacements of dead ones too (forked later by the pool's
    # handler thread): set while the pool lives, which is one pool at a time (a live pool's
    # threads keep another from being forked here).
    _ANSWERS = answers
    held = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD)
    try:
        pool = multiprocessing.get_context("fork").Pool(
            n, initializer=_worker_start, initargs=(os.getpid(), threading.get_ident()))
    except BaseException:
        _ANSWERS = None
        if answers is not None:
            answers.close()
        raise
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
    if answers is not None:
        _POOL_ANSWERS[id(pool)] = answers
    try:
        try:
            yield pool
        finally:
            end_pool(pool)
    finally:
        _ANSWERS = None
        _POOL_ANSWERS.pop(id(pool), None)
        if answers is not None:
            answers.close()


_HELD = {signal.SIGTERM, signal.SIGINT}


def _worker_start(parent: int, thread: int) -> None:
    """A forked worker ends at SIGTERM, whatever handler it inherited (unpack's
    ``terminate_as_exit`` raises SystemExit instead: a worker then hung in its exit, and the
    pool's ``terminate``, which sent SIGTERM then, waited for it forever; the pool is now ended
    by :func:`.pool_end.end_pool`, with SIGKILL), leaves Ctrl-C to the parent, which ends the
    pool, and dies with the parent process (``parent``): a prune killed stops removing at
    once, as its threads did, instead of its workers finishing the tasks they hold.

    Only a worker forked by the pool's creator (``thread``, which outlives the pool) asks for
    that: the kernel's signal follows the forking *thread*, and a worker that replaces a dead
    one is forked by the pool's own handler thread, which ends while the pool is being ended
    (a replacement killed there held the pipe's lock, and ``Pool.terminate`` waited for it
    forever: 4 of 6 runs)."""
    global _IN_WORKER
    _IN_WORKER = True
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _HELD)
    if threading.get_ident() == thread:
        _die_with(parent)


_PR_SET_PDEATHSIG = 1


def _die_with(parent: int) -> None:
    """``prctl(PR_SET_PDEATHSIG, SIGKILL)`` where there is one (Linux), then exit where the
    parent ended before it took effect."""
    prctl = libc_fn("prctl")
    if prctl is None:
        return
    prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


def _with_paths(items: Sequence[Item], prev: Sequence[msgspec.Raw | None],
                read: Iterator[Read], deep: bool, records: bool
                ) -> Iterator[tuple[Entry, msgspec.Raw | None]]:
    """Entries with the paths this process holds (summaries came as :data:`_HERE`), those
    found unchanged built from their records (listing_index.rebuild)."""
    for (_, path), before, (e, got) in zip(items, prev, read, strict=True):
        if e is None:
            news = cast(Unchanged, got)
            raw = news[0] if news[0] is not None else cast(msgspec.Raw, before)
            yield rebuild(raw, path, news[1], entry_times), raw if records else None
            continue
        rec = cast("msgspec.Raw | None", got)
        yield (e if deep else replace(e, path=path)), rec
