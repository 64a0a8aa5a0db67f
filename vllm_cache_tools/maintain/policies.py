"""Prune policies as data: :class:`Policies` says which are on, :data:`POLICY_SELECTORS` maps
each to one selector that chooses entries (with a reason) or marks them undecided. Selectors
only choose; :mod:`vllm_cache_tools.maintain.plan` applies the protections and ``--max-size``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from vllm_cache_tools.keys.compat import Environment
from vllm_cache_tools.layout import short_key
from vllm_cache_tools.maintain.evidence import model_identity, unhittable_verdict
from vllm_cache_tools.store.types import Entry
from vllm_cache_tools.store.usage import StartUse
from vllm_cache_tools.units import fmt_duration, format_size


@dataclass(frozen=True)
class Policies:
    """What to remove; an entry goes if any policy chooses it."""

    older_than_s: float | None = None
    max_size_bytes: int | None = None
    max_files: int | None = None
    """A file-count budget: on GPFS/Lustre quotas count files (inodes), not bytes."""
    keep: int | None = None
    unhittable: bool = False
    corrupt: bool = False
    partial: bool = False
    load_failed: bool = False
    """Entries vLLM failed to load since their last hit (the recorder's ledger)."""
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
        if self.max_files is not None:
            out.append(f"max-files {self.max_files}")
        if self.keep is not None:
            out.append(f"keep {self.keep} per model")
        out += [n for n, on in (("unhittable", self.unhittable), ("corrupt", self.corrupt),
                                ("partial", self.partial), ("load-failed", self.load_failed))
                if on]
        return tuple(out)

    @property
    def empty(self) -> bool:
        return not self.describe()

    def budgets(self) -> tuple[Budget, ...]:
        """The budgets that are on, in the order they are filled."""
        return tuple(b for b in BUDGETS if b.limit(self) is not None)


@dataclass(frozen=True)
class Budget:
    """A limit on what stays (``--max-size``, ``--max-files``): the least recently used
    entries no policy chose go until what stays fits (:func:`~.plan._fill_budget`)."""

    name: str
    limit: Callable[[Policies], int | None]
    measure: Callable[[Entry], int]
    show: Callable[[int], str]


BUDGETS = (
    Budget("max-size", lambda p: p.max_size_bytes, lambda e: e.size_bytes, format_size),
    Budget("max-files", lambda p: p.max_files, lambda e: e.stats.files,
           lambda n: f"{n} files"),
)


# --------------------------------------------------------------------------------------------
# Policies as data: one selector per policy


@dataclass
class Choosing:
    """What the selectors share while one plan is chosen."""

    entries: list[Entry]
    policies: Policies
    environment: Environment | None
    now: float
    lu: dict[int, tuple[float | None, str | None]]
    """id(entry) -> (last use, its source), see :func:`last_use`."""
    chosen: dict[int, list[str]] = field(default_factory=dict)
    """id(entry) -> the reasons the policies gave, in :data:`POLICY_SELECTORS` order."""
    undecided: list[tuple[Entry, str, str]] = field(default_factory=list)
    """(entry, question, why): entries a policy asked about but could not judge."""
    notes: list[str] = field(default_factory=list)
    starts: tuple[StartUse, ...] = ()
    """What each start of the recorder's ledger decided: the pairing of one start's backend
    and AOT entries (``--keep``)."""
    same_start: dict[int, tuple[str, ...]] = field(default_factory=dict)
    """id(entry) -> keys of the other entries of the root that a start used with it."""

    def choose(self, e: Entry, reason: str) -> None:
        self.chosen.setdefault(id(e), []).append(reason)


def _select_named(c: Choosing) -> None:
    named = {os.path.realpath(p): why for p, why in c.policies.named}
    for e in c.entries:
        if os.path.realpath(e.path) in named:
            c.choose(e, named[os.path.realpath(e.path)])


def _select_load_failed(c: Choosing) -> None:
    for e in c.entries:
        if e.state == "load-failed":
            c.choose(e, f"load-failed: {e.state_detail}")


def _select_corrupt(c: Choosing) -> None:
    for e in c.entries:
        if e.state == "corrupt":
            c.choose(e, f"corrupt: {e.state_detail}")


def _select_partial(c: Choosing) -> None:
    for e in c.entries:
        if e.state == "partial":
            c.choose(e, f"partial: {e.state_detail}")


def _select_unjudged(c: Choosing) -> None:
    """``--corrupt`` / ``--partial`` cannot judge an entry whose parts could not be read."""
    for e in c.entries:
        if e.state == "unknown":
            c.undecided.append((e, "corrupt?" if c.policies.corrupt else "partial?",
                                e.state_detail or "not judged: parts could not be read"))


def _select_older(c: Choosing) -> None:
    older_than_s = c.policies.older_than_s
    assert older_than_s is not None
    for e in c.entries:
        t, src = c.lu[id(e)]
        if t is not None and c.now - t > older_than_s:
            c.choose(e, f"older than {fmt_duration(older_than_s)}: last used "
                        f"{fmt_duration(c.now - t)} ago ({src})")


def start_units(entries: list[Entry], starts: tuple[StartUse, ...]) -> list[list[Entry]]:
    """Entries joined when one start of the ledger used them together (its backend and AOT
    entries, every rank), transitively; an entry no recorded start used is a unit alone."""
    by_key = {e.key: i for i, e in enumerate(entries)}
    parent = list(range(len(entries)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for s in starts:
        idx = [by_key[k] for k in s.keys if k in by_key]
        for i in idx[1:]:
            parent[find(i)] = find(idx[0])
    units: dict[int, list[Entry]] = {}
    for i, e in enumerate(entries):
        units.setdefault(find(i), []).append(e)
    return list(units.values())


def _select_keep(c: Choosing) -> None:
    """Keep the entries of the ``keep`` most recently used starts of each model, both trees
    together. A start is what the recorder's ledger says one vLLM start used (its backend and
    AOT entries are kept or removed as one unit, ordered by the ledger's last decision of any
    of them: the
    live start's backend entry was removed while its AOT entry was being hit, and an older
    start's backend entry kept); entries no recorded start used count alone, per tree, as
    before the pairing (``keep`` of each tree)."""
    keep = c.policies.keep
    assert keep is not None
    by_model: dict[str, list[tuple[float, list[Entry]]]] = {}
    decided: dict[str, float] = {}
    for s in c.starts:
        for k in s.keys:
            decided[k] = max(decided.get(k, 0.0), s.last)
    for unit in start_units(c.entries, c.starts):
        mf = next((m for m in map(model_identity, unit) if m is not None), None)
        if mf is None:  # no evidence which model it is: never counted
            continue
        # A unit the ledger knows is as recent as its last recorded start: a later atime
        # there is a read by anything (a copy, a backup, a scan), not a start; it ordered
        # the starts of a copied root by the order cp read them.
        known = [decided[e.key] for e in unit if e.key in decided]
        t = max(known) if known else max(c.lu[id(e)][0] or 0.0 for e in unit)
        by_model.setdefault(mf, []).append((t, unit))
        if len(unit) > 1:
            for e in unit:
                c.same_start[id(e)] = tuple(sorted(x.key for x in unit if x is not e))
    for mf, units in by_model.items():
        units.sort(key=lambda tu: (-tu[0], min(e.key for e in tu[1])))
        kept: dict[str, int] = {}
        for n, (_, unit) in enumerate(units, start=1):
            layouts = {e.layout for e in unit}
            if any(kept.get(layout, 0) < keep for layout in layouts):
                for layout in layouts:
                    kept[layout] = kept.get(layout, 0) + 1
                continue
            what = ("start" if len(unit) > 1 else f"{unit[0].layout} entry")
            for e in unit:
                c.choose(e, f"keep {keep} per model: of the {_ordinal(n)} most recently used "
                            f"{what} of {mf}"
                            + (" (with " + ", ".join(
                                f"{x.layout} {short_key(x.key)}" for x in unit if x is not e)
                               + ": one start, recorder ledger)" if len(unit) > 1 else ""))


def _select_unhittable(c: Choosing) -> None:
    env = c.environment
    if env is None:
        c.notes.append("--unhittable: no environment given; nothing judged")
    else:
        c.notes.append(f"--unhittable judged against {env.describe()}" if env.torch else
                       f"--unhittable: {env.describe()}, so every entry is unknown and stays")
        for e in c.entries:
            if e.state == "unloadable":
                continue  # chosen below, whatever the environment
            verdict, why = unhittable_verdict(e, env)
            if verdict == "unhittable":
                c.choose(e, f"unhittable: {why}")
            elif verdict == "unknown" and id(e) not in c.chosen:
                c.undecided.append((e, "unhittable?", f"unknown: {why}"))
    for e in c.entries:
        if e.state != "unloadable":
            continue
        if e.layout == "aot":
            c.choose(e, f"unloadable: {e.state_detail}")
        elif id(e) not in c.chosen:
            # Graph-only backend folders are what vLLM writes beside the mega AOT
            # artifact; their factors and manifests are explain's evidence, and they are
            # small. Named removal (`rm`) still takes them.
            c.undecided.append((e, "unloadable, kept:", "graph-only backend folder (its "
                                "factors and manifests are what explain reads; `vllm-cache "
                                "rm KEY` removes it)"))


Selector = Callable[[Choosing], None]

POLICY_SELECTORS: dict[str, tuple[Callable[[Policies], bool], Selector]] = {
    "named": (lambda p: bool(p.named), _select_named),
    "corrupt": (lambda p: p.corrupt, _select_corrupt),
    "partial": (lambda p: p.partial, _select_partial),
    "load-failed": (lambda p: p.load_failed, _select_load_failed),
    "unjudged": (lambda p: p.corrupt or p.partial, _select_unjudged),
    "older-than": (lambda p: p.older_than_s is not None, _select_older),
    "keep": (lambda p: p.keep is not None, _select_keep),
    "unhittable": (lambda p: p.unhittable, _select_unhittable),
}
"""Policy -> (is it on, its selector), run in this order (an entry's reasons keep it).
``--max-size`` and ``--max-files`` are not here: they are budgets (:data:`BUDGETS`) over what
the others and the protections left (:func:`vllm_cache_tools.maintain.plan._fill_budget`)."""

TIMES_ONLY = frozenset({"older-than"})
"""Selectors that judge an entry by its walk alone (the budgets do too, but need the whole
root first) (file times, from
:func:`~vllm_cache_tools.store.tree_stats.tree_stats`, and the recorder's ledger); every
other reads what the key files say (state, model, versions). The protections
(:func:`~vllm_cache_tools.maintain.plan.protection_reason`) need the walk (owners, times,
unreadable parts) and /proc, plus whether a key file may be read."""


def reads_contents(policies: Policies) -> bool:
    """Whether some policy that is on needs the entries' key files read (else the light
    read, :func:`vllm_cache_tools.store.light.light_entry`, holds every fact it needs)."""
    return any(active(policies) for name, (active, _) in POLICY_SELECTORS.items()
               if name not in TIMES_ONLY)


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
