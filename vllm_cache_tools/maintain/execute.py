"""Prune execution: a :class:`~vllm_cache_tools.maintain.plan.PrunePlan` -> :class:`PruneResult`.

Executing re-checks each planned entry under a per-entry lock right before moving it (the plan
may be seconds old) and moves it into the trash in one rename; removal happens there
(:mod:`vllm_cache_tools.maintain.trash`), by worker threads while later entries are still being
checked. Afterwards the recorder's unreferenced source snapshots are swept.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.pool import AsyncResult, Pool
from pathlib import Path

from vllm_cache_tools.layout import COMPILE_CACHE_DIRNAME
from vllm_cache_tools.maintain.evidence import busy_entries, entry_rel_path, in_use_elsewhere
from vllm_cache_tools.maintain.plan import PlannedEntry, Protections, PrunePlan, Skip
from vllm_cache_tools.maintain.snapshot_sweep import SnapshotSweep, sweep_snapshots
from vllm_cache_tools.maintain.trash import (
    EntryLocks,
    RemoveResult,
    RootHandle,
    Trash,
    TrashItem,
    check_tree_fd,
    remove_in_worker,
)
from vllm_cache_tools.safeio import UnsafeTree, open_dir, rename_at
from vllm_cache_tools.store import in_use
from vllm_cache_tools.store.parallel_read import worker_pids
from vllm_cache_tools.store.tree_stats import Listing
from vllm_cache_tools.units import fmt_duration

SNAPSHOT_MIN_AGE_S = 600.0
"""Recorder source snapshots younger than this (or than the grace period) are never swept."""


@dataclass(frozen=True)
class PruneResult:
    plan: PrunePlan
    deleted: tuple[str, ...]
    skipped: tuple[Skip, ...]
    """The plan's skips plus entries that failed the re-check when their turn came."""
    freed_bytes: int
    finished_trash: tuple[str, ...] = ()
    """Trash items left by an earlier, interrupted run and removed by this one."""
    errors: tuple[str, ...] = ()
    """Items that could not be removed from the trash (they stay there, out of vLLM's way)."""
    failed: tuple[Skip, ...] = ()
    """The ones of :attr:`skipped` that the plan would delete and that could not be (a folder
    not ours to empty, an I/O error): a partial failure, where the others are protections."""
    snapshots: SnapshotSweep | None = None
    """The recorder's source snapshots no manifest names any more, swept after deleting."""


class Busy:
    """/proc snapshots of open/mapped files, refreshed when older than ``max_age_s``."""

    def __init__(self, root: Path, max_age_s: float) -> None:
        self.root = root
        self.max_age_s = max_age_s
        self.taken = -1e18
        self.map: dict[str, list[int]] = {}
        # Child processes this process had before (an engine a library caller started, as
        # vLLM's V1 starts its EngineCore) are users like any other.
        self.before = {p.pid for p in multiprocessing.active_children()}

    def get(self) -> dict[str, list[int]]:
        if time.monotonic() - self.taken > self.max_age_s:
            busy = busy_entries(self.root)
            # Our own reading processes (a streaming prune's scan pool, started after this,
            # reads entries ahead of the one being moved) are not users of the cache.
            ours = {p.pid for p in multiprocessing.active_children()} - self.before
            if ours:
                busy = {k: kept for k, pids in busy.items()
                        if (kept := [p for p in pids if p not in ours])}
            self.map = busy
            self.taken = time.monotonic()
        return self.map


Progress = Callable[[str, str], None]


class _CannotRemove(str):
    """Why an entry stays that is no protection: the deletion failed (permission, I/O)."""


def _move_to_trash(parent: int | None, trash: Trash, pe: PlannedEntry, prot: Protections,
                   busy: Busy, leases: bool) -> tuple[str | None, str | None]:
    """One fd-relative pass over the entry (the caller holds its lock): open its folder under
    its parent's fd without following a link, then, through that one fd, check it is the
    planned folder, re-stat every planned subfolder (nothing added, removed or modified;
    each ours to empty), the grace period, /proc, and where /proc may hide a holder
    (``leases``), a write lease per file; then one ``renameat`` into the trash, of that
    folder only. (trash name, None) when moved, else (None, why it stays): a
    :class:`_CannotRemove` when that is a failure, not a protection."""
    if parent is None:
        return None, "its parent folder is gone or is a symlink (not followed)"
    try:
        fd = open_dir(pe.key, parent)
    except FileNotFoundError:
        return None, "already gone"
    except UnsafeTree:
        return None, "no longer a folder"
    except OSError as exc:
        return None, _CannotRemove(f"{pe.key}: {exc.strerror or exc}")
    try:
        s = os.fstat(fd)
        if (s.st_dev, s.st_ino) != pe.ident:
            return None, "replaced since the plan was made"
        chk = check_tree_fd(fd, parent, pe.key, pe.dir_mtimes, prot.uid)
        if chk.problem is not None:  # a folder we may not empty, or one we cannot read
            return None, _CannotRemove(chk.problem)
        if chk.changed:
            return None, "changed since the plan was made (being written?)"
        age = time.time() - chk.newest_ns / 1e9
        if prot.grace_s > 0 and age < prot.grace_s:
            return None, (f"modified {fmt_duration(age)} ago, within --grace "
                          f"{fmt_duration(prot.grace_s)}")
        pids = busy.get().get(entry_rel_path(pe.tree, pe.key))
        if pids:
            return None, f"in use: open by pid {', '.join(map(str, pids[:5]))}"
        if leases:
            held = in_use.held_open_in(fd, prot.uid)
            if held is not None:
                return None, in_use_elsewhere(held)
    finally:
        os.close(fd)
    assert trash.fd is not None
    name = trash.new_name(pe.key)
    try:
        # Only the folder checked above (a name swapped meanwhile is left where it is).
        if not rename_at(parent, pe.key, trash.fd, name, expect=pe.ident):
            return None, "replaced since the plan was made"
    except OSError as exc:
        return None, _CannotRemove(f"cannot move it to the trash: {exc.strerror}")
    return name, None


WORKER_ENDED = ("its removal process ended without answering (killed?); it stays in the "
                "trash, where the next prune removes it")


class _InWorker:
    """A removal running in a process of the streamed prune's pool, waited for as a
    :class:`~concurrent.futures.Future` is. A worker that ends mid-task leaves that task
    unanswered (the pool replaces the worker), and which task that was cannot be told: once a
    worker has ended and no task of the pool has finished for :data:`LOST_AFTER_S`, this
    removal is handed to the pool again (a removal is safe to repeat, even beside a slow
    first run of it: names that vanish meanwhile are no errors), at most :data:`RETRIES`
    times; then it counts as lost, with an error result instead of a wait without end."""

    def __init__(self, pool: Pool, args: tuple[object, ...]) -> None:
        self.pool, self.args = pool, args
        self.res: AsyncResult[RemoveResult] = pool.apply_async(remove_in_worker, args)
        self.pids = worker_pids(pool)

    def result(self) -> RemoveResult:
        quiet, left, tries = 0.0, -1, 0
        while True:
            try:
                return self.res.get(timeout=0.25)
            except multiprocessing.TimeoutError:
                if worker_pids(self.pool) == self.pids:
                    continue
                now = len(self.pool._cache)  # type: ignore[attr-defined]  # tasks unanswered
                quiet = 0.0 if now != left else quiet + 0.25
                left = now
                if quiet < LOST_AFTER_S:
                    continue
                if tries >= RETRIES:
                    return RemoveResult(0, 0, WORKER_ENDED)
                tries, quiet, left = tries + 1, 0.0, -1
                self.res = self.pool.apply_async(remove_in_worker, self.args)
                self.pids = worker_pids(self.pool)


LOST_AFTER_S = 3.0
RETRIES = 2
LISTING_MAX_NAMES = 2048
"""A removal task carries the light read's listing of its entry up to this many names (a real
entry holds ~25 files); a bigger entry is listed afresh by the worker, so that no task sent
through the pool's pipe is large."""


class Mover:
    """What moving entries into the trash needs for one run, held while it lasts: the root's
    folder fds, the trash and its entry locks, the /proc look, and the threads that remove
    trash items. :func:`execute_plan` moves a plan's entries through it; the streaming
    ``prune --yes`` (:mod:`vllm_cache_tools.maintain.stream`) moves each entry as the scan
    reads it. Use as a context manager; :meth:`ready` is ``False`` where nothing can be moved
    (no ``torch_compile_cache``, or a symlink there). ``pool``: forked processes that remove
    the moved entries instead of this process's threads (:func:`remove_in_worker`), so that
    the removal and the checks do not share one interpreter lock; forked before any thread,
    they stay the caller's."""

    def __init__(self, root: Path, prot: Protections, *, create: bool, workers: int = 4,
                 proc_refresh_s: float = 1.0, progress: Progress | None = None,
                 busy: Busy | None = None, pool: Pool | None = None) -> None:
        self.root, self.prot, self.progress = root, prot, progress
        self.workers, self.create = workers, create
        self.busy = busy if busy is not None else Busy(root, proc_refresh_s)
        self.skipped: list[Skip] = []
        self.failed: list[Skip] = []
        self._moved: list[tuple[PlannedEntry, Future[RemoveResult] | _InWorker]] = []
        self._procs = pool
        self._trash_ident: tuple[int, int] | None = None
        self._leftovers: list[tuple[str, Future[RemoveResult]]] = []
        self._locks: EntryLocks | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._leases = False
        self.handle = RootHandle(root)
        self._open = True
        self.trash = self.handle.trash(create=create)

    @property
    def ready(self) -> bool:
        t = self.trash
        return t is not None and t.fd is not None and (not self.create or t.locks_fd is not None)

    def start(self) -> None:
        """Start the removal threads and queue what interrupted runs left in the trash. Call
        it after any process pool was forked (a threaded process is not forked)."""
        assert self.trash is not None and self.ready
        # Asked once per run: where /proc shows every process, its look (``busy``) sees
        # every holder and no lease is taken (store/in_use.py).
        self._leases = not in_use.proc_shows_every_process()
        if self.trash.locks_fd is not None:
            self._locks = EntryLocks(self.trash.locks_fd)
        self._pool = ThreadPoolExecutor(max_workers=max(1, self.workers))
        for item in self.trash.items():
            if finishes(item, self.prot):
                self._leftovers.append((item.name, self._pool.submit(self.trash.remove,
                                                                      item.name)))

    def move(self, pe: PlannedEntry, listing: Listing | None = None) -> bool:
        """Lock, re-check and move one entry into the trash, where a thread removes it;
        ``False`` (and a :class:`Skip` recorded) where it stays. ``listing``: the entry's
        names as the scan walked them (:func:`~vllm_cache_tools.store.tree_stats.tree_stats`):
        the re-check found its folders unchanged since, so the removal unlinks those names
        without listing each folder again."""
        assert self._pool is not None and self.trash is not None
        locks = self._locks
        assert locks is not None
        lock_name = f"{pe.layout}-{pe.key}"
        if not locks.try_lock(lock_name):
            self.skipped.append(Skip(pe.key, pe.layout, pe.path,
                                     "another vllm-cache process is working on it"))
            return False
        try:
            name, why = _move_to_trash(self.handle.parent_fd(pe.tree), self.trash, pe,
                                       self.prot, self.busy, self._leases)
        finally:
            locks.unlock(lock_name)
        if name is None:
            self.skipped.append(Skip(pe.key, pe.layout, pe.path, why or "?"))
            if isinstance(why, _CannotRemove):
                self.failed.append(self.skipped[-1])
            return False
        if self.progress is not None:
            self.progress("moved", pe.key)
        self._moved.append((pe, self._remove(name, pe.ident, listing)))
        return True

    def _remove(self, name: str, expect: tuple[int, ...],
                listing: Listing | None) -> Future[RemoveResult] | _InWorker:
        assert self._pool is not None and self.trash is not None and self.trash.fd is not None
        if self._procs is None:
            return self._pool.submit(self.trash.remove, name, expect, listing)
        if self._trash_ident is None:
            s = os.fstat(self.trash.fd)
            self._trash_ident = (s.st_dev, s.st_ino)
        if listing is not None and sum(len(a) + len(b) for a, b in listing.values()) \
                > LISTING_MAX_NAMES:
            listing = None
        return _InWorker(self._procs, (os.fspath(self.root), self._trash_ident, name, expect,
                                       listing))

    @property
    def moved(self) -> int:
        """Entries moved into the trash so far."""
        return len(self._moved)

    def finish(self, plan: PrunePlan) -> PruneResult:
        """Wait for the removals, sweep the recorder's unreferenced snapshots, and report.
        ``plan``: what was planned (its skips come first in the result's)."""
        deleted: list[str] = []
        errors: list[str] = []
        finished: list[str] = []
        freed = 0
        for name, left in self._leftovers:
            res = left.result()
            if res.error:
                errors.append(f"trash item {name}: {res.error}")
            else:
                finished.append(name)
        for pe, fut in self._moved:
            res = fut.result()
            deleted.append(pe.key)
            if res.error:
                errors.append(f"{pe.key}: moved to the trash but not fully removed: "
                              f"{res.error}")
            else:
                freed += pe.size_bytes
        self.close()
        sweep = (sweep_snapshots(plan.root / COMPILE_CACHE_DIRNAME,
                                 min_age_s=max(SNAPSHOT_MIN_AGE_S, self.prot.grace_s))
                 if deleted else None)
        return PruneResult(plan, tuple(deleted), (*plan.skipped, *self.skipped), freed,
                           tuple(finished), tuple(errors), snapshots=sweep,
                           failed=tuple(self.failed))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self._locks is not None:
            self._locks.close()
            self._locks = None
        if self.trash is not None:
            self.trash.close()
            self.trash = None
        if self._open:
            self.handle.close()
            self._open = False

    def __enter__(self) -> Mover:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def execute_plan(plan: PrunePlan, *, workers: int = 4, proc_refresh_s: float = 1.0,
                 progress: Progress | None = None) -> PruneResult:
    """Delete what ``plan`` lists. Per entry: take its lock, re-check it (same folder, no
    folder changed since planning, nothing modified within the grace period, every folder
    ours to empty, not open per a /proc look at most ``proc_refresh_s`` old), then one
    rename into the trash. Trash items (and any left by an interrupted run) are removed by
    ``workers`` threads while later entries are still being checked."""
    with Mover(plan.root, plan.protections, create=bool(plan.entries), workers=workers,
               proc_refresh_s=proc_refresh_s, progress=progress) as m:
        if not m.ready:
            skipped = [*plan.skipped, *(Skip(pe.key, pe.layout, pe.path,
                                             "torch_compile_cache is missing or a symlink")
                                        for pe in plan.entries)]
            return PruneResult(plan, (), tuple(skipped), 0)
        m.start()
        for pe in plan.entries:
            m.move(pe)
        return m.finish(plan)


def finishes(item: TrashItem, prot: Protections) -> bool:
    """Whether a run with ``prot`` removes this leftover trash item: its own, or any with
    ``--all-users`` or as root (another user's run left it; it stays for them)."""
    return prot.all_users or prot.uid == 0 or item.uid == prot.uid


def trash_leftovers(vllm_root: Path) -> list[TrashItem]:
    """Items an interrupted run left in the trash (read-only; for dry runs)."""
    try:
        with RootHandle(vllm_root) as h:
            t = h.trash(create=False)
            if t is None:
                return []
            try:
                return t.items()
            finally:
                t.close()
    except OSError:
        return []

