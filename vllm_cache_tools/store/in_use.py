"""Which files under a folder are open or mapped by running processes (Linux ``/proc``).

vLLM holds the AOT ``model`` and Inductor ``.so`` kernels open/mapped while an engine runs; an
entry with such files is ``in-use`` and must never be deleted. Processes we may not inspect
(other users, without privileges) are skipped silently: the answer is "known open", not "known
closed"."""

from __future__ import annotations

import os
from pathlib import Path


def open_paths_under(root: Path, proc: Path = Path("/proc")) -> dict[str, set[int]]:
    """Map each path under ``root`` that some process has open or mmapped to the pids."""
    prefix = os.path.realpath(root).rstrip("/") + "/"
    bprefix = os.fsencode(prefix)
    found: dict[str, set[int]] = {}
    try:
        pids = [p for p in os.listdir(proc) if p.isdigit()]
    except OSError:
        return found
    me = os.getpid()
    for pid_s in pids:
        pid = int(pid_s)
        if pid == me:
            continue
        fd_dir = proc / pid_s / "fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            fds = []
        for fd in fds:
            try:
                target = os.readlink(fd_dir / fd)
            except OSError:
                continue
            if target.startswith(prefix):
                found.setdefault(target, set()).add(pid)
        try:
            with open(proc / pid_s / "maps", "rb") as f:
                maps = f.read()
        except OSError:
            continue
        # Bytes, decoded as the file system's names are (a root whose path is not UTF-8:
        # str.encode() raised, and a lossy decode never matched the entry's path).
        if bprefix not in maps:
            continue
        for line in maps.splitlines():
            idx = line.find(bprefix)
            if idx >= 0:
                path = os.fsdecode(line[idx:].removesuffix(b" (deleted)"))
                found.setdefault(path, set()).add(pid)
    return found
