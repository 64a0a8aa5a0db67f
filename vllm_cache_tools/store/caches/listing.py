"""``ls --all-caches``: every JIT cache of :mod:`.kinds` with its size, files, age, last use
and owners, and, for the kinds whose layout we understand, its parts: vLLM's entries (both
trees, from :func:`vllm_cache_tools.store.scan.scan`), Triton's kernel folders (kernel name,
target, Triton version from their metadata JSON), Inductor's top-level folders, and vLLM's
other folders under its root. Problems (unreadable, a symlinked cache folder, one cache
inside another) are collected, never raised."""

from __future__ import annotations

import os
import re
import stat as st
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from vllm_cache_tools.layout import COMPILE_CACHE_DIRNAME
from vllm_cache_tools.read.errors import ReadError
from vllm_cache_tools.read.triton import read_triton_meta
from vllm_cache_tools.store.caches.kinds import (
    DEEPGEMM_DIRNAME,
    KINDS,
    CacheKind,
    CacheLocation,
    check_place,
    dangerous_reason,
    locate_caches,
)
from vllm_cache_tools.store.caches.walk import PartStats, merge_stats, part_stats
from vllm_cache_tools.store.scan import RootError, scan
from vllm_cache_tools.store.types import CacheInfo

TRASH_PREFIX = ".vllm-cache-trash."
"""Parts ``prune --cache`` renamed aside and is removing (never listed as parts)."""
SKIPPED_SHARED = "skipped (not safe to use)"
"""How a listing's problem starts when the location failed the shared-folder check."""
TRITON_META_PER_KERNEL = 8
"""Metadata files read per Triton folder (one per compiled kernel; usually one)."""


@dataclass(frozen=True)
class CacheItem:
    """One part of a cache: the unit ``prune --cache KIND`` keeps or removes whole."""

    name: str
    path: Path
    stats: PartStats
    what: str | None = None
    """What the part is, when its name tells (Inductor's folders)."""
    kernels: tuple[str, ...] = ()
    """Triton: the kernel names its metadata JSON records."""
    target: str | None = None
    triton_version: str | None = None


@dataclass(frozen=True)
class CacheListing:
    location: CacheLocation
    exists: bool
    stats: PartStats | None = None
    items: tuple[CacheItem, ...] = ()
    problems: tuple[str, ...] = ()
    vllm: CacheInfo | None = None
    """For ``vllm``: the scan of both trees (its entries are the parts)."""
    ident: tuple[int, int] | None = None
    """``(st_dev, st_ino)`` of the folder listed: ``prune --cache`` removes only below that
    same folder (opened again without following, compared)."""

    @property
    def kind(self) -> CacheKind:
        return self.location.kind


@dataclass(frozen=True)
class AllCaches:
    caches: tuple[CacheListing, ...]
    made_at: float = field(default_factory=time.time)


_INDUCTOR_PARTS = {
    "fxgraph": "FX graph cache", "aotautograd": "AOTAutograd cache",
    "triton": "Triton kernels Inductor compiled", "precompiled_headers":
    "precompiled C++ headers (CPU)", "locks": "Inductor's lock files",
    "cache": "Inductor's local cache", "kernel": "kernel sources",
}
_CODE_DIR = re.compile(r"^[a-z0-9]{2}$")


def inductor_part(name: str) -> str | None:
    if name in _INDUCTOR_PARTS:
        return _INDUCTOR_PARTS[name]
    if _CODE_DIR.match(name):
        return "generated code (by hash prefix)"
    return None


def _parts(real: str, skip: frozenset[str]) -> tuple[list[tuple[str, PartStats]], str | None]:
    """Every name directly in the cache folder with its stats (one walk of the tree)."""
    try:
        names = sorted(n for n in os.listdir(real)
                       if n not in skip and not n.startswith(TRASH_PREFIX))
    except OSError as exc:
        return [], f"unreadable: {real}: {exc.strerror or exc}"
    return [(n, part_stats(os.path.join(real, n))) for n in names], None


def _triton_item(real: str, name: str, stats: PartStats) -> CacheItem:
    folder = os.path.join(real, name)
    kernels: list[str] = []
    target = version = None
    try:
        metas = sorted(n for n in os.listdir(folder)
                       if n.endswith(".json") and not n.startswith("__grp__"))
    except OSError:
        metas = []
    for m in metas[:TRITON_META_PER_KERNEL]:
        try:
            meta = read_triton_meta(os.path.join(folder, m))  # no link followed, no atime
        except ReadError:
            continue
        if meta.name:
            kernels.append(meta.name)
        if meta.backend or meta.arch:
            target = target or meta.target
        version = version or meta.triton_version
    return CacheItem(name, Path(folder), stats, kernels=tuple(kernels), target=target,
                     triton_version=version)


def list_cache(loc: CacheLocation, *, use_index: bool = True, force: bool = False
               ) -> CacheListing:
    """One location: missing, unreadable, or its stats and (understood kinds) parts. A
    location that is ``/``, the home folder or above it, a temp or system folder is not
    walked unless ``force`` (``prune --force``). One in a folder other users can write in
    that fails :func:`~.kinds.shared_place_problem` (a planted symlink, someone else's
    folder) is never walked, ``force`` or not: its one problem names the path and why."""
    problems: list[str] = []
    place = check_place(loc)
    if place.problem is not None:
        return CacheListing(loc, True, problems=(
            f"{SKIPPED_SHARED}: {loc.path}: {place.problem}",))
    try:
        s = os.stat(loc.path)  # a symlinked cache folder is followed: users make such links
    except FileNotFoundError:
        return CacheListing(loc, False)
    except OSError as exc:
        return CacheListing(loc, True, problems=(f"unreadable: {loc.path}: "
                                                 f"{exc.strerror or exc}",))
    if place.exposed and (s.st_dev, s.st_ino) != place.ident:
        return CacheListing(loc, True, problems=(
            f"{SKIPPED_SHARED}: {loc.path}: replaced while it was being checked",))
    if not st.S_ISDIR(s.st_mode):
        return CacheListing(loc, True, problems=(f"not a folder: {loc.path}",))
    if loc.kind not in ("vllm", "vllm-other") and not force:
        why = dangerous_reason(loc.path)
        if why is not None:  # a variable pointing at / or ~ is not walked (nor pruned)
            return CacheListing(loc, True, problems=(
                f"not walked: {loc.path} (from {loc.source}) is no {loc.kind} cache: {why}",))
    target = loc.link_target
    if target is not None:
        problems.append(f"symlink: {loc.path} -> {target} (listed at its target)")
    real = target if target is not None else os.fspath(loc.path)
    if loc.kind == "vllm":
        try:
            info = scan(loc.path.parent, use_index=use_index)
        except RootError as exc:
            return CacheListing(loc, True, part_stats(real), (), (*problems, str(exc)))
        problems += [f"{p.kind}: {p.path}: {p.detail}" for p in info.problems]
        return CacheListing(loc, True, part_stats(real), (), tuple(problems), info)
    skip = (frozenset({COMPILE_CACHE_DIRNAME, DEEPGEMM_DIRNAME})
            if loc.kind == "vllm-other" else frozenset())
    parts, problem = _parts(real, skip)
    if problem is not None:
        return CacheListing(loc, True, None, (), (*problems, problem))
    stats = merge_stats(s, [ps for _, ps in parts])
    ident = (s.st_dev, s.st_ino)
    problems += [f"unreadable: {u}" for u in stats.unreadable[:20]]
    if loc.kind == "triton":  # kernel folders (a symlink is counted, never entered)
        items = tuple(_triton_item(real, n, ps) for n, ps in parts if ps.is_dir)
    else:
        items = tuple(CacheItem(n, Path(real, n), ps,
                                what=inductor_part(n) if loc.kind == "inductor" else None)
                      for n, ps in parts)
    return CacheListing(loc, True, stats, items, tuple(problems), ident=ident)


def list_all_caches(root: str | os.PathLike[str] | None = None, *,
                    kinds: tuple[CacheKind, ...] = KINDS, use_index: bool = True,
                    env: dict[str, str] | None = None) -> AllCaches:
    """Every cache location of ``kinds`` for this user and environment, existing or not;
    one cache folder inside another is said (its bytes are counted in both)."""
    locs = locate_caches(root, env, kinds)
    listed = [list_cache(loc, use_index=use_index) for loc in locs]
    out = []
    for c in listed:
        if not c.exists or c.stats is None:
            out.append(c)
            continue
        real = os.path.realpath(c.location.path)
        inside = [o for o in listed if o is not c and o.stats is not None
                  and o.kind != "vllm-other"
                  and c.kind != "vllm-other"
                  and _within(real, os.path.realpath(o.location.path))]
        notes = [f"inside the {o.kind} cache {o.location.path}: counted there too"
                 for o in inside]
        out.append(c if not notes else replace(c, problems=(*c.problems, *notes)))
    return AllCaches(tuple(out))


def _within(path: str, parent: str) -> bool:
    return path != parent and path.startswith(parent.rstrip("/") + "/")
