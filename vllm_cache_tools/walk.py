"""Sizes and times of a folder tree with ``os.scandir`` and ``lstat`` only.

Never follows symlinks (they are counted as themselves and reported), never leaves the tree,
keeps going past unreadable folders, and works on names that are not UTF-8."""

from __future__ import annotations

import os
import stat as st
from collections.abc import Callable

from vllm_cache_tools.model import TreeStats

def is_tmp_name(name: str) -> bool:
    # vLLM/torch write "<file>.<pid>.tmp" and rename it into place; one left behind means a
    # writer died mid-write.
    return name.endswith(".tmp")


def tree_stats(top: str, on_file: Callable[[int], None] | None = None) -> TreeStats:
    size = disk = files = dirs = 0
    oldest: float | None = None
    newest: float | None = None
    newest_a: float | None = None
    tmps: list[str] = []
    links: list[str] = []
    unreadable: list[str] = []
    owners: set[int] = set()
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
                try:
                    s = e.stat(follow_symlinks=False)
                except OSError:
                    unreadable.append(e.path)
                    continue
                mode = s.st_mode
                if st.S_ISDIR(mode):
                    dirs += 1
                    stack.append(e.path)
                    continue
                if st.S_ISLNK(mode):
                    links.append(e.path)
                files += 1
                size += s.st_size
                disk += s.st_blocks * 512
                owners.add(s.st_uid)
                m = s.st_mtime
                if oldest is None or m < oldest:
                    oldest = m
                if newest is None or m > newest:
                    newest = m
                a = s.st_atime
                if newest_a is None or a > newest_a:
                    newest_a = a
                if is_tmp_name(e.name):
                    tmps.append(e.path)
        if on_file is not None:
            on_file(files)
    return TreeStats(size, disk, files, dirs, oldest, newest, newest_a, tuple(tmps),
                     tuple(links), tuple(unreadable), tuple(sorted(owners)))
