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
from dataclasses import dataclass, field
from pathlib import Path

from vllm_cache_tools.layout import COMPILE_CACHE_DIRNAME
from vllm_cache_tools.read.errors import ReadError
from vllm_cache_tools.read.triton import read_triton_meta
from vllm_cache_tools.store.caches.kinds import (
    DEEPGEMM_DIRNAME,
    KINDS,
    CacheKind,
    CacheLocation,
    dangerous_reason,
    locate_caches,
)
from vllm_cache_tools.store.caches.walk import PartStats, part_stats
from vllm_cache_tools.store.scan import RootError, scan
from vllm_cache_tools.store.types import CacheInfo

TRASH_PREFIX = ".vllm-cache-trash."
"""Parts ``prune --cache`` renamed aside and is removing (never listed as parts)."""
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


def _children(path: Path, skip: frozenset[str]) -> tuple[list[str], str | None]:
    try:
        return sorted(n for n in os.listdir(path) if n not in skip), None
    except OSError as exc:
        return [], f"unreadable: {path}: {exc.strerror or exc}"


def _triton_item(path: Path, name: str) -> CacheItem:
    stats = part_stats(path / name)
    kernels: list[str] = []
    target = version = None
    try:
        metas = sorted(n for n in os.listdir(path / name)
                       if n.endswith(".json") and not n.startswith("__grp__"))
    except OSError:
        metas = []
    for m in metas[:TRITON_META_PER_KERNEL]:
        p = path / name / m
        if p.is_symlink():
            continue
        try:
            meta = read_triton_meta(p)
        except ReadError:
            continue
        if meta.name:
            kernels.append(meta.name)
        if meta.backend or meta.arch:
            target = target or meta.target
        version = version or meta.triton_version
    return CacheItem(name, path / name, stats, kernels=tuple(kernels), target=target,
                     triton_version=version)


def _items(loc: CacheLocation, path: Path, problems: list[str]) -> tuple[CacheItem, ...]:
    skip: frozenset[str] = frozenset()
    if loc.kind == "vllm-other":
        skip = frozenset({COMPILE_CACHE_DIRNAME, DEEPGEMM_DIRNAME})
    names, problem = _children(path, skip)
    names = [n for n in names if not n.startswith(TRASH_PREFIX)]
    if problem:
        problems.append(problem)
    if loc.kind == "triton":
        return tuple(_triton_item(path, n) for n in names if (path / n).is_dir()
                     and not (path / n).is_symlink())
    out = []
    for n in names:
        what = inductor_part(n) if loc.kind == "inductor" else None
        out.append(CacheItem(n, path / n, part_stats(path / n), what=what))
    return tuple(out)


def list_cache(loc: CacheLocation, *, use_index: bool = True, force: bool = False
               ) -> CacheListing:
    """One location: missing, unreadable, or its stats and (understood kinds) parts. A
    location that is ``/``, the home folder or above it, a temp or system folder is not
    walked unless ``force`` (``prune --force``)."""
    problems: list[str] = []
    try:
        s = os.stat(loc.path)  # a symlinked cache folder is followed: users make such links
    except FileNotFoundError:
        return CacheListing(loc, False)
    except OSError as exc:
        return CacheListing(loc, True, problems=(f"unreadable: {loc.path}: "
                                                 f"{exc.strerror or exc}",))
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
    real = Path(target) if target is not None else loc.path
    if loc.kind == "vllm":
        try:
            info = scan(loc.path.parent, use_index=use_index)
        except RootError as exc:
            return CacheListing(loc, True, part_stats(real), (), (*problems, str(exc)))
        problems += [f"{p.kind}: {p.path}: {p.detail}" for p in info.problems]
        return CacheListing(loc, True, part_stats(real), (), tuple(problems), info)
    exclude = (frozenset({COMPILE_CACHE_DIRNAME, DEEPGEMM_DIRNAME})
               if loc.kind == "vllm-other" else frozenset())
    stats = part_stats(real, exclude)
    problems += [f"unreadable: {u}" for u in stats.unreadable[:20]]
    return CacheListing(loc, True, stats, _items(loc, real, problems), tuple(problems))


def list_all_caches(root: str | os.PathLike[str] | None = None, *,
                    kinds: tuple[CacheKind, ...] = KINDS, use_index: bool = True,
                    env: dict[str, str] | None = None) -> AllCaches:
    """Every cache location of ``kinds`` for this user and environment, existing or not;
    one cache folder inside another is said (its bytes are counted in both)."""
    locs = locate_caches(root, env, kinds)
    listed = [list_cache(loc, use_index=use_index) for loc in locs]
    out = []
    for c in listed:
        if not c.exists:
            out.append(c)
            continue
        real = os.path.realpath(c.location.path)
        inside = [o for o in listed if o is not c and o.stats is not None
                  and o.kind != "vllm-other"
                  and c.kind != "vllm-other"
                  and _within(real, os.path.realpath(o.location.path))]
        notes = [f"inside the {o.kind} cache {o.location.path}: counted there too"
                 for o in inside]
        out.append(c if not notes else CacheListing(c.location, c.exists, c.stats, c.items,
                                                    (*c.problems, *notes), c.vllm))
    return AllCaches(tuple(out))


def _within(path: str, parent: str) -> bool:
    return path != parent and path.startswith(parent.rstrip("/") + "/")
