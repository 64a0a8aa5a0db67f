"""Open cache files for reading without leaving a trace and without trusting what they are.

``ls`` and ``prune`` use atime as evidence of when vLLM last loaded an entry; our own reads
must not count as use. ``O_NOATIME`` is allowed only for the file's owner (or with
CAP_FOWNER), and restoring an atime with ``utime`` needs the same rights, so a non-owner reads
a file only when the kernel would not update its atime anyway (a ``noatime`` mount, or
``relatime`` with an atime already newer than the file's last change and younger than a day);
otherwise the file is not read and :class:`UnreadableError` says why.

A shared root may hold anything under a cache file's name: FIFOs would block an open or a read
forever, devices read without end. Every open is ``O_NONBLOCK | O_NOFOLLOW``, the file must
be a regular file (checked with ``lstat`` before opening, so devices are never opened, and with
``fstat`` after, against a swap), and reads stop at a byte cap. :func:`walked_fd` leaves the
``lstat`` to the caller's walk, made moments before: what was swapped in since is opened and
refused after, as a swap between :func:`open_noatime`'s ``lstat`` and its open is."""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO

from vllm_cache_tools.read.errors import UnreadableError

_NOATIME = getattr(os, "O_NOATIME", 0)
_FLAGS = (os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
          | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
# relatime updates an atime older than a day; keep clear of the boundary.
_RELATIME_WINDOW_S = 86400 - 3600
MAX_READ_BYTES = 512 * 1024 * 1024
"""No artifact vLLM writes comes near this; a bigger file is read only up to a caller's cap."""


def _would_touch_atime(fd: int, st: os.stat_result) -> bool:
    """Whether a read through ``fd`` (opened without O_NOATIME) may update the file's atime."""
    try:
        flags = os.fstatvfs(fd).f_flag
    except OSError:
        return True
    if flags & getattr(os, "ST_NOATIME", 1024):
        return False
    if flags & getattr(os, "ST_RELATIME", 4096):
        return not (st.st_atime_ns > st.st_mtime_ns and st.st_atime_ns > st.st_ctime_ns
                    and time.time() - st.st_atime < _RELATIME_WINDOW_S)
    return True  # strictatime


def _not_regular(name: str, mode: int) -> UnreadableError:
    kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "a symlink" if stat.S_ISLNK(mode) else "a folder" if stat.S_ISDIR(mode)
            else "not a regular file")
    return UnreadableError(f"{name} is {kind}, not a regular file (not read)")


def open_noatime(path: str | os.PathLike[str], buffering: int = -1, *,
                 keep_atime: bool = True) -> BinaryIO:
    """A binary file object on a regular file, opened without following a symlink, without
    blocking and without updating its atime. Raises :class:`UnreadableError` (an OSError)
    when that cannot be done. ``keep_atime=False`` is for files whose atime is no evidence
    (source files a manifest names): read even when the atime would change."""
    name = os.path.basename(os.fspath(path)) or os.fspath(path)
    try:
        before = os.lstat(path)
    except OSError as exc:
        raise UnreadableError(f"cannot read {name}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(before.st_mode):
        raise _not_regular(name, before.st_mode)
    try:
        try:
            fd = os.open(path, _FLAGS | _NOATIME)
        except PermissionError as exc:
            if exc.errno != errno.EPERM or not _NOATIME:
                raise
            fd = os.open(path, _FLAGS)  # not the owner: only read if the atime stays
            st = os.fstat(fd)
            if keep_atime and _would_touch_atime(fd, st):
                os.close(fd)
                raise UnreadableError(
                    f"{name} not read: reading it as uid {os.geteuid()} would record a use "
                    f"(its owner is uid {st.st_uid}; O_NOATIME needs the owner)") from None
    except OSError as exc:
        if isinstance(exc, UnreadableError):
            raise
        if exc.errno == errno.ELOOP:
            raise UnreadableError(f"{name} is a symlink (not followed)") from None
        raise UnreadableError(f"cannot read {name}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (before.st_dev,
                                                                         before.st_ino):
            raise _not_regular(name, st.st_mode) if not stat.S_ISREG(st.st_mode) else \
                UnreadableError(f"{name} was replaced while being opened (not read)")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return os.fdopen(fd, "rb", buffering=buffering)
    except BaseException:
        os.close(fd)
        raise


@contextmanager
def walked_fd(path: str) -> Iterator[tuple[int, os.stat_result]]:
    """A descriptor on the file at ``path`` and its ``fstat``, for a file a walk found a regular
    file moments before (its ``lstat`` is the one :func:`open_noatime` makes first): opened
    with the same flags, in two system calls instead of six (no ``lstat``, no flag changes, no
    file object: a pack's 17,000 files, 0.29-0.35 s -> 0.10 s; issue 27 session 17). Anything
    else (not the owner, gone, no longer a regular file) is opened by :func:`open_noatime`,
    which says why it cannot be read."""
    try:
        fd = os.open(path, _FLAGS | _NOATIME)
    except OSError:
        fd = -1
    if fd >= 0:
        try:
            st = os.fstat(fd)
            if stat.S_ISREG(st.st_mode):  # O_NONBLOCK does nothing to a regular file
                yield fd, st
                return
        finally:
            os.close(fd)
    with open_noatime(path, buffering=0) as f:
        yield f.fileno(), os.fstat(f.fileno())


def read_capped(f: BinaryIO, cap: int) -> bytes:
    """At most ``cap`` bytes of the regular file ``f``, read in one call sized by the file
    (one byte over, to see it grew): ``f.read(cap)`` allocates ``cap`` bytes and then
    shrinks them, a copy (an AOT ``model`` of 1.6 MB read with a cap of 512 MB: 1.1 ms, sized
    0.4 ms)."""
    size = os.fstat(f.fileno()).st_size
    first = min(cap, size + 1) if size > 0 else cap
    data = f.read(first)
    if len(data) == first < cap:  # it grew since
        data += f.read(cap - first)
    return data


def read_noatime(path: str | os.PathLike[str], limit: int = -1) -> bytes:
    """The file's bytes (at most ``limit``, and never more than :data:`MAX_READ_BYTES`)."""
    cap = MAX_READ_BYTES if limit < 0 else min(limit, MAX_READ_BYTES)
    with open_noatime(path) as f:
        try:
            return read_capped(f, cap)
        except OSError as exc:
            raise UnreadableError(f"cannot read {os.path.basename(os.fspath(path))}: "
                                  f"{exc.strerror or exc}") from None


def read_source_text(path: str | os.PathLike[str], limit: int = 64 * 1024 * 1024) -> str | None:
    """A source file's text as vLLM would hash it, or ``None`` when it cannot be had the safe
    way (missing, not a regular file, larger than ``limit``, not UTF-8). Paths come from
    manifests and probes, so a FIFO or ``/dev/zero`` must neither hang nor fill memory."""
    try:
        with open_noatime(path, keep_atime=False) as f:
            raw = read_capped(f, limit + 1)
    except OSError:
        return None
    if len(raw) > limit:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
