"""Sizes and times of a folder tree with ``os.scandir`` and ``lstat`` only.

Never follows symlinks (they are counted as themselves and reported), never leaves the tree,
keeps going past unreadable folders, and works on names that are not UTF-8. Folders are
recognised from the directory entry's type (no ``stat`` call); only files are stat'ed."""

from __future__ import annotations

import os
import stat as st
from collections.abc import Callable

from vllm_cache_tools.layout import KEY_FILES
from vllm_cache_tools.store.types import TreeStats

Listing = dict[str, tuple[list[str], list[str]]]
"""Folder relative to the walked top (``.`` for the top) -> (names of its non-folders, names
of its folders), as one walk saw them."""

HASH_NAME_MIN = 20
"""Folder names at least this long are content hashes (Inductor's ``aotautograd/<hash>``,
``fxgraph/<xx>/<hash>``, Triton's ``triton_cache/<hash>``)."""


def is_bucket(rel: str) -> bool:
    """Whether a folder (relative to its entry) is, or lies inside, a content-addressed bucket:
    a 2-character kernel folder directly in an ``inductor_cache`` or a folder named by a
    content hash. The listing index does not watch these (:func:`watched_dirs`).

    Why that is safe, measured on the harness's real vLLM starts (every pair of consecutive
    snapshots of every scenario, tests/test_scan_speed.py): after an entry was first written,
    later starts created files only in the entry folder, its ``rank_*`` folders (``model``
    replaced), its ``inductor_cache`` (new buckets, new ``aotautograd/<hash>`` folders) and
    ``inductor_cache/locks``; never in an existing bucket. A new bucket changes its parent's
    mtime, which is watched. What is not seen: a new kernel written into an existing bucket
    (two kernels sharing their 2 first hash characters, one written by a later start). Kernel
    files are named by their content and written by tmp + rename, so a rewrite in place does
    not happen; ``--rescan`` (and every prune, which never uses the index) walks everything."""
    parts = rel.split("/")
    for i, name in enumerate(parts):
        if len(name) >= HASH_NAME_MIN:
            return True
        if len(name) == 2 and i > 0 and parts[i - 1] == "inductor_cache":
            return True
    return False


def watched_dirs(dir_mtimes: tuple[tuple[str, int], ...]) -> tuple[tuple[str, int], ...]:
    """The folders whose mtimes the listing index compares: every folder that is not a
    content-addressed bucket (:func:`is_bucket`)."""
    return tuple((rel, m) for rel, m in dir_mtimes if rel == "." or not is_bucket(rel))


def tree_stats(top: str, on_file: Callable[[int], None] | None = None,
               listing: Listing | None = None) -> TreeStats:
    """The stats of the tree at ``top``; where ``listing`` is given, also the names in each
    folder, filled in (a later removal of the same tree can skip listing it again:
    :func:`vllm_cache_tools.safeio.remove_tree_at`)."""
    size = disk = files = dirs = 0
    oldest = newest = -1.0
    tmps: list[str] = []
    links: list[str] = []
    unreadable: list[str] = []
    owners: set[int] = set()
    dir_mtimes: list[tuple[str, int]] = []
    keys: list[tuple[str, int, int, float]] = []
    cut = len(top) + 1
    try:
        top_st = os.lstat(top)
        dir_mtimes.append((".", top_st.st_mtime_ns))
        owners.add(top_st.st_uid)
    except OSError:
        unreadable.append(top)
        return TreeStats(unreadable=(top,))
    stack = [top]
    push = stack.append
    S_ISLNK = st.S_ISLNK
    while stack:
        d = stack.pop()
        try:
            it = os.scandir(d)
        except OSError:
            unreadable.append(d)
            continue
        if listing is not None:
            here: tuple[list[str], list[str]] = ([], [])
            listing[d[cut:] if len(d) > len(top) else "."] = here
        with it:
            for e in it:
                try:
                    if e.is_dir(follow_symlinks=False):
                        dirs += 1
                        push(e.path)
                        if listing is not None:
                            here[1].append(e.name)
                        ds = e.stat(follow_symlinks=False)
                        # A folder of another user decides as much as its files: prune must
                        # not remove a tree part of which it could not create.
                        owners.add(ds.st_uid)
                        dir_mtimes.append((e.path[cut:], ds.st_mtime_ns))
                        continue
                    s = e.stat(follow_symlinks=False)
                except OSError:
                    unreadable.append(e.path)
                    continue
                if listing is not None:
                    here[0].append(e.name)
                if S_ISLNK(s.st_mode):
                    links.append(e.path)
                files += 1
                size += s.st_size
                disk += s.st_blocks
                owners.add(s.st_uid)
                m = s.st_mtime
                if m > newest:
                    newest = m
                if m < oldest or oldest < 0:
                    oldest = m
                name = e.name
                if name.endswith(".tmp"):
                    # vLLM/torch write "<file>.<pid>.tmp" and rename it into place; one left
                    # behind means a writer died mid-write.
                    tmps.append(e.path)
                elif name in KEY_FILES or name.startswith("artifact_compile_range_"):
                    keys.append((e.path[cut:], s.st_size, s.st_mtime_ns, s.st_atime))
        if on_file is not None:
            on_file(files)
    return TreeStats(size, disk * 512, files, dirs, oldest if files else None,
                     newest if files else None, tuple(tmps), tuple(links), tuple(unreadable),
                     tuple(sorted(owners)), tuple(dir_mtimes), tuple(sorted(keys)))
