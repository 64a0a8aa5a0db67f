"""Hard-link identical cache files (``vllm-cache dedup``); :mod:`.dedup_undo` splits them again.

Ranks of one tensor-parallel start, and entries of related starts, hold byte-identical files.
A plan groups them (same size, owner, group and mode, on one filesystem; then the same
xxh3-128 digest, read without moving atimes); executing it makes every other name of a group
a hard link to the first, one name at a time, atomically (:func:`safeio.link_over_at`: link
to a random name in the same folder, check both identities, rename over), after re-checking
that both files still hold the planned inode, size, mtime and content.

Only files whose writers never modify them in place are linked; which those are, and how we
know, is :mod:`.dedup_kinds`. Protections (as prune's): files of entries held open or mapped by
a running process (/proc), files or folders modified within the grace period, other users'
files, and prune's per-entry locks while an entry's files are linked. Linking merges atimes:
a load through either name then counts as use of both.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, suppress
from dataclasses import dataclass, field
from pathlib import Path

import xxhash

from vllm_cache_tools.errors import VctError
from vllm_cache_tools.layout import AOT_DIRNAME, COMPILE_CACHE_DIRNAME
from vllm_cache_tools.maintain.dedup_kinds import entry_of, entry_rel, file_kind, so_peer_key
from vllm_cache_tools.maintain.evidence import busy_entries
from vllm_cache_tools.maintain.trash import EntryLocks, RootHandle
from vllm_cache_tools.read.noatime import open_noatime
from vllm_cache_tools.safeio import (
    UnsafeTree,
    ident,
    link_over_at,
    open_dirs,
)


class DedupError(VctError, OSError):
    """The root cannot be deduplicated (missing, not a folder)."""

    exit_code = 1


# --------------------------------------------------------------------------------------------
# Records


@dataclass(frozen=True)
class CacheFile:
    rel: str
    """Path below the vLLM root."""
    size: int
    ident: tuple[int, int, int]
    mode: int
    uid: int
    gid: int
    mtime_ns: int
    nlink: int
    kind: str


@dataclass(frozen=True)
class LinkGroup:
    """Files with identical bytes: every name in ``link`` becomes a name of ``keep``."""

    digest: str
    size: int
    kind: str
    keep: CacheFile
    link: tuple[CacheFile, ...]
    already: tuple[str, ...] = ()
    """Names that already share ``keep``'s inode."""

    @property
    def saved_bytes(self) -> int:
        """An inode is freed when every name it has is linked (none outside the plan)."""
        names: dict[tuple[int, int, int], int] = {}
        for f in self.link:
            names[f.ident] = names.get(f.ident, 0) + 1
        return self.size * sum(1 for f in {f.ident: f for f in self.link}.values()
                               if names[f.ident] >= f.nlink)


@dataclass(frozen=True)
class DedupSkip:
    rel: str
    reason: str


@dataclass(frozen=True)
class DedupPlan:
    root: Path
    groups: tuple[LinkGroup, ...]
    skipped: tuple[DedupSkip, ...]
    """Files that would have been linked but a protection kept (in use, grace, owner, ...)."""
    files_seen: int
    bytes_seen: int
    grace_s: float
    made_at: float = field(default_factory=time.time)
    excluded: tuple[tuple[str, int], ...] = ()
    """Why other files were left out, with counts (lock files, vllm_compile_cache.py, ...)."""

    @property
    def saved_bytes(self) -> int:
        return sum(g.saved_bytes for g in self.groups)

    @property
    def files_to_link(self) -> int:
        return sum(len(g.link) for g in self.groups)


@dataclass(frozen=True)
class DedupResult:
    plan: DedupPlan
    linked: tuple[str, ...]
    skipped: tuple[DedupSkip, ...]
    saved_bytes: int


# --------------------------------------------------------------------------------------------
# Walking the trees


def _walk(root: Path) -> Iterator[tuple[tuple[str, ...], os.stat_result]]:
    """Regular files below ``torch_compile_cache`` and the older ``<root>/torch_aot_compile``
    as (components below the root, lstat); folders entered through ``O_NOFOLLOW`` fds (one
    open at a time: a Triton cache has thousands of folders), on the filesystem of the top
    folder only, symlinks never followed."""
    for top in (COMPILE_CACHE_DIRNAME, AOT_DIRNAME):
        try:
            fd = open_dirs(root, top)
        except (FileNotFoundError, UnsafeTree, NotADirectoryError):
            continue
        try:
            dev = os.fstat(fd).st_dev
        finally:
            os.close(fd)
        stack: list[tuple[str, ...]] = [(top,)]
        while stack:
            parts = stack.pop()
            try:
                dfd = open_dirs(root, parts)
            except OSError:
                continue
            items: list[tuple[str, os.stat_result]] = []
            try:
                if os.fstat(dfd).st_dev == dev:
                    with os.scandir(dfd) as it:
                        for e in it:  # stat while the folder's fd is open (fd-relative)
                            with suppress(OSError):
                                items.append((e.name, e.stat(follow_symlinks=False)))
            except OSError:
                pass
            finally:
                os.close(dfd)
            for name, s in items:
                if stat.S_ISDIR(s.st_mode):
                    if s.st_dev == dev and not name.startswith("."):
                        stack.append((*parts, name))
                elif stat.S_ISREG(s.st_mode):
                    yield (*parts, name), s


def _digest(path: Path, expect: tuple[int, int, int]) -> str | None:
    """xxh3-128 of a file's bytes, read without moving its atime; ``None`` when the file is
    no longer ``expect`` or cannot be read."""
    h = xxhash.xxh3_128()
    try:
        with open_noatime(path) as f:
            if ident(os.fstat(f.fileno())) != expect:
                return None
            while chunk := f.read(1 << 20):
                h.update(chunk)
    except OSError:
        return None
    return h.hexdigest()


# --------------------------------------------------------------------------------------------
# Planning


def _protect(f: CacheFile, parent_mtime_ns: int, now: float, grace_s: float, uid: int,
             busy: dict[str, list[int]]) -> str | None:
    if f.uid != uid:
        return f"owned by uid {f.uid} (only your own files are linked)"
    newest = max(f.mtime_ns, parent_mtime_ns) / 1e9
    if grace_s > 0 and now - newest < grace_s:
        return "modified within the grace period (may still be written)"
    return in_use(busy, f.rel)


def in_use(busy: dict[str, list[int]], rel: str) -> str | None:
    pids = busy.get(entry_rel(rel.split("/")))
    return f"its entry is in use: open by pid {', '.join(map(str, pids[:5]))}" if pids else None


def candidates(root: Path, grace_s: float, uid: int
                ) -> tuple[list[CacheFile], list[DedupSkip], dict[str, int], int, int]:
    busy = busy_entries(root)
    now = time.time()
    files: list[CacheFile] = []
    skips: list[DedupSkip] = []
    excluded: dict[str, int] = {}
    dir_mtime: dict[tuple[str, ...], int] = {}
    seen = total = 0
    for parts, s in _walk(root):
        seen += 1
        total += s.st_size
        kind, why = file_kind(parts)
        if kind is None:
            excluded[why] = excluded.get(why, 0) + 1
            continue
        if s.st_size == 0:
            excluded["empty file"] = excluded.get("empty file", 0) + 1
            continue
        parent = parts[:-1]
        if parent not in dir_mtime:
            try:
                dir_mtime[parent] = os.stat(root.joinpath(*parent),
                                            follow_symlinks=False).st_mtime_ns
            except OSError:
                dir_mtime[parent] = time.time_ns()
        f = CacheFile("/".join(parts), s.st_size, ident(s), stat.S_IMODE(s.st_mode),
                      s.st_uid, s.st_gid, s.st_mtime_ns, s.st_nlink, kind)
        why_not = _protect(f, dir_mtime[parent], now, grace_s, uid, busy)
        if why_not:
            skips.append(DedupSkip(f.rel, why_not))
            continue
        files.append(f)
    return files, skips, excluded, seen, total


def _group_key(f: CacheFile) -> tuple[object, ...]:
    parts = f.rel.split("/")
    so = parts[-1].endswith(".so") or ".so." in parts[-1]
    peer = so_peer_key(parts) if so else ()
    if so and peer is None:
        peer = (f.rel,)  # alone: never linked
    return (f.size, f.ident[0], f.mode, f.uid, f.gid, peer)


def check_root(vllm_root: Path) -> None:
    if not vllm_root.is_dir():
        raise DedupError(f"{vllm_root} is not a folder")


def plan_dedup(vllm_root: Path, *, grace_s: float = 600.0, uid: int | None = None,
               min_size: int = 1) -> DedupPlan:
    """Which files would be linked, and the bytes that frees. Reads only (no atime moves)."""
    check_root(vllm_root)
    uid = os.geteuid() if uid is None else uid
    files, skips, excluded, seen, total = candidates(vllm_root, grace_s, uid)
    by_key: dict[tuple[object, ...], list[CacheFile]] = {}
    for f in files:
        if f.size >= min_size:
            by_key.setdefault(_group_key(f), []).append(f)
    groups: list[LinkGroup] = []
    for same_size in by_key.values():
        if len({f.ident for f in same_size}) < 2:
            continue
        by_digest: dict[str, list[CacheFile]] = {}
        for f in same_size:
            d = _digest(vllm_root / f.rel, f.ident)
            if d is None:
                skips.append(DedupSkip(f.rel, "changed or unreadable while planning"))
                continue
            by_digest.setdefault(d, []).append(f)
        for digest, group in by_digest.items():
            if len({f.ident for f in group}) < 2:
                continue
            # Keep the inode with most names (then the first path): fewest links to make.
            group.sort(key=lambda f: (-f.nlink, f.rel))
            keep = group[0]
            groups.append(LinkGroup(
                digest, keep.size, keep.kind, keep,
                tuple(f for f in group[1:] if f.ident != keep.ident),
                tuple(f.rel for f in group[1:] if f.ident == keep.ident)))
    groups.sort(key=lambda g: (-g.saved_bytes, g.keep.rel))
    return DedupPlan(vllm_root, tuple(groups), tuple(sorted(skips, key=lambda s: s.rel)),
                     seen, total, grace_s, excluded=tuple(sorted(excluded.items())))


# --------------------------------------------------------------------------------------------
# Executing


class EntryLockSet:
    """Per-entry locks (prune's lock file), taken once per entry for the whole run."""

    def __init__(self, handle: RootHandle) -> None:
        try:
            self.trash = handle.trash(create=True)
            if self.trash is None or self.trash.locks_fd is None:
                raise DedupError(f"{handle.vllm_root}: torch_compile_cache is missing or a "
                                 "symlink")
            self.locks = EntryLocks(self.trash.locks_fd)
        except DedupError:
            raise
        except OSError as exc:
            raise DedupError(f"{handle.vllm_root}: cannot take the entry locks "
                             f"(.vllm-cache-trash/locks): {exc.strerror or exc}") from None
        self.held: dict[str, bool] = {}

    def take(self, rel: str) -> bool:
        name = "-".join(entry_of(rel.split("/")))
        if name not in self.held:
            self.held[name] = self.locks.try_lock(name)
        return self.held[name]

    def close(self) -> None:
        for name, ok in self.held.items():
            if ok:
                self.locks.unlock(name)
        self.locks.close()
        if self.trash is not None:
            self.trash.close()


def _still(f: CacheFile, s: os.stat_result) -> bool:
    return (ident(s) == f.ident and s.st_size == f.size and s.st_mtime_ns == f.mtime_ns
            and stat.S_IMODE(s.st_mode) == f.mode and s.st_uid == f.uid and s.st_gid == f.gid)


Progress = Callable[[str, str], None]


def _link_one(root: Path, keep: CacheFile, f: CacheFile, digest: str) -> str | None:
    """Replace ``f``'s name by a link to ``keep`` (whose content the caller checked);
    ``None`` when done, else why not."""
    src_parts, dst_parts = keep.rel.split("/"), f.rel.split("/")
    with ExitStack() as stack:
        try:
            sfd = open_dirs(root, src_parts[:-1])
            stack.callback(os.close, sfd)
            dfd = open_dirs(root, dst_parts[:-1])
            stack.callback(os.close, dfd)
            s = os.stat(src_parts[-1], dir_fd=sfd, follow_symlinks=False)
            d = os.stat(dst_parts[-1], dir_fd=dfd, follow_symlinks=False)
        except UnsafeTree as exc:
            return f"unsafe path: {exc.strerror or exc}"
        except OSError as exc:
            return f"cannot look at it: {exc.strerror or exc}"
        if not _still(keep, s) or not _still(f, d):
            return "changed since the plan was made"
        if os.fstat(sfd).st_dev != os.fstat(dfd).st_dev:
            return "another filesystem (hard links cannot cross it)"
        # The content again, now: a file rewritten since digesting is never linked.
        if _digest(root / f.rel, f.ident) != digest:
            return "content changed since the plan was made"
        before = os.fstat(dfd)
        try:
            done = link_over_at(sfd, src_parts[-1], dfd, dst_parts[-1],
                                expect_src=keep.ident, expect_dst=f.ident)
        except OSError as exc:
            if exc.errno == errno.EXDEV:
                return "another filesystem (hard links cannot cross it)"
            return f"cannot link: {exc.strerror or exc}"
        keep_folder_times(dfd, before)
        return None if done else "replaced while being linked"


def keep_folder_times(dfd: int, before: os.stat_result) -> None:
    """Put a folder's times back after our temporary name came and went in it: prune, verify
    and the grace period read folder mtimes as "a compile is writing here", and a file that
    became a link holds the same bytes. (Only the microseconds between our link and rename
    could hide a concurrent write; the entry was checked idle and past the grace period.)"""
    with suppress(OSError):
        os.utime(dfd, ns=(before.st_atime_ns, before.st_mtime_ns))


def execute_dedup(plan: DedupPlan, progress: Progress | None = None) -> DedupResult:
    """Link what ``plan`` lists; every name is re-checked just before (see :func:`_link_one`).
    A group whose kept file changed is skipped whole."""
    linked: list[str] = []
    skipped = list(plan.skipped)
    saved = 0
    busy = busy_entries(plan.root)  # a fresh look: the plan may be minutes old
    with RootHandle(plan.root) as h:
        locks = EntryLockSet(h)
        try:
            for g in plan.groups:
                why_keep = ("another vllm-cache process is working on its entry"
                            if not locks.take(g.keep.rel) else
                            in_use(busy, g.keep.rel) or
                            "the file to keep changed since the plan was made"
                            if _digest(plan.root / g.keep.rel, g.keep.ident) != g.digest
                            else None)
                if why_keep is not None:
                    skipped += [DedupSkip(f.rel, why_keep) for f in g.link]
                    continue
                done: dict[tuple[int, int, int], int] = {}
                for f in g.link:
                    why = ("another vllm-cache process is working on its entry"
                           if not locks.take(f.rel) else in_use(busy, f.rel)
                           or _link_one(plan.root, g.keep, f, g.digest))
                    if why is not None:
                        skipped.append(DedupSkip(f.rel, why))
                        continue
                    linked.append(f.rel)
                    if progress is not None:
                        progress("linked", f.rel)
                    done[f.ident] = done.get(f.ident, 0) + 1
                    if done[f.ident] == f.nlink:  # its last name: the inode is freed
                        saved += g.size
        finally:
            locks.close()
    return DedupResult(plan, tuple(linked), tuple(skipped), saved)
