"""Test support: a victim's folder outside a cache root, and an exact record of it (paths,
types, sizes, mtimes, modes, content hashes, link targets), to prove that no command changed
anything outside the root."""

from __future__ import annotations

import hashlib
import os
import stat
import time
from pathlib import Path

OLD_SHA = "ab" * 32
"""A 64-hex name (what the snapshot sweep deletes when it is old and unreferenced)."""

State = dict[str, tuple[object, ...]]


def make_victim(d: Path, snapshot_names: tuple[str, ...] = ()) -> Path:
    """A victim's folder: notes, a nested folder, a day-old 64-hex file, a ``sources/`` and
    ``ledger/`` like the recorder's (so a redirected state folder finds what it expects), and
    files named like real snapshots (``snapshot_names``)."""
    d.mkdir(parents=True, exist_ok=True)
    (d / "notes").write_text("the victim's notes\n")
    (d / "sub").mkdir(exist_ok=True)
    (d / "sub" / "deep.txt").write_text("deep\n")
    for sub in ("", "sources", "ledger"):
        (d / sub).mkdir(exist_ok=True)
        (d / sub / OLD_SHA).write_bytes(b"victim data named like a snapshot\n")
    (d / "ledger" / "host.jsonl").write_text("victim ledger-like file\n")
    for n in snapshot_names:
        (d / n).write_bytes(b"victim file named like a real snapshot\n")
        (d / "sources" / n).write_bytes(b"victim file named like a real snapshot\n")
    day_ago = time.time() - 86400
    for dirpath, _dirnames, filenames in os.walk(d):
        for n in filenames:
            os.utime(os.path.join(dirpath, n), (day_ago, day_ago))
    for dirpath, dirnames, _ in os.walk(d, topdown=False):
        for n in dirnames:
            os.utime(os.path.join(dirpath, n), (day_ago, day_ago))
    os.utime(d, (day_ago, day_ago))
    return d


def tree_state(d: Path) -> State:
    """Every name under ``d`` (``d`` included) -> (type, size, mtime_ns, mode, uid, sha256 or
    link target). Symlinks are recorded, never followed."""
    out: State = {}
    for p in [d, *sorted(d.rglob("*"))]:
        s = p.lstat()
        rel = str(p.relative_to(d))
        if stat.S_ISLNK(s.st_mode):
            out[rel] = ("link", os.readlink(p))
        elif stat.S_ISDIR(s.st_mode):
            out[rel] = ("dir", s.st_mtime_ns, stat.S_IMODE(s.st_mode), s.st_uid)
        elif stat.S_ISREG(s.st_mode):
            out[rel] = ("file", s.st_size, s.st_mtime_ns, stat.S_IMODE(s.st_mode), s.st_uid,
                        hashlib.sha256(p.read_bytes()).hexdigest())
        else:
            out[rel] = ("other", stat.S_IFMT(s.st_mode), s.st_mtime_ns)
    return out


def changed(before: State, after: State) -> list[str]:
    """Names added, removed or changed between two states (empty when identical)."""
    return sorted(n for n in set(before) | set(after) if before.get(n) != after.get(n))
