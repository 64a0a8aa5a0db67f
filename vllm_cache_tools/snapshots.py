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
import time
from dataclasses import dataclass
from pathlib import Path

from vllm_cache_tools.locate import AOT_DIRNAME
from vllm_cache_tools.read.errors import ReadError
from vllm_cache_tools.read.manifest import manifest_paths, read_manifest
from vllm_cache_tools.recorder.layout import SOURCES_DIRNAME, STATE_DIRNAME

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


def referenced(compile_cache: Path, newer_than: float | None = None
               ) -> tuple[set[str], str | None]:
    """(sha256 of every traced-file snapshot named by a manifest in the root, the first
    manifest that could not be read or None). ``newer_than``: only manifests modified since."""
    refs: set[str] = set()
    entries: list[tuple[Path, str]] = []
    for parent, layout in ((compile_cache, "backend"), (compile_cache / AOT_DIRNAME, "aot")):
        try:
            with os.scandir(parent) as it:
                entries += [(Path(d.path), layout) for d in it
                            if not d.name.startswith(".") and d.name != AOT_DIRNAME
                            and d.is_dir(follow_symlinks=False)]
        except OSError:
            continue
    for entry, layout in entries:
        for p in manifest_paths(entry, layout):
            if newer_than is not None:
                try:
                    if p.stat().st_mtime < newer_than:
                        continue
                except OSError:
                    continue  # gone: names nothing
            try:
                m = read_manifest(p)
            except ReadError as exc:
                return refs, f"{p}: {exc}"
            for f in m.data.get("traced_files") or []:
                sha = f.get("sha256") if isinstance(f, dict) else None
                if isinstance(sha, str):
                    refs.add(sha)
    return refs, None


def sweep_snapshots(compile_cache: Path, *, min_age_s: float = 600.0,
                    now: float | None = None) -> SnapshotSweep:
    """Remove unreferenced snapshots older than ``min_age_s`` (see the module docstring)."""
    src = compile_cache / STATE_DIRNAME / SOURCES_DIRNAME
    t0 = time.time() if now is None else now
    try:
        with os.scandir(src) as it:
            listing = {d.name: d.stat(follow_symlinks=False) for d in it
                       if _is_sha(d.name) and d.is_file(follow_symlinks=False)}
    except FileNotFoundError:
        return SnapshotSweep()
    except OSError as exc:
        return SnapshotSweep(stopped=f"cannot list {src}: {exc.strerror or exc}")
    refs, bad = referenced(compile_cache)
    if bad is not None:
        return SnapshotSweep(stopped=f"a manifest could not be read ({bad}): all kept")
    young = [n for n, st in listing.items() if n not in refs and t0 - st.st_mtime < min_age_s]
    candidates = sorted(n for n, st in listing.items()
                        if n not in refs and t0 - st.st_mtime >= min_age_s)
    kept_ref = sum(1 for n in listing if n in refs)
    if not candidates:
        return SnapshotSweep(kept_referenced=kept_ref, kept_young=len(young))
    quarantine = src / f".sweep-{os.getpid()}-{int(t0)}"
    errors: list[str] = []
    try:
        quarantine.mkdir()
    except OSError as exc:
        return SnapshotSweep(kept_referenced=kept_ref, kept_young=len(young),
                             stopped=f"cannot create {quarantine}: {exc.strerror or exc}")
    moved: list[str] = []
    for n in candidates:
        try:
            os.rename(src / n, quarantine / n)
            moved.append(n)
        except OSError as exc:
            errors.append(f"snapshot {n}: {exc.strerror or exc}")
    late, bad = referenced(compile_cache, newer_than=t0 - LATE_WINDOW_S)
    back = set(moved) if bad is not None else late & set(moved)
    removed: list[str] = []
    freed = 0
    for n in moved:
        if n in back:
            with contextlib.suppress(OSError):
                if (src / n).exists():  # a recorder placed a new copy meanwhile
                    os.unlink(quarantine / n)
                else:
                    os.rename(quarantine / n, src / n)
            continue
        try:
            os.unlink(quarantine / n)
            removed.append(n)
            freed += listing[n].st_size
        except OSError as exc:
            errors.append(f"snapshot {n}: {exc.strerror or exc}")
    try:
        quarantine.rmdir()
    except OSError as exc:
        errors.append(f"{quarantine}: {exc.strerror or exc}")
    return SnapshotSweep(tuple(removed), freed, kept_ref, len(young), tuple(sorted(back)),
                         f"a manifest could not be read ({bad}): all put back"
                         if bad is not None else None, tuple(errors))


__all__ = ["LATE_WINDOW_S", "SnapshotSweep", "referenced", "sweep_snapshots"]
