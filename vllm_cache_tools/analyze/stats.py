"""``vllm-cache stats``: what ccache ``-s`` is for a C compiler, for vLLM's compile cache.

Counted from the recorder's ledgers (every host's, merged), one vLLM start at a time:

* a **start** is the processes of one vLLM start, named by the start id the recorder shares
  between them (ledgers of recorders without it: one process, so a tensor-parallel start counts
  once per worker there);
* its **outcome**: ``load failure`` when vLLM found an entry and could not load it, else
  ``miss`` when it compiled, else ``hit`` when everything it needed was loaded, else
  ``disabled`` (cache off);
* **compile seconds**: for each worker of a start that compiled, vLLM's backend time on its
  misses plus Dynamo's trace; the slowest worker counts (workers compile side by side). vLLM's
  DYNAMO_TRACE_ONCE mode (AOT tree only) compiles outside anything the recorder times: those
  starts are counted in ``compile_unknown``;
* **saved seconds**: each hit (one start loading one entry) is credited with that entry's
  compile time, measured at the latest miss that wrote it (an AOT entry: the compile seconds of
  the start that wrote it). Hits on entries whose compile was never measured are counted in
  ``saved_unknown``; **load seconds** is what the hits spent loading (slowest worker);
* **net seconds** (the headline): saved minus load seconds, what the cache gave back. Where
  it is negative for a group (a model, host, day or, with ``--by entry``, one entry), its
  hits cost more than compiling would have: a **regression**.

Without any ledger the counts are what the cache files prove: every entry was compiled at
least once (``misses`` >= entries); starts, hits, load failures and seconds are unknown and
the report says so (``basis == "files"``, ``unknown``).

The same event found in two copies of one host's ledger (a collected folder) counts once:
ledger files whose first event names the same host are merged by event."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from vllm_cache_tools.analyze import stats_tally
from vllm_cache_tools.analyze.inputs import EntryFacts, Inputs, gather
from vllm_cache_tools.analyze.stats_read import jobs_default, read_all
from vllm_cache_tools.analyze.stats_tally import (
    MAX_GROUPS,
    MAX_PROBLEMS,
    UNKNOWN_MODEL,
    day_of,
    new_acc,
    sum_accs,
)

__all__ = ["GROUPINGS", "MAX_GROUPS", "MAX_PROBLEMS", "UNKNOWN_MODEL", "Counters", "Group",
           "StatsReport", "UnusedEntry", "jobs_default", "stats", "stats_of"]

GROUPINGS = ("model", "host", "day", "entry")


@dataclass(frozen=True)
class Counters:
    """One row of numbers; ``None`` where the files cannot tell (no ledger)."""

    starts: int | None
    hits: int | None
    misses: int | None
    """Starts that compiled (without a ledger: entries written, a lower bound)."""
    load_failures: int | None
    disabled: int | None
    compile_seconds: float | None
    saved_seconds: float | None
    load_seconds: float | None
    compile_unknown: int | None
    """Starts that compiled without a measured time (vLLM's DYNAMO_TRACE_ONCE mode)."""
    saved_unknown: int | None
    """Hits on entries whose compile time was never measured."""

    @property
    def net_seconds(self) -> float | None:
        """Compile time avoided minus time spent loading: what the hits gave back (gross
        ``saved_seconds`` overstated it: 6.4 m saved beside 5.7 m spent loading)."""
        if self.saved_seconds is None or self.load_seconds is None:
            return None
        return round(self.saved_seconds - self.load_seconds, 3)

    @property
    def regression(self) -> bool:
        """Hits that cost more loading than the compiles they avoided."""
        return bool(self.hits) and self.net_seconds is not None and self.net_seconds < 0

    @property
    def hit_ratio(self) -> float | None:
        if self.hits is None or self.misses is None or self.load_failures is None:
            return None
        decided = self.hits + self.misses + self.load_failures
        return self.hits / decided if decided else None


@dataclass(frozen=True)
class Group:
    """The counters of one model, host, day (UTC) or entry."""

    by: str
    name: str
    counters: Counters
    entries: int | None = None
    """Entries of this model (or this entry: 1) in the source; ``None`` for hosts and days."""
    size_bytes: int | None = None
    others: int = 0
    """0 for one group; for the last row past :data:`MAX_GROUPS`, how many groups it sums up
    (its name says so: ``990,000 other hosts``)."""


@dataclass(frozen=True)
class UnusedEntry:
    """An entry written and never loaded since (by any start the ledgers saw)."""

    key: str
    layout: str
    model: str | None
    size_bytes: int | None
    """``None`` when the entry is no longer in the source (the ledger remembers it)."""
    written: float


@dataclass(frozen=True)
class StatsReport:
    source: str
    kind: str
    """``root``, ``folder`` or ``remote`` (see :mod:`.inputs`)."""
    basis: str
    """``ledger``: counted from the recorder's ledgers; ``files``: what the cache files prove."""
    since: float | None
    by: str
    totals: Counters
    groups: tuple[Group, ...]
    events: Mapping[str, Mapping[str, int]] = field(hash=False)
    """Ledger events per tree and kind (one per worker and entry, and per prefix in the
    backend tree): the numbers to compare with vLLM's own log lines."""
    ledgers: int
    hosts: int
    first: float | None
    last: float | None
    duplicates: int
    """Events found in more than one copy of a host's ledger, counted once."""
    entries: int
    size_bytes: int
    untracked: int
    """Entries in the source that no ledger event names and that carry no recorder manifest
    (written with the recorder off)."""
    never_hit: tuple[UnusedEntry, ...]
    unknown: tuple[str, ...]
    """What cannot be counted from this source, and why (empty with ledgers)."""
    problems: tuple[str, ...]
    caps: tuple[str, ...] = ()
    """One line per limit reached while counting (groups folded into one row, ledgers
    counted in parts on disk), so nothing is cut without saying so."""
    placed: int = 0
    """Entries no ledger event here names that carry a recorder's manifests: written by a
    recorder elsewhere and placed here by ``unpack``/``pull`` (the manifests travel with
    them), not written with the recorder off."""
    models: tuple[tuple[str, int, int], ...] = ()
    """(model, entries, bytes) of the entries in the source, whatever ``by`` is (the
    metrics give bytes per model beside counters per host)."""

    @property
    def regressions(self) -> tuple[Group, ...]:
        """The groups whose hits cost more than compiling would have."""
        return tuple(g for g in self.groups if g.counters.regression)


def _counters(a: list[Any]) -> Counters:
    return Counters(a[0], a[1], a[2], a[3], a[4], round(a[5], 3), round(a[7], 3),
                    round(a[9], 3), a[6], a[8])


def _model_sizes(entries: Iterable[EntryFacts]) -> dict[str, tuple[int, int]]:
    """model -> (entries, bytes)."""
    out: dict[str, tuple[int, int]] = {}
    for e in entries:
        n, b = out.get(e.model or UNKNOWN_MODEL, (0, 0))
        out[e.model or UNKNOWN_MODEL] = (n + 1, b + e.size_bytes)
    return out


_NOUN = {"model": ("model", "models"), "host": ("host", "hosts"), "day": ("day", "days"),
         "entry": ("entry", "entries")}


def _n_of(n: int, by: str) -> str:
    return f"{n:,} {_NOUN[by][n != 1]}"


def _other(by: str, acc: list[Any] | None, n: int) -> tuple[Group, ...]:
    """The row summing up the groups past :data:`MAX_GROUPS` (none when none were)."""
    if acc is None or not n:
        return ()
    return (Group(by, f"{n:,} other {_NOUN[by][n != 1]}", _counters(acc), others=n),)


def _groups(by: str, accs: Mapping[str, list[Any]], inputs: Inputs,
            folded: bool = False) -> tuple[Group, ...]:
    sizes = _model_sizes(inputs.entries) if by == "model" else {}
    entry = {e.key: e for e in inputs.entries} if by == "entry" else {}
    out = []
    for name, acc in accs.items():
        n: int | None = None
        b: int | None = None
        if by == "model":
            n, b = sizes.get(name, (0, 0))
        elif by == "entry":
            e = entry.get(name)
            n, b = (1, e.size_bytes) if e is not None else (0, None)
        out.append(Group(by, name, _counters(acc), n, b))
    if by == "model" and not folded:  # models with entries and no start in the ledgers
        out += [Group(by, m, _counters(new_acc()), n, b) for m, (n, b) in sizes.items()
                if m not in accs]
    out.sort(key=lambda g: (-(g.counters.starts or 0), -(g.size_bytes or 0), g.name))
    return tuple(out)


def _from_files(inputs: Inputs, by: str, since: float | None, problems: list[str],
                files: int = 0) -> StatsReport:
    """No ledger, or ``files`` ledgers without a readable event: only what the entries
    prove."""
    es = [e for e in inputs.entries if since is None or (e.created or 0.0) >= since]
    names: dict[str, list[EntryFacts]] = {}
    for e in es:
        if by == "model":
            name = e.model or UNKNOWN_MODEL
        elif by == "day":
            name = day_of(e.created) if e.created is not None else "?"
        elif by == "entry":
            name = e.key
        else:
            name = "?"  # which host wrote an entry is not in its files
        names.setdefault(name, []).append(e)

    def counters(n: int) -> Counters:
        return Counters(None, None, n, None, None, None, None, None, None, None)

    groups = tuple(sorted((Group(by, name, counters(len(g)),
                                 len(g) if by in ("model", "entry") else None,
                                 sum(e.size_bytes for e in g)) for name, g in names.items()),
                          key=lambda g: (-(g.size_bytes or 0), g.name)))
    why = (f"the {files} recorder ledger(s) here hold no readable event (see the warnings)"
           if files else "no recorder ledger in this source (install vllm-cache-tools where "
           "vLLM runs: its recorder writes one)")
    unknown: tuple[str, ...] = (
        f"starts, hits, load failures, compile and saved seconds: {why}; misses count the "
        "entries written, each compiled at least once",)
    if by == "host":
        unknown += ("host: the cache files do not say which host wrote them",)
    return StatsReport(inputs.source, inputs.kind, "files", since, by, counters(len(es)),
                       groups, {}, files, 0, None, None, 0, len(inputs.entries),
                       sum(e.size_bytes for e in inputs.entries), len(inputs.entries), (),
                       unknown, tuple(problems), models=_models(inputs))


def _models(inputs: Inputs) -> tuple[tuple[str, int, int], ...]:
    return tuple(sorted(((m, n, b) for m, (n, b) in _model_sizes(inputs.entries).items()),
                        key=lambda x: (-x[2], x[0])))


def _no_start(inputs: Inputs, by: str, since: float, files: int, problems: list[str]
              ) -> StatsReport:
    """Ledgers without an event since ``since``: no start, no hit, no miss in that time."""
    return StatsReport(inputs.source, inputs.kind, "ledger", since, by, _counters(new_acc()),
                       _groups(by, {}, inputs), {}, files, 0, None, None, 0,
                       len(inputs.entries), sum(e.size_bytes for e in inputs.entries),
                       0, (), (), tuple(problems), models=_models(inputs))


def stats_of(inputs: Inputs, *, by: str = "model", since: float | None = None,
             jobs: int | None = None) -> StatsReport:
    """Statistics over gathered inputs (see :func:`stats`)."""
    if by not in GROUPINGS:
        raise ValueError(f"--by must be one of {', '.join(GROUPINGS)}, not {by!r}")
    problems = list(inputs.problems)
    models = inputs.models()
    part = read_all(inputs.ledgers, since, by, models, jobs or jobs_default())
    problems += part.problems
    files = len(inputs.ledgers)
    if not part.groups:
        if not inputs.entries and not files:
            why = f" ({problems[0]})" if problems else ""  # e.g. a symlink not followed
            raise ValueError(f"{inputs.source}: no recorder ledger and no cache entry to "
                             f"count{why}")
        if files:
            problems.append("the ledgers hold no event" + (" in that time" if since else ""))
            if since is not None:  # the ledgers count: no start in that time
                return _no_start(inputs, by, since, files, problems)
        return _from_files(inputs, by, since, problems, files)
    total = sum_accs([*part.groups.values(), *([part.other] if part.other else [])])
    accs = part.entry_groups if by == "entry" else part.groups
    other, others = (part.entry_other, part.entry_others) if by == "entry" else \
        (part.other, part.others)
    caps = list(part.spilled)
    if others:
        caps.insert(0, f"--by {by}: {_n_of(others, by)} more than the "
                    f"{stats_tally.MAX_GROUPS:,} shown one by one (those with the most "
                    f"starts), summed up in the last row, "
                    f"'{others:,} other {_NOUN[by][others != 1]}'")
    events: dict[str, dict[str, int]] = {}
    for (tree, ev), n in sorted(part.events.items()):
        events.setdefault(tree, {})[ev] = n
    present = {e.key: e for e in inputs.entries}
    hit = part.last_hit
    never = [UnusedEntry(key, "aot" if len(key) == 64 else "backend", models.get(key),
                         present[key].size_bytes if key in present else None, t)
             for key, t in part.written.items() if hit.get(key, 0.0) < t
             and (key in present or not inputs.entries)]
    never.sort(key=lambda u: (-(u.size_bytes or 0), -u.written, u.key))
    first = part.first
    last = max([first or 0.0, *hit.values(), *part.written.values()])
    unnamed = [e for e in inputs.entries if e.key not in part.written and e.key not in hit]
    placed = sum(1 for e in unnamed if e.carries_manifests())
    return StatsReport(
        inputs.source, inputs.kind, "ledger", since, by, _counters(total),
        _groups(by, accs, inputs, bool(others)) + _other(by, other, others), events, files,
        len(part.hosts) + part.more_hosts, first, last,
        part.duplicates, len(inputs.entries), sum(e.size_bytes for e in inputs.entries),
        len(unnamed) - placed, tuple(never), (), tuple(problems), tuple(caps), placed=placed,
        models=_models(inputs))


def stats(source: str | os.PathLike[str] | None = None, *, by: str = "model",
          since: float | None = None, storage_options: Mapping[str, Any] | None = None,
          jobs: int | None = None) -> StatsReport:
    """Hit statistics of a cache root (default: resolved like vLLM), a folder of collected
    roots/ledgers/manifests, or a remote store URL. ``by``: ``model``, ``host``, ``day``
    (UTC) or ``entry``. ``since``: only events at or after this Unix time. ``jobs``: worker
    processes for large ledgers (default: the CPUs this process may use, at most 8).

    Raises :class:`~vllm_cache_tools.analyze.inputs.InputError` when the source cannot be
    read and ``ValueError`` for a bad ``by`` or a source with nothing to count."""
    return stats_of(gather(source, storage_options=storage_options), by=by, since=since,
                    jobs=jobs)
