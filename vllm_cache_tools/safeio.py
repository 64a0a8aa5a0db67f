"""Every file operation this package makes inside a cache root, in one place: folders opened
without following links, files created new or appended only when they are ours, removals and
moves relative to a folder fd. Standard library only: the recorder imports it inside vLLM, and
the inspector's deleters (trash, snapshot sweep, prune) use the same functions.

Why each rule (a cache root may be shared, and anyone who can write in it can plant names):

* A folder below the place the user (or vLLM) named is opened component by component with
  ``O_NOFOLLOW | O_DIRECTORY`` relative to its parent's fd (:func:`open_dirs`). A symlink or a
  non-folder raises :class:`UnsafeTree`; it is never entered, so nothing done through the fd
  can land outside the root. The named place itself is followed: ``~/.cache/vllm`` may be a
  link the user made.
* Bytes are only ever written through an fd that this call created (``O_CREAT | O_EXCL |
  O_NOFOLLOW``: a new inode, so a planted symlink or file is never truncated or written), or,
  for appends, through an fd whose ``fstat`` shows a regular file owned by us with one link
  (:func:`append_own`: a planted hard link to someone's file is refused too). Temporary names
  are random, never ``<name>.<pid>.tmp``, which anyone could plant in advance.
* Names are put in place with ``link(2)`` without following (create-only) or ``rename(2)``
  (replace): both act on the name, never through a link.
* A name becomes another name of an existing file (``dedup``, :func:`link_over_at`) or gets
  its own copy back (:func:`split_link_at`) by a random name in the same folder, checked
  against the expected inodes, then ``rename(2)`` over it.
* Removal (:func:`unlink_at`, :func:`remove_tree_at`) and moves (:func:`rename_at`) are
  fd-relative; a symlink is removed as a link; trees are walked through ``O_NOFOLLOW`` fds, on
  one filesystem, and an expected ``(st_dev, st_ino)`` is checked where the caller knows what
  it is about to remove.

Folders owned by another user (:func:`check_writable_folder`): refused, except in a
group-shared tree (folder group-writable and setgid, the usual recipe for a shared cache,
and not writable by everyone without the sticky bit). There we only create new files with
``O_EXCL`` and append to files we own: whoever owns the folder can rename or delete our names
(they could anyway), but cannot make us write into anything but our own new inode.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_APPEND = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class UnsafeTree(OSError):
    """A folder we must operate in is a symlink, not a folder, or not ours to write in; or a
    file we must write is not a regular file of ours."""


def open_dir(name: str | os.PathLike[str], dir_fd: int | None = None) -> int:
    """Open a folder without following a symlink at its last component."""
    try:
        return os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafeTree(exc.errno, f"{os.fsdecode(name)} is a symlink or not a "
                             "folder (not followed)") from None
        raise


def _components(rel: str | Sequence[str]) -> list[str]:
    parts = rel.split("/") if isinstance(rel, str) else list(rel)
    out = [p for p in parts if p not in ("", ".")]
    if ".." in out:
        raise UnsafeTree(errno.EINVAL, f"{'/'.join(out)}: '..' in a path below the root")
    return out


def open_dirs(base: str | os.PathLike[str] | int, rel: str | Sequence[str] = (), *,
              create: bool = False, mode: int = 0o777) -> int:
    """An fd on ``base/rel``: ``base`` is followed (a path the user or vLLM named, or an
    already open folder fd, which is duplicated), every component of ``rel`` is opened with
    ``O_NOFOLLOW``. ``create``: missing components are made (``mode`` minus the umask; in a
    group-shared parent the new folder takes the parent's permission bits, so the next
    user of the group can write in it too)."""
    if isinstance(base, int):
        fd = os.dup(base)
    else:
        fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in _components(rel):
            try:
                nfd = open_dir(name, fd)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, mode, dir_fd=fd)
                nfd = open_dir(name, fd)
                _inherit_sharing(fd, nfd)
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def _inherit_sharing(parent_fd: int, fd: int) -> None:
    p, s = os.fstat(parent_fd), os.fstat(fd)
    if s.st_uid != os.geteuid() or not is_group_shared(p):
        return
    want = stat.S_IMODE(p.st_mode)  # group-shared excludes o+w without the sticky bit
    if stat.S_IMODE(s.st_mode) != want:
        # A filesystem without modes (some NFS/SMB mounts): keep what mkdir gave.
        with contextlib.suppress(OSError):
            os.fchmod(fd, want)


def is_group_shared(s: os.stat_result) -> bool:
    """A folder meant to be shared by a group: group-writable and setgid (new files and
    folders inherit the group), and not writable by everyone unless sticky."""
    m = s.st_mode
    return (bool(m & stat.S_IWGRP) and bool(m & stat.S_ISGID)
            and not (m & stat.S_IWOTH and not m & stat.S_ISVTX))


def check_writable_folder(fd: int, what: str = "folder") -> os.stat_result:
    """Raise :class:`UnsafeTree` unless the folder is ours or group-shared (module docstring)."""
    s = os.fstat(fd)
    if not stat.S_ISDIR(s.st_mode):
        raise UnsafeTree(errno.ENOTDIR, f"{what} is not a folder")
    if s.st_uid == os.geteuid() or is_group_shared(s):
        return s
    raise UnsafeTree(errno.EPERM, f"{what} belongs to uid {s.st_uid} and is not group-shared "
                     "(setgid and group-writable): not written")


def _tmp_name(name: str) -> str:
    # os.urandom is what secrets.token_hex reads; importing secrets loaded OpenSSL (hmac)
    # for every command that imports this module (~5 ms of a 0.2 s ls).
    return f".{name}.{os.getpid()}.{os.urandom(6).hex()}.tmp"


def write_all(fd: int, data: bytes) -> None:
    """All of ``data`` to ``fd`` (``os.write`` may write part of it)."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _new_file(dir_fd: int, data: bytes, name: str, mode: int) -> str:
    """Write ``data`` to a new file with a random name in ``dir_fd``; returns the name."""
    for _ in range(16):
        tmp = _tmp_name(name)
        try:
            fd = os.open(tmp, _NEW_FILE, mode, dir_fd=dir_fd)
        except FileExistsError:
            continue
        try:
            write_all(fd, data)
        except BaseException:
            os.close(fd)
            unlink_at(dir_fd, tmp)
            raise
        os.close(fd)
        return tmp
    raise FileExistsError(errno.EEXIST, f"no free temporary name for {name}")


def create_exclusive(dir_fd: int, name: str, data: bytes, mode: int = 0o644) -> bool:
    """Create ``name`` with ``data`` (``O_EXCL``: never through an existing name). False when
    the name exists. A reader may see the file while it is being written: use
    :func:`place_at` for records read concurrently."""
    try:
        fd = os.open(name, _NEW_FILE, mode, dir_fd=dir_fd)
    except FileExistsError:
        return False
    try:
        write_all(fd, data)
    finally:
        os.close(fd)
    return True


def place_at(dir_fd: int, name: str, data: bytes, mode: int = 0o644) -> bool:
    """Put a complete file named ``name`` with ``data`` in place unless the name exists
    (whatever it is: a file, a symlink, a FIFO): written under a random new name, then
    ``link``-ed without following. True when this call placed it."""
    tmp = _new_file(dir_fd, data, name, mode)
    try:
        os.link(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
        return True
    except FileExistsError:
        return False
    finally:
        unlink_at(dir_fd, tmp)


def replace_at(dir_fd: int, name: str, data: bytes, mode: int = 0o600) -> None:
    """Atomically replace ``name`` (whatever it is, a symlink too: the name is replaced, its
    target untouched) with a new file holding ``data``."""
    tmp = _new_file(dir_fd, data, name, mode)
    try:
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        unlink_at(dir_fd, tmp)
        raise


def _is_own_regular(s: os.stat_result) -> bool:
    return stat.S_ISREG(s.st_mode) and s.st_uid == os.geteuid() and s.st_nlink == 1


def append_own(dir_fd: int, name: str, data: bytes, mode: int = 0o644,
               lock: bool = True) -> bool:
    """Append ``data`` in one ``write`` to ``name`` if it is a regular file we own with one
    link (created with ``O_EXCL`` when missing); under ``flock`` when ``lock``. False (nothing
    written) when the name is anything else: a symlink, a FIFO, another user's file."""
    import fcntl

    for _ in range(8):
        try:
            fd = os.open(name, _APPEND, dir_fd=dir_fd)
        except FileNotFoundError:
            try:
                fd = os.open(name, _NEW_FILE | os.O_APPEND, mode, dir_fd=dir_fd)
            except FileExistsError:
                continue
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EACCES, errno.EPERM,
                             errno.EISDIR, errno.ENOTDIR, errno.EWOULDBLOCK):
                return False
            raise
        try:
            if not _is_own_regular(os.fstat(fd)):
                return False
            if lock:
                fcntl.flock(fd, fcntl.LOCK_EX)
            n = os.write(fd, data)
            if n != len(data):
                raise OSError(errno.EIO, f"short write to {name}")
            return True
        finally:
            os.close(fd)  # closing releases the lock
    raise OSError(errno.EAGAIN, f"{name} keeps appearing and vanishing")


def touch_own(dir_fd: int, name: str) -> bool | None:
    """Set a regular file's mtime to now, through an fd opened without following (a planted
    symlink or hard link to someone's file is refused). None when the name is missing, False
    when it is not a regular file with one link or cannot be touched, True when touched."""
    try:
        fd = os.open(name, _READ, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError:
        return False
    try:
        s = os.fstat(fd)
        if not stat.S_ISREG(s.st_mode) or s.st_nlink != 1:
            return False
        os.utime(fd)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def open_regular(path: str | os.PathLike[str], *, dir_fd: int | None = None,
                 follow: bool = False) -> int:
    """A blocking read fd on a regular file: opened with ``O_NONBLOCK`` (a FIFO is never
    waited on in ``open``) and without following the last component unless ``follow``, then
    ``fstat`` must show a regular file (a FIFO, socket, device or folder is refused, never
    read), and only then is ``O_NONBLOCK`` cleared. Raises OSError (``UnsafeTree`` for a
    symlink or a non-regular file)."""
    flags = _READ if not follow else _READ & ~os.O_NOFOLLOW
    try:
        fd = os.open(path, flags, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeTree(exc.errno, f"{os.fsdecode(path)} is a symlink (not followed)",
                             ) from None
        raise
    try:
        s = os.fstat(fd)
        if not stat.S_ISREG(s.st_mode):
            raise UnsafeTree(errno.EINVAL, f"{os.fsdecode(path)} is {_kind(s.st_mode)}, not "
                             "a regular file (not read)")
        _blocking(fd)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _kind(mode: int) -> str:
    return ("a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "a folder" if stat.S_ISDIR(mode) else "not a regular file")


def read_regular(path: str | os.PathLike[str], cap: int, *, dir_fd: int | None = None,
                 follow: bool = False) -> bytes:
    """At most ``cap`` bytes of a regular file (:func:`open_regular`: a FIFO or a device is
    refused, never waited on; the last component is not followed unless ``follow``).
    Raises OSError (``UnsafeTree`` for a non-regular file, ``EFBIG`` over the cap)."""
    fd = open_regular(path, dir_fd=dir_fd, follow=follow)
    try:
        chunks: list[bytes] = []
        got = 0
        while got <= cap:
            b = os.read(fd, min(1 << 20, cap + 1 - got))
            if not b:
                break
            chunks.append(b)
            got += len(b)
        if got > cap:
            raise OSError(errno.EFBIG, f"{os.fsdecode(path)} is over {cap} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


# ---- files at a path a user named ---------------------------------------------------------

class OutputExists(FileExistsError):
    """The name a user gave for an output is taken (by anything: a file, a symlink, a FIFO)
    and replacing it was not asked for."""


_TAKEN = "exists (not replaced; --force replaces it)"


class NamedOutput:
    """A file written at a path a user named (``pack -o``, ``host-profile -o``, ``warm
    --log``): the one way this package writes there (issue 23, item 2: ``warm --log F`` in a
    shared sticky folder truncated root's file through a planted symlink).

    The folder named is followed (the user named it); the final name never is, and no file
    this call did not create is ever opened for writing: bytes go to a new inode made with
    ``O_CREAT | O_EXCL | O_NOFOLLOW`` under a random name beside the target. Then:

    * ``atomic`` (a bundle, a profile): the name appears when :meth:`commit` is called, whole,
      by ``link(2)`` without following (the name taken -> :class:`OutputExists`, nothing
      replaced) or, with ``force``, by ``rename(2)`` over it (the name is replaced, whatever
      it was; a symlink's target is untouched). :meth:`abort` removes the new file.
    * not ``atomic`` (a log, read while it grows): the new file takes the name at once, the
      same two ways; :meth:`abort` keeps it (a failed run's log is what the user needs).

    Root and users are treated alike (no check depends on who runs it or on
    ``fs.protected_symlinks``). Before publishing, the random name is checked to be still
    our inode. Use as a context manager: commit on success, abort on an exception."""

    def __init__(self, path: str | os.PathLike[str], *, force: bool = False,
                 atomic: bool = True, mode: int = 0o644) -> None:
        self.path = os.fspath(path)
        self.force, self.atomic = force, atomic
        folder, self.name = os.path.split(os.path.abspath(self.path))
        if not self.name or self.path.endswith("/"):
            raise IsADirectoryError(errno.EISDIR, "names a folder, not a file")
        self.dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self.fd = -1
        self.tmp: str | None = None
        try:
            if not force:
                self._check_free()
            self.tmp, self.fd = self._new(mode)
            if not atomic:
                self._publish()
        except BaseException:
            self._close(remove=True)
            raise

    def _check_free(self) -> None:
        try:
            os.stat(self.name, dir_fd=self.dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        raise OutputExists(errno.EEXIST, _TAKEN)

    def _new(self, mode: int) -> tuple[str, int]:
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        for _ in range(16):
            tmp = _tmp_name(self.name)
            try:
                return tmp, os.open(tmp, flags, mode, dir_fd=self.dir_fd)
            except FileExistsError:
                continue
        raise FileExistsError(errno.EEXIST, f"no free temporary name for {self.name}")

    def _publish(self) -> None:
        tmp = self.tmp
        assert tmp is not None
        if not same(os.stat(tmp, dir_fd=self.dir_fd, follow_symlinks=False),
                    ident(os.fstat(self.fd))):
            raise UnsafeTree(errno.EPERM, f"{tmp} was replaced while being written")
        if self.force:
            os.rename(tmp, self.name, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)
        else:
            try:
                os.link(tmp, self.name, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd,
                        follow_symlinks=False)
            except FileExistsError:
                raise OutputExists(errno.EEXIST, _TAKEN) from None
            unlink_at(self.dir_fd, tmp)
        self.tmp = None

    @staticmethod
    def refuse_taken(path: str | os.PathLike[str], force: bool = False) -> None:
        """Raise :class:`OutputExists` now, before long work, if the name is taken and
        ``force`` is not given (the check is made again when the file is put in place)."""
        if force:
            return
        try:
            os.lstat(path)
        except FileNotFoundError:
            return
        raise OutputExists(errno.EEXIST, _TAKEN)

    def write(self, data: bytes) -> None:
        write_all(self.fd, data)

    def file(self) -> io.FileIO:
        """A file object on the new file (closing it leaves this output open)."""
        return io.FileIO(self.fd, "r+b", closefd=False)

    def read_back(self, cap: int) -> bytes:
        """The last ``cap`` bytes written (a log read back through our own fd, not its name)."""
        end = os.fstat(self.fd).st_size
        return os.pread(self.fd, cap, max(0, end - cap))

    def commit(self) -> None:
        try:
            if self.tmp is not None:
                self._publish()
        finally:
            self._close(remove=True)

    def abort(self) -> None:
        self._close(remove=self.atomic)

    def _close(self, remove: bool) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if remove and self.tmp is not None:
            unlink_at(self.dir_fd, self.tmp)
            self.tmp = None
        if self.dir_fd >= 0:
            os.close(self.dir_fd)
            self.dir_fd = -1

    def __enter__(self) -> NamedOutput:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()


# ---- removal and moves --------------------------------------------------------------------

def ident(s: os.stat_result) -> tuple[int, int, int]:
    """What a name held when it was looked at: ``(st_dev, st_ino, file type)``. The type is
    part of it because a freed inode number is reused at once (ext4): a file unlinked and
    replaced by a symlink often gets the same ``st_ino``."""
    return (s.st_dev, s.st_ino, stat.S_IFMT(s.st_mode))


def same(s: os.stat_result, expect: tuple[int, ...]) -> bool:
    """``s`` is what ``expect`` recorded (an :func:`ident`, or a bare ``(st_dev, st_ino)``)."""
    return ident(s)[:len(expect)] == tuple(expect)


def unlink_at(dir_fd: int, name: str, expect: tuple[int, ...] | None = None) -> bool:
    """Remove the non-folder ``name`` (a symlink as a link). With ``expect``, only if it is
    still that ``(st_dev, st_ino)``. True when removed; False when missing or not the
    expected file. Raises OSError otherwise (``IsADirectoryError`` for a folder)."""
    try:
        if expect is not None:
            s = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if not same(s, expect):
                return False
        os.unlink(name, dir_fd=dir_fd)
        return True
    except FileNotFoundError:
        return False


def rename_at(src_fd: int, name: str, dst_fd: int, new_name: str, *,
              expect: tuple[int, ...] | None = None, replace: bool = False) -> bool:
    """Move the name ``name`` (a symlink is moved as a link) from folder ``src_fd`` to
    ``dst_fd``. Non-folders are moved without replacing an existing ``new_name`` (link, then
    unlink) unless ``replace``; folders by ``rename`` (callers pick fresh names). With
    ``expect``, only if it is still that ``(st_dev, st_ino)``. True when moved; False when
    missing, not the expected item, or (not ``replace``) ``new_name`` exists."""
    try:
        s = os.stat(name, dir_fd=src_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    if expect is not None and not same(s, expect):
        return False
    if replace or stat.S_ISDIR(s.st_mode):
        try:
            if not replace:
                try:
                    os.stat(new_name, dir_fd=dst_fd, follow_symlinks=False)
                    return False
                except FileNotFoundError:
                    pass
            os.rename(name, new_name, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
            return True
        except FileNotFoundError:
            return False
    try:
        os.link(name, new_name, src_dir_fd=src_fd, dst_dir_fd=dst_fd, follow_symlinks=False)
    except (FileNotFoundError, FileExistsError):
        return False
    except PermissionError:
        # protected_hardlinks: another user's file cannot be linked. Rename after checking
        # that the new name is free (a name made in between is replaced by a name: nothing
        # is followed either way).
        try:
            os.stat(new_name, dir_fd=dst_fd, follow_symlinks=False)
            return False
        except FileNotFoundError:
            pass
        try:
            os.rename(name, new_name, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
        except FileNotFoundError:
            return False
        return True
    unlink_at(src_fd, name, ident(s))
    return True


def link_over_at(src_fd: int, src_name: str, dst_fd: int, dst_name: str, *,
                 expect_src: tuple[int, ...], expect_dst: tuple[int, ...]) -> bool:
    """Make ``dst_name`` another name of the file ``src_name`` (a hard link), atomically:
    ``link`` (not following) to a random name in ``dst_fd``'s folder, check that name is
    ``expect_src`` and ``dst_name`` still ``expect_dst``, then ``rename`` over ``dst_name``.
    False (nothing changed) when either name is no longer what was expected. Raises OSError
    otherwise (``EXDEV`` across filesystems, ``EPERM`` for a file we may not link)."""
    tmp: str | None = None
    for _ in range(16):
        cand = _tmp_name(dst_name)
        try:
            os.link(src_name, cand, src_dir_fd=src_fd, dst_dir_fd=dst_fd, follow_symlinks=False)
        except FileExistsError:
            continue
        except FileNotFoundError:
            return False
        tmp = cand
        break
    if tmp is None:
        raise FileExistsError(errno.EEXIST, f"no free temporary name for {dst_name}")
    try:
        if not same(os.stat(tmp, dir_fd=dst_fd, follow_symlinks=False), expect_src):
            return False
        if not same(os.stat(dst_name, dir_fd=dst_fd, follow_symlinks=False), expect_dst):
            return False
        os.rename(tmp, dst_name, src_dir_fd=dst_fd, dst_dir_fd=dst_fd)
        tmp = None
        return True
    except FileNotFoundError:
        return False
    finally:
        if tmp is not None:
            unlink_at(dst_fd, tmp)


def split_link_at(dir_fd: int, name: str, expect: tuple[int, ...]) -> bool:
    """Give ``name`` (a regular file with several links, still ``expect``) its own inode: a
    copy under a random name (same mode, group and times; ``O_EXCL``), then ``rename`` over
    ``name``. The other names keep the old inode. False when ``name`` is not that file, has
    one link, or changed while being copied."""
    try:
        src = os.open(name, _READ, dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return False
        raise
    tmp: str | None = None
    try:
        s = os.fstat(src)
        if not same(s, expect) or not stat.S_ISREG(s.st_mode) or s.st_nlink < 2:
            return False
        mode = stat.S_IMODE(s.st_mode)
        for _ in range(16):
            cand = _tmp_name(name)
            try:
                out = os.open(cand, _NEW_FILE, 0o600, dir_fd=dir_fd)
            except FileExistsError:
                continue
            tmp = cand
            break
        if tmp is None:
            raise FileExistsError(errno.EEXIST, f"no free temporary name for {name}")
        try:
            _blocking(src)
            copy_fd(src, out, s.st_size)
            with contextlib.suppress(OSError):
                os.fchown(out, -1, s.st_gid)
            os.fchmod(out, mode)
            os.utime(out, ns=(s.st_atime_ns, s.st_mtime_ns))
            o = os.fstat(out)
        finally:
            os.close(out)
        after = os.fstat(src)
        if (o.st_size != s.st_size or after.st_size != s.st_size
                or after.st_mtime_ns != s.st_mtime_ns):
            return False
        if not same(os.stat(name, dir_fd=dir_fd, follow_symlinks=False), expect):
            return False
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        tmp = None
        return True
    finally:
        os.close(src)
        if tmp is not None:
            unlink_at(dir_fd, tmp)


def _blocking(fd: int) -> None:
    import fcntl

    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)


def copy_fd(src: int, dst: int, size: int) -> None:
    """Copy ``size`` bytes from ``src``'s offset to ``dst``'s in the kernel
    (``copy_file_range``: no bytes through Python, a reflink where the filesystem has them);
    plain reads and writes where the kernel or filesystem cannot."""
    off = 0
    while off < size:
        try:
            n = os.copy_file_range(src, dst, size - off)
        except OSError as exc:  # not on this filesystem / kernel: plain reads
            if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                raise
            n = 0
            while True:
                b = os.read(src, 1 << 20)
                if not b:
                    return
                write_all(dst, b)
        if n == 0:
            return
        off += n


@dataclass(frozen=True)
class RemoveResult:
    files: int
    dirs: int
    error: str | None = None
    """Why removal stopped (what is left stays where it was, partly removed); ``None`` if
    done."""


def remove_tree_at(parent_fd: int, name: str, *, expect: tuple[int, ...] | None = None,
                   one_filesystem: bool = True,
                   listing: Mapping[str, tuple[Sequence[str], Sequence[str]]] | None = None
                   ) -> RemoveResult:
    """Remove ``name`` under the folder ``parent_fd`` and everything in it.

    Iterative (no recursion limit), fd-relative (``unlinkat``/``openat``/``rmdir`` with
    ``dir_fd``), ``O_NOFOLLOW`` on every folder: a symlink is removed as a link. ``expect``:
    the ``(st_dev, st_ino)`` the caller means to remove; anything else now at that name is
    left alone. ``one_filesystem``: a folder on another device (a mount point somebody made
    inside the tree) is left, with an error. Names that vanish meanwhile (another process
    emptying the same item) are not errors.

    ``listing``: the names in each folder (relative path, ``.`` for the top -> (non-folders,
    folders)) as a walk of this tree just saw them: each folder's first pass unlinks those
    names instead of listing it again. A listed name that is gone is skipped, one that became
    a folder is entered, one that became a file is unlinked; a name added since is found
    when the folder's ``rmdir`` fails (not empty), which lists it afresh, as without one."""
    files = dirs = 0
    try:
        top = open_dir(name, parent_fd)
    except FileNotFoundError:
        return RemoveResult(0, 0)
    except UnsafeTree:
        try:
            if expect is not None and not unlink_at(parent_fd, name, expect):
                return RemoveResult(0, 0, f"{name}: replaced by something else (left)")
            if expect is None:
                os.unlink(name, dir_fd=parent_fd)
            return RemoveResult(1, 0)
        except FileNotFoundError:
            return RemoveResult(0, 0)
        except OSError as exc:
            return RemoveResult(0, 0, f"{name}: {exc.strerror}")
    except OSError as exc:
        return RemoveResult(0, 0, f"{name}: {exc.strerror}")
    top_st = os.fstat(top)
    if expect is not None and not same(top_st, expect):
        os.close(top)
        return RemoveResult(0, 0, f"{name}: replaced by another folder (left)")
    dev = top_st.st_dev
    # Frames: [folder fd, its name in the parent frame, pending subfolder names or None, tries,
    # its path relative to the top]
    stack: list[list[object]] = [[top, name, None, 0, "."]]
    unlink = os.unlink
    try:
        while stack:
            frame = stack[-1]
            fd = frame[0]
            assert isinstance(fd, int)
            listed = (listing.get(str(frame[4])) if listing is not None and frame[3] == 0
                      else None)
            if frame[2] is None and listed is not None:
                subdirs = list(listed[1])
                for n in listed[0]:
                    try:
                        unlink(n, dir_fd=fd)
                        files += 1
                    except FileNotFoundError:
                        pass
                    except IsADirectoryError:  # replaced by a folder meanwhile
                        subdirs.append(n)
                frame[2] = subdirs
            elif frame[2] is None:
                subdirs = []
                with os.scandir(fd) as it:
                    for e in it:
                        try:
                            if e.is_dir(follow_symlinks=False):
                                subdirs.append(e.name)
                                continue
                            unlink(e.name, dir_fd=fd)
                            files += 1
                        except FileNotFoundError:
                            pass
                        except IsADirectoryError:  # replaced by a folder meanwhile
                            subdirs.append(e.name)
                frame[2] = subdirs
            pending = frame[2]
            assert isinstance(pending, list)
            if pending:
                sub = pending.pop()
                try:
                    sfd = open_dir(sub, fd)
                except FileNotFoundError:
                    continue
                except UnsafeTree:  # became a link or a file: remove the name itself
                    try:
                        unlink(sub, dir_fd=fd)
                        files += 1
                    except FileNotFoundError:
                        pass
                    continue
                if one_filesystem and os.fstat(sfd).st_dev != dev:
                    os.close(sfd)
                    raise OSError(errno.EXDEV, f"{sub} is another filesystem (left)")
                rel = sub if frame[4] == "." else f"{frame[4]}/{sub}"
                stack.append([sfd, sub, None, 0, rel])
                continue
            stack.pop()
            os.close(fd)
            parent = stack[-1][0] if stack else parent_fd
            assert isinstance(parent, int)
            try:
                os.rmdir(str(frame[1]), dir_fd=parent)
                dirs += 1
            except FileNotFoundError:
                pass
            except OSError as exc:
                tries = int(frame[3])  # type: ignore[call-overload]
                if exc.errno != errno.ENOTEMPTY or tries >= 3:
                    raise
                # Something was added after we listed it: list again.
                again = open_dir(str(frame[1]), parent)
                if os.fstat(again).st_dev != dev and one_filesystem:
                    os.close(again)
                    raise
                stack.append([again, frame[1], None, tries + 1, frame[4]])
    except OSError as exc:
        where = "/".join(str(f[1]) for f in stack)
        for f in stack:
            os.close(f[0])  # type: ignore[arg-type]
        return RemoveResult(files, dirs, f"{where or name}: {exc.strerror or exc}")
    return RemoveResult(files, dirs)


def close_all(fds: Iterable[int | None]) -> None:
    for fd in fds:
        if fd is not None:
            os.close(fd)


__all__ = ["DIR_FLAGS", "NamedOutput", "OutputExists", "RemoveResult", "UnsafeTree",
           "append_own", "check_writable_folder",
           "close_all", "create_exclusive", "ident", "is_group_shared", "link_over_at",
           "open_dir", "open_dirs", "open_regular", "place_at", "read_regular",
           "remove_tree_at", "rename_at", "replace_at", "same", "split_link_at", "touch_own",
           "unlink_at"]
