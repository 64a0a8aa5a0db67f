"""``vllm-cache dedup --undo``: give every hard-linked cache file of the linkable kinds its own
inode again (a copy with the same mode, group and times, renamed over the name), under the same
protections as linking (:mod:`.dedup`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from vllm_cache_tools.maintain.dedup import (
    CacheFile,
    DedupSkip,
    EntryLockSet,
    Progress,
    candidates,
    check_root,
    in_use,
    keep_folder_times,
)
from vllm_cache_tools.maintain.evidence import busy_entries
from vllm_cache_tools.maintain.trash import RootHandle
from vllm_cache_tools.safeio import open_dirs, split_link_at


@dataclass(frozen=True)
class SplitPlan:
    """``--undo``: every linkable file with several names, each to get its own inode."""

    root: Path
    files: tuple[CacheFile, ...]
    skipped: tuple[DedupSkip, ...]
    grace_s: float

    @property
    def added_bytes(self) -> int:
        return sum(f.size for f in self.files)


@dataclass(frozen=True)
class SplitResult:
    plan: SplitPlan
    split: tuple[str, ...]
    skipped: tuple[DedupSkip, ...]


def plan_split(vllm_root: Path, *, grace_s: float = 600.0, uid: int | None = None) -> SplitPlan:
    """``--undo``: every linkable file with more than one name (what dedup made, and any
    other hard link of those kinds), under the same protections as linking."""
    check_root(vllm_root)
    uid = os.geteuid() if uid is None else uid
    files, skips, _, _, _ = candidates(vllm_root, grace_s, uid)
    by_inode: dict[tuple[int, int, int], list[CacheFile]] = {}
    for f in sorted(files, key=lambda f: f.rel):
        if f.nlink > 1:
            by_inode.setdefault(f.ident, []).append(f)
    # When every name of an inode is in the root, the first keeps the inode (no copy).
    linked = tuple(sorted((f for names in by_inode.values()
                           for f in (names[1:] if len(names) >= names[0].nlink else names)),
                          key=lambda f: f.rel))
    skips = [s for s in skips if _nlink(vllm_root / s.rel) > 1]
    return SplitPlan(vllm_root, linked, tuple(skips), grace_s)


def _nlink(path: Path) -> int:
    try:
        return os.lstat(path).st_nlink
    except OSError:
        return 1


def execute_split(plan: SplitPlan, progress: Progress | None = None) -> SplitResult:
    """Give each planned name its own copy (:func:`safeio.split_link_at`), re-checked just
    before."""
    done: list[str] = []
    skipped: list[DedupSkip] = []
    busy = busy_entries(plan.root)
    with RootHandle(plan.root) as h:
        locks = EntryLockSet(h)
        try:
            for f in plan.files:
                why = ("another vllm-cache process is working on its entry"
                       if not locks.take(f.rel) else in_use(busy, f.rel))
                if why is not None:
                    skipped.append(DedupSkip(f.rel, why))
                    continue
                parts = f.rel.split("/")
                try:
                    dfd = open_dirs(plan.root, parts[:-1])
                except OSError as exc:
                    skipped.append(DedupSkip(f.rel, f"cannot open its folder: "
                                             f"{exc.strerror or exc}"))
                    continue
                try:
                    before = os.fstat(dfd)
                    ok = split_link_at(dfd, parts[-1], f.ident)
                    keep_folder_times(dfd, before)
                except OSError as exc:
                    skipped.append(DedupSkip(f.rel, f"cannot copy: {exc.strerror or exc}"))
                    continue
                finally:
                    os.close(dfd)
                if not ok:
                    skipped.append(DedupSkip(f.rel, "changed since the plan was made"))
                    continue
                done.append(f.rel)
                if progress is not None:
                    progress("split", f.rel)
        finally:
            locks.close()
    return SplitResult(plan, tuple(done), tuple(skipped))
