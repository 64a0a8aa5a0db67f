"""Size, file count, times and owners of one cache folder (or one part of it), with
``os.scandir`` and ``lstat`` only: never follows a symlink below the top, never leaves the
filesystem's tree, keeps going past unreadable folders. Sizes are apparent sizes of
everything that is not a folder (what ``du -b --apparent-size`` counts, minus the folders'
own sizes)."""

from __future__ import annotations

import os
import stat as st
from dataclasses import dataclass


@dataclass(frozen=True)
class PartStats:
    size_bytes: int = 0
    disk_bytes: int = 0
    files: int = 0
    dirs: int = 0
    oldest_mtime: float | None = None
    newest_mtime: float | None = None
    """Of files and folders (a folder's mtime moves when a file is added or removed)."""
    newest_atime: float | None = None
    """Of files: the best evidence of last use the filesystem keeps (relatime updates it at
    most daily; ``noatime`` mounts never do)."""
    owners: tuple[int, ...] = ()
    unreadable: tuple[str, ...] = ()
    symlinks: int = 0
    is_dir: bool = False


def part_stats(path: str | os.PathLike[str], exclude: frozenset[str] = frozenset()) -> PartStats:
    """Stats of ``path`` (a folder or a file; not followed if a symlink). ``exclude``: names
    directly under ``path`` to leave out (``vllm-other`` leaves ``torch_compile_cache``)."""
    top = os.fspath(path)
    size = disk = files = dirs = links = 0
    oldest = newest = atime = -1.0
    owners: set[int] = set()
    unreadable: list[str] = []
    try:
        s = os.lstat(top)
    except OSError:
        return PartStats(unreadable=(top,))
    owners.add(s.st_uid)
    if not st.S_ISDIR(s.st_mode):
        return PartStats(s.st_size, s.st_blocks * 512, 1, 0, s.st_mtime, s.st_mtime,
                         s.st_atime, (s.st_uid,), (), int(st.S_ISLNK(s.st_mode)))
    newest = s.st_mtime
    stack = [top]
    while stack:
        d = stack.pop()
        try:
            it = os.scandir(d)
        except OSError:
            unreadable.append(d)
            continue
        with it:
            for e in it:
                if d is top and e.name in exclude:
                    continue
                try:
                    s = e.stat(follow_symlinks=False)
                except OSError:
                    unreadable.append(e.path)
                    continue
                owners.add(s.st_uid)
                m = s.st_mtime
                if m > newest:
                    newest = m
                if st.S_ISDIR(s.st_mode):
                    dirs += 1
                    stack.append(e.path)
                    continue
                files += 1
                size += s.st_size
                disk += s.st_blocks
                if st.S_ISLNK(s.st_mode):
                    links += 1
                if m < oldest or oldest < 0:
                    oldest = m
                if s.st_atime > atime:
                    atime = s.st_atime
    return PartStats(size, disk * 512, files, dirs, oldest if files else None,
                     newest if newest >= 0 else None, atime if files else None,
                     tuple(sorted(owners)), tuple(unreadable), links, True)



def merge_stats(top: os.stat_result, parts: list[PartStats]) -> PartStats:
    """The stats of a folder from those of every name directly in it (one walk, not two)."""
    oldest = [p.oldest_mtime for p in parts if p.oldest_mtime is not None]
    newest = [top.st_mtime, *(p.newest_mtime for p in parts if p.newest_mtime is not None)]
    atimes = [p.newest_atime for p in parts if p.newest_atime is not None]
    return PartStats(
        sum(p.size_bytes for p in parts), sum(p.disk_bytes for p in parts),
        sum(p.files for p in parts), sum(p.dirs + p.is_dir for p in parts),
        min(oldest, default=None), max(newest), max(atimes, default=None),
        tuple(sorted({top.st_uid, *(u for p in parts for u in p.owners)})),
        tuple(u for p in parts for u in p.unreadable), sum(p.symlinks for p in parts), True)
