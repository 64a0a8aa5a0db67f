"""``prune`` and ``rm``: policies -> a frozen :class:`PrunePlan` -> :func:`execute_plan`.

Planning reads the store (``scan``) and touches nothing. The plan names every entry to go with
its reasons and the bytes it frees, and every entry a policy chose but a protection kept, with
why. Executing re-checks each planned entry under a per-entry lock right before moving it (the
plan may be seconds old) and moves it into the trash in one rename; removal happens there
(:mod:`vllm_cache_tools.maintain.trash`).

Protections, in the order they are checked:
- in use: a file of the entry is open or mapped by a running process (/proc);
- ``unknown`` state: parts of the entry could not be read;
- grace: a file or folder of the entry was modified within ``grace_s`` (a compile may be
  writing it; vLLM writes by tmp + rename, which changes the folder's mtime);
- ownership: files owned by another user, unless ``all_users``.

An entry is always removed whole: for an AOT entry that is every ``rank_*`` folder and the
``inductor_cache/`` they share, so a rank never loses the Inductor cache under it; if any file
of any rank is in use, the whole entry stays.
"""

from __future__ import annotations

import os
import pwd
import re
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from vllm_cache_tools.errors import VctError
from vllm_cache_tools.keys.compat import Environment, aot_verdict, describe_env_for_json
from vllm_cache_tools.keys.source_link import install_prefix, sources_code_hashes
from vllm_cache_tools.layout import AOT_DIRNAME, COMPILE_CACHE_DIRNAME
from vllm_cache_tools.maintain.snapshot_sweep import SnapshotSweep, sweep_snapshots
from vllm_cache_tools.maintain.trash import (
    EntryLocks,
    RemoveResult,
    RootHandle,
    Trash,
    check_tree_at,
    entry_tree,
    is_dir_stat,
)
from vllm_cache_tools.read.aot_model import AotModelInfo, read_aot_model
from vllm_cache_tools.read.errors import ReadError
from vllm_cache_tools.safeio import rename_at
from vllm_cache_tools.store.in_use import open_paths_under
from vllm_cache_tools.store.locate import display_path
from vllm_cache_tools.store.scan import read_entry
from vllm_cache_tools.store.types import CacheInfo, Entry, Layout
from vllm_cache_tools.store.usage import usage
from vllm_cache_tools.units import fmt_duration, format_size, iso

# --------------------------------------------------------------------------------------------
# Root safety


SNAPSHOT_MIN_AGE_S = 600.0
"""Recorder source snapshots younger than this (or than the grace period) are never swept."""


class RootRefused(VctError, ValueError):
    """A root we will not prune without ``--force``."""


def check_prunable_root(vllm_root: Path, force: bool = False) -> None:
    """Refuse ``/``, ``$HOME`` and folders that do not look like a vLLM cache root (no
    ``torch_compile_cache`` or ``torch_aot_compile`` folder in them) unless ``force``."""
    if force:
        return
    real = os.path.realpath(vllm_root)
    if real == "/":
        raise RootRefused("refusing to prune / (pass --force if you really mean it)")
    home = os.path.realpath(os.path.expanduser("~"))
    if real == home:
        raise RootRefused(f"refusing to prune your home folder {display_path(vllm_root)} "
                          "(pass --force if it really is a vLLM cache root)")
    if not any(os.path.isdir(os.path.join(real, n)) and not os.path.islink(os.path.join(real, n))
               for n in (COMPILE_CACHE_DIRNAME, AOT_DIRNAME)):
        raise RootRefused(f"{display_path(vllm_root)} does not look like a vLLM cache root "
                          f"(no {COMPILE_CACHE_DIRNAME} folder; pass --force to prune it anyway)")


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
# Plan


@dataclass(frozen=True)
class Policies:
    """What to remove; an entry goes if any policy chooses it."""

    older_than_s: float | None = None
    max_size_bytes: int | None = None
    keep: int | None = None
    unhittable: bool = False
    corrupt: bool = False
    partial: bool = False
    named: tuple[tuple[Path, str], ...] = ()
    """Entry folders chosen by name, each with its reason (``rm``, ``verify --fix``)."""

    def describe(self) -> tuple[str, ...]:
        out = []
        if self.named:
            out.append(f"named entries ({len(self.named)})")
        if self.older_than_s is not None:
            out.append(f"older-than {fmt_duration(self.older_than_s)}")
        if self.max_size_bytes is not None:
            out.append(f"max-size {format_size(self.max_size_bytes)}")
        if self.keep is not None:
            out.append(f"keep {self.keep} per model")
        out += [n for n, on in (("unhittable", self.unhittable), ("corrupt", self.corrupt),
                                ("partial", self.partial)) if on]
        return tuple(out)

    @property
    def empty(self) -> bool:
        return not self.describe()


@dataclass(frozen=True)
class Protections:
    grace_s: float = 600.0
    all_users: bool = False
    uid: int = field(default_factory=os.geteuid)


@dataclass(frozen=True)
class PlannedEntry:
    key: str
    layout: Layout
    path: Path
    tree: str
    """``backend``, ``aot`` or ``aot-old`` (which folder of the root holds it)."""
    size_bytes: int
    disk_bytes: int
    files: int
    reasons: tuple[str, ...]
    last_used: float | None
    last_used_source: str | None
    model: str | None
    model_file: str | None
    state: str
    ident: tuple[int, int]
    """(st_dev, st_ino) of the entry folder when planned: a folder replaced since is skipped."""
    dir_mtimes: tuple[tuple[str, int], ...]
    same_sources_aot: tuple[str, ...] = ()
    """Backend entries: keys of AOT entries compiled from the same traced sources (their
    pickled sources re-hash to this entry's code hash,
    :mod:`vllm_cache_tools.keys.source_link`). Several
    starts can share sources, so this is not proof of one start."""
    checkpoint: str | None = None
    """The served model (recorder manifests), when known."""


@dataclass(frozen=True)
class Skip:
    key: str
    layout: str
    path: Path
    reason: str


@dataclass(frozen=True)
class PrunePlan:
    root: Path
    root_source: str
    entries: tuple[PlannedEntry, ...]
    skipped: tuple[Skip, ...]
    policies: tuple[str, ...]
    protections: Protections
    made_at: float
    total_bytes: int
    """All entries under the root before pruning."""
    entry_count: int
    environment: Environment | None = None
    notes: tuple[str, ...] = ()

    @property
    def bytes(self) -> int:
        return sum(p.size_bytes for p in self.entries)

    def groups(self) -> list[tuple[str | None, list[PlannedEntry]]]:
        """Planned entries by the model source file both layouts record (AOT: the compiled
        code object's file; backend: the ``# File:`` of ``computation_graph.py``). That a
        backend key and an AOT entry came from one start cannot be proven from the store yet,
        so they are grouped by model only, never paired."""
        groups: dict[str | None, list[PlannedEntry]] = {}
        for p in self.entries:
            groups.setdefault(p.checkpoint or p.model_file, []).append(p)
        return sorted(groups.items(), key=lambda kv: (kv[0] is None, kv[0] or ""))


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


def _owner_name(uid: int) -> str:
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


def entry_rel_path(tree: str, key: str) -> str:
    """An entry folder relative to the root (how :func:`busy_entries` names it)."""
    return {"backend": f"{COMPILE_CACHE_DIRNAME}/{key}",
            "aot": f"{COMPILE_CACHE_DIRNAME}/{AOT_DIRNAME}/{key}",
            "aot-old": f"{AOT_DIRNAME}/{key}"}[tree]


def plan_prune(info: CacheInfo, policies: Policies, protections: Protections | None = None,
               *, environment: Environment | None = None, now: float | None = None,
               busy: Mapping[str, Sequence[int]] | None = None,
               ledger: Mapping[str, float] | None = None,
               link_sources: bool = False) -> PrunePlan:
    """Build the plan. ``info`` should come from ``scan(check_in_use=False)``: in-use is
    judged here from ``busy`` (default: a fresh /proc look), so an in-use entry still shows
    what a policy thought of it. ``link_sources`` adds, for planned backend entries, the AOT
    entries proven to share their traced sources (deep reads; bounded by ``LINK_LIMITS``)."""
    prot = protections or Protections()
    now = time.time() if now is None else now
    ledger = ledger_last_used(info.root) if ledger is None else ledger
    busy = busy_entries(info.root) if busy is None else busy
    entries = list(info.entries)
    lu = {id(e): last_use(e, ledger) for e in entries}
    chosen: dict[int, list[str]] = {}
    undecided: list[tuple[Entry, str, str]] = []
    """(entry, question, why): entries a policy asked about but could not judge."""
    notes: list[str] = []

    def choose(e: Entry, reason: str) -> None:
        chosen.setdefault(id(e), []).append(reason)

    named = {os.path.realpath(p): why for p, why in policies.named}
    for e in entries:
        if named and os.path.realpath(e.path) in named:
            choose(e, named[os.path.realpath(e.path)])
        if policies.corrupt and e.state == "corrupt":
            choose(e, f"corrupt: {e.state_detail}")
        if policies.partial and e.state == "partial":
            choose(e, f"partial: {e.state_detail}")
        if (policies.corrupt or policies.partial) and e.state == "unknown":
            undecided.append((e, "corrupt?" if policies.corrupt else "partial?",
                              e.state_detail or "not judged: parts could not be read"))
        if policies.older_than_s is not None:
            t, src = lu[id(e)]
            if t is not None and now - t > policies.older_than_s:
                choose(e, f"older than {fmt_duration(policies.older_than_s)}: last used "
                          f"{fmt_duration(now - t)} ago ({src})")
    if policies.keep is not None:
        by_model: dict[tuple[str, str], list[Entry]] = {}
        for e in entries:
            mf = model_identity(e)
            if mf is not None:  # no evidence which model it is: never counted
                by_model.setdefault((e.layout, mf), []).append(e)
        for (layout, mf), group in by_model.items():
            group.sort(key=lambda x: -(lu[id(x)][0] or 0.0))
            for i, e in enumerate(group[policies.keep:], start=policies.keep + 1):
                choose(e, f"keep {policies.keep} per model: {_ordinal(i)} most recently "
                          f"used {layout} entry of {mf}")
    if policies.unhittable:
        env = environment
        if env is None:
            notes.append("--unhittable: no environment given; nothing judged")
        else:
            notes.append(f"--unhittable judged against {env.describe()}" if env.torch else
                         f"--unhittable: {env.describe()}, so every entry is unknown and stays")
            for e in entries:
                if e.state == "unloadable":
                    continue  # chosen below, whatever the environment
                verdict, why = unhittable_verdict(e, env)
                if verdict == "unhittable":
                    choose(e, f"unhittable: {why}")
                elif verdict == "unknown" and id(e) not in chosen:
                    undecided.append((e, "unhittable?", f"unknown: {why}"))
        for e in entries:
            if e.state != "unloadable":
                continue
            if e.layout == "aot":
                choose(e, f"unloadable: {e.state_detail}")
            elif id(e) not in chosen:
                # Graph-only backend folders are what vLLM writes beside the mega AOT
                # artifact; their factors and manifests are explain's evidence, and they are
                # small. Named removal (`rm`) still takes them.
                undecided.append((e, "unloadable, kept:", "graph-only backend folder (its "
                                  "factors and manifests are what explain reads; `vllm-cache "
                                  "rm KEY` removes it)"))

    planned: list[PlannedEntry] = []
    skipped: list[Skip] = []
    for e in entries:
        if id(e) not in chosen:
            continue
        reasons = tuple(chosen[id(e)])
        why_not = protection_reason(e, info.root, prot, now, busy)
        if why_not is not None:
            skipped.append(Skip(e.key, e.layout, e.path, f"{why_not} [{'; '.join(reasons)}]"))
            continue
        pe = _planned(e, info.root, reasons, lu[id(e)])
        if pe is None:
            skipped.append(Skip(e.key, e.layout, e.path, "vanished while planning"))
        else:
            planned.append(pe)
    total = sum(e.size_bytes for e in entries)
    if policies.max_size_bytes is not None:
        remaining = total - sum(p.size_bytes for p in planned)
        lru = sorted((e for e in entries if id(e) not in chosen),
                     key=lambda x: (lu[id(x)][0] or 0.0, x.key))
        for e in lru:
            if remaining <= policies.max_size_bytes:
                break
            t, src = lu[id(e)]
            reason = (f"max-size {format_size(policies.max_size_bytes)}: least recently used "
                      f"(last used {fmt_duration(now - t) + ' ago' if t else 'never'}, {src})")
            why_not = protection_reason(e, info.root, prot, now, busy)
            if why_not is not None:
                skipped.append(Skip(e.key, e.layout, e.path, f"{why_not} [{reason}]"))
                continue
            pe = _planned(e, info.root, (reason,), (t, src))
            if pe is not None:
                planned.append(pe)
                remaining -= e.size_bytes
        if remaining > policies.max_size_bytes:
            notes.append(f"still {format_size(remaining)} after this plan, above --max-size "
                         f"{format_size(policies.max_size_bytes)}: the rest is protected")
    for e, question, why in undecided:
        if id(e) not in chosen:
            skipped.append(Skip(e.key, e.layout, e.path, f"{question} {why}"))
    planned.sort(key=lambda p: (p.last_used or 0.0, p.key))
    if link_sources:
        planned = _with_links(planned, entries, notes)
    sources = Counter(p.last_used_source or "none" for p in planned)
    if planned:
        note = "last use from " + ", ".join(f"{src} ({n})" for src, n in sorted(sources.items()))
        if not ledger:
            note += ("; no hit ledger (the recorder plugin has not run on this root)")
        notes.insert(0, note)
    return PrunePlan(info.root, info.root_source, tuple(planned), tuple(skipped),
                     policies.describe(), prot, now, total, len(entries), environment,
                     tuple(notes))


LINK_LIMITS = (64, 256)
"""Links are computed for at most this many planned backend entries and AOT candidates (each
AOT candidate is read whole and its sources hashed once per plan)."""


def _with_links(planned: list[PlannedEntry], entries: Sequence[Entry], notes: list[str]
                ) -> list[PlannedEntry]:
    """Add the proven same-sources links of planned backend entries: the recipe of
    :func:`vllm_cache_tools.keys.source_link.linked_aot_entries`, with each AOT entry read and
    hashed once per install prefix rather than once per backend entry."""
    backends = [p for p in planned if p.layout == "backend"]
    aots = [e for e in entries if e.layout == "aot" and e.model]
    if not backends or not aots:
        return planned
    if len(backends) > LINK_LIMITS[0] or len(aots) > LINK_LIMITS[1]:
        notes.append(f"backend/AOT source links not computed ({len(backends)} backend entries, "
                     f"{len(aots)} AOT entries; `vllm-cache show KEY` has them)")
        return planned
    infos: dict[str, AotModelInfo | None] = {}
    hashes: dict[tuple[str, str], list[str]] = {}
    out = []
    for p in planned:
        if p.layout == "backend":
            try:
                b = read_entry(p.path)
            except (OSError, ValueError):
                out.append(p)
                continue
            f = b.factors
            graph = [g for d in b.prefix_dirs if d.graph for g in d.graph.files]
            linked = []
            for a in aots:
                loc = (a.model or "").split(" (", 1)[-1].rsplit(":", 1)[0]
                if f is None or not f.code_hash or not any(g.endswith("/" + loc) for g in graph):
                    continue
                if a.key not in infos:
                    try:
                        infos[a.key] = read_entry(a.path).aot_info
                    except (OSError, ValueError):
                        infos[a.key] = None
                info = infos[a.key]
                if info is None:
                    continue
                prefix = install_prefix(graph, (s.module for s in info.inlined_sources))
                if prefix is None:
                    continue
                if (a.key, prefix) not in hashes:
                    hashes[(a.key, prefix)] = sources_code_hashes(info, prefix)
                if f.code_hash in hashes[(a.key, prefix)]:
                    linked.append(a.key)
            p = replace(p, same_sources_aot=tuple(linked))
        out.append(p)
    return out


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def protection_reason(e: Entry, root: Path, prot: Protections, now: float,
                      busy: Mapping[str, Sequence[int]]) -> str | None:
    """Why ``e`` must stay even though a policy chose it, or ``None``."""
    tree = entry_tree(e.path, root)
    if tree is None:
        return f"not inside the root {display_path(root)}"
    pids = busy.get(entry_rel_path(tree, e.key))
    if pids:
        return f"in use: open by pid {', '.join(map(str, pids[:5]))}"
    if e.state == "in-use":
        return f"in use: {e.state_detail}"
    if e.state == "unknown" or e.stats.unreadable:
        return ("parts could not be read (" + (e.state_detail if e.state == "unknown" else
                f"{len(e.stats.unreadable)} unreadable") + "); what is in them is unknown")
    newest = max([e.stats.newest_mtime or 0.0, *(m / 1e9 for _, m in e.stats.dir_mtimes)])
    if prot.grace_s > 0 and now - newest < prot.grace_s:
        return (f"modified {fmt_duration(now - newest)} ago, within --grace "
                f"{fmt_duration(prot.grace_s)}")
    if not prot.all_users:
        try:
            owners = set(e.stats.owners) | {os.lstat(e.path).st_uid}
        except OSError:
            owners = set(e.stats.owners)
        others = sorted(u for u in owners if u != prot.uid)
        if others:
            return (f"owned by {', '.join(_owner_name(u) for u in others)}, not you "
                    "(--all-users to include)")
    return None


def _planned(e: Entry, root: Path, reasons: tuple[str, ...],
             lu: tuple[float | None, str | None]) -> PlannedEntry | None:
    tree = entry_tree(e.path, root)
    try:
        s = os.lstat(e.path)
    except OSError:
        return None
    if tree is None or not is_dir_stat(s):
        return None
    return PlannedEntry(
        key=e.key, layout=e.layout, path=e.path, tree=tree, size_bytes=e.size_bytes,
        disk_bytes=e.disk_bytes, files=e.stats.files, reasons=reasons, last_used=lu[0],
        last_used_source=lu[1], model=e.model, model_file=model_file(e), state=e.state,
        ident=(s.st_dev, s.st_ino), dir_mtimes=e.stats.dir_mtimes, checkpoint=e.checkpoint)


@dataclass(frozen=True)
class OwnerUsage:
    """Usage of one owner (or set of owners, for entries with files of several users)."""

    owner: str
    uids: tuple[int, ...]
    entries: int
    size_bytes: int
    disk_bytes: int


def owner_usage(entries: Sequence[Entry]) -> list[OwnerUsage]:
    """Per-owner usage for ``ls --by-owner`` (who would ``prune --all-users`` affect). An
    entry counts for the owners of its files; one written by several users (ranks run as
    different users) counts once, under all of them together."""
    acc: dict[tuple[int, ...], list[int]] = {}
    for e in entries:
        row = acc.setdefault(tuple(sorted(set(e.stats.owners))), [0, 0, 0])
        row[0] += 1
        row[1] += e.size_bytes
        row[2] += e.disk_bytes
    out = [OwnerUsage("+".join(_owner_name(u) for u in uids) or "-", uids, n, size, disk)
           for uids, (n, size, disk) in acc.items()]
    return sorted(out, key=lambda o: -o.size_bytes)


# --------------------------------------------------------------------------------------------
# Execute


@dataclass(frozen=True)
class PruneResult:
    plan: PrunePlan
    deleted: tuple[str, ...]
    skipped: tuple[Skip, ...]
    """The plan's skips plus entries that failed the re-check when their turn came."""
    freed_bytes: int
    finished_trash: tuple[str, ...] = ()
    """Trash items left by an earlier, interrupted run and removed by this one."""
    errors: tuple[str, ...] = ()
    """Items that could not be removed from the trash (they stay there, out of vLLM's way)."""
    snapshots: SnapshotSweep | None = None
    """The recorder's source snapshots no manifest names any more, swept after deleting."""


class _Busy:
    """/proc snapshots of open/mapped files, refreshed when older than ``max_age_s``."""

    def __init__(self, root: Path, max_age_s: float) -> None:
        self.root = root
        self.max_age_s = max_age_s
        self.taken = -1e18
        self.map: dict[str, list[int]] = {}

    def get(self) -> dict[str, list[int]]:
        if time.monotonic() - self.taken > self.max_age_s:
            self.map = busy_entries(self.root)
            self.taken = time.monotonic()
        return self.map


Progress = Callable[[str, str], None]


def _move_to_trash(h: RootHandle, trash: Trash, pe: PlannedEntry, prot: Protections,
                   busy: _Busy) -> tuple[str | None, str | None]:
    """(trash name, None) when moved, else (None, why it stays). Caller holds the lock."""
    parent = h.parent_fd(pe.tree)
    if parent is None:
        return None, "its parent folder is gone or is a symlink (not followed)"
    try:
        s = os.stat(pe.key, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return None, "already gone"
    except OSError as exc:
        return None, f"cannot stat: {exc.strerror}"
    if not is_dir_stat(s):
        return None, "no longer a folder"
    if (s.st_dev, s.st_ino) != pe.ident:
        return None, "replaced since the plan was made"
    chk = check_tree_at(parent, pe.key, pe.dir_mtimes, prot.uid)
    if chk.problem is not None:
        return None, chk.problem
    if chk.changed:
        return None, "changed since the plan was made (being written?)"
    age = time.time() - chk.newest_ns / 1e9
    if prot.grace_s > 0 and age < prot.grace_s:
        return None, (f"modified {fmt_duration(age)} ago, within --grace "
                      f"{fmt_duration(prot.grace_s)}")
    pids = busy.get().get(entry_rel_path(pe.tree, pe.key))
    if pids:
        return None, f"in use: open by pid {', '.join(map(str, pids[:5]))}"
    assert trash.fd is not None
    name = trash.new_name(pe.key)
    try:
        # Only the folder checked above (a name swapped meanwhile is left where it is).
        if not rename_at(parent, pe.key, trash.fd, name, expect=pe.ident):
            return None, "replaced since the plan was made"
    except OSError as exc:
        return None, f"cannot move it to the trash: {exc.strerror}"
    return name, None


def execute_plan(plan: PrunePlan, *, workers: int = 4, proc_refresh_s: float = 1.0,
                 progress: Progress | None = None) -> PruneResult:
    """Delete what ``plan`` lists. Per entry: take its lock, re-check it (same folder, no
    folder changed since planning, nothing modified within the grace period, every folder
    ours to empty, not open per a /proc look at most ``proc_refresh_s`` old), then one
    rename into the trash. Trash items (and any left by an interrupted run) are removed by
    ``workers`` threads while later entries are still being checked."""
    prot = plan.protections
    deleted: list[str] = []
    skipped = list(plan.skipped)
    errors: list[str] = []
    finished: list[str] = []
    freed = 0
    with RootHandle(plan.root) as h:
        trash = h.trash(create=bool(plan.entries))
        if trash is None or trash.fd is None or (plan.entries and trash.locks_fd is None):
            if trash is not None:
                trash.close()
            for pe in plan.entries:
                skipped.append(Skip(pe.key, pe.layout, pe.path,
                                    "torch_compile_cache is missing or a symlink"))
            return PruneResult(plan, (), tuple(skipped), 0)
        busy = _Busy(plan.root, proc_refresh_s)
        locks = EntryLocks(trash.locks_fd) if trash.locks_fd is not None else None
        try:
            with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
                leftovers: list[tuple[str, Future[RemoveResult]]] = []
                owner = None if (prot.all_users or prot.uid == 0) else prot.uid
                for item in trash.items():
                    if owner is None or item.uid == owner:
                        leftovers.append((item.name, pool.submit(trash.remove, item.name)))
                moved: list[tuple[PlannedEntry, Future[RemoveResult]]] = []
                for pe in plan.entries:
                    assert locks is not None
                    lock_name = f"{pe.layout}-{pe.key}"
                    if not locks.try_lock(lock_name):
                        skipped.append(Skip(pe.key, pe.layout, pe.path,
                                            "another vllm-cache process is working on it"))
                        continue
                    try:
                        name, why = _move_to_trash(h, trash, pe, prot, busy)
                    finally:
                        locks.unlock(lock_name)
                    if name is None:
                        skipped.append(Skip(pe.key, pe.layout, pe.path, why or "?"))
                        continue
                    if progress is not None:
                        progress("moved", pe.key)
                    moved.append((pe, pool.submit(trash.remove, name, pe.ident)))
                for name, fut in leftovers:
                    res = fut.result()
                    if res.error:
                        errors.append(f"trash item {name}: {res.error}")
                    else:
                        finished.append(name)
                for pe, fut in moved:
                    res = fut.result()
                    deleted.append(pe.key)
                    if res.error:
                        errors.append(f"{pe.key}: moved to the trash but not fully removed: "
                                      f"{res.error}")
                    else:
                        freed += pe.size_bytes
        finally:
            if locks is not None:
                locks.close()
            trash.close()
    sweep = (sweep_snapshots(plan.root / COMPILE_CACHE_DIRNAME,
                             min_age_s=max(SNAPSHOT_MIN_AGE_S, prot.grace_s))
             if deleted else None)
    return PruneResult(plan, tuple(deleted), tuple(skipped), freed, tuple(finished),
                       tuple(errors), sweep)


def trash_leftovers(vllm_root: Path) -> list[str]:
    """Names of items an interrupted run left in the trash (read-only; for dry runs)."""
    try:
        with RootHandle(vllm_root) as h:
            t = h.trash(create=False)
            if t is None:
                return []
            try:
                return [i.name for i in t.items()]
            finally:
                t.close()
    except OSError:
        return []


# --------------------------------------------------------------------------------------------
# JSON


def planned_json(p: PlannedEntry) -> dict[str, Any]:
    return {"key": p.key, "layout": p.layout, "path": display_path(p.path),
            "size_bytes": p.size_bytes, "reasons": list(p.reasons),
            "last_used": iso(p.last_used), "last_used_source": p.last_used_source,
            "model": p.model, "checkpoint": p.checkpoint, "files": p.files,
            "same_sources_aot": list(p.same_sources_aot)}


def prune_report(plan: PrunePlan, result: PruneResult | None) -> dict[str, Any]:
    """The ``prune --json`` / ``rm --json`` document."""
    skipped = result.skipped if result is not None else plan.skipped
    out: dict[str, Any] = {
        "root": display_path(plan.root),
        "plan": {"entries": [planned_json(p) for p in plan.entries], "bytes": plan.bytes,
                 "policies": list(plan.policies), "grace_s": plan.protections.grace_s,
                 "total_bytes_before": plan.total_bytes, "notes": list(plan.notes)},
        "dry_run": result is None,
        "deleted": list(result.deleted) if result is not None else [],
        "skipped": [{"key": s.key, "reason": s.reason} for s in skipped],
        "freed_bytes": result.freed_bytes if result is not None else 0,
    }
    if result is not None:
        out["finished_trash"] = list(result.finished_trash)
        out["errors"] = list(result.errors)
        sw = result.snapshots
        out["snapshots"] = None if sw is None else {
            "removed": list(sw.removed), "freed_bytes": sw.freed_bytes,
            "kept_referenced": sw.kept_referenced, "kept_young": sw.kept_young,
            "restored": list(sw.restored), "stopped": sw.stopped, "errors": list(sw.errors)}
    if plan.environment is not None:
        out["environment"] = describe_env_for_json(plan.environment)
    return out


def plan_prune_root(root: str | os.PathLike[str] | None, policies: Policies,
                    protections: Protections | None = None, *, force: bool = False,
                    environment: Environment | None = None) -> PrunePlan:
    """What ``vllm-cache prune`` plans for ``root`` (default: resolved like vLLM), for
    library callers: refuses ``/``, ``$HOME`` and folders that are not vLLM cache roots
    unless ``force`` (:class:`RootRefused`), scans afresh (a plan that deletes is never made
    from the listing index), then :func:`plan_prune`. Nothing is deleted until the plan is
    passed to :func:`execute_plan`."""
    from vllm_cache_tools.store.locate import resolve_root
    from vllm_cache_tools.store.scan import scan

    croot = resolve_root(root)
    check_prunable_root(croot.vllm_root, force)
    info = scan(croot, check_in_use=False, use_index=False)
    return plan_prune(info, policies, protections, environment=environment,
                      link_sources=True)
