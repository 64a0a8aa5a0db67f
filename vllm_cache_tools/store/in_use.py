"""Which files under a folder are open or mapped by running processes (Linux ``/proc``).

vLLM holds the AOT ``model`` and Inductor ``.so`` kernels open/mapped while an engine runs; an
entry with such files is ``in-use`` and must never be deleted. Processes we may not inspect
(other users, without privileges) are skipped silently: the answer is "known open", not "known
closed". :func:`held_open_at` closes that gap for files we own, through a write lease: it
sees every process, of any user or container."""

from __future__ import annotations

import errno
import fcntl
import os
import signal
import stat as st
from pathlib import Path

from vllm_cache_tools.safeio import open_dir


def open_paths_under(root: Path, proc: Path = Path("/proc")) -> dict[str, set[int]]:
    """Map each path under ``root`` that some process has open or mmapped to the pids."""
    prefix = os.path.realpath(root).rstrip("/") + "/"
    bprefix = os.fsencode(prefix)
    found: dict[str, set[int]] = {}
    try:
        proc_fd = os.open(proc, _DIR_OPEN)
    except OSError:
        return found
    try:
        pids = [p for p in os.listdir(proc_fd) if p.isdigit()]
        me = os.getpid()
        for pid_s in pids:
            pid = int(pid_s)
            if pid != me:
                _add_open(proc_fd, pid_s, pid, prefix, bprefix, found)
    finally:
        os.close(proc_fd)
    return found


# Opened relative to /proc's folder and each process's fd folder (readlinkat): a ls of a
# host with ~3,500 open files resolved one /proc path and built one Path per descriptor,
# two thirds of its time in pathlib (measured: docs/architecture.md, "CLI layer").
_DIR_OPEN = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


def _add_open(proc_fd: int, pid_s: str, pid: int, prefix: str, bprefix: bytes,
              found: dict[str, set[int]]) -> None:
    """Add what process ``pid`` holds open (its fds) or mapped (its maps) under ``prefix``."""
    try:
        fd_dir = os.open(f"{pid_s}/fd", _DIR_OPEN, dir_fd=proc_fd)
    except OSError:
        fd_dir = -1
    if fd_dir >= 0:
        try:
            for fd in os.listdir(fd_dir):
                try:
                    target = os.readlink(fd, dir_fd=fd_dir)
                except OSError:
                    continue
                if target.startswith(prefix):
                    found.setdefault(target, set()).add(pid)
        except OSError:
            pass
        finally:
            os.close(fd_dir)
    try:
        maps_fd = os.open(f"{pid_s}/maps", os.O_RDONLY | os.O_CLOEXEC, dir_fd=proc_fd)
    except OSError:
        return
    try:
        with open(maps_fd, "rb", closefd=False) as f:
            maps = f.read()
    except OSError:
        return
    finally:
        os.close(maps_fd)
    # Bytes, decoded as the file system's names are (a root whose path is not UTF-8:
    # str.encode() raised, and a lossy decode never matched the entry's path).
    if bprefix not in maps:
        return
    for line in maps.splitlines():
        idx = line.find(bprefix)
        if idx >= 0:
            path = os.fsdecode(line[idx:].removesuffix(b" (deleted)"))
            found.setdefault(path, set()).add(pid)


# A write lease (fcntl F_SETLEASE, F_WRLCK) is granted only when no other open file
# description of the file exists, in any process of any user, in any PID namespace; a
# mapping keeps its file open. So it answers what /proc cannot for an unprivileged user: is
# this file held by a process we may not inspect (another user's vLLM on a shared root, or one
# in a container)? Only a file's owner (or CAP_LEASE) may take one, and the lease is released
# at once. An open by someone else meanwhile waits for that release (microseconds); the kernel
# then signals us, with SIGURG rather than SIGIO, whose default action would end the process
# (SIGURG's is to ignore it).
_F_SETLEASE = getattr(fcntl, "F_SETLEASE", 1024)
_F_SETSIG = getattr(fcntl, "F_SETSIG", 10)
_LEASE_OPEN = (os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
               | getattr(os, "O_NOATIME", 0))


def _held_elsewhere(dir_fd: int | None, name: str | os.PathLike[str], uid: int) -> bool | None:
    """True: another open file description of the regular file ``name`` exists; False: none;
    None: cannot tell (not ours to lease, not a regular file, no lease support here).
    O_NOATIME: asking records no use, and it opens only our own files (root: any)."""
    try:
        fd = os.open(name, _LEASE_OPEN, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        f = os.fstat(fd)
        if not st.S_ISREG(f.st_mode) or (uid != 0 and f.st_uid != uid):
            return None
        fcntl.fcntl(fd, _F_SETSIG, signal.SIGURG)
        try:
            fcntl.fcntl(fd, _F_SETLEASE, fcntl.F_WRLCK)
        except OSError as exc:
            return True if exc.errno in (errno.EAGAIN, errno.EBUSY) else None
        return False  # closing the fd below releases the lease
    except OSError:
        return None
    finally:
        os.close(fd)


def _first_held(dir_fd: int, uid: int, prefix: str) -> str | None:
    with os.scandir(dir_fd) as it:
        items = list(it)
    for e in items:
        if e.is_file(follow_symlinks=False):
            if _held_elsewhere(dir_fd, e.name, uid):
                return prefix + e.name
        elif e.is_dir(follow_symlinks=False):
            try:
                sub = open_dir(e.name, dir_fd)
            except OSError:
                continue
            try:
                found = _first_held(sub, uid, f"{prefix}{e.name}/")
            finally:
                os.close(sub)
            if found is not None:
                return found
    return None


_PROC_PID_INIT_INO = 0xEFFFFFFC
"""The inode of the host's (initial) PID namespace (``/proc/self/ns/pid``; Linux's
``PROC_PID_INIT_INO``)."""


def proc_shows_every_process() -> bool:
    """Whether ``/proc`` shows this process every process that could hold a file open: as
    root (who may read every ``/proc/PID/fd`` and ``maps``) in the host's PID namespace (whose
    ``/proc`` lists the processes of every container too). Elsewhere (another user's
    processes, another container's) only a lease can tell (:func:`held_unseen`)."""
    if os.geteuid() != 0:
        return False
    try:
        return os.stat("/proc/self/ns/pid").st_ino == _PROC_PID_INIT_INO
    except OSError:
        return False


def held_unseen(name: str | os.PathLike[str], parent_fd: int | None = None,
                uid: int | None = None) -> str | None:
    """:func:`held_open_at` where a holder could be a process ``/proc`` does not show us
    (:func:`proc_shows_every_process`), else ``None`` without asking: there the ``/proc``
    check the caller makes already sees every holder, and a lease per file costs prune of a
    100k-file root about a third of its time (``benchmarks/bench_prune.py``)."""
    if proc_shows_every_process():
        return None
    return held_open_at(name, parent_fd, uid)


def held_open_in(dir_fd: int, uid: int | None = None) -> str | None:
    """:func:`held_open_at` on a folder already open (``dir_fd``, opened without following
    a link): the first file under it another process holds, as a path relative to it, or
    ``None``. For callers that hold the folder's fd for the rest of their checks (prune's
    one pass per entry), so that the lease walk looks at the very folder they move."""
    try:
        return _first_held(dir_fd, os.geteuid() if uid is None else uid, "")
    except OSError:
        return None


def held_open_at(name: str | os.PathLike[str], parent_fd: int | None = None,
                 uid: int | None = None) -> str | None:
    """The first file under the folder ``name`` (relative to ``parent_fd`` when given;
    symlinks never followed) that some other process holds open or mapped, as a path
    relative to that folder (a regular file ``name``: its own name); ``None`` when none is.
    Only files owned by ``uid`` (default: the effective uid; every file for root) can be
    asked, through a write lease (see above); others, and file systems without leases (NFS),
    stay "not seen open", as with /proc."""
    uid = os.geteuid() if uid is None else uid
    try:
        top = os.lstat(name, dir_fd=parent_fd)
        if st.S_ISREG(top.st_mode):
            return os.path.basename(name) if _held_elsewhere(parent_fd, name, uid) else None
        fd = open_dir(name, parent_fd)
    except OSError:
        return None
    try:
        return _first_held(fd, uid, "")
    except OSError:
        return None
    finally:
        os.close(fd)
