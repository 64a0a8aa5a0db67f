"""``prune --cache KIND``: policies over the parts of one JIT cache kind (Triton kernel
folders, Inductor's top-level folders, ...; :mod:`vllm_cache_tools.store.caches.listing`),
planned first, then removed with the protections of the compile-cache prune: a part in use
(a file open or mapped by a running process), modified within the grace period, holding
files of other users (without ``--all-users``) or with unreadable parts stays.

A cache folder is refused (without ``--force``) when it is ``/``, the home folder or one
above it, the temp folder itself, a system folder, or holds the vLLM cache root: an
environment variable pointing there would otherwise turn "old Triton kernels" into "old
files". Another user's default folder (``/tmp/torchinductor_<user>``) is only considered
with ``--all-users``.

Removal: each part is re-checked (same inode, no file added, removed or modified since the
plan, not in use), renamed in one ``rename(2)`` to ``.vllm-cache-trash.<name>.<pid>.<ns>``
in the same folder (so the owner never finds half a kernel folder under its real name), then
removed fd-relative without following links (:mod:`vllm_cache_tools.safeio`). A run killed
half-way leaves such names; the next run removes those that are ours."""

from __future__ import annotations

import errno
import os
import stat as st
import time
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, replace
from pathlib import Path

from vllm_cache_tools.errors import VctError
from vllm_cache_tools.maintain.evidence import in_use_elsewhere, owner_name
from vllm_cache_tools.safeio import (
    UnsafeTree,
    ident,
    open_dir,
    open_dirs,
    remove_tree_at,
    rename_at,
    unlink_at,
)
from vllm_cache_tools.store.caches.kinds import (
    CacheKind,
    CacheLocation,
    dangerous_reason,
    shared_place_problem,
)
from vllm_cache_tools.store.caches.listing import (
    SKIPPED_SHARED,
    TRASH_PREFIX,
    CacheItem,
    CacheListing,
    list_cache,
)
from vllm_cache_tools.store.caches.walk import part_stats
from vllm_cache_tools.store.in_use import held_unseen, open_paths_under
from vllm_cache_tools.units import fmt_duration, format_size


class CacheDirRefused(VctError, ValueError):
    """A cache folder we will not prune without ``--force``."""


@dataclass(frozen=True)
class CachePolicies:
    older_than_s: float | None = None
    max_size_bytes: int | None = None

    def describe(self) -> tuple[str, ...]:
        out = []
        if self.older_than_s is not None:
            out.append(f"older-than {fmt_duration(self.older_than_s)}")
        if self.max_size_bytes is not None:
            out.append(f"max-size {format_size(self.max_size_bytes)}")
        return tuple(out)


@dataclass(frozen=True)
class PlannedPart:
    kind: CacheKind
    cache_dir: Path
    """The cache folder as resolved (a symlinked folder: its target)."""
    name: str
    size_bytes: int
    files: int
    last_used: float | None
    last_used_source: str
    reasons: tuple[str, ...]
    ident: tuple[int, int, int]
    newest_mtime: float | None
    cache_dir_ident: tuple[int, int] | None = None
    """``(st_dev, st_ino)`` of the cache folder as listed: removal opens ``cache_dir``'s last
    component without following and goes on only if it is still that folder."""

    @property
    def path(self) -> Path:
        return self.cache_dir / self.name


@dataclass(frozen=True)
class PartSkip:
    path: Path
    reason: str


@dataclass(frozen=True)
class CachePrunePlan:
    kind: CacheKind
    locations: tuple[CacheLocation, ...]
    parts: tuple[PlannedPart, ...]
    skipped: tuple[PartSkip, ...]
    policies: tuple[str, ...]
    grace_s: float
    all_users: bool
    made_at: float
    total_bytes: int
    part_count: int
    notes: tuple[str, ...] = ()

    @property
    def bytes(self) -> int:
        return sum(p.size_bytes for p in self.parts)


@dataclass(frozen=True)
class CachePruneResult:
    plan: CachePrunePlan
    deleted: tuple[str, ...]
    skipped: tuple[PartSkip, ...]
    freed_bytes: int
    errors: tuple[str, ...] = ()


def check_prunable_cache_dir(loc: CacheLocation, vllm_root: Path | None,
                             force: bool = False) -> None:
    # vllm-other is the vLLM root itself (its parts never include torch_compile_cache).
    why = dangerous_reason(loc.path, vllm_root if loc.kind != "vllm-other" else None)
    if why is not None and not force:
        via = f" (from {loc.source})" if loc.source not in ("default", "other user") else ""
        raise CacheDirRefused(f"refusing to prune the {loc.kind} cache {loc.path}{via}: "
                              f"{why} (pass --force if it really is only a {loc.kind} cache)")


def _last_use(item: CacheItem) -> tuple[float | None, str]:
    m, a = item.stats.newest_mtime, item.stats.newest_atime
    if a is not None and (m is None or a > m):
        return a, "atime"
    return m, "mtime"


def plan_cache_prune(kind: CacheKind, listings: Sequence[CacheListing],
                     policies: CachePolicies, *, grace_s: float = 600.0,
                     all_users: bool = False, uid: int | None = None,
                     now: float | None = None, busy: Mapping[str, set[int]] | None = None
                     ) -> CachePrunePlan:
    """Choose parts of the listed caches (all of ``kind``) by ``policies``; nothing is
    removed here. ``busy``: open paths -> pids (default: a fresh /proc look per folder)."""
    uid = os.geteuid() if uid is None else uid
    now = time.time() if now is None else now
    parts: list[PlannedPart] = []
    skipped: list[PartSkip] = []
    notes: list[str] = []
    candidates: list[tuple[CacheItem, Path, float | None, str]] = []
    dir_ident: dict[Path, tuple[int, int] | None] = {}
    for c in listings:
        if not c.exists or c.stats is None:
            continue
        real = Path(os.path.realpath(c.location.path))
        dir_ident[real] = c.ident
        for item in c.items:
            if item.name.startswith(TRASH_PREFIX):
                continue
            t, src = _last_use(item)
            candidates.append((item, real, t, src))
    open_map: dict[str, set[int]] = {}
    if busy is None:
        for c in listings:
            if c.exists:
                open_map.update(open_paths_under(Path(os.path.realpath(c.location.path))))
    else:
        open_map.update(busy)
    chosen: dict[int, list[str]] = {}
    if policies.older_than_s is not None:
        for i, (_, _, t, src) in enumerate(candidates):
            if t is not None and now - t > policies.older_than_s:
                chosen.setdefault(i, []).append(
                    f"older than {fmt_duration(policies.older_than_s)}: last used "
                    f"{fmt_duration(now - t)} ago ({src})")
    total = sum(item.stats.size_bytes for item, *_ in candidates)
    if policies.max_size_bytes is not None:
        remaining = total - sum(candidates[i][0].stats.size_bytes for i in chosen)
        lru = sorted((i for i in range(len(candidates)) if i not in chosen),
                     key=lambda i: (candidates[i][2] or 0.0, candidates[i][0].name))
        for i in lru:
            if remaining <= policies.max_size_bytes:
                break
            item, _, t, src = candidates[i]
            why = _protection(item, uid, grace_s, all_users, now, open_map)
            if why is not None:
                skipped.append(PartSkip(item.path, f"{why} [max-size]"))
                continue
            chosen[i] = [f"max-size {format_size(policies.max_size_bytes)}: least recently "
                         f"used ({src} {fmt_duration(now - t) + ' ago' if t else 'never'})"]
            remaining -= item.stats.size_bytes
        if remaining > policies.max_size_bytes:
            notes.append(f"still {format_size(remaining)} after this plan, above --max-size "
                         f"{format_size(policies.max_size_bytes)}: the rest is protected")
    for i in sorted(chosen):
        item, real, t, src = candidates[i]
        why = _protection(item, uid, grace_s, all_users, now, open_map)
        if why is not None:
            skipped.append(PartSkip(item.path, f"{why} [{'; '.join(chosen[i])}]"))
            continue
        try:
            s = os.lstat(real / item.name)
        except OSError:
            skipped.append(PartSkip(item.path, "vanished while planning"))
            continue
        parts.append(PlannedPart(kind, real, item.name, item.stats.size_bytes,
                                 item.stats.files, t, src, tuple(chosen[i]), ident(s),
                                 item.stats.newest_mtime, dir_ident.get(real)))
    parts.sort(key=lambda p: (p.last_used or 0.0, p.name))
    return CachePrunePlan(kind, tuple(c.location for c in listings), tuple(parts),
                          tuple(skipped), policies.describe(), grace_s, all_users, now, total,
                          len(candidates), tuple(notes))


class _Busy:
    """/proc snapshots of open/mapped files under one folder, refreshed when older than
    ``max_age_s`` (a look reads every process's fds and maps: once per part would make a
    prune of thousands of kernel folders quadratic)."""

    def __init__(self, folder: Path, max_age_s: float = 1.0) -> None:
        self.folder, self.max_age_s = folder, max_age_s
        self.taken = -1e18
        self.map: dict[str, set[int]] = {}

    def get(self) -> dict[str, set[int]]:
        if time.monotonic() - self.taken > self.max_age_s:
            self.map = open_paths_under(self.folder)
            self.taken = time.monotonic()
        return self.map


def _busy_under(path: Path, open_map: Mapping[str, set[int]] | None) -> list[int]:
    real = os.path.realpath(path)
    m = open_paths_under(Path(real)) if open_map is None else open_map
    pids: set[int] = set()
    for p, who in m.items():
        if p == real or p.startswith(real.rstrip("/") + "/"):
            pids |= who
    return sorted(pids)


def _protection(item: CacheItem, uid: int, grace_s: float, all_users: bool, now: float,
                open_map: Mapping[str, set[int]] | None) -> str | None:
    pids = _busy_under(item.path, open_map)
    if pids:
        return f"in use: open by pid {', '.join(map(str, pids[:5]))}"
    held = held_unseen(item.path, uid=uid)
    if held is not None:
        return in_use_elsewhere(held)
    if item.stats.unreadable:
        return (f"parts could not be read ({len(item.stats.unreadable)} unreadable); what is "
                "in them is unknown")
    newest = item.stats.newest_mtime
    if grace_s > 0 and newest is not None and now - newest < grace_s:
        return f"modified {fmt_duration(now - newest)} ago, within --grace {fmt_duration(grace_s)}"
    others = sorted(u for u in item.stats.owners if u != uid)
    if others and not all_users:
        return (f"owned by {', '.join(owner_name(u) for u in others)}, not you "
                "(--all-users to include)")
    return None


def plan_cache_kind_prune(locations: Sequence[CacheLocation], policies: CachePolicies, *,
                  vllm_root: Path | None, grace_s: float = 600.0, all_users: bool = False,
                  force: bool = False) -> CachePrunePlan:
    """Refuse dangerous folders, list each location afresh, then plan. Other users' default
    folders are left out unless ``all_users``."""
    chosen = [loc for loc in locations if all_users or loc.source != "other user"]
    unsafe: list[PartSkip] = []
    for loc in list(chosen):
        why = shared_place_problem(loc)
        if why is not None:  # a planted name: skipped, said, never followed (even --force)
            unsafe.append(PartSkip(loc.path, f"{SKIPPED_SHARED}: {why}"))
            chosen.remove(loc)
        elif os.path.lexists(loc.path):
            check_prunable_cache_dir(loc, vllm_root, force)
    listings = [list_cache(loc, force=force) for loc in chosen]
    kind = locations[0].kind if locations else "vllm"
    plan = plan_cache_prune(kind, listings, policies, grace_s=grace_s, all_users=all_users)
    return replace(plan, skipped=(*unsafe, *plan.skipped)) if unsafe else plan


def _finish_leftovers(fd: int, uid: int, all_users: bool) -> list[str]:
    errors = []
    for e in os.scandir(fd):
        if not e.name.startswith(TRASH_PREFIX):
            continue
        s = e.stat(follow_symlinks=False)
        if not all_users and s.st_uid != uid and uid != 0:
            continue
        res = remove_tree_at(fd, e.name, expect=ident(s)[:2])
        if res.error:
            errors.append(f"{e.name}: {res.error}")
    return errors


def _cannot_empty(fd: int, name: str) -> str | None:
    """Why we could only partly remove the folder ``name`` (relative to ``fd``): a folder in
    it we may not list, write or search, or a sticky one holding others' files; else
    ``None``. Checked before the move, as prune checks an entry's folders, so that a part is
    never moved aside and then left half-removed in the cache folder."""
    uid = os.geteuid()
    ok = os.R_OK | os.W_OK | os.X_OK
    unopened: list[OSError] = []
    for dirpath, _dirs, files, dfd in os.fwalk(name, dir_fd=fd, follow_symlinks=False,
                                               onerror=unopened.append):
        s = os.fstat(dfd)
        if not (s.st_uid == uid and s.st_mode & 0o700 == 0o700) and \
                not os.access(".", ok, dir_fd=dfd, effective_ids=True):
            return f"permission denied: cannot empty {dirpath}"
        if s.st_mode & st.S_ISVTX and uid not in (0, s.st_uid):
            for f in files:
                with suppress(OSError):
                    if os.lstat(f, dir_fd=dfd).st_uid != uid:
                        return f"{dirpath} is sticky and holds {f} of another user"
    if unopened:
        return f"permission denied: cannot empty {unopened[0].filename or name}"
    return None


def _remove_part(fd: int, p: PlannedPart, plan: CachePrunePlan, busy: _Busy, uid: int
                 ) -> tuple[bool, str | None]:
    """(removed, why not / error)."""
    try:
        s = os.stat(p.name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return False, "already gone"
    if ident(s) != p.ident:
        return False, "replaced since the plan was made"
    fresh = part_stats(p.path)
    if fresh.newest_mtime != p.newest_mtime or fresh.files != p.files:
        return False, "changed since the plan was made (being written?)"
    if plan.grace_s > 0 and fresh.newest_mtime is not None and \
            time.time() - fresh.newest_mtime < plan.grace_s:
        return False, f"modified within --grace {fmt_duration(plan.grace_s)}"
    pids = _busy_under(p.path, busy.get())
    if pids:
        return False, f"in use: open by pid {', '.join(map(str, pids[:5]))}"
    held = held_unseen(p.name, fd, uid)
    if held is not None:
        return False, in_use_elsewhere(held)
    if st.S_ISDIR(p.ident[2]):
        why = _cannot_empty(fd, p.name)
        if why is not None:
            return False, why
    doomed = f"{TRASH_PREFIX}{p.name}.{os.getpid()}.{time.time_ns():x}"
    if not rename_at(fd, p.name, fd, doomed, expect=p.ident[:2]):
        return False, "replaced since the plan was made"
    if st.S_ISDIR(p.ident[2]):
        res = remove_tree_at(fd, doomed, expect=p.ident[:2])
        return True, res.error
    unlink_at(fd, doomed, p.ident[:2])
    return True, None


def open_cache_dir(d: Path, expect: tuple[int, int] | None) -> int:
    """An fd on the cache folder ``d`` (a resolved path): its parent followed, ``d`` itself
    opened without following and, with ``expect``, only if it is still the folder listed and
    checked (a name in a shared temp folder swapped for a link or another folder between the
    plan and now is refused: every removal is fd-relative below this fd)."""
    parent = open_dirs(d.parent)
    try:
        fd = open_dir(d.name, parent)
    finally:
        os.close(parent)
    s = os.fstat(fd)
    if expect is not None and (s.st_dev, s.st_ino) != tuple(expect):
        os.close(fd)
        raise UnsafeTree(errno.ESTALE, "replaced since the plan was made (not followed)")
    return fd


def execute_cache_plan(plan: CachePrunePlan, uid: int | None = None) -> CachePruneResult:
    uid = os.geteuid() if uid is None else uid
    deleted: list[str] = []
    skipped = list(plan.skipped)
    errors: list[str] = []
    freed = 0
    by_dir: dict[Path, list[PlannedPart]] = {}
    for p in plan.parts:
        by_dir.setdefault(p.cache_dir, []).append(p)
    for d, parts in by_dir.items():
        try:
            fd = open_cache_dir(d, parts[0].cache_dir_ident)
        except OSError as exc:
            skipped += [PartSkip(p.path, f"cannot open {d}: {exc.strerror or exc}")
                        for p in parts]
            continue
        busy = _Busy(d)
        try:
            errors += _finish_leftovers(fd, uid, plan.all_users)
            for p in parts:
                try:
                    removed, why = _remove_part(fd, p, plan, busy, uid)
                except OSError as exc:
                    removed, why = False, exc.strerror or str(exc)
                if not removed:
                    skipped.append(PartSkip(p.path, why or "?"))
                    continue
                deleted.append(str(p.path))
                if why:
                    errors.append(f"{p.path}: moved aside but not fully removed: {why}")
                else:
                    freed += p.size_bytes
        finally:
            os.close(fd)
    return CachePruneResult(plan, tuple(deleted), tuple(skipped), freed, tuple(errors))
