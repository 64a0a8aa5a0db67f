"""The recorder's writes: content-addressed manifests and source snapshots (write to a
temporary name, then ``link`` into place: atomic, and an existing record is never replaced) and
ledger events (one ``write`` of one line under ``flock`` on a per-host file). Standard library
only; every function may raise ``OSError`` (the hooks swallow it)."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import socket
from typing import Any

from vllm_cache_tools.recorder.layout import (
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


def _place(path: str, data: bytes, touch: bool = False) -> bool:
    """Create ``path`` with ``data`` unless it exists; True when this call created it.
    ``touch``: an existing file's mtime is set to now (a snapshot reused by this start: the
    snapshot sweep never removes one touched within its minimum age), and one removed at
    that moment is placed again."""
    if os.path.exists(path):
        if not touch:
            return False
        try:
            os.utime(path)
            return False
        except FileNotFoundError:
            pass  # swept just now: place it again
        except OSError:
            return False
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    try:
        os.link(tmp, path)  # fails if another process placed it first: theirs stays
        return True
    except FileExistsError:
        return False
    finally:
        os.unlink(tmp)


def write_manifest(entry_dir: str, manifest: dict[str, Any]) -> tuple[str, bool]:
    """(digest, created) for ``manifest`` placed in ``entry_dir``."""
    digest = manifest_digest(manifest)
    os.makedirs(entry_dir, exist_ok=True)
    data = json.dumps({**manifest, "digest": digest}, indent=1, sort_keys=True,
                      default=repr).encode()
    created = _place(os.path.join(entry_dir, f"{MANIFEST_PREFIX}{digest}{MANIFEST_SUFFIX}"),
                     data)
    return digest, created


def state_dir(compile_cache: str) -> str:
    return os.path.join(compile_cache, STATE_DIRNAME)


def snapshot_file(compile_cache: str, path: str) -> dict[str, Any]:
    """``{path, sha256, size, snapshot}`` for one traced file; its content is saved once under
    ``sources/<sha256>`` when it is at most SNAPSHOT_CAP bytes."""
    try:
        with open(path, "rb") as f:
            data = f.read(SNAPSHOT_CAP + 1)
            size = os.fstat(f.fileno()).st_size
            h = hashlib.sha256(data)
            if size > len(data):  # over the cap: hash the rest without keeping it
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
    except OSError:
        return {"path": path, "sha256": None, "size": None, "snapshot": False}
    sha = h.hexdigest()
    kept = size <= SNAPSHOT_CAP
    if kept:
        d = os.path.join(state_dir(compile_cache), SOURCES_DIRNAME)
        os.makedirs(d, exist_ok=True)
        _place(os.path.join(d, sha), data, touch=True)
    return {"path": path, "sha256": sha, "size": size, "snapshot": kept}


def append_event(compile_cache: str, event: dict[str, Any]) -> None:
    d = os.path.join(state_dir(compile_cache), LEDGER_DIRNAME)
    os.makedirs(d, exist_ok=True)
    host = socket.gethostname() or "unknown-host"
    line = (json.dumps(event, sort_keys=True, default=repr) + "\n").encode()
    fd = os.open(os.path.join(d, f"{host}.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, line)
    finally:
        os.close(fd)  # closing releases the lock
