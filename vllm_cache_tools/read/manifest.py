"""Reader for the recorder's manifests (``vct-manifest.<digest>.json``, written by
:mod:`vllm_cache_tools.recorder`) and its per-host ledgers. Plain JSON; a manifest that cannot
be read is reported, never guessed at."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vllm_cache_tools.read.errors import ReadError, unreadable
from vllm_cache_tools.read.noatime import read_noatime
from vllm_cache_tools.recorder.layout import (
    LEDGER_DIRNAME,
    SOURCES_DIRNAME,
    STATE_DIRNAME,
    is_manifest_name,
)

MAX_MANIFEST_BYTES = 64 * 1024 * 1024


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
        raw = read_noatime(path, MAX_MANIFEST_BYTES)
        data = json.loads(raw)
    except OSError as exc:
        raise unreadable(path.name, exc) from None
    except ValueError as exc:
        raise ReadError(f"invalid manifest {path.name}: {exc}") from None
    if not isinstance(data, dict) or data.get("schema") != 1:
        raise ReadError(f"{path.name}: not a version-1 recorder manifest")
    return Manifest(path, str(data.get("digest", "")), str(data.get("tree", "")),
                    str(data.get("key", "")), str(data.get("rank", "")),
                    str(data.get("prefix", "")),
                    data.get("created") if isinstance(data.get("created"), (int, float))
                    else None, data)


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
    """A traced file's content as the recorder saved it (``None`` when not kept)."""
    if not all(c in "0123456789abcdef" for c in sha256) or len(sha256) != 64:
        return None
    try:
        return read_noatime(compile_cache / STATE_DIRNAME / SOURCES_DIRNAME / sha256).decode(
            "utf-8", errors="replace")
    except OSError:
        return None


@dataclass(frozen=True)
class LedgerEvent:
    time: float
    event: str
    tree: str
    key: str
    rank: str
    prefix: str
    host: str
    pid: int | None
    manifest: str | None
    reason: str | None
    seconds: float | None
    recorder_s: float | None = None
    """Time that process had spent in the recorder when it wrote this event."""


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
        try:
            text = read_noatime(d / name).decode("utf-8", errors="replace")
        except OSError as exc:
            problems.append(f"cannot read ledger {name}: {exc.strerror or exc}")
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                e = json.loads(line)
                events.append(LedgerEvent(
                    float(e["time"]), str(e["event"]), str(e["tree"]), str(e["key"]),
                    str(e.get("rank", "")), str(e.get("prefix", "")), str(e.get("host", "")),
                    e.get("pid"), e.get("manifest"), e.get("reason"), e.get("seconds"),
                    e.get("recorder_s")))
            except (ValueError, KeyError, TypeError):
                problems.append(f"ledger {name} line {n}: not a ledger event")
    events.sort(key=lambda e: e.time)
    return events, problems
