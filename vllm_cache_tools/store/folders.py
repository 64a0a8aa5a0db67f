"""The names of entry folders and the listing of folders, shared by the scan (which must not
import the artifact readers: an indexed listing reads no artifact) and the entry readers."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

from vllm_cache_tools.store.locate import display_path
from vllm_cache_tools.store.types import EntryTimes, Problem, TreeStats

# vLLM 0.9.0-0.9.1 suffixed a second compiled model in one process with "-<n>".
BACKEND_KEY = re.compile(r"^[0-9a-f]{10}(-\d+)?$")
AOT_KEY = re.compile(r"^[0-9a-f]{64}$")

Progress = Callable[[int], None]
WORKERS_ENV = "VLLM_CACHE_TOOLS_SCAN_WORKERS"


def list_dir(path: Path, problems: list[Problem]) -> list[os.DirEntry[str]]:
    """A folder's items sorted by name; an unreadable folder is a problem and reads as empty."""
    try:
        with os.scandir(path) as it:
            return sorted(it, key=lambda e: e.name)
    except OSError as exc:
        problems.append(Problem(display_path(path), "unreadable", exc.strerror or str(exc)))
        return []


def is_dir_entry(e: os.DirEntry[str]) -> bool:
    """A real folder (a symlink to one is not); ``False`` when it cannot be told."""
    try:
        return e.is_dir(follow_symlinks=False)
    except OSError:
        return False


def entry_times(stats: TreeStats) -> EntryTimes:
    """When an entry was created, modified and last used, from its file times.

    Linux gives no birth time through ``os.stat``; every artifact is written once, so the
    earliest file mtime is when the entry was created. Last use is the later of the newest
    read of a file vLLM loads (atime newer than its mtime: the mount records reads, as relatime
    and strictatime do) and the last write (a load can also write, e.g. Inductor kernels
    unpacked from the AOT artifact)."""
    created = stats.oldest_mtime
    modified = stats.newest_mtime
    read = stats.last_read
    if read is not None and (modified is None or read > modified):
        return EntryTimes(created, "oldest-mtime", modified, read, "atime")
    return EntryTimes(created, "oldest-mtime", modified, modified,
                      "mtime" if modified else None)


def scan_workers() -> int:
    """Processes to read with: ``$VLLM_CACHE_TOOLS_SCAN_WORKERS``, else the cores this process
    may run on (``sched_getaffinity``: a container's or taskset's limit, not the host's)."""
    env = os.environ.get(WORKERS_ENV, "").strip()
    if env.isdigit() and int(env) > 0:
        return min(int(env), 64)
    try:
        return max(1, min(len(os.sched_getaffinity(0)), 64))
    except (AttributeError, OSError):
        return max(1, min(os.cpu_count() or 1, 64))
