"""Which filesystem a cache root is on, and what that means for its writers and for atime.

Read from ``/proc/self/mountinfo`` (the mount whose device number is the root's ``st_dev``;
among bind mounts of one device, the longest mount point above the root) and ``statvfs``
flags (``ST_NOATIME``, ``ST_RELATIME``: what this kernel applies to the mount). Nothing here
mounts, writes or follows a link.

Why it matters (issue 17 item 4):
- Several hosts sharing one root over NFS, Lustre, GPFS, CIFS or a FUSE filesystem are
  several writers of the same folders. vLLM and torch write each artifact by tmp + rename,
  atomic within one filesystem, but two engines compiling the same key still both write the
  folder; vllm#24601 reports concurrent writers clobbering one cache folder, and before torch
  2.10 made AOT writes atomic, shared roots corrupted artifacts. Warm one host, then share.
- atime as evidence of last use: on NFS the server sets atimes and clients cache attributes
  (a read served from a client's page cache moves nothing); FUSE filesystems often do not keep
  atimes at all; ``noatime`` mounts never move them. Last use then falls back to mtime unless
  the recorder's ledger is on (``VLLM_CACHE_TOOLS_RECORD=1``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

MOUNTINFO = "/proc/self/mountinfo"

NETWORK_TYPES = {
    "nfs": "nfs", "nfs4": "nfs", "lustre": "lustre", "gpfs": "gpfs", "cifs": "cifs",
    "smb3": "cifs", "smbfs": "cifs", "ceph": "ceph", "glusterfs": "glusterfs",
    "beegfs": "beegfs", "9p": "9p", "afs": "afs", "ocfs2": "ocfs2", "gfs2": "gfs2",
    "virtiofs": "virtiofs", "fuse": "fuse", "fuseblk": "fuse",
}
"""Filesystem type (mountinfo) -> family, for types where other hosts (or another kernel) may
write the same files. Every ``fuse.*`` type (sshfs, s3fs, gcsfuse, juicefs, ...) is ``fuse``."""


@dataclass(frozen=True)
class Mount:
    """One line of ``/proc/self/mountinfo``."""

    mount_id: int
    device: tuple[int, int]
    """(major, minor), as ``os.major(st_dev)``, ``os.minor(st_dev)``."""
    root: str
    mount_point: str
    options: tuple[str, ...]
    fstype: str
    source: str
    super_options: tuple[str, ...]


@dataclass(frozen=True)
class FilesystemInfo:
    """The filesystem under a cache root and what it means for the cache."""

    path: Path
    fstype: str | None
    """``None`` when no mount could be matched (no /proc, another OS)."""
    family: str | None
    """``nfs``, ``lustre``, ``gpfs``, ``cifs``, ``fuse``, ... for shared filesystems (see
    :data:`NETWORK_TYPES`); ``None`` for a local one."""
    mount_point: str | None
    source: str | None
    atime: str
    """``noatime``, ``relatime``, ``strictatime`` (mount options), ``unknown``."""
    notes: tuple[str, ...] = ()

    @property
    def shared(self) -> bool:
        return self.family is not None


def _unescape(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as \ooo octal.
    out, i = [], 0
    while i < len(field):
        code = field[i + 1:i + 4]
        if field[i] == "\\" and len(code) == 3 and code.isdigit():
            out.append(chr(int(code, 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> list[Mount]:
    """Every well-formed line of a mountinfo file (proc(5)); malformed lines are skipped."""
    mounts = []
    for line in text.splitlines():
        parts = line.split(" ")
        try:
            sep = parts.index("-", 6)
            major, minor = parts[2].split(":")
            mounts.append(Mount(
                int(parts[0]), (int(major), int(minor)), _unescape(parts[3]),
                _unescape(parts[4]), tuple(parts[5].split(",")), parts[sep + 1],
                _unescape(parts[sep + 2]), tuple(parts[sep + 3].split(","))
                if len(parts) > sep + 3 else ()))
        except (ValueError, IndexError):
            continue
    return mounts


def family_of(fstype: str) -> str | None:
    if fstype.startswith("fuse."):
        return "fuse"
    return NETWORK_TYPES.get(fstype)


def mount_of(path: str, dev: tuple[int, int], mounts: list[Mount]) -> Mount | None:
    """The mount holding ``path`` (a real path): same device, longest mount point above it;
    without a device match (btrfs subvolumes, overlay), the longest mount point above it."""
    def above(m: Mount) -> bool:
        mp = m.mount_point.rstrip("/") + "/"
        return path == m.mount_point or path.startswith(mp) or m.mount_point == "/"

    same = [m for m in mounts if m.device == dev and above(m)]
    pool = same or [m for m in mounts if above(m)]
    return max(pool, key=lambda m: (len(m.mount_point), m.mount_id), default=None)


def _atime_mode(m: Mount | None, path: str) -> str:
    if m is not None:
        opts = set(m.options)
        for mode in ("noatime", "strictatime", "relatime"):
            if mode in opts:
                return mode
    try:
        flags = os.statvfs(path).f_flag
    except OSError:
        return "unknown"
    if flags & getattr(os, "ST_NOATIME", 1024):
        return "noatime"
    if flags & getattr(os, "ST_RELATIME", 4096):
        return "relatime"
    return "strictatime" if m is not None else "unknown"


def notes_for(family: str | None, fstype: str | None, atime: str) -> tuple[str, ...]:
    """What a user should know about a root on this filesystem (pure; tested per family)."""
    out = []
    if family is not None:
        out.append(
            f"root is on {fstype} ({family}, shared): engines on several hosts writing one "
            "root are concurrent writers of the same folders (vllm#24601: writers clobbering "
            "one cache folder); vLLM's tmp + rename keeps each file whole, not the folder. "
            "Compile on one host, then share read-only (or one VLLM_CACHE_ROOT per host).")
        if family == "nfs":
            out.append("atime on NFS is set by the server and cached by clients (a read from "
                       "a client's page cache does not move it): last use from atime can lag "
                       "or miss; the recorder's ledger (VLLM_CACHE_TOOLS_RECORD=1) does not")
        elif family == "fuse":
            out.append("FUSE filesystems often keep no atime at all: last use from atime may "
                       "be missing; the recorder's ledger (VLLM_CACHE_TOOLS_RECORD=1) is not")
        elif family in ("lustre", "gpfs"):
            out.append(f"{family} quotas often count files (inodes) as well as bytes: "
                       "`prune --max-files N` keeps the file count under a budget")
    if atime == "noatime":
        out.append("mounted noatime: reads never move atime, so last use is the last write "
                   "(mtime) unless the recorder's ledger is on")
    return tuple(out)


def filesystem_of(path: str | os.PathLike[str], mountinfo: str | None = None) -> FilesystemInfo:
    """The filesystem of ``path`` (a cache root). ``mountinfo`` replaces
    ``/proc/self/mountinfo`` (tests)."""
    p = Path(path)
    real = os.path.realpath(p)
    try:
        st = os.stat(real)
        dev = (os.major(st.st_dev), os.minor(st.st_dev))
    except OSError:
        return FilesystemInfo(p, None, None, None, None, "unknown")
    if mountinfo is None:
        try:
            with open(MOUNTINFO, encoding="utf-8", errors="surrogateescape") as f:
                mountinfo = f.read()
        except OSError:
            mountinfo = ""
    m = mount_of(real, dev, parse_mountinfo(mountinfo))
    fstype = m.fstype if m is not None else None
    family = family_of(fstype) if fstype else None
    atime = _atime_mode(m, real)
    return FilesystemInfo(p, fstype, family, m.mount_point if m else None,
                          m.source if m else None, atime, notes_for(family, fstype, atime))
