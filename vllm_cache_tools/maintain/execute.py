"""Prune execution: a :class:`~vllm_cache_tools.maintain.plan.PrunePlan` -> :class:`PruneResult`.

Executing re-checks each planned entry under a per-entry lock right before moving it (the plan
may be seconds old) and moves it into the trash in one rename; removal happens there
(:mod:`vllm_cache_tools.maintain.trash`), by worker threads while later entries are still being
checked. Afterwards the recorder's unreferenced source snapshots are swept.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
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
)
from vllm_cache_tools.safeio import UnsafeTree, open_dir, rename_at
from vllm_cache_tools.store import in_use
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


class _Busy:
    """/proc snapshots of open/mapped files, refreshed when older than ``max_age_s``."""

    def __init__(self, root: Path, max_age_s: float) -> None:
        self.root = root
        self.max_age_s = max_age_s
        self.taken = -1e18
        self.map: dict[str, list[int]] = {}

    def get(self) -> dict[str, list[int]]:
        if time.monotonic() - self.taken > self.max_age_s:
            self.map = busy_entries(self.root)
            self.taken = time.monotonic()
        return self.map


Progress = Callable[[str, str], None]


class _CannotRemove(str):
    """Why an entry stays that is no protection: the deletion failed (permission, I/O)."""


def _move_to_trash(parent: int | None, trash: Trash, pe: PlannedEntry, prot: Protections,
                   busy: _Busy, leases: bool) -> tuple[str | None, str | None]:
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


def execute_plan(plan: PrunePlan, *, workers: int = 4, proc_refresh_s: float = 1.0,
                 progress: Progress | None = None) -> PruneResult:
    """Delete what ``plan`` lists. Per entry: take its lock, re-check it (same folder, no
    folder changed since planning, nothing modified within the grace period, every folder
    ours to empty, not open per a /proc look at most ``proc_refresh_s`` old), then one
    rename into the trash. Trash items (and any left by an interrupted run) are removed by
    ``workers`` threads while later entries are still being checked."""
    prot = plan.protections
    deleted: list[str] = []
    skipped = list(plan.skipped)
    errors: list[str] = []
    failed: list[Skip] = []
    finished: list[str] = []
    freed = 0
    with RootHandle(plan.root) as h:
        trash = h.trash(create=bool(plan.entries))
        if trash is None or trash.fd is None or (plan.entries and trash.locks_fd is None):
            if trash is not None:
                trash.close()
            for pe in plan.entries:
                skipped.append(Skip(pe.key, pe.layout, pe.path,
                                    "torch_compile_cache is missing or a symlink"))
            return PruneResult(plan, (), tuple(skipped), 0)
        busy = _Busy(plan.root, proc_refresh_s)
        # Asked once per run: where /proc shows every process, its look (``busy``) sees
        # every holder and no lease is taken (store/in_use.py).
        leases = not in_use.proc_shows_every_process()
        locks = EntryLocks(trash.locks_fd) if trash.locks_fd is not None else None
        try:
            with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
                leftovers: list[tuple[str, Future[RemoveResult]]] = []
                for item in trash.items():
                    if finishes(item, prot):
                        leftovers.append((item.name, pool.submit(trash.remove, item.name)))
                moved: list[tuple[PlannedEntry, Future[RemoveResult]]] = []
                for pe in plan.entries:
                    assert locks is not None
                    lock_name = f"{pe.layout}-{pe.key}"
                    if not locks.try_lock(lock_name):
                        skipped.append(Skip(pe.key, pe.layout, pe.path,
                                            "another vllm-cache process is working on it"))
                        continue
                    try:
                        name, why = _move_to_trash(h.parent_fd(pe.tree), trash, pe, prot,
                                                   busy, leases)
                    finally:
                        locks.unlock(lock_name)
                    if name is None:
                        skipped.append(Skip(pe.key, pe.layout, pe.path, why or "?"))
                        if isinstance(why, _CannotRemove):
                            failed.append(skipped[-1])
                        continue
                    if progress is not None:
                        progress("moved", pe.key)
                    moved.append((pe, pool.submit(trash.remove, name, pe.ident)))
                for name, fut in leftovers:
                    res = fut.result()
                    if res.error:
                        errors.append(f"trash item {name}: {res.error}")
                    else:
                        finished.append(name)
                for pe, fut in moved:
                    res = fut.result()
                    deleted.append(pe.key)
                    if res.error:
                        errors.append(f"{pe.key}: moved to the trash but not fully removed: "
                                      f"{res.error}")
                    else:
                        freed += pe.size_bytes
        finally:
            if locks is not None:
                locks.close()
            trash.close()
    sweep = (sweep_snapshots(plan.root / COMPILE_CACHE_DIRNAME,
                             min_age_s=max(SNAPSHOT_MIN_AGE_S, prot.grace_s))
             if deleted else None)
    return PruneResult(plan, tuple(deleted), tuple(skipped), freed, tuple(finished),
                       tuple(errors), snapshots=sweep, failed=tuple(failed))


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

