"""The files the recorder moved aside at a load failure (``recorder/quarantine.py``): one
folder per move under ``torch_compile_cache/.vllm-cache-tools/quarantine/``, each with the
``why.json`` the recorder wrote. Read for ``verify`` (a note per folder) and ``ls`` (a footer);
never removed here."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from vllm_cache_tools.layout import QUARANTINE_DIRNAME, QUARANTINE_NOTE, STATE_DIRNAME
from vllm_cache_tools.read import jsontext
from vllm_cache_tools.read.errors import ReadError
from vllm_cache_tools.read.noatime import read_noatime

NOTE_CAP = 64 * 1024
"""``why.json`` is a few hundred bytes."""


@dataclass(frozen=True)
class QuarantinedFiles:
    path: Path
    """The quarantine folder."""
    tree: str
    key: str
    rank: str
    prefix: str
    files: tuple[str, ...]
    size: int
    """Bytes of the regular files in the folder (``why.json`` left out)."""
    time: float | None
    reason: str
    """vLLM's failure as the recorder caught it (``Type: message``, first line), or why the
    note could not be read."""


def quarantine_dir(compile_cache: Path) -> Path:
    return compile_cache / STATE_DIRNAME / QUARANTINE_DIRNAME


def quarantined(compile_cache: Path) -> list[QuarantinedFiles]:
    """Every quarantine folder under the compile cache, oldest first (no link followed)."""
    base = quarantine_dir(compile_cache)
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return []
    out = []
    for name in names:
        d = base / name
        try:
            if not stat.S_ISDIR(os.lstat(d).st_mode):
                continue
            files, size = [], 0
            for e in os.scandir(d):
                if e.name != QUARANTINE_NOTE and e.is_file(follow_symlinks=False):
                    files.append(e.name)
                    size += e.stat(follow_symlinks=False).st_size
        except OSError:
            continue
        note: dict[str, object] = {}
        reason = ""
        try:
            loaded = jsontext.loads(read_noatime(d / QUARANTINE_NOTE, NOTE_CAP),
                                    f"{name}/{QUARANTINE_NOTE}")
            note = loaded if isinstance(loaded, dict) else {}
            reason = str(note.get("reason") or "")
        except (ReadError, OSError) as exc:
            reason = f"(no readable {QUARANTINE_NOTE}: {jsontext.one_line(exc)})"
        out.append(QuarantinedFiles(
            path=d, tree=str(note.get("tree") or "?"), key=str(note.get("key") or ""),
            rank=str(note.get("rank") or ""), prefix=str(note.get("prefix") or ""),
            files=tuple(sorted(files)), size=size, time=jsontext.finite_time(note.get("time")),
            reason=reason))
    return out
