"""Sweep the recorder's source snapshots (``torch_compile_cache/.vllm-cache-tools/sources/
<sha256>``) that no manifest references any more, after prune or rm removed the entries whose
manifests did.

A snapshot is garbage only when no manifest in the root names it. The sweep must not race a
recorder that, inside a running vLLM, finds a snapshot already in place and writes a manifest
naming it moments later. So: candidates are unreferenced snapshots older than ``min_age_s``;
they are first renamed into a quarantine folder (a recorder that looks now writes a new copy),
then the manifests written since shortly before the sweep began are read again and anything
they name goes back; only the rest is removed. A manifest that cannot be read stops the sweep:
it might name any snapshot.

Every move and removal is relative to folder fds opened without following links
(:mod:`vllm_cache_tools.safeio`): ``torch_compile_cache``, ``.vllm-cache-tools``,
``sources`` and each quarantine folder. A symlink planted at any of them (or a file swapped
for one mid-sweep) is never entered, so nothing outside the root is moved or deleted; a
quarantined name is only deleted if it is still the file that was listed (same
``st_dev``/``st_ino``), and quarantine folders left by others are only emptied of regular
files, back into ``sources``.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from vllm_cache_tools import safeio
from vllm_cache_tools.layout import AOT_DIRNAME, SOURCES_DIRNAME, STATE_DIRNAME, is_manifest_name
from vllm_cache_tools.read.errors import ReadError
from vllm_cache_tools.read.manifest import read_manifest

LATE_WINDOW_S = 600.0
"""Manifests modified this long before the sweep began are read again after the quarantine
(covers a manifest written while the first pass was reading, clock skew on NFS included)."""


@dataclass(frozen=True)
class SnapshotSweep:
    removed: tuple[str, ...] = ()
    freed_bytes: int = 0
    kept_referenced: int = 0
    kept_young: int = 0
    restored: tuple[str, ...] = ()
    """Quarantined, then named by a manifest written meanwhile: put back."""
    stopped: str | None = None
    """Why nothing was removed (an unreadable manifest), or None."""
    errors: tuple[str, ...] = ()


def _is_sha(name: str) -> bool:
    return len(name) == 64 and all(c in "0123456789abcdef" for c in name)


def _dirs(parent: Path) -> list[str]:
    """Sub-folder names; raises OSError (except for a missing folder: none)."""
    try:
        with os.scandir(parent) as it:
            return sorted(d.name for d in it if d.is_dir(follow_symlinks=False))
    except FileNotFoundError:
        return []


def _manifests(compile_cache: Path) -> list[Path]:
    """Every manifest file in the root's entries. Unlike the store's lenient reader, any
    folder that cannot be listed raises: its manifests might name any snapshot."""
    out: list[Path] = []
    trees = ((compile_cache, "backend"), (compile_cache / AOT_DIRNAME, "aot"))
    for parent, layout in trees:
        for key in _dirs(parent):
            if key.startswith(".") or (layout == "backend" and key == AOT_DIRNAME):
                continue
            for rank in _dirs(parent / key):
                if not rank.startswith("rank"):
                    continue
                folders = [parent / key / rank]
                if layout == "backend":
                    folders += [parent / key / rank / p for p in _dirs(parent / key / rank)]
                for d in folders:
                    try:
                        names = os.listdir(d)
                    except FileNotFoundError:
                        continue
                    out += [d / n for n in sorted(names) if is_manifest_name(n)]
    return out


def referenced(compile_cache: Path, newer_than: float | None = None
               ) -> tuple[set[str], str | None]:
    """(sha256 of every traced-file snapshot named by a manifest in the root, the first
    manifest or folder that could not be read, or None). ``newer_than``: only manifests
    modified since."""
    refs: set[str] = set()
    try:
        paths = _manifests(compile_cache)
    except OSError as exc:
        return refs, f"{exc.filename}: {exc.strerror or exc}"
    for p in paths:
        if newer_than is not None:
            try:
                if p.stat().st_mtime < newer_than:
                    continue
            except FileNotFoundError:
                continue  # gone: names nothing
            except OSError as exc:
                return refs, f"{p}: {exc.strerror or exc}"
        try:
            m = read_manifest(p)
        except ReadError as exc:
            if not p.exists():
                continue
            return refs, f"{p}: {exc}"
        for f in m.data.get("traced_files") or []:
            sha = f.get("sha256") if isinstance(f, dict) else None
            if isinstance(sha, str):
                refs.add(sha)
    return refs, None


def _put_back(src_fd: int, q_fd: int, name: str, where: str,
              expect: tuple[int, ...] | None = None) -> str | None:
    """Move a quarantined snapshot back (dropped if a recorder placed a new copy meanwhile:
    same name, same content). Only a regular file is moved or dropped. An error message,
    or None."""
    try:
        s = os.stat(name, dir_fd=q_fd, follow_symlinks=False)
        if not stat.S_ISREG(s.st_mode) or (expect is not None and not safeio.same(s, expect)):
            return f"snapshot {name} left in {where}: not the file quarantined"
        if not safeio.rename_at(q_fd, name, src_fd, name, expect=safeio.ident(s)):
            # A new copy is in place (or the name is taken): ours is not needed.
            try:
                os.stat(name, dir_fd=src_fd, follow_symlinks=False)
            except FileNotFoundError:
                return f"snapshot {name} left in {where}: could not be moved back"
            safeio.unlink_at(q_fd, name, safeio.ident(s))
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"snapshot {name} left in {where}: {exc.strerror or exc}"
    return None


def _recover(src_fd: int, src: Path, t0: float) -> list[str]:
    """Put back what an interrupted sweep left in quarantine (its process gone, or a day
    old): those snapshots were never proven unreferenced by a finished sweep. A
    ``.sweep-*`` name that is not a folder (a planted link) is left alone."""
    errors: list[str] = []
    host = socket.gethostname()
    with os.scandir(src_fd) as it:
        names = sorted(e.name for e in it if e.name.startswith(".sweep-"))
    for qname in names:
        parts = qname.split("-")
        try:
            pid, started = int(parts[-2]), float(parts[-1])
        except (ValueError, IndexError):
            continue
        mine = "-".join(parts[1:-2]) == host
        alive = mine and pid != os.getpid() and _pid_alive(pid)
        if alive and t0 - started < 86400:
            continue
        try:
            q_fd = safeio.open_dir(qname, src_fd)
        except OSError:
            continue  # a link or a file, or gone: not a quarantine
        try:
            for n in sorted(os.listdir(q_fd)):
                err = _put_back(src_fd, q_fd, n, str(src / qname))
                if err:
                    errors.append(err)
        finally:
            os.close(q_fd)
        with contextlib.suppress(OSError):
            os.rmdir(qname, dir_fd=src_fd)
    return errors


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _open_sources(compile_cache: Path) -> int | None:
    """An fd on ``<compile cache>/.vllm-cache-tools/sources``, none of them followed if a
    link (the root above them is, as the user named it); None when missing or not a real
    folder."""
    try:
        return safeio.open_dirs(compile_cache.parent,
                                [compile_cache.name, STATE_DIRNAME, SOURCES_DIRNAME])
    except OSError:
        return None


def sweep_snapshots(compile_cache: Path, *, min_age_s: float = 600.0,
                    now: float | None = None) -> SnapshotSweep:
    """Remove unreferenced snapshots older than ``min_age_s`` (see the module docstring)."""
    src_fd = _open_sources(compile_cache)
    if src_fd is None:
        return SnapshotSweep()
    try:
        return _sweep(compile_cache, src_fd, min_age_s,
                      time.time() if now is None else now)
    finally:
        os.close(src_fd)


def _sweep(compile_cache: Path, src_fd: int, min_age_s: float, t0: float) -> SnapshotSweep:
    src = compile_cache / STATE_DIRNAME / SOURCES_DIRNAME
    try:
        errors = _recover(src_fd, src, t0)
        with os.scandir(src_fd) as it:
            listing = {d.name: d.stat(follow_symlinks=False) for d in it
                       if _is_sha(d.name) and d.is_file(follow_symlinks=False)}
    except OSError as exc:
        return SnapshotSweep(stopped=f"cannot list {src}: {exc.strerror or exc}")
    refs, bad = referenced(compile_cache)
    if bad is not None:
        return SnapshotSweep(stopped=f"a manifest could not be read ({bad}): all kept",
                             errors=tuple(errors))
    young = [n for n, st in listing.items() if n not in refs and t0 - st.st_mtime < min_age_s]
    candidates = sorted(n for n, st in listing.items()
                        if n not in refs and t0 - st.st_mtime >= min_age_s)
    kept_ref = sum(1 for n in listing if n in refs)
    if not candidates:
        return SnapshotSweep(kept_referenced=kept_ref, kept_young=len(young),
                             errors=tuple(errors))
    qname = f".sweep-{socket.gethostname()}-{os.getpid()}-{int(t0)}"
    quarantine = src / qname
    try:
        os.mkdir(qname, 0o700, dir_fd=src_fd)
        q_fd = safeio.open_dir(qname, src_fd)
    except OSError as exc:
        return SnapshotSweep(kept_referenced=kept_ref, kept_young=len(young),
                             stopped=f"cannot create {quarantine}: {exc.strerror or exc}",
                             errors=tuple(errors))
    moved: list[str] = []
    removed: list[str] = []
    back: set[str] = set()
    freed = 0
    bad = None
    try:
        qs = os.fstat(q_fd)
        if qs.st_uid != os.geteuid() or stat.S_IMODE(qs.st_mode) & 0o077:
            raise OSError(0, f"{quarantine} is not the private folder just made")
        for n in candidates:
            try:
                if safeio.rename_at(src_fd, n, q_fd, n, expect=safeio.ident(listing[n])):
                    moved.append(n)
            except OSError as exc:
                errors.append(f"snapshot {n}: {exc.strerror or exc}")
        # A recorder that reused one just before it moved touched it: it is young again.
        for n in moved:
            with contextlib.suppress(OSError):
                if t0 - os.stat(n, dir_fd=q_fd, follow_symlinks=False).st_mtime < min_age_s:
                    back.add(n)
        late, bad = referenced(compile_cache, newer_than=t0 - LATE_WINDOW_S)
        back |= set(moved) if bad is not None else late & set(moved)
        for n in moved:
            if n in back:
                continue
            try:
                if not safeio.unlink_at(q_fd, n, safeio.ident(listing[n])):
                    back.add(n)
                    continue
                removed.append(n)
                freed += listing[n].st_size
            except OSError as exc:
                back.add(n)
                errors.append(f"snapshot {n}: {exc.strerror or exc}")
    except OSError as exc:
        errors.append(f"{exc.strerror or exc}")
        back |= set(moved)
    finally:
        for n in moved:
            if n not in removed:
                err = _put_back(src_fd, q_fd, n, str(quarantine), safeio.ident(listing[n]))
                if err:
                    errors.append(err)
        os.close(q_fd)
        with contextlib.suppress(OSError):
            os.rmdir(qname, dir_fd=src_fd)
    return SnapshotSweep(tuple(removed), freed, kept_ref, len(young), tuple(sorted(back)),
                         f"a manifest could not be read ({bad}): all put back"
                         if bad is not None else None, tuple(errors))


__all__ = ["LATE_WINDOW_S", "SnapshotSweep", "referenced", "sweep_snapshots"]
