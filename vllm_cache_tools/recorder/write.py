"""The recorder's writes: content-addressed manifests and source snapshots (a complete file
under a random new name, then ``link``-ed into place: atomic, and an existing record is never
replaced) and ledger events (one ``write`` of one line under ``flock`` on a per-host file).

Every write goes through :mod:`vllm_cache_tools.safeio`: the compile cache folder is
taken as vLLM named it, every folder below it is opened without following links, and nothing
is written through a name someone else made (a shared root lets other users plant names). A
ledger file that is not a regular file of ours (another user's on a shared root, or a planted
link) is left alone and this user's events go to ``<host>.<uid>.jsonl`` instead; the ledger
readers read every ``*.jsonl``. Standard library only; every function may raise ``OSError``
(the hooks swallow it)."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import stat
from typing import Any

from vllm_cache_tools import safeio
from vllm_cache_tools.layout import (
    LEDGER_DIRNAME,
    MANIFEST_PREFIX,
    MANIFEST_SUFFIX,
    SNAPSHOT_CAP,
    SOURCES_DIRNAME,
    STATE_DIRNAME,
)

VOLATILE = ("created", "pid", "host", "timings", "command_line")
"""Manifest fields that describe the start, not what it hashed: left out of the digest (each
start's command line is in its ledger event)."""


def manifest_digest(manifest: dict[str, Any]) -> str:
    stable = {k: v for k, v in manifest.items() if k not in VOLATILE}
    blob = json.dumps(stable, sort_keys=True, default=repr).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def _place(dir_fd: int, name: str, data: bytes, touch: bool = False) -> bool:
    """Create ``name`` in ``dir_fd`` with ``data`` unless the name exists; True when this
    call created it. ``touch``: an existing snapshot's mtime is set to now (reused by this
    start: the snapshot sweep never removes one touched within its minimum age; a planted
    link or non-file is never touched), and one removed at that moment is placed again."""
    if touch:
        if safeio.touch_own(dir_fd, name) is not None:
            return False
    elif _exists(dir_fd, name):
        return False
    return safeio.place_at(dir_fd, name, data)


def _exists(dir_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        return True
    except FileNotFoundError:
        return False


def _writable_dirs(base: str, rel: str | list[str]) -> int:
    """An fd on ``base/rel`` (made when missing), below ``base`` without following links,
    and ours or group-shared (:func:`safeio.check_writable_folder`)."""
    fd = safeio.open_dirs(base, rel, create=True)
    try:
        safeio.check_writable_folder(fd, os.path.join(base, *([rel] if isinstance(rel, str)
                                                                  else rel)))
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_manifest(entry_dir: str, manifest: dict[str, Any],
                   base: str | None = None) -> tuple[str, bool]:
    """(digest, created) for ``manifest`` placed in ``entry_dir``. ``base``: the folder vLLM
    named (the compile cache); the folders from there to ``entry_dir`` are not followed if
    they are links. Without it only ``entry_dir``'s last component is checked."""
    digest = manifest_digest(manifest)
    if base is None:
        base, rel = os.path.split(os.path.normpath(entry_dir))
    else:
        rel = os.path.relpath(os.path.normpath(entry_dir), os.path.normpath(base))
        if rel == os.pardir or rel.startswith(os.pardir + os.sep) or os.path.isabs(rel):
            raise safeio.UnsafeTree(0, f"{entry_dir} is not under {base}")
    data = json.dumps({**manifest, "digest": digest}, indent=1, sort_keys=True,
                      default=repr).encode()
    fd = _writable_dirs(base, rel)
    try:
        created = _place(fd, f"{MANIFEST_PREFIX}{digest}{MANIFEST_SUFFIX}", data)
    finally:
        os.close(fd)
    return digest, created


def state_dir(compile_cache: str) -> str:
    return os.path.join(compile_cache, STATE_DIRNAME)


def snapshot_file(compile_cache: str, path: str) -> dict[str, Any]:
    """``{path, sha256, size, snapshot}`` for one traced file; its content is saved once under
    ``sources/<sha256>`` when it is at most SNAPSHOT_CAP bytes. The traced file is read only
    if it is a regular file (never blocks on a FIFO)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise OSError(0, "not a regular file")
            data = f.read(SNAPSHOT_CAP + 1)
            size = st.st_size
            h = hashlib.sha256(data)
            if len(data) > SNAPSHOT_CAP:  # over the cap: hash the rest without keeping it
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
                size = max(size, len(data))
    except OSError:
        return {"path": path, "sha256": None, "size": None, "snapshot": False}
    sha = h.hexdigest()
    kept = len(data) <= SNAPSHOT_CAP
    if kept:
        size = len(data)
        d = _writable_dirs(compile_cache, [STATE_DIRNAME, SOURCES_DIRNAME])
        try:
            _place(d, sha, data, touch=True)
        finally:
            os.close(d)
    return {"path": path, "sha256": sha, "size": size, "snapshot": kept}


def ledger_names(host: str, uid: int) -> tuple[str, str]:
    """The per-host ledger file, and this user's own when that one is not ours."""
    return f"{host}.jsonl", f"{host}.{uid}.jsonl"


def append_event(compile_cache: str, event: dict[str, Any]) -> None:
    host = (socket.gethostname() or "unknown-host").replace("/", "_")
    line = (json.dumps(event, sort_keys=True, default=repr) + "\n").encode()
    d = _writable_dirs(compile_cache, [STATE_DIRNAME, LEDGER_DIRNAME])
    try:
        for name in ledger_names(host, os.geteuid()):
            if safeio.append_own(d, name, line):
                return
        raise safeio.UnsafeTree(0, f"ledger files for {host} are not ours: event not kept")
    finally:
        os.close(d)
