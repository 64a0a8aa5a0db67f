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
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from vllm_cache_tools.locate import AOT_DIRNAME
from vllm_cache_tools.read.errors import ReadError
from vllm_cache_tools.read.manifest import read_manifest
from vllm_cache_tools.recorder.layout import SOURCES_DIRNAME, STATE_DIRNAME, is_manifest_name

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


def _put_back(src: Path, quarantine: Path, name: str) -> str | None:
    """Move a quarantined snapshot back (dropped if a recorder placed a new copy meanwhile:
    same name, same content). An error message, or None."""
    try:
        if (src / name).exists():
            os.unlink(quarantine / name)
        else:
            os.rename(quarantine / name, src / name)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"snapshot {name} left in {quarantine}: {exc.strerror or exc}"
    return None


def _recover(src: Path, t0: float) -> list[str]:
    """Put back what an interrupted sweep left in quarantine (its process gone, or a day
    old): those snapshots were never proven unreferenced by a finished sweep."""
    errors: list[str] = []
    host = socket.gethostname()
    for d in src.glob(".sweep-*"):
        parts = d.name.split("-")
        try:
            pid, started = int(parts[-2]), float(parts[-1])
        except (ValueError, IndexError):
            continue
        mine = "-".join(parts[1:-2]) == host
        alive = mine and pid != os.getpid() and _pid_alive(pid)
        if alive and t0 - started < 86400:
            continue
        for n in sorted(os.listdir(d)) if d.is_dir() else []:
            err = _put_back(src, d, n)
            if err:
                errors.append(err)
        with contextlib.suppress(OSError):
            d.rmdir()
    return errors


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def sweep_snapshots(compile_cache: Path, *, min_age_s: float = 600.0,
                    now: float | None = None) -> SnapshotSweep:
    """Remove unreferenced snapshots older than ``min_age_s`` (see the module docstring)."""
    src = compile_cache / STATE_DIRNAME / SOURCES_DIRNAME
    t0 = time.time() if now is None else now
    if not src.is_dir():
        return SnapshotSweep()
    errors = _recover(src, t0)
    try:
        with os.scandir(src) as it:
            listing = {d.name: d.stat(follow_symlinks=False) for d in it
                       if _is_sha(d.name) and d.is_file(follow_symlinks=False)}
    except OSError as exc:
        return SnapshotSweep(stopped=f"cannot list {src}: {exc.strerror or exc}",
                             errors=tuple(errors))
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
    quarantine = src / f".sweep-{socket.gethostname()}-{os.getpid()}-{int(t0)}"
    try:
        quarantine.mkdir()
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
        for n in candidates:
            try:
                os.rename(src / n, quarantine / n)
                moved.append(n)
            except FileNotFoundError:
                continue
            except OSError as exc:
                errors.append(f"snapshot {n}: {exc.strerror or exc}")
        # A recorder that reused one just before it moved touched it: it is young again.
        for n in moved:
            with contextlib.suppress(OSError):
                if t0 - (quarantine / n).stat().st_mtime < min_age_s:
                    back.add(n)
        late, bad = referenced(compile_cache, newer_than=t0 - LATE_WINDOW_S)
        back |= set(moved) if bad is not None else late & set(moved)
        for n in moved:
            if n in back:
                continue
            try:
                os.unlink(quarantine / n)
                removed.append(n)
                freed += listing[n].st_size
            except OSError as exc:
                back.add(n)
                errors.append(f"snapshot {n}: {exc.strerror or exc}")
    finally:
        for n in moved:
            if n not in removed:
                err = _put_back(src, quarantine, n)
                if err:
                    errors.append(err)
        with contextlib.suppress(OSError):
            quarantine.rmdir()
    return SnapshotSweep(tuple(removed), freed, kept_ref, len(young), tuple(sorted(back)),
                         f"a manifest could not be read ({bad}): all put back"
                         if bad is not None else None, tuple(errors))


__all__ = ["LATE_WINDOW_S", "SnapshotSweep", "referenced", "sweep_snapshots"]
