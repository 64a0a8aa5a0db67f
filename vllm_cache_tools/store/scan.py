"""Walk a vLLM cache root and describe every compile-cache entry in both trees: check the root
(:func:`check_root`), sort its folders into entries and foreign items (:func:`classify`), read
each entry (:mod:`vllm_cache_tools.store.entries`, or the listing index for unchanged ones),
mark entries in use and apply the recorder's usage ledger (:func:`scan`).

Layout (see docs/layout.md and shared FACTS):
  <root>/torch_compile_cache/<10-hex>/...                                backend tree
  <root>/torch_compile_cache/torch_aot_compile/<64-hex>/                 AOT tree
  <root>/torch_aot_compile/<64-hex>/                                     AOT tree, vLLM 0.11.1-0.16
  <root>/modelinfos/*.json, <root>/dummy_cache                           other vLLM files
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from vllm_cache_tools import __version__
from vllm_cache_tools.errors import VctError
from vllm_cache_tools.layout import AOT_DIRNAME, COMPILE_CACHE_DIRNAME, STATE_DIRNAME, TRASH_DIRNAME
from vllm_cache_tools.store.folders import (
    AOT_KEY,
    BACKEND_KEY,
    Progress,
    entry_times,
    is_dir_entry,
    list_dir,
    scan_workers,
)
from vllm_cache_tools.store.in_use import open_paths_under
from vllm_cache_tools.store.listing_index import ListingIndex
from vllm_cache_tools.store.locate import (
    SYMLINKED_COMPILE_CACHE,
    CacheRoot,
    display_path,
    resolve_root,
)
from vllm_cache_tools.store.tree_stats import tree_stats
from vllm_cache_tools.store.types import (
    CacheInfo,
    Entry,
    OtherItem,
    Problem,
)

KNOWN_ROOT_ITEMS = {"modelinfos": "modelinfos", "dummy_cache": "dummy_cache"}


class RootError(VctError, ValueError):
    """The root cannot be scanned at all (missing, a file, unreadable)."""


def _mark_in_use(entries: list[Entry], open_paths: dict[str, set[int]]) -> list[Entry]:
    if not open_paths:
        return entries
    # Entry folders are real folders (classify follows no link) in one or two parents: one
    # realpath per parent, not one per entry (a realpath is an lstat per path component).
    real_parent: dict[str, str] = {}
    out = []
    for e in entries:
        parent, name = os.path.split(os.fspath(e.path))
        if parent not in real_parent:
            real_parent[parent] = os.path.realpath(parent)
        prefix = os.path.join(real_parent[parent], name).rstrip("/") + "/"
        pids = sorted({pid for p, ps in open_paths.items() if p.startswith(prefix) for pid in ps})
        if pids:
            e = replace(e, state="in-use",
                        state_detail=f"open by pid {', '.join(map(str, pids[:5]))}")
        out.append(e)
    return out


def check_root(root: CacheRoot) -> None:
    p = root.vllm_root
    if not os.path.lexists(p):
        raise RootError(f"cache root {display_path(p)} does not exist (from {root.source})")
    if not p.is_dir():
        raise RootError(f"cache root {display_path(p)} is not a directory")
    if not os.access(p, os.R_OK | os.X_OK):
        raise RootError(f"cache root {display_path(p)} is not readable")


def _classify_aot(tree: Path, problems: list[Problem]) -> list[tuple[str, Path]]:
    found: list[tuple[str, Path]] = []
    for a in list_dir(tree, problems):
        if AOT_KEY.match(a.name) and is_dir_entry(a):
            found.append(("aot", Path(a.path)))
        else:
            problems.append(Problem(display_path(a.path), "foreign",
                                    "not an AOT entry (64-hex folder)"))
    return found


def classify(cc: Path, problems: list[Problem]) -> list[tuple[str, Path]]:
    """(layout, path) for every entry folder under ``torch_compile_cache`` and, for vLLM
    0.11.1-0.16 (AOT tree beside it), ``<root>/torch_aot_compile``; foreign items go to
    ``problems``."""
    found: list[tuple[str, Path]] = []
    old_aot = cc.parent / AOT_DIRNAME
    if old_aot.is_dir() and not old_aot.is_symlink():
        found += _classify_aot(old_aot, problems)
    if not (cc.is_dir() and not cc.is_symlink()):
        return found
    for e in list_dir(cc, problems):
        if e.name == AOT_DIRNAME and is_dir_entry(e):
            found += _classify_aot(Path(e.path), problems)
        elif BACKEND_KEY.match(e.name) and is_dir_entry(e):
            found.append(("backend", Path(e.path)))
        elif e.name in (TRASH_DIRNAME, STATE_DIRNAME) and is_dir_entry(e):
            continue  # prune's trash, the recorder's ledger and snapshots: ours, not entries
        elif e.is_symlink():
            problems.append(Problem(display_path(e.path), "symlink", "symlink in the cache root "
                                    "(not followed)"))
        else:
            problems.append(Problem(display_path(e.path), "foreign", "not a vLLM compile-cache "
                                    "entry"))
    return found


def scan(root: str | os.PathLike[str] | CacheRoot | None = None, *, deep: bool = False,
         check_in_use: bool = True, progress: Progress | None = None,
         use_index: bool = True, refresh_index: bool = False) -> CacheInfo:
    """Scan a cache root (default: resolved like vLLM) and return every entry of both trees.

    ``deep=False`` (``ls``) returns summaries: sizes, times, ranks, state, versions, model and
    hardware, without per-rank details, reusing the listing index for unchanged entries
    (``use_index``). ``deep=True`` reads every artifact whole (hashes, raw env factors, source
    contents, compiled ranges). ``refresh_index`` (``ls --rescan``) walks every entry afresh
    (reading its files again only where the walk finds a folder or key file changed since
    the index's record) and stores what it read in the index for the next listing.
    Per-entry problems are collected, never raised; only a root that cannot be scanned at all
    raises :class:`RootError`."""
    croot = root if isinstance(root, CacheRoot) else resolve_root(root)
    check_root(croot)
    problems: list[Problem] = []
    others: list[OtherItem] = []
    for e in list_dir(croot.vllm_root, problems):
        if e.name in (COMPILE_CACHE_DIRNAME, AOT_DIRNAME):
            continue
        kind = KNOWN_ROOT_ITEMS.get(e.name, "other")
        size = tree_stats(e.path).size_bytes if is_dir_entry(e) else _lsize(e)
        others.append(OtherItem(Path(e.path), kind, size))
    cc = croot.compile_cache
    entries: list[Entry] = []
    if (cc.is_dir() and not cc.is_symlink()) or (croot.vllm_root / AOT_DIRNAME).is_dir():
        counted = 0
        # A rescan loads the index too: it walks every entry, and reads the files only of
        # those the walk finds changed since their record (parallel_read._summary).
        index = (ListingIndex(cc, __version__)
                 if (use_index or refresh_index) and not deep else None)
        items = classify(cc, problems)
        found: list[Entry | None] = (
            index.lookup_all([p for _, p in items], entry_times, scan_workers())
            if index is not None and use_index else [None] * len(items))
        if progress is not None:
            for hit in found:
                if hit is not None:
                    counted += hit.stats.files
                    progress(counted)
        todo = [i for i, e in enumerate(found) if e is None]
        previous = ([index.records.get(os.fsdecode(items[i][1])) for i in todo]
                    if index is not None else None)
        # The rest is read afresh, spread over processes (store/parallel_read.py; imported
        # only then: it imports every artifact reader, which an indexed listing does not need).
        read: Iterable[tuple[Entry, object]] = ()
        if todo:
            from vllm_cache_tools.store.parallel_read import read_entries_for_index

            read = read_entries_for_index([items[i] for i in todo], deep=deep,
                                          records=index is not None, previous=previous)
        for i, (entry, record) in zip(todo, read, strict=True):
            if index is not None:
                index.put(entry, record, encoded=True)  # type: ignore[arg-type]
            found[i] = entry  # with the path this process holds (parallel_read._with_paths)
            if progress is not None:
                counted += entry.stats.files
                progress(counted)
        # The earlier records (and with them the whole index file read) are no longer needed:
        # free them before the index is encoded anew (~20 MB each on a root of 1M files).
        previous = read = None  # type: ignore[assignment]
        entries = [e for e in found if e is not None]
        if index is not None:
            index.save()
    elif cc.is_symlink():
        problems.append(Problem(display_path(cc), "symlink", SYMLINKED_COMPILE_CACHE))
    if check_in_use and entries:
        entries = _mark_in_use(entries, open_paths_under(croot.vllm_root))
    if entries and (cc / STATE_DIRNAME).is_dir():
        # Imported only here (its ledger and manifest readers are ~15 ms of imports): a root
        # without the recorder's state folder has no usage to apply.
        from vllm_cache_tools.store.usage import apply_usage, usage

        entries = apply_usage(entries, usage(cc))
    return CacheInfo(croot.vllm_root, croot.source, tuple(entries), tuple(others),
                     tuple(problems))


def _lsize(e: os.DirEntry[str]) -> int:
    try:
        return e.stat(follow_symlinks=False).st_size
    except OSError:
        return 0
