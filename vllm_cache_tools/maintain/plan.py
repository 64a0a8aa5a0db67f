"""Prune planning: policies -> a frozen :class:`PrunePlan`; nothing here deletes
(:mod:`vllm_cache_tools.maintain.execute` does, from the plan).

Planning reads the store (``scan``) and touches nothing. The plan names every entry to go with
its reasons and the bytes it frees, and every entry a policy chose but a protection kept, with
why. Policies are data: :data:`POLICY_SELECTORS` maps each policy to one selector function;
``--max-size`` and ``--max-files`` are budgets applied after the protections.

Protections, in the order they are checked (:func:`protection_reason`):
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
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from vllm_cache_tools.errors import VctError
from vllm_cache_tools.keys.compat import Environment
from vllm_cache_tools.keys.source_link import install_prefix, sources_code_hashes
from vllm_cache_tools.layout import COMPILE_CACHE_DIRNAME
from vllm_cache_tools.maintain.evidence import (
    busy_entries,
    entry_rel_path,
    in_use_elsewhere,
    last_use,
    model_file,
    owner_name,
)
from vllm_cache_tools.maintain.policies import POLICY_SELECTORS, Budget, Choosing, Policies
from vllm_cache_tools.maintain.trash import entry_tree, is_dir_stat
from vllm_cache_tools.read.aot_model import AotModelInfo
from vllm_cache_tools.read.manifest import read_ledger
from vllm_cache_tools.store.entries import read_entry
from vllm_cache_tools.store.in_use import held_unseen
from vllm_cache_tools.store.locate import CacheRoot, display_path, not_a_cache_root
from vllm_cache_tools.store.tree_stats import tree_stats
from vllm_cache_tools.store.types import CacheInfo, Entry, Layout
from vllm_cache_tools.store.usage import StartUse, starts_used, summarize
from vllm_cache_tools.units import fmt_duration

# --------------------------------------------------------------------------------------------
# Root safety


class RootRefused(VctError, ValueError):
    """A root we will not prune without ``--force``."""


def check_prunable_root(root: CacheRoot, force: bool = False, verb: str = "prune") -> None:
    """Refuse ``/``, ``$HOME`` and folders that do not look like a vLLM cache root (no
    ``torch_compile_cache`` or ``torch_aot_compile`` folder in them) unless ``force``;
    ``verb`` names what is refused in the message. A root that is missing, not a folder or
    not readable is a :class:`RootError` first, with or without ``force`` (which cannot
    help there)."""
    from vllm_cache_tools.store.scan import check_root

    check_root(root)
    if force:
        return
    vllm_root = root.vllm_root
    real = os.path.realpath(vllm_root)
    if real == "/":
        raise RootRefused(f"refusing to {verb} / (pass --force if you really mean it)")
    home = os.path.realpath(os.path.expanduser("~"))
    if real == home:
        raise RootRefused(f"refusing to {verb} your home folder {display_path(vllm_root)} "
                          "(pass --force if it really is a vLLM cache root)")
    why = not_a_cache_root(root, verb)
    if why is not None:
        raise RootRefused(why)


# --------------------------------------------------------------------------------------------
# Records


@dataclass(frozen=True)
class Protections:
    grace_s: float = 600.0
    all_users: bool = False
    uid: int = field(default_factory=os.geteuid)
    leases_when_planning: bool = True
    """Ask the kernel (a write lease per file) whether another process holds a chosen
    entry's files open, when planning, so the plan shows it; the check right before each
    move is made regardless. Off for ``prune --yes``: nobody reads that plan before the
    moves, and one look less over every file of every entry."""


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
    same_start: tuple[str, ...] = ()
    """Keys of the entries (either tree) that one vLLM start used together with this one,
    from the recorder's ledger: ``--keep`` keeps or removes them as one."""


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
    total_files: int = 0
    """Files of all entries under the root before pruning."""

    @property
    def bytes(self) -> int:
        return sum(p.size_bytes for p in self.entries)

    @property
    def files(self) -> int:
        return sum(p.files for p in self.entries)

    def groups(self) -> list[tuple[str | None, list[PlannedEntry]]]:
        """Planned entries by the served model (recorder manifests), else the model source
        file both layouts record (AOT: the compiled code object's file; backend: the
        ``# File:`` of ``computation_graph.py``); the entries of one start (``same_start``,
        from the recorder's ledger) share the group of the first of them."""
        groups: dict[str | None, list[PlannedEntry]] = {}
        group_of: dict[str, str | None] = {}
        for p in self.entries:
            g = next((group_of[k] for k in p.same_start if k in group_of),
                     p.checkpoint or p.model_file)
            group_of[p.key] = g
            groups.setdefault(g, []).append(p)
        return sorted(groups.items(), key=lambda kv: (kv[0] is None, kv[0] or ""))


# --------------------------------------------------------------------------------------------
# Plan


def plan_prune(info: CacheInfo, policies: Policies, protections: Protections | None = None,
               *, environment: Environment | None = None, now: float | None = None,
               busy: Mapping[str, Sequence[int]] | None = None,
               ledger: Mapping[str, float] | None = None,
               starts: Sequence[StartUse] | None = None,
               link_sources: bool = False) -> PrunePlan:
    """Build the plan. ``info`` should come from ``scan(check_in_use=False)``: in-use is
    judged here from ``busy`` (default: a fresh /proc look), so an in-use entry still shows
    what a policy thought of it. ``link_sources`` adds, for planned backend entries, the AOT
    entries proven to share their traced sources (deep reads; bounded by ``LINK_LIMITS``)."""
    prot = protections or Protections()
    now = time.time() if now is None else now
    if ledger is None:
        events = read_ledger(info.root / COMPILE_CACHE_DIRNAME)[0]
        ledger = {k: u.last for k, u in summarize(events).items()}
        starts = starts_used(events) if starts is None else starts
    busy = busy_entries(info.root) if busy is None else busy
    entries = [_with_every_folder(e) for e in info.entries]
    c = Choosing(entries, policies, environment, now, {id(e): last_use(e, ledger) for e in entries},
                 starts=tuple(starts or ()))
    for active, select in POLICY_SELECTORS.values():
        if active(policies):
            select(c)

    planned: list[PlannedEntry] = []
    skipped: list[Skip] = []
    for e in entries:
        if id(e) not in c.chosen:
            continue
        reasons = tuple(c.chosen[id(e)])
        why_not = protection_reason(e, info.root, prot, now, busy)
        if why_not is not None:
            skipped.append(Skip(e.key, e.layout, e.path, f"{why_not} [{'; '.join(reasons)}]"))
            continue
        pe = planned_entry(e, info.root, reasons, c.lu[id(e)])
        if pe is not None and id(e) in c.same_start:
            pe = replace(pe, same_start=c.same_start[id(e)])
        if pe is None:
            skipped.append(Skip(e.key, e.layout, e.path, "vanished while planning"))
        else:
            planned.append(pe)
    total = sum(e.size_bytes for e in entries)
    tried: set[int] = set()
    for budget in policies.budgets():
        _fill_budget(c, budget, info.root, prot, busy, planned, skipped, tried)
    for e, question, why in c.undecided:
        if id(e) not in c.chosen:
            skipped.append(Skip(e.key, e.layout, e.path, f"{question} {why}"))
    planned.sort(key=lambda p: (p.last_used or 0.0, p.key))
    notes = c.notes
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
                     tuple(notes), total_files=sum(e.stats.files for e in entries))


def _with_every_folder(e: Entry) -> Entry:
    """``e`` with the mtime of every one of its folders: the grace check and the check before
    an entry is moved need them all, and a listing scan (the index) keeps only some, or none
    (store/listing_index.py). A scan without the index has them all: no walk then."""
    if len(e.stats.dir_mtimes) == e.stats.dirs + 1:
        return e
    return replace(e, stats=replace(e.stats, dir_mtimes=tree_stats(str(e.path)).dir_mtimes))


def _fill_budget(c: Choosing, budget: Budget, root: Path, prot: Protections,
                 busy: Mapping[str, Sequence[int]], planned: list[PlannedEntry],
                 skipped: list[Skip], tried: set[int]) -> None:
    """A budget (``--max-size``, ``--max-files``): add the least recently used entries no other
    policy chose until what stays fits (protected ones are skipped, and a note says when the
    rest cannot fit). ``tried``: entries an earlier budget planned or skipped."""
    limit = budget.limit(c.policies)
    assert limit is not None
    going = {os.fsdecode(p.path) for p in planned}
    remaining = sum(budget.measure(e) for e in c.entries if os.fsdecode(e.path) not in going)
    lru = sorted((e for e in c.entries if id(e) not in c.chosen and id(e) not in tried),
                 key=lambda x: (c.lu[id(x)][0] or 0.0, x.key))
    for e in lru:
        if remaining <= limit:
            break
        tried.add(id(e))
        t, src = c.lu[id(e)]
        reason = (f"{budget.name} {budget.show(limit)}: least recently used "
                  f"(last used {fmt_duration(c.now - t) + ' ago' if t else 'never'}, {src})")
        why_not = protection_reason(e, root, prot, c.now, busy)
        if why_not is not None:
            skipped.append(Skip(e.key, e.layout, e.path, f"{why_not} [{reason}]"))
            continue
        pe = planned_entry(e, root, (reason,), (t, src))
        if pe is not None:
            planned.append(pe)
            remaining -= budget.measure(e)
    if remaining > limit:
        c.notes.append(f"still {budget.show(remaining)} after this plan, above --{budget.name} "
                       f"{budget.show(limit)}: the rest is protected")


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
    held = held_unseen(e.path, uid=prot.uid) if prot.leases_when_planning else None
    if held is not None:
        return in_use_elsewhere(held)
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
            return (f"owned by {', '.join(owner_name(u) for u in others)}, not you "
                    "(--all-users to include)")
    return None


def planned_entry(e: Entry, root: Path, reasons: tuple[str, ...],
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
    check_prunable_root(croot, force)
    info = scan(croot, check_in_use=False, use_index=False)
    return plan_prune(info, policies, protections, environment=environment,
                      link_sources=True)
