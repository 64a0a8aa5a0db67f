"""Put entries into a cache root the way the rest of the package writes there: everything is
first written into a staging folder inside the root (``torch_compile_cache/.vllm-cache-tools/
staging/<random>``, which vLLM and ``ls`` never read), checked, then each entry folder is put
in place by one ``rename(2)`` under its entry lock (the lock prune and ``verify --fix`` take,
:class:`vllm_cache_tools.maintain.trash.EntryLocks`). So vLLM sees an entry whole or not at all; an
interrupted unpack or pull (a full disk, a kill) leaves at most its staging folder, which the
next one removes.

An entry already in place is never overwritten: identical content is a no-op, other content
is refused. Every operation is relative to folder fds opened without following links
(:mod:`vllm_cache_tools.safeio`). Durability: no file is fsynced on its own; the whole
file system is flushed once before the first rename (:func:`flush_filesystem`)."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import hashlib
import os
import secrets
import stat
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, TypeVar

from vllm_cache_tools import safeio
from vllm_cache_tools.fleet.errors import FleetError
from vllm_cache_tools.fleet.key_proof import (
    gate,
    placed_note,
    proof_of,
    snapshot_named_by_content,
    status_of,
)
from vllm_cache_tools.fleet.records import EntryRecord, FileRecord
from vllm_cache_tools.keys.entry_proof import KeyProof
from vllm_cache_tools.layout import COMPILE_CACHE_DIRNAME, STATE_DIRNAME
from vllm_cache_tools.libc import errno_now, libc_fn
from vllm_cache_tools.maintain.trash import EntryLocks, RootHandle
from vllm_cache_tools.store.locate import display_path
from vllm_cache_tools.store.types import Entry

STAGING_DIRNAME = "staging"
"""Under the recorder's state folder: staged unpacks and pulls (not entries)."""
STALE_STAGING_S = 6 * 3600
"""Staging folders older than this were left by a killed run: removed by the next one."""
UNLOCKED_STAGING_S = 60
"""A staging folder whose ``flock`` nobody holds (its run was killed) is removed by the next
run once it is this old (the new folder is locked right after ``mkdir``); where ``flock``
does not work on folders (NFS), :data:`STALE_STAGING_S` decides."""
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
LOCK_WAIT_S = 30.0


@dataclass(frozen=True)
class Placement:
    """What happened to one entry: ``placed``, ``identical`` (already there, same files:
    nothing done), ``refused`` (another entry of that key is there, or it is busy) or
    ``checked`` (``--check``: nothing placed)."""

    key: str
    layout: str
    path: str
    action: str
    detail: str = ""
    proof: str = ""
    """Whether the key was re-derived from the entry's own files: ``proven``, ``linked``,
    ``mismatch``, ``unproven`` (:mod:`vllm_cache_tools.keys.entry_proof`)."""


class Staging:
    """A fresh folder inside the root's state folder to write files into, fd-relative."""

    def __init__(self, vllm_root: Path) -> None:
        self.vllm_root = vllm_root
        os.makedirs(vllm_root, exist_ok=True)  # the place the user named (may be new)
        base = safeio.open_dirs(vllm_root, [COMPILE_CACHE_DIRNAME, STATE_DIRNAME,
                                            STAGING_DIRNAME], create=True)
        try:
            safeio.check_writable_folder(base, "the staging folder")
            _sweep_stale(base)
            self.name = f"{os.getpid()}.{secrets.token_hex(8)}"
            os.mkdir(self.name, 0o700, dir_fd=base)
            self.fd = safeio.open_dir(self.name, base)
            with contextlib.suppress(OSError):  # held until the fd closes, or the run dies
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BaseException:
            os.close(base)
            raise
        self.base_fd = base
        self.written = 0
        self.write_behind = False
        """Start each file's writeback as it is closed (:func:`start_writeback`): the frame
        reader's workers do (:data:`.frame_read.WRITE_BEHIND`)."""
        self.read: dict[str, Entry | None] = {}
        """Deep reads of staged entries made while they were written (by their path here):
        the key proof does not read them again (:func:`.key_proof.prove_records`)."""
        self._dirs: dict[str, int] = {}
        self._lock = threading.Lock()
        self._flushing: threading.Thread | None = None

    def start_flush(self) -> None:
        """Start the flush of what is written (:func:`flush_filesystem`) in a thread now, the
        caller going on (the key proof); :meth:`flush` waits for it and flushes again (little
        is left to write then)."""
        fd = os.dup(self.fd)  # its own: the staging folder may be removed meanwhile

        def flush() -> None:
            try:
                flush_filesystem(fd)
            finally:
                os.close(fd)

        self._flushing = threading.Thread(target=flush, name="vllm-cache-flush", daemon=True)
        self._flushing.start()

    def flush(self) -> None:
        """Every staged file's data on disk (:func:`flush_filesystem`)."""
        if self._flushing is not None:
            self._flushing.join()
            self._flushing = None
        flush_filesystem(self.fd)

    def _dir(self, rel: str) -> int:
        """An fd on ``rel`` under the staging folder (made when missing), kept open: a
        bundle's files share a few folders."""
        with self._lock:
            return self._dir_locked(rel)

    def _dir_locked(self, rel: str) -> int:
        fd = self._dirs.get(rel)
        if fd is None:
            parent, _, name = rel.rpartition("/")
            base = self._dir_locked(parent) if parent else self.fd
            fd = self._dirs[rel] = safeio.open_dirs(base, [name], create=True, mode=0o755)
        return fd

    @property
    def path(self) -> Path:
        return (self.vllm_root / COMPILE_CACHE_DIRNAME / STATE_DIRNAME / STAGING_DIRNAME
                / self.name)

    def write(self, rel: str, src: IO[bytes], rec: FileRecord, chunk: int = 1 << 20,
              on_bytes: Callable[[int], None] | None = None) -> None:
        """Copy ``rec.size`` bytes of ``src`` to ``rel`` (a checked relative path), checking
        size and sha256; raises :class:`FleetError` on a mismatch."""
        parent, _, name = rel.rpartition("/")
        dfd = self._dir(parent)
        fd = os.open(name, _NEW, 0o755 if rec.executable else 0o644, dir_fd=dfd)
        h = hashlib.sha256()
        left = rec.size
        try:
            while left > 0:
                b = src.read(min(chunk, left))
                if not b:
                    break
                h.update(b)
                view = memoryview(b)
                while view:
                    view = view[os.write(fd, view):]
                left -= len(b)
                self.written += len(b)
                if on_bytes is not None:
                    on_bytes(len(b))
            if not left and src.read(1):
                raise FleetError(f"{rel}: more bytes than the {rec.size} listed")
            if self.write_behind:
                start_writeback(fd)
        finally:
            os.close(fd)
        if left:
            raise FleetError(f"{rel}: {rec.size - left} bytes of {rec.size} (truncated)")
        if h.hexdigest() != rec.sha256:
            raise FleetError(f"{rel}: sha256 differs from the manifest (tampered or "
                             "corrupt)")

    def write_bytes(self, rel: str, data: bytes, rec: FileRecord,
                    on_bytes: Callable[[int], None] | None = None) -> None:
        """:meth:`write` of a member read whole: its size and sha256 checked before the file
        is created, then one write."""
        if len(data) != rec.size:
            raise FleetError(f"{rel}: {len(data)} bytes of {rec.size} (truncated)")
        if hashlib.sha256(data).hexdigest() != rec.sha256:
            raise FleetError(f"{rel}: sha256 differs from the manifest (tampered or "
                             "corrupt)")
        parent, _, name = rel.rpartition("/")
        dfd = self._dir(parent)
        fd = os.open(name, _NEW, 0o755 if rec.executable else 0o644, dir_fd=dfd)
        try:
            safeio.write_all(fd, data)
            if self.write_behind:
                start_writeback(fd)
        finally:
            os.close(fd)
        self.written += len(data)
        if on_bytes is not None:
            on_bytes(len(data))

    def copy_checked(self, rel: str, of: str, of_rec: FileRecord, rec: FileRecord, *,
                     link: bool = False) -> None:
        """``rel`` as a copy of ``of``, a file :meth:`write` made here and checked against
        ``of_rec`` (a blob listed under several names is fetched and hashed once, then copied
        in the kernel, not read back through Python and hashed again). ``rec`` must name the
        same bytes (size and sha256): a :class:`FleetError` otherwise. ``link``: a hard link
        to ``of`` instead (the caller knows the file is never written in place, as
        ``vllm-cache dedup`` links; the mode must agree)."""
        if (rec.sha256, rec.size) != (of_rec.sha256, of_rec.size):
            raise FleetError(f"{rel}: sha256 differs from the manifest (tampered or corrupt)"
                             if rec.sha256 != of_rec.sha256 else
                             f"{rel}: listed with {rec.size} bytes, its blob has "
                             f"{of_rec.size} (tampered or corrupt)")
        sparent, _, sname = of.rpartition("/")
        parent, _, name = rel.rpartition("/")
        if link and rec.executable == of_rec.executable:
            try:
                os.link(sname, name, src_dir_fd=self._dir(sparent),
                        dst_dir_fd=self._dir(parent), follow_symlinks=False)
                return
            except FileExistsError:
                raise
            except OSError:
                pass  # no hard links here (some NFS, SMB, FUSE mounts; EMLINK): a copy
        src = os.open(sname, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC,
                      dir_fd=self._dir(sparent))
        try:
            fd = os.open(name, _NEW, 0o755 if rec.executable else 0o644,
                         dir_fd=self._dir(parent))
            try:
                safeio.copy_fd(src, fd, rec.size)
                size = os.fstat(fd).st_size
                if self.write_behind:
                    start_writeback(fd)
            finally:
                os.close(fd)
        finally:
            os.close(src)
        if size != rec.size:
            raise FleetError(f"{rel}: {size} bytes of {rec.size} copied (the staged copy "
                             "changed)")
        self.written += size

    def close_dirs(self) -> None:
        """Close the kept folder fds (before entries are moved out of the staging folder)."""
        with self._lock:
            for fd in self._dirs.values():
                os.close(fd)
            self._dirs.clear()

    def remove(self) -> None:
        if self.fd < 0:
            return
        self.close_dirs()
        os.close(self.fd)
        self.fd = -1
        safeio.remove_tree_at(self.base_fd, self.name)
        os.close(self.base_fd)

    def __enter__(self) -> Staging:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()  # an early flush still running goes on alone (nothing waits for it)


def _sweep_stale(base_fd: int) -> None:
    now = time.time()
    with os.scandir(base_fd) as it:
        names = [(e.name, e.stat(follow_symlinks=False)) for e in it]
    for name, s in names:
        if not stat.S_ISDIR(s.st_mode) or s.st_uid != os.geteuid():
            continue
        age = now - s.st_mtime
        if age > STALE_STAGING_S or (age > UNLOCKED_STAGING_S and _abandoned(base_fd, name)):
            safeio.remove_tree_at(base_fd, name, expect=safeio.ident(s))


def _abandoned(base_fd: int, name: str) -> bool:
    """Whether nobody holds the staging folder's lock (its run ended without removing it);
    False when that cannot be told."""
    try:
        fd = safeio.open_dir(name, base_fd)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


T = TypeVar("T")


# ---- comparing and placing ----------------------------------------------------------------------

def _tree_files(fd: int, of_file: Callable[[str, int, os.stat_result], T]
                ) -> dict[str, T] | None:
    """``of_file(name, dir_fd, lstat)`` of every file under an open folder, by relative path;
    ``None`` when something in it is not a regular file or folder (then it is not the same
    entry)."""
    out: dict[str, T] = {}
    stack: list[tuple[str, int]] = [("", os.dup(fd))]
    try:
        while stack:
            rel, dfd = stack.pop()
            try:
                with os.scandir(dfd) as it:
                    items = [(e.name, e.stat(follow_symlinks=False)) for e in it]
                for name, s in items:
                    r = f"{rel}/{name}" if rel else name
                    if stat.S_ISDIR(s.st_mode):
                        stack.append((r, safeio.open_dir(name, dfd)))
                    elif stat.S_ISREG(s.st_mode):
                        out[r] = of_file(name, dfd, s)
                    else:
                        return None
            finally:
                os.close(dfd)
    finally:
        for _, d in stack:
            os.close(d)
    return out


def _tree_digests(fd: int) -> dict[str, str] | None:
    """sha256 of every file under an open folder (see :func:`_tree_files`)."""
    return _tree_files(fd, lambda name, dfd, _s: _fd_digest(name, dfd))


def _tree_sizes(fd: int) -> dict[str, int] | None:
    """Size of every file under an open folder (``lstat``, nothing read)."""
    return _tree_files(fd, lambda _name, _dfd, s: s.st_size)


def _fd_digest(name: str, dir_fd: int) -> str:
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(name, flags | getattr(os, "O_NOATIME", 0), dir_fd=dir_fd)
    except PermissionError:
        fd = os.open(name, flags, dir_fd=dir_fd)
    h = hashlib.sha256()
    try:
        while b := os.read(fd, 1 << 20):
            h.update(b)
    finally:
        os.close(fd)
    return h.hexdigest()


def same_files(fd: int, rec: EntryRecord) -> bool:
    return _tree_digests(fd) == {f.path: f.sha256 for f in rec.files}


def identical_in_place(vllm_root: Path, records: Sequence[EntryRecord]) -> frozenset[str]:
    """Keys of the records whose entry is already in the root with the same files (the same
    paths and sizes, then the same sha256 of every file; read without following links and
    without moving atimes): a pull need not download those. Anything that cannot be opened
    or read is not the same entry (it is fetched, and placing then decides)."""
    try:
        root_fd = os.open(vllm_root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return frozenset()
    same: set[str] = set()
    try:
        for rec in records:
            try:
                efd = safeio.open_dirs(root_fd, rec.path)
            except OSError:
                continue
            try:
                if (_tree_sizes(efd) == {f.path: f.size for f in rec.files}
                        and same_files(efd, rec)):
                    same.add(rec.key)
            except OSError:
                pass
            finally:
                os.close(efd)
    finally:
        os.close(root_fd)
    return frozenset(same)


_RENAME_NOREPLACE = 1
_SYNC_FILE_RANGE_WRITE = 2
def start_writeback(fd: int) -> None:
    """Ask the kernel to start writing ``fd``'s dirty pages to disk now, without waiting
    (``sync_file_range(SYNC_FILE_RANGE_WRITE)``). Only a head start for
    :func:`flush_filesystem`, which alone makes the data durable: where the call is missing
    or fails (another OS, a file system without it), nothing happens."""
    fn = libc_fn("sync_file_range", (ctypes.c_int, ctypes.c_int64, ctypes.c_int64,
                                      ctypes.c_uint))
    if fn is not None:
        fn(fd, 0, 0, _SYNC_FILE_RANGE_WRITE)


def rename_noreplace(src_fd: int, src: str, dst_fd: int, dst: str) -> None:
    """``renameat2(RENAME_NOREPLACE)``: fails with EEXIST when ``dst`` exists (even an empty
    folder that a starting vLLM just made, which plain ``rename`` would replace). Falls back
    to check-then-rename where the kernel or filesystem lacks it."""
    fn = libc_fn("renameat2")
    if fn is not None:
        r = fn(src_fd, os.fsencode(src), dst_fd, os.fsencode(dst), _RENAME_NOREPLACE)
        if r == 0:
            return
        err = errno_now()
        if err not in (errno.ENOSYS, errno.EINVAL):
            raise OSError(err, os.strerror(err), dst)
    try:
        os.stat(dst, dir_fd=dst_fd, follow_symlinks=False)
        raise FileExistsError(errno.EEXIST, "exists", dst)
    except FileNotFoundError:
        pass
    os.rename(src, dst, src_dir_fd=src_fd, dst_dir_fd=dst_fd)


def flush_filesystem(fd: int) -> None:
    """Write the data of the staged files to disk before any entry is renamed into place:
    one ``syncfs(2)`` of the root's file system instead of an ``fsync`` per file (measured
    here on ext4: 0.05 s for 450 new files / 26 MB against 0.5-1.2 s for 450 fsyncs). So a
    crash or power loss never leaves a visible entry with empty or torn files; at worst
    the renames themselves are lost, and the entry is not there (a miss, never a false
    hit). Where ``syncfs`` is missing, ``sync()``."""
    fn = libc_fn("syncfs")
    if fn is None or fn(fd) != 0:
        os.sync()


def _lock(locks: EntryLocks, name: str, wait_s: float) -> bool:
    end = time.monotonic() + wait_s
    while not locks.try_lock(name):
        if time.monotonic() > end:
            return False
        time.sleep(0.1)
    return True


def place_entries(staging: Staging, records: Sequence[EntryRecord],
                  extras: Iterable[FileRecord] = (), *,
                  proofs: Mapping[tuple[str, str], KeyProof], force: bool = False,
                  lock_wait_s: float = LOCK_WAIT_S) -> tuple[Placement, ...]:
    """Move each staged entry (``staging/<record.path>``) into its place in the root; put the
    staged extras (content-addressed snapshots) in place when missing. An entry is refused
    where :func:`.key_proof.gate` says so (its key not proven from its staged files, or not
    vLLM's current spelling of it, or a second spelling of a key present)."""
    out: list[Placement] = []
    root = staging.vllm_root
    staging.close_dirs()
    extras = [x for x in extras if snapshot_named_by_content(x)]
    staging.flush()
    with RootHandle(root) as h:
        trash = h.trash(create=True)
        if trash is None or trash.locks_fd is None:
            raise FleetError(f"{display_path(root / COMPILE_CACHE_DIRNAME)} is missing or a "
                             "symlink: nothing placed")
        locks = EntryLocks(trash.locks_fd)
        try:
            for rec in records:
                proof = proof_of(proofs, rec)
                why = gate(rec, proof, force=force, root_fd=h.root_fd)
                if why is not None:
                    out.append(Placement(rec.key, rec.layout,
                                         display_path(staging.vllm_root / rec.path),
                                         "refused", why, status_of(proof)))
                    continue
                p = _place_one(h, staging, rec, locks, lock_wait_s)
                out.append(replace(p, proof=status_of(proof),
                                   detail=p.detail or placed_note(proof)))
            for x in extras:
                _place_extra(staging, x)
        finally:
            locks.close()
            trash.close()
    return tuple(out)


def _place_one(h: RootHandle, staging: Staging, rec: EntryRecord, locks: EntryLocks,
               wait_s: float) -> Placement:
    parent_rel, _, key = rec.path.rpartition("/")
    dst_parent = safeio.open_dirs(h.root_fd, parent_rel, create=True, mode=0o755)
    src_parent = safeio.open_dirs(staging.fd, parent_rel)
    shown = display_path(staging.vllm_root / rec.path)
    try:
        if not _lock(locks, rec.lock_name, wait_s):
            return Placement(rec.key, rec.layout, shown, "refused",
                             "another vllm-cache process holds its lock")
        try:
            try:
                rename_noreplace(src_parent, key, dst_parent, key)
                return Placement(rec.key, rec.layout, shown, "placed")
            except FileExistsError:
                pass
            except OSError as exc:
                if exc.errno != errno.ENOTEMPTY:
                    raise
            try:
                efd = safeio.open_dir(key, dst_parent)
            except safeio.UnsafeTree:
                return Placement(rec.key, rec.layout, shown, "refused",
                                 "a symlink or file is at its place (not followed)")
            try:
                same = same_files(efd, rec)
            finally:
                os.close(efd)
            if same:
                return Placement(rec.key, rec.layout, shown, "identical",
                                 "already there with the same files")
            return Placement(rec.key, rec.layout, shown, "refused",
                             "an entry of this key with other files is already there "
                             "(never overwritten; remove it with vllm-cache rm first)")
        finally:
            locks.unlock(rec.lock_name)
    finally:
        os.close(dst_parent)
        os.close(src_parent)


def _place_extra(staging: Staging, x: FileRecord) -> None:
    parent, _, name = x.path.rpartition("/")
    try:
        src = safeio.open_dirs(staging.fd, parent)
    except FileNotFoundError:
        return
    dst = safeio.open_dirs(staging.vllm_root, parent, create=True, mode=0o755)
    try:
        with contextlib.suppress(FileExistsError):
            os.link(name, name, src_dir_fd=src, dst_dir_fd=dst, follow_symlinks=False)
    finally:
        os.close(src)
        os.close(dst)


__all__ = ["STAGING_DIRNAME", "Placement", "Staging", "identical_in_place", "place_entries",
           "rename_noreplace", "same_files"]
