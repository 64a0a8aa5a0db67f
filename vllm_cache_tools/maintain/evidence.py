"""What prune planning judges entries by, read from the store and the system (nothing here
decides or deletes): last use (the recorder's ledger over the store's own evidence), which
model an entry belongs to (``--keep N`` counts per model), the unhittable verdict of an AOT
entry against an environment, which entries running processes hold open (/proc), and usage
per owner (``ls --by-owner``). :mod:`vllm_cache_tools.maintain.verify` shares the in-use look.
"""

from __future__ import annotations

import os
import pwd
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from vllm_cache_tools.keys.compat import Environment, aot_verdict
from vllm_cache_tools.layout import AOT_DIRNAME, COMPILE_CACHE_DIRNAME
from vllm_cache_tools.read.aot_model import AotModelInfo, read_aot_model
from vllm_cache_tools.read.errors import ReadError
from vllm_cache_tools.store.in_use import open_paths_under
from vllm_cache_tools.store.types import Entry
from vllm_cache_tools.store.usage import usage

# --------------------------------------------------------------------------------------------
# Last use


def ledger_last_used(vllm_root: Path) -> Mapping[str, float]:
    """Entry key -> when vLLM last decided it (hit or miss), from the recorder's ledger under
    ``torch_compile_cache/.vllm-cache-tools/ledger``; empty when the recorder never ran."""
    return {k: u.last for k, u in usage(vllm_root / COMPILE_CACHE_DIRNAME).items()}


def last_use(e: Entry, ledger: Mapping[str, float]) -> tuple[float | None, str | None]:
    """The later of the ledger's last decision and the store's own evidence: last use is
    never moved back (a start with the recorder off still reads the files)."""
    t = ledger.get(e.key)
    if t is not None and (e.last_used is None or t >= e.last_used):
        return t, "ledger"
    return e.last_used, e.last_used_source


# --------------------------------------------------------------------------------------------
# Model identity, verdicts, in use


_AOT_LOC = re.compile(r"^.*\((?P<file>.+):(?P<line>\d+)\)$")


def model_identity(e: Entry) -> str | None:
    """What ``--keep N`` counts per: the served model when the recorder named it (two
    checkpoints of one architecture are two models), else the model source file."""
    return e.checkpoint or model_file(e)


def model_file(e: Entry) -> str | None:
    """The model source file an entry was compiled from, when the store knows it."""
    if not e.model:
        return None
    if e.layout == "aot":
        m = _AOT_LOC.match(e.model)
        return m.group("file") if m else None
    return e.model


def owner_name(uid: int) -> str:
    """The login name of ``uid``, or ``uid N`` when it has none."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _aot_infos(e: Entry) -> list[AotModelInfo | None]:
    """System info of every rank's ``model`` (quick read: no unpickling, nothing executed)."""
    out: list[AotModelInfo | None] = []
    try:
        ranks = sorted(os.listdir(e.path))
    except OSError:
        return [None]
    for r in ranks:
        if not r.startswith("rank_"):
            continue
        m = e.path / r / "model"
        if m.is_symlink():
            out.append(None)
            continue
        try:
            out.append(read_aot_model(m, full=False))
        except (ReadError, OSError):
            out.append(None)
    return out or [None]


def unhittable_verdict(e: Entry, env: Environment) -> tuple[str, str]:
    if e.layout != "aot":
        return "unknown", ("backend entries record no torch or hardware versions (their "
                           "compiler hash needs the live hashing recipes)")
    verdicts = [aot_verdict(i, env) for i in _aot_infos(e)]
    bad = [v for v in verdicts if v[0] == "unhittable"]
    if bad:
        return bad[0]
    unknown = [v for v in verdicts if v[0] == "unknown"]
    return unknown[0] if unknown else verdicts[0]


def busy_entries(vllm_root: Path, open_paths: Mapping[str, set[int]] | None = None
                 ) -> dict[str, list[int]]:
    """Entry folder (relative to the root, e.g. ``torch_compile_cache/<key>``) -> pids that
    have one of its files open or mapped."""
    if open_paths is None:
        open_paths = open_paths_under(vllm_root)
    real = os.path.realpath(vllm_root).rstrip("/") + "/"
    out: dict[str, set[int]] = {}
    for path, pids in open_paths.items():
        if not path.startswith(real):
            continue
        parts = path[len(real):].split("/")
        if parts[0] == COMPILE_CACHE_DIRNAME and len(parts) > 2:
            rel = parts[:3] if parts[1] == AOT_DIRNAME else parts[:2]
        elif parts[0] == AOT_DIRNAME and len(parts) > 1:
            rel = parts[:2]
        else:
            continue
        out.setdefault("/".join(rel), set()).update(pids)
    return {k: sorted(v) for k, v in out.items()}


def in_use_elsewhere(held: str) -> str:
    """Why an entry stays when a write lease, not /proc, found one of its files open
    (:func:`~vllm_cache_tools.store.in_use.held_open_at`)."""
    return f"in use: {held} is open in a process /proc does not show us (another user's?)"


def entry_rel_path(tree: str, key: str) -> str:
    """An entry folder relative to the root (how :func:`busy_entries` names it)."""
    return {"backend": f"{COMPILE_CACHE_DIRNAME}/{key}",
            "aot": f"{COMPILE_CACHE_DIRNAME}/{AOT_DIRNAME}/{key}",
            "aot-old": f"{AOT_DIRNAME}/{key}"}[tree]



@dataclass(frozen=True)
class OwnerUsage:
    """Usage of one owner (or set of owners, for entries with files of several users)."""

    owner: str
    uids: tuple[int, ...]
    entries: int
    size_bytes: int
    disk_bytes: int
    files: int = 0


def owner_usage(entries: Sequence[Entry]) -> list[OwnerUsage]:
    """Per-owner usage for ``ls --by-owner`` (who would ``prune --all-users`` affect). An
    entry counts for the owners of its files; one written by several users (ranks run as
    different users) counts once, under all of them together."""
    acc: dict[tuple[int, ...], list[int]] = {}
    for e in entries:
        row = acc.setdefault(tuple(sorted(set(e.stats.owners))), [0, 0, 0, 0])
        row[0] += 1
        row[1] += e.size_bytes
        row[2] += e.disk_bytes
        row[3] += e.stats.files
    out = [OwnerUsage("+".join(owner_name(u) for u in uids) or "-", uids, n, size, disk, files)
           for uids, (n, size, disk, files) in acc.items()]
    return sorted(out, key=lambda o: -o.size_bytes)

