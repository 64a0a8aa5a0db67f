"""The counting behind :mod:`.stats`: a host's ledger events streamed into a small tally per
start and per entry (:class:`_Tally`), summed up per group into mergeable partial sums
(:class:`_Partial`). :mod:`.stats_read` reads the ledgers into it; :mod:`.stats` owns the
report records and turns these sums into them."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vllm_cache_tools.read.ledger_stream import StatsEvent

MAX_PROBLEMS = 50
"""Damaged ledger lines reported one by one; past this only their number."""
MAX_STARTS = 150_000
"""Starts one tally holds (~100 MB at ~600 bytes a start, with its host and entry names). A
host's ledgers with more are counted in parts spilled to disk (:mod:`.stats_read`), exactly."""
MAX_GROUPS = 10_000
"""Groups (hosts, models, days, entries) reported one by one; the rest are summed up in one
row (``N other hosts``). Hosts are folded while they are counted, so memory stays bounded
with a million hosts; the rows kept are the groups with the most starts."""
UNKNOWN_MODEL = "unknown"

_HIT, _MISS, _LOAD_FAILURE, _DISABLED = 1, 2, 4, 8
GUARD_EVENT = "guard-warning"
"""In ``events``: decisions the wrong-hit guard warned about (a ``hit`` in warn mode, a
``disabled`` in strict mode: each also counted under its own kind)."""
_FLAG = {"hit": _HIT, "miss": _MISS, "load-failure": _LOAD_FAILURE, "disabled": _DISABLED}


Times = tuple[dict[str, float], dict[str, tuple[float, float]], dict[tuple[str, str], float]]


class _Tally:
    """The streaming count: a small list per start and per entry, nothing kept per event.
    Hits (most events) take the shortest path."""

    def __init__(self, since: float | None, by_entry: bool) -> None:
        self.since = since
        self.starts: dict[str, list[Any]] = {}
        """start id -> [first time, outcome flags, host, first key, hit keys (one key,
        a set of keys or None), load seconds]"""
        self.work: dict[tuple[str, str, int | None], float] = {}
        """(start, host, pid) -> backend seconds on misses (one worker's compile time)"""
        self.key_work: dict[tuple[str, str, str, int | None], float] = {}
        self.aot_written: list[tuple[str, str]] = []
        self.written: dict[str, float] = {}
        """entry -> when it was last written (a miss or a load failure)"""
        self.decisions: dict[tuple[str, str], int] | None = {} if by_entry else None
        self.events: Counter[tuple[str, str]] = Counter()
        self.strings: dict[str, str] = {}

    def add(self, rows: Sequence[StatsEvent]) -> None:
        since = self.since
        if since is not None:
            rows = [r for r in rows if r.time >= since]
        starts, work, key_work, decisions = self.starts, self.work, self.key_work, self.decisions
        written = self.written
        # One string object per host and entry, not one per start (300k starts hold few).
        same = self.strings.setdefault
        # Events per tree and kind: hits (most rows) in two plain counters, the rest in a dict.
        aot_hits = backend_hits = 0
        other: dict[tuple[str, str], int] = {}
        for r in rows:
            ev = r.event
            if r.guard is not None:  # the wrong-hit guard warned: counted beside the event
                tg = (r.tree, GUARD_EVENT)
                other[tg] = other.get(tg, 0) + 1
            sid = r.start or f"{r.host}:{r.pid}"
            st = starts.get(sid)
            if decisions is not None:
                d = (r.key, sid)
                decisions[d] = decisions.get(d, 0) | _FLAG[ev]
            if ev == "hit":
                if r.tree == "aot":
                    aot_hits += 1
                else:
                    backend_hits += 1
                key = r.key
                sec = r.seconds
                if st is None:
                    key = same(key, key)
                    host = r.host
                    starts[sid] = [r.time, _HIT, same(host, host), key, key, sec or 0.0]
                    continue
                st[1] |= _HIT
                hk = st[4]
                if hk != key:
                    if hk is None:
                        st[4] = same(key, key)
                    elif isinstance(hk, str):
                        st[4] = {hk, same(key, key)}
                    else:
                        hk.add(key)
                if sec is not None and sec > st[5]:
                    st[5] = sec
                continue
            te = (r.tree, ev)
            other[te] = other.get(te, 0) + 1
            key = r.key
            if st is None:
                host = r.host
                st = starts[sid] = [r.time, 0, same(host, host), same(key, key), None, 0.0]
            st[1] |= _FLAG[ev]
            if ev == "disabled":
                continue
            t = r.time
            if t > written.get(key, 0.0):
                written[key] = t
            if r.tree == "backend":
                s = (r.seconds or 0.0) + (r.dynamo_s or 0.0)
                w = (sid, r.host, r.pid)
                work[w] = work.get(w, 0.0) + s
                kw = (key, sid, r.host, r.pid)
                key_work[kw] = key_work.get(kw, 0.0) + s
            else:
                self.aot_written.append((sid, key))
        events = self.events
        if aot_hits:
            events["aot", "hit"] += aot_hits
        if backend_hits:
            events["backend", "hit"] += backend_hits
        events.update(other)

    # ---- after the last row ----
    def compile_times(self) -> Times:
        """(start -> compile seconds, entry -> (start time, compile seconds) of its latest
        measured miss, (entry, start) -> that start's compile seconds for the entry)."""
        per_start: dict[str, float] = {}
        for (sid, _h, _p), s in self.work.items():
            if s > per_start.get(sid, -1.0):
                per_start[sid] = s
        per_decision: dict[tuple[str, str], float] = {}
        for (key, sid, _h, _p), s in self.key_work.items():
            if s > per_decision.get((key, sid), -1.0):
                per_decision[key, sid] = s
        aot_keys: dict[str, set[str]] = {}
        for sid, key in self.aot_written:
            aot_keys.setdefault(sid, set()).add(key)
        for sid, ks in aot_keys.items():
            if sid in per_start:
                for key in ks:  # one start writing several AOT entries: its time split
                    per_decision[key, sid] = per_start[sid] / len(ks)
        latest: dict[str, tuple[float, float]] = {}
        for (key, sid), s in per_decision.items():
            t0 = self.starts[sid][0]
            if key not in latest or t0 >= latest[key][0]:
                latest[key] = (t0, s)
        return per_start, latest, per_decision


# Per group: [starts, hits, misses, load failures, disabled, compile s, compile unknown,
# saved s, saved unknown, load s]; a start's outcome by its flags (load failure first).
_OUTCOME = [4 if f & _DISABLED and not f & (_HIT | _MISS | _LOAD_FAILURE) else
            3 if f & _LOAD_FAILURE else 2 if f & _MISS else 1 if f & _HIT else 4
            for f in range(16)]


def new_acc() -> list[Any]:
    return [0, 0, 0, 0, 0, 0.0, 0, 0.0, 0, 0.0]



def _add_acc(mine: list[Any] | None, theirs: list[Any] | None) -> list[Any] | None:
    if theirs is None:
        return mine
    if mine is None:
        return list(theirs)
    for i, v in enumerate(theirs):
        mine[i] += v
    return mine


def sum_accs(accs: Iterable[list[Any]]) -> list[Any]:
    total = new_acc()
    for a in accs:
        for i, v in enumerate(a):
            total[i] += v
    return total


def day_of(t: float) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(t))


@dataclass
class _Partial:
    """What one pass over some hosts' ledgers leaves: small, mergeable (partials of other
    hosts are added), with the seconds saved by hits still per (group, entry): an entry's
    compile time may be measured in another host's ledger."""

    events: Counter[tuple[str, str]] = field(default_factory=Counter)
    groups: dict[str, list[Any]] = field(default_factory=dict)
    hits: Counter[tuple[str, str]] = field(default_factory=Counter)
    """(group, entry) -> hits"""
    entry_groups: dict[str, list[Any]] = field(default_factory=dict)
    entry_hits: Counter[str] = field(default_factory=Counter)
    entry_time: dict[str, tuple[float, float]] = field(default_factory=dict)
    """entry -> (start time, compile seconds) of its latest measured miss"""
    written: dict[str, float] = field(default_factory=dict)
    last_hit: dict[str, float] = field(default_factory=dict)
    hosts: set[str] = field(default_factory=set)
    more_hosts: int = 0
    """Hosts counted and no longer named (past :data:`MAX_GROUPS`; never also in ``hosts``)."""
    other: list[Any] | None = None
    """The counters of the groups folded past :data:`MAX_GROUPS` (:meth:`fold`)."""
    other_hits: Counter[str] = field(default_factory=Counter)
    others: int = 0
    """How many groups ``other`` sums up."""
    entry_other: list[Any] | None = None
    entry_other_hits: Counter[str] = field(default_factory=Counter)
    entry_others: int = 0
    spilled: list[str] = field(default_factory=list)
    """One line per ledger group counted in parts on disk (:mod:`.stats_read`)."""
    first: float | None = None
    duplicates: int = 0
    bad: int = 0
    problems: list[str] = field(default_factory=list)

    def merge(self, o: _Partial) -> None:
        self.events.update(o.events)
        for mine, theirs in ((self.groups, o.groups), (self.entry_groups, o.entry_groups)):
            for name, acc in theirs.items():
                m = mine.get(name)
                if m is None:
                    mine[name] = list(acc)
                else:  # in place: 200 hosts x 100 entries of --by entry
                    for i, v in enumerate(acc):
                        m[i] += v
        self.hits.update(o.hits)
        self.entry_hits.update(o.entry_hits)
        for k, v in o.entry_time.items():
            if k not in self.entry_time or v[0] >= self.entry_time[k][0]:
                self.entry_time[k] = v
        for mine_t, theirs_t in ((self.written, o.written), (self.last_hit, o.last_hit)):
            for k, t in theirs_t.items():
                if t > mine_t.get(k, 0.0):
                    mine_t[k] = t
        self.hosts |= o.hosts
        self.more_hosts += o.more_hosts
        self.other = _add_acc(self.other, o.other)
        self.other_hits.update(o.other_hits)
        self.others += o.others
        self.entry_other = _add_acc(self.entry_other, o.entry_other)
        self.entry_other_hits.update(o.entry_other_hits)
        self.entry_others += o.entry_others
        self.spilled += o.spilled
        if o.first is not None and (self.first is None or o.first < self.first):
            self.first = o.first
        self.duplicates += o.duplicates
        self.bad += o.bad
        self.problems += o.problems[:max(0, MAX_PROBLEMS - len(self.problems))]

    def saved(self) -> None:
        """Credit the hits with their entries' compile times (after the last merge)."""
        for (name, key), n in self.hits.items():
            self._credit(self.groups[name], key, n)
        for key, n in self.entry_hits.items():
            self._credit(self.entry_groups[key], key, n)
        for key, n in self.other_hits.items():
            assert self.other is not None
            self._credit(self.other, key, n)
        for key, n in self.entry_other_hits.items():
            assert self.entry_other is not None
            self._credit(self.entry_other, key, n)

    def fold(self, keep: int | None = None, entries: bool = False, slack: int = 1) -> None:
        """Keep the ``keep`` groups with the most starts (then by name) one by one and sum
        the rest up into ``other`` (before :meth:`saved`: their hits are credited there).
        Exact only for groups complete in this partial (a host whose ledgers are all read),
        as :mod:`.stats_read` calls it. ``entries``: the ``--by entry`` rows instead.
        ``slack``: fold only past ``slack`` times ``keep`` groups (fewer sorts while
        counting)."""
        keep = MAX_GROUPS if keep is None else keep
        groups = self.entry_groups if entries else self.groups
        if len(groups) <= keep * slack:
            return
        ranked = sorted(groups, key=lambda g: (-groups[g][0], g))
        gone = set(ranked[keep:])
        acc = self.entry_other if entries else self.other
        acc = acc if acc is not None else new_acc()
        for i, column in enumerate(zip(*[groups.pop(g) for g in gone], strict=True)):
            acc[i] += sum(column)
        if entries:
            self.entry_other, self.entry_others = acc, self.entry_others + len(gone)
            for key in gone & self.entry_hits.keys():
                self.entry_other_hits[key] += self.entry_hits.pop(key)
        else:
            self.other, self.others = acc, self.others + len(gone)
            for gk in [gk for gk in self.hits if gk[0] in gone]:
                self.other_hits[gk[1]] += self.hits.pop(gk)

    def fold_hosts(self, keep: int | None = None) -> None:
        """Count the hosts named past ``keep`` without their names (hosts of different
        partials must be different hosts: :mod:`.stats_read` partitions by host)."""
        if len(self.hosts) > (MAX_GROUPS if keep is None else keep):
            self.more_hosts += len(self.hosts)
            self.hosts = set()

    def _credit(self, acc: list[Any], key: str, hits: int) -> None:
        t = self.entry_time.get(key)
        if t is None:
            acc[8] += hits
        else:
            acc[7] += hits * t[1]


def _start_groups(tally: _Tally, by: str, models: Mapping[str, str], per_start: dict[str, float],
                  out: _Partial) -> None:
    """Each start added to its group's counters, its hits counted per (group, entry), and
    when each entry was last hit. One pass over the starts (the most numerous thing a tally
    holds): a group's counters and hit counts are found once per model key, host or day,
    not per start."""
    groups = out.groups
    slots: dict[Any, tuple[list[Any], dict[str, int]]] = {}
    hit_counts: dict[str, dict[str, int]] = {}
    last: dict[str, float] = {}
    miss = _MISS | _LOAD_FAILURE
    by_model, by_host = by == "model", by == "host"
    for sid, (t, flags, host, key0, hit_keys, load) in tally.starts.items():
        slot_key = key0 if by_model else host if by_host else int(t // 86400)
        slot = slots.get(slot_key)
        if slot is None:
            name = models.get(key0, UNKNOWN_MODEL) if by_model else (host or "?") if by_host \
                else day_of(t)
            acc = groups.get(name)
            if acc is None:
                acc = groups[name] = new_acc()
            slot = slots[slot_key] = (acc, hit_counts.setdefault(name, {}))
        a, hc = slot
        a[0] += 1
        a[_OUTCOME[flags]] += 1
        if flags & miss:
            c = per_start.get(sid)
            if c is None:
                a[6] += 1
            else:
                a[5] += c
        if hit_keys is not None:
            if hit_keys.__class__ is str:
                hc[hit_keys] = hc.get(hit_keys, 0) + 1
                if t > last.get(hit_keys, 0.0):
                    last[hit_keys] = t
            else:
                for k in hit_keys:
                    hc[k] = hc.get(k, 0) + 1
                    if t > last.get(k, 0.0):
                        last[k] = t
            a[9] += load
    hits = out.hits
    for name, hc in hit_counts.items():
        for k, n in hc.items():
            hits[name, k] += n
    out.last_hit = last


def _entry_groups(tally: _Tally, per_decision: dict[tuple[str, str], float],
                  out: _Partial) -> None:
    groups = out.entry_groups
    assert tally.decisions is not None
    for (key, sid), flags in tally.decisions.items():
        a = groups.get(key)
        if a is None:
            a = groups[key] = new_acc()
        a[0] += 1
        a[_OUTCOME[flags]] += 1
        if flags & (_MISS | _LOAD_FAILURE):
            c = per_decision.get((key, sid))
            if c is None:
                a[6] += 1
            else:
                a[5] += c
        elif flags & _HIT:
            out.entry_hits[key] += 1
            a[9] += tally.starts[sid][5]


def _summary(tally: _Tally, by: str, models: Mapping[str, str]) -> _Partial:
    """One tally summed up per group (its starts are dropped with it)."""
    out = _Partial(events=tally.events)
    if not tally.starts:
        return out
    per_start, entry_time, per_decision = tally.compile_times()
    _start_groups(tally, "host" if by == "entry" else by, models, per_start, out)
    if by == "entry":
        _entry_groups(tally, per_decision, out)
    out.entry_time = entry_time
    out.written = tally.written
    out.hosts = {st[2] for st in tally.starts.values()}
    out.first = min(st[0] for st in tally.starts.values())
    return out
