"""Safe removal of whole cache entries: by atomic rename into a trash folder inside the root,
then fd-relative deletion that never follows a symlink and never leaves the root.

Why not ``rm -rf``: vLLM engines load and write entries while we prune. An entry is either
whole in its place or gone from it, never half-deleted where vLLM would find it: the only
operation on the entry's place is one ``rename(2)`` of its folder into
``<root>/torch_compile_cache/.vllm-cache-trash/``. Everything after happens in the trash, where
vLLM never looks; a prune killed mid-way leaves its items there and the next run finishes them
(:meth:`Trash.empty`).

Every path operation is relative to a folder fd opened with ``O_NOFOLLOW``: a symlink planted
anywhere (even swapped in after planning) is unlinked as a link, never entered, so nothing
outside the root is touched. Folders are told apart by the directory entry's type, not by
``stat`` of the target. The primitives (:func:`remove_tree_at`, :func:`open_dir`) live in
:mod:`vllm_cache_tools.safeio`, shared with every other writer and deleter.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import stat as st
import time
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from vllm_cache_tools.layout import LOCKS_DIRNAME, TRASH_DIRNAME
from vllm_cache_tools.maintain.evidence import owner_name
from vllm_cache_tools.safeio import (
    RemoveResult,
    UnsafeTree,
    is_group_shared,
    open_dir,
    remove_tree_at,
)
from vllm_cache_tools.store.tree_stats import Listing


@dataclass(frozen=True)
class TreeCheck:
    """A fresh, fd-relative look at an entry's folders just before it is moved."""

    changed: bool
    """A folder was added, removed or replaced, or its mtime differs from ``dir_mtimes``."""
    newest_ns: int
    problem: str | None
    """Why the entry must not be moved (a folder we may not empty), else ``None``."""


def check_tree_at(parent_fd: int, name: str, dir_mtimes: tuple[tuple[str, int], ...],
                  uid: int | None = None) -> TreeCheck:
    """:func:`check_tree_fd` on the folder ``name`` under ``parent_fd`` (opened here without
    following a link)."""
    try:
        fd = open_dir(name, parent_fd)
    except OSError as exc:
        return TreeCheck(True, 0, f"{name}: {exc.strerror or exc}")
    try:
        return check_tree_fd(fd, parent_fd, name, dir_mtimes, uid)
    finally:
        os.close(fd)


def check_tree_fd(fd: int, parent_fd: int, name: str,
                  dir_mtimes: tuple[tuple[str, int], ...], uid: int | None = None) -> TreeCheck:
    """Re-stat, relative to the entry's open folder ``fd`` (``name`` under ``parent_fd``),
    every folder recorded when the entry was planned (``dir_mtimes``: relative path ->
    mtime_ns; ``.`` is the entry). Creating, renaming or removing a file changes its folder's
    mtime, which is how vLLM and Inductor write, so equal mtimes mean no file came or went; a
    new subfolder changes its parent's. Each folder must also be ours to empty (read, write
    and search), so that an entry we could only partly remove is never moved at all."""
    uid = os.geteuid() if uid is None else uid
    newest = 0
    ok = os.W_OK | os.X_OK | os.R_OK
    lstat = os.lstat
    try:
        for rel, mtime in dir_mtimes:
            try:
                s = lstat(rel, dir_fd=fd) if rel != "." else os.fstat(fd)
            except FileNotFoundError:
                return TreeCheck(True, newest, None)
            if not st.S_ISDIR(s.st_mode) or s.st_mtime_ns != mtime:
                return TreeCheck(True, max(newest, s.st_mtime_ns), None)
            newest = max(newest, s.st_mtime_ns)
            # Owner with rwx: no access(2) call needed (true with or without privileges).
            if s.st_uid == uid and s.st_mode & 0o700 == 0o700:
                continue
            where = name if rel == "." else f"{name}/{rel}"
            if rel == ".":
                allowed = os.access(name, ok, dir_fd=parent_fd, effective_ids=True,
                                    follow_symlinks=False)
            else:
                allowed = os.access(rel, ok, dir_fd=fd, effective_ids=True,
                                    follow_symlinks=False)
            if not allowed:
                return TreeCheck(False, newest, f"permission denied: cannot empty {where}")
    except OSError as exc:
        return TreeCheck(True, newest, f"{exc.strerror or exc}")
    return TreeCheck(False, newest, None)


class EntryLocks:
    """Per-entry exclusive locks, held by a vllm-cache process while it re-checks and moves
    one entry, so that two prunes (or a prune and a ``verify --fix``) never act on one entry
    at once. vLLM itself takes no such lock: entries in use are found through /proc and the
    grace period instead.

    Each entry's lock is a one-byte POSIX record lock (``lockf``) at an offset derived from
    its name (60 bits of sha256) in one shared file, ``<trash>/locks/entries.lock``: no lock
    file is created or removed per entry (that costs as much as the deletion on a busy
    journal), and the kernel drops the locks of a process that dies.

    Who may take a lock is who may open the file for writing, and whoever can hold one can
    stall every prune: the file is ``0600``, or ``0660`` when the locks folder is group-shared
    (setgid and group-writable: the group's members prune the same root). Never writable by
    everyone; an older file that was (``0666``) is narrowed when it is ours. A planted link, a
    FIFO or any non-regular file there is refused (:class:`UnsafeTree`)."""

    FILENAME = "entries.lock"

    def __init__(self, locks_fd: int) -> None:
        self.fd = -1
        folder = os.fstat(locks_fd)
        mode = 0o660 if is_group_shared(folder) else 0o600
        flags = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        for _ in range(5):
            try:
                self.fd = os.open(self.FILENAME, flags, dir_fd=locks_fd)
                break
            except FileNotFoundError:
                try:
                    self.fd = os.open(self.FILENAME, flags | os.O_CREAT | os.O_EXCL, mode,
                                      dir_fd=locks_fd)
                except FileExistsError:
                    continue
                os.fchmod(self.fd, mode)  # the umask aside
                break
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
                    raise UnsafeTree(exc.errno, "the entry lock file is a symlink or not a "
                                     "file: refused") from None
                if exc.errno == errno.EACCES:
                    raise OSError(exc.errno, _not_ours(locks_fd, self.FILENAME)) from None
                raise
        if self.fd < 0:
            raise OSError(errno.EAGAIN, "cannot open the entry lock file")
        s = os.fstat(self.fd)
        if not st.S_ISREG(s.st_mode):
            os.close(self.fd)
            self.fd = -1
            raise UnsafeTree(errno.EINVAL, "the entry lock file is not a regular file: refused")
        if s.st_mode & 0o007 and s.st_uid == os.geteuid():
            with suppress(OSError):
                os.fchmod(self.fd, mode)

    @staticmethod
    def offset(name: str) -> int:
        return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big") >> 4

    def try_lock(self, name: str) -> bool:
        try:
            fcntl.lockf(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, self.offset(name))
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EAGAIN):
                return False
            raise
        return True

    def unlock(self, name: str) -> None:
        fcntl.lockf(self.fd, fcntl.LOCK_UN, 1, self.offset(name))

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _not_ours(locks_fd: int, name: str) -> str:
    """Why another user's lock file cannot be opened, and what fixes it: the root was pruned
    before its folders were group-shared (setgid), so the file kept its maker's group."""
    where = f"{TRASH_DIRNAME}/{LOCKS_DIRNAME}/{name}"
    try:
        s = os.stat(name, dir_fd=locks_fd, follow_symlinks=False)
    except OSError:
        return f"{where} is not writable by you"
    return (f"{where} (owner {owner_name(s.st_uid)}, mode {st.S_IMODE(s.st_mode):04o}) is not "
            "writable by you; on a root shared by a group its folders need the group and the "
            "setgid bit (chmod g+ws), and this file group read-write: ask its owner")


@dataclass(frozen=True)
class TrashItem:
    name: str
    uid: int


class Trash:
    """``<compile cache>/.vllm-cache-trash``: where entries go in one rename, and are then
    removed. Everything in it except ``locks/`` is doomed; nothing else ever goes in."""

    def __init__(self, cc_fd: int, create: bool) -> None:
        self.fd: int | None = None
        self.locks_fd: int | None = None
        if create:
            mode = os.fstat(cc_fd).st_mode & 0o7777
            for name, parent in ((TRASH_DIRNAME, cc_fd), (LOCKS_DIRNAME, None)):
                pfd = parent if parent is not None else self.fd
                assert pfd is not None
                try:
                    os.mkdir(name, 0o700, dir_fd=pfd)
                    # Same permissions as torch_compile_cache (umask aside): on a shared root
                    # other users can use the trash and locks as they use the cache.
                    fd = open_dir(name, pfd)
                    os.fchmod(fd, mode)
                except FileExistsError:
                    fd = open_dir(name, pfd)
                if self.fd is None:
                    self.fd = fd
                else:
                    self.locks_fd = fd
        else:
            try:
                self.fd = open_dir(TRASH_DIRNAME, cc_fd)
            except FileNotFoundError:
                return
            with suppress(FileNotFoundError):
                self.locks_fd = open_dir(LOCKS_DIRNAME, self.fd)

    def close(self) -> None:
        for fd in (self.fd, self.locks_fd):
            if fd is not None:
                os.close(fd)
        self.fd = self.locks_fd = None

    def new_name(self, key: str) -> str:
        return f"{key}.{os.getpid()}.{time.time_ns():x}"

    def items(self) -> list[TrashItem]:
        if self.fd is None:
            return []
        out = []
        with os.scandir(self.fd) as it:
            for e in it:
                if e.name == LOCKS_DIRNAME:
                    continue
                try:
                    out.append(TrashItem(e.name, e.stat(follow_symlinks=False).st_uid))
                except FileNotFoundError:
                    continue
        return sorted(out, key=lambda t: t.name)

    def remove(self, name: str, expect: tuple[int, ...] | None = None,
               listing: Listing | None = None) -> RemoveResult:
        """Remove one item; ``expect``: the (st_dev, st_ino) this process moved in (on a
        shared root another user could swap the name for something else meanwhile);
        ``listing``: its names as the scan walked them (not listed again)."""
        assert self.fd is not None
        return remove_tree_at(self.fd, name, expect=expect, listing=listing)

    def empty(self, uid: int | None) -> list[tuple[TrashItem, RemoveResult]]:
        """Finish what earlier (possibly killed) runs left: remove every item, or only those
        owned by ``uid``."""
        done = []
        for item in self.items():
            if uid is not None and item.uid != uid:
                continue
            done.append((item, self.remove(item.name)))
        return done


_WORKER_TRASH: dict[tuple[str, tuple[int, int]], int] = {}
"""In a forked removal worker: the trash folder fd it opened, by (root, the trash's identity)."""


def remove_in_worker(vllm_root: str, trash_ident: tuple[int, int], name: str,
                     expect: tuple[int, ...] | None, listing: Listing | None) -> RemoveResult:
    """:meth:`Trash.remove` in a forked worker process (a streamed prune's reading pool, so
    that the removal shares no interpreter lock with the checks and moves). The worker was
    forked before the trash was opened: it opens the root's trash itself, as
    :class:`RootHandle` does (no link followed below the root), and uses it only where it is
    the very folder the moving process holds (``trash_ident``: its st_dev, st_ino); the item
    must still be the folder that process moved there (``expect``)."""
    key = (vllm_root, trash_ident)
    fd = _WORKER_TRASH.get(key)
    if fd is None:
        try:
            with RootHandle(Path(vllm_root)) as h:
                cc = h.cc_fd
                if cc is None:
                    raise FileNotFoundError(errno.ENOENT, "torch_compile_cache is gone")
                fd = open_dir(TRASH_DIRNAME, cc)
        except OSError as exc:
            return RemoveResult(0, 0, f"{name}: cannot open the trash: {exc.strerror or exc}")
        s = os.fstat(fd)
        if (s.st_dev, s.st_ino) != trash_ident:
            os.close(fd)
            return RemoveResult(0, 0, f"{name}: the trash folder was replaced (left)")
        _WORKER_TRASH[key] = fd
    return remove_tree_at(fd, name, expect=expect, listing=listing)


class RootHandle:
    """Open folder fds of one cache root: the root (its own path may be a symlink; the user
    named it), ``torch_compile_cache``, its ``torch_aot_compile`` and the older
    ``<root>/torch_aot_compile`` (vLLM 0.11.1-0.16), each opened without following links."""

    def __init__(self, vllm_root: Path) -> None:
        self.vllm_root = vllm_root
        self.root_fd = os.open(vllm_root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self.fds: dict[str, int | None] = {"backend": None, "aot": None, "aot-old": None}
        with suppress(FileNotFoundError, UnsafeTree):
            self.fds["backend"] = open_dir("torch_compile_cache", self.root_fd)
        cc = self.fds["backend"]
        if cc is not None:
            with suppress(FileNotFoundError, UnsafeTree):
                self.fds["aot"] = open_dir("torch_aot_compile", cc)
        with suppress(FileNotFoundError, UnsafeTree):
            self.fds["aot-old"] = open_dir("torch_aot_compile", self.root_fd)

    @property
    def cc_fd(self) -> int | None:
        return self.fds["backend"]

    def parent_fd(self, tree: str) -> int | None:
        return self.fds.get(tree)

    def trash(self, create: bool) -> Trash | None:
        if self.cc_fd is None:
            return None
        return Trash(self.cc_fd, create)

    def close(self) -> None:
        for fd in self.fds.values():
            if fd is not None:
                os.close(fd)
        os.close(self.root_fd)

    def __enter__(self) -> RootHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_LEXICAL = {"/torch_compile_cache": "backend", "/torch_compile_cache/torch_aot_compile": "aot",
            "/torch_aot_compile": "aot-old"}


def entry_tree(path: Path, vllm_root: Path) -> str | None:
    """Which of the root's entry folders holds ``path``: ``backend`` (torch_compile_cache),
    ``aot`` (torch_compile_cache/torch_aot_compile) or ``aot-old`` (<root>/torch_aot_compile);
    ``None`` when it is in none of them (another root)."""
    # Entries found by scanning this root have exactly these parents: no realpath needed
    # (compared as text: building and hashing three Paths per entry was ~18 us, called twice
    # per planned entry).
    parent, root = os.path.dirname(os.fspath(path)), os.fspath(vllm_root).rstrip("/")
    lexical = _LEXICAL.get(parent[len(root):]) if parent.startswith(root) else None
    if lexical is not None:
        return lexical
    parent = os.path.realpath(path.parent)
    cc = os.path.realpath(vllm_root / "torch_compile_cache")
    if parent == cc:
        return "backend"
    if parent == os.path.join(cc, "torch_aot_compile"):
        return "aot"
    if parent == os.path.join(os.path.realpath(vllm_root), "torch_aot_compile"):
        return "aot-old"
    return None


def is_dir_stat(s: os.stat_result) -> bool:
    return st.S_ISDIR(s.st_mode)


__all__ = ["LOCKS_DIRNAME", "TRASH_DIRNAME", "EntryLocks", "RemoveResult", "RootHandle",
           "Trash", "TrashItem", "TreeCheck", "UnsafeTree", "check_tree_at", "check_tree_fd",
           "entry_tree",
           "is_dir_stat", "open_dir", "remove_tree_at"]
