"""Reader for the recorder's manifests (``vct-manifest.<digest>.json``, written by
:mod:`vllm_cache_tools.recorder`) and its per-host ledgers. Plain JSON; a manifest that cannot
be read is reported, never guessed at. A ledger line is judged by the one record and rules of
:mod:`vllm_cache_tools.read.ledger_stream` (:class:`LedgerEvent`), which ``stats`` streams."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vllm_cache_tools.layout import (
    LEDGER_DIRNAME,
    SOURCES_DIRNAME,
    STATE_DIRNAME,
    is_manifest_name,
)
from vllm_cache_tools.read import jsontext
from vllm_cache_tools.read.errors import ReadError, unreadable
from vllm_cache_tools.read.ledger_stream import LedgerEvent as LedgerEvent  # re-exported
from vllm_cache_tools.read.ledger_stream import parse_ledger_line
from vllm_cache_tools.read.noatime import open_noatime, read_noatime

MAX_MANIFEST_BYTES = 8 * 1024 * 1024
"""Real manifests are ~60 KB (config, env and Inductor factors of one start)."""
MAX_LEDGER_BYTES = 64 * 1024 * 1024
"""Of each host's ledger, only the newest this many bytes are read (~300k events)."""
MAX_LEDGER_LINE = 64 * 1024
MAX_LINE_PROBLEMS = 20
"""Bad ledger lines reported one by one per file; the rest are counted."""

_OBJECT_FIELDS = ("config", "env", "inductor", "versions", "timings", "model", "key_parts",
                  "forward")
"""Manifest fields the recorder writes as JSON objects (or null), which readers index."""


@dataclass(frozen=True)
class Manifest:
    path: Path
    digest: str
    tree: str
    key: str
    rank: str
    prefix: str
    created: float | None
    data: dict[str, Any] = field(hash=False, compare=False, repr=False)
    sha256: str = field(default="", compare=False, repr=False)
    """Of the bytes ``data`` was parsed from (a pack checks that they are the ones it carries)."""

    @property
    def config(self) -> dict[str, Any]:
        return self.data.get("config") or {}

    @property
    def inductor(self) -> dict[str, Any] | None:
        return self.data.get("inductor")

    @property
    def env(self) -> dict[str, Any]:
        return self.data.get("env") or {}


def read_manifest(path: Path) -> Manifest:
    try:
        raw = read_noatime(path, MAX_MANIFEST_BYTES + 1)
    except OSError as exc:
        raise unreadable(path.name, exc) from None
    return manifest_from_bytes(raw, path)


def manifest_from_bytes(raw: bytes, path: Path) -> Manifest:
    """The manifest whose bytes are ``raw`` (read from ``path``), checked as
    :func:`read_manifest` does."""
    if len(raw) > MAX_MANIFEST_BYTES:
        raise jsontext.beyond_limits(path.name, f"larger than {MAX_MANIFEST_BYTES} bytes")
    data = jsontext.loads(raw, path.name)
    if not isinstance(data, dict) or data.get("schema") != 1:
        raise ReadError(f"{path.name}: not a version-1 recorder manifest")
    bad = _schema_problem(data)
    if bad:
        raise ReadError(f"{path.name}: not a recorder manifest ({bad})")

    def text(key: str) -> str:
        v = data.get(key, "")
        return v if isinstance(v, str) else ""

    return Manifest(path, text("digest"), text("tree"), text("key"), text("rank"),
                    text("prefix"), jsontext.finite_time(data.get("created")), data,
                    hashlib.sha256(raw).hexdigest())


def _schema_problem(data: dict[str, Any]) -> str | None:
    """What in ``data`` the recorder never writes and readers would trip on, or ``None``."""
    for key in _OBJECT_FIELDS:
        if data.get(key) is not None and not isinstance(data[key], dict):
            return f"{key} is not an object"
    cmd = data.get("command_line")
    if cmd is not None and not (isinstance(cmd, list) and all(isinstance(a, str) for a in cmd)):
        return "command_line is not a list of strings"
    files = data.get("traced_files")
    if files is not None:
        if not isinstance(files, list):
            return "traced_files is not a list"
        for f in files:
            if not (isinstance(f, dict) and isinstance(f.get("path"), str)
                    and isinstance(f.get("sha256"), str | type(None))):
                return "traced_files holds something other than {path, sha256} records"
    return None


def manifest_paths(entry_path: Path, layout: str) -> Iterator[Path]:
    """Manifest files of one entry: ``rank_*/<prefix>/`` (backend) or ``rank_*/`` (AOT)."""
    try:
        ranks = sorted(os.scandir(entry_path), key=lambda d: d.name)
    except OSError:
        return
    for r in ranks:
        if not (r.name.startswith("rank") and r.is_dir(follow_symlinks=False)):
            continue
        dirs = [Path(r.path)]
        if layout == "backend":
            try:
                dirs += [Path(p.path) for p in sorted(os.scandir(r.path), key=lambda d: d.name)
                         if p.is_dir(follow_symlinks=False)]
            except OSError:
                continue
        for d in dirs:
            try:
                names = sorted(n for n in os.listdir(d) if is_manifest_name(n))
            except OSError:
                continue
            yield from (d / n for n in names)


def read_manifests(entry_path: Path, layout: str) -> tuple[list[Manifest], list[str]]:
    """(manifests, problems) of one entry, oldest first."""
    out: list[Manifest] = []
    problems: list[str] = []
    for p in manifest_paths(entry_path, layout):
        try:
            out.append(read_manifest(p))
        except ReadError as exc:
            problems.append(str(exc))
    out.sort(key=lambda m: (m.created or 0.0, m.rank, m.prefix))
    return out, problems


def source_snapshot(compile_cache: Path, sha256: str) -> str | None:
    """A traced file's content as the recorder saved it (``None`` when not kept, and when
    the file's content is not what its name says: snapshots are content-addressed, and one
    whose sha256 differs from its name was not written by the recorder; see
    :func:`misnamed_snapshot`)."""
    raw = _snapshot_bytes(compile_cache, sha256)
    if raw is None or _sha256_hex(raw) != sha256:
        return None
    return raw.decode("utf-8", errors="replace")


def misnamed_snapshot(compile_cache: Path, sha256: str) -> bool:
    """Whether the snapshot named ``sha256`` is there with other content (a reader skips it
    with a warning)."""
    raw = _snapshot_bytes(compile_cache, sha256)
    return raw is not None and _sha256_hex(raw) != sha256


def _sha256_hex(raw: bytes) -> str:
    # hashlib loads OpenSSL (~5 ms): imported here, where a snapshot is checked, not by every
    # listing that reads the ledger (ls imports this module for the hit counts).
    import hashlib

    return hashlib.sha256(raw).hexdigest()


def _snapshot_bytes(compile_cache: Path, sha256: str) -> bytes | None:
    if not all(c in "0123456789abcdef" for c in sha256) or len(sha256) != 64:
        return None
    try:
        return read_noatime(compile_cache / STATE_DIRNAME / SOURCES_DIRNAME / sha256)
    except OSError:
        return None


def _ledger_lines(path: Path, name: str, problems: list[str]) -> Iterator[tuple[int, bytes]]:
    """(line number, line) of one ledger file, the newest :data:`MAX_LEDGER_BYTES` only;
    lines longer than :data:`MAX_LEDGER_LINE` are yielded cut (and then fail to parse)."""
    with open_noatime(path) as f:
        size = os.fstat(f.fileno()).st_size
        first = 1
        if size > MAX_LEDGER_BYTES:
            f.seek(size - MAX_LEDGER_BYTES)
            f.readline(MAX_LEDGER_BYTES)  # the rest of a line cut by the seek
            first = 0
            problems.append(f"ledger {name}: only its newest {MAX_LEDGER_BYTES >> 20} MB "
                            f"read (of {size >> 20} MB)")
        left = MAX_LEDGER_BYTES
        n = 0
        while left > 0:
            line = f.readline(min(MAX_LEDGER_LINE, left))
            if not line:
                return
            left -= len(line)
            cut = not line.endswith(b"\n")
            while cut and left > 0:  # skip the rest of an overlong line
                rest = f.readline(min(MAX_LEDGER_LINE, left))
                left -= len(rest)
                if not rest or rest.endswith(b"\n"):
                    break
            n += 1
            yield (n if first else 0), line


def read_ledger(compile_cache: Path) -> tuple[list[LedgerEvent], list[str]]:
    """Every host's events, in time order; unreadable lines are reported and skipped."""
    d = compile_cache / STATE_DIRNAME / LEDGER_DIRNAME
    events: list[LedgerEvent] = []
    problems: list[str] = []
    try:
        files = sorted(n for n in os.listdir(d) if n.endswith(".jsonl"))
    except OSError:
        return events, problems
    for name in files:
        bad = 0
        try:
            for n, line in _ledger_lines(d / name, name, problems):
                if not line.strip():
                    continue
                try:
                    events.append(parse_ledger_line(line))
                except ReadError as exc:
                    bad += 1
                    if bad <= MAX_LINE_PROBLEMS:
                        where = f"line {n}" if n else "a line"
                        problems.append(f"ledger {name} {where}: not a ledger event "
                                        f"({jsontext.one_line(exc, 120)})")
        except OSError as exc:
            problems.append(f"cannot read ledger {name}: {exc.strerror or exc}"
                            if not isinstance(exc, ReadError) else str(exc))
            continue
        if bad > MAX_LINE_PROBLEMS:
            problems.append(f"ledger {name}: {bad - MAX_LINE_PROBLEMS} more lines that are "
                            f"not ledger events")
    events.sort(key=lambda e: e.time)
    return events, problems
