"""Reading for :mod:`.stats`: the recorder's ledgers one host at a time (a host's copies merged
by event, a host's single ledger continued from its memo, :mod:`.stats_memo`), each host's
lines streamed into a :class:`~.stats_tally._Tally` and summed up, large fleets spread over
worker processes.

Memory is bounded: a tally that grows past :data:`~.stats_tally.MAX_STARTS` starts (one
ledger file holding a million hosts, or one host's years of restarts) is dropped and its
ledgers read again into parts on disk (:class:`~vllm_cache_tools.read.ledger_spill.Spill`),
by host, each part counted on its own and summed up; a part still too large is split again by
start. Every event of a start is in one part, so the counts are exact. Hosts are folded past
:data:`~.stats_tally.MAX_GROUPS` after each part (hosts are complete there), the ones with
the most starts kept by name."""

from __future__ import annotations

import concurrent.futures
import contextlib
import gc
import multiprocessing
import operator
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from vllm_cache_tools.analyze import stats_memo
from vllm_cache_tools.analyze.stats_tally import (
    MAX_PROBLEMS,
    MAX_STARTS,
    _Partial,
    _summary,
    _Tally,
)
from vllm_cache_tools.layout import COMPILE_CACHE_DIRNAME, LEDGER_DIRNAME, STATE_DIRNAME
from vllm_cache_tools.read.ledger_spill import Spill, parts_for
from vllm_cache_tools.read.ledger_stream import (
    Complete,
    LedgerProblem,
    StatsEvent,
    first_row,
    read_batches,
    read_from,
)
from vllm_cache_tools.store.locate import display_path


def _first_host(path: Path) -> str | None:
    row = first_row(path)
    return row.host if row is not None else None


Work = Sequence[tuple[int, str | None, Sequence[tuple[Path, str]]]]
"""Hosts to read: (its place among all hosts, host, [(ledger, its label)]); one host's copies
are merged by event."""


def _partial(work: Work, since: float | None, by: str, models: Mapping[str, str]
             ) -> list[tuple[int, _Partial]]:
    """Read the ledgers of some hosts and sum them up, one host at a time: a start's processes
    all log on one host, so a host's starts are complete when its files are read and only
    their sums are kept (memory follows the largest host, not the fleet). Runs in a worker
    process for large fleets. Each host's sums come back on their own, to be added up in the
    hosts' order: the same seconds to the last digit however hosts were spread over workers
    or taken from the memo."""
    digest = stats_memo.models_digest(by, models)
    return [(i, _host(host, paths, since, by, models, digest)) for i, host, paths in work]


def _host(host: str | None, paths: Sequence[tuple[Path, str]], since: float | None, by: str,
          models: Mapping[str, str], digest: str) -> _Partial:
    """One host's ledgers summed up: its memo's tally continued with the lines appended since
    (:mod:`.stats_memo`), the file read whole without one; the sums are kept for the next run
    when the file ended in a whole line."""
    tally = _Tally(since, by == "entry")
    seen: set[StatsEvent] | None = set() if len(paths) > 1 and host is not None else None
    memo = stats_memo.memoizable(list(paths), since)
    kept = stats_memo.load(memo, by == "entry") if memo is not None else None
    problems: list[str] = []
    bad = duplicates = 0
    if kept is not None and not stats_memo.restore(kept, tally):
        kept, tally = None, _Tally(since, by == "entry")
    if kept is not None:
        problems, bad = kept.problems[:MAX_PROBLEMS], kept.bad
    end: int | None = None
    tail = False
    for p, label in paths:
        batches = read_from(p, label, kept.offset, kept.lines) if kept is not None else \
            read_from(p, label)
        for b in batches:
            if isinstance(b, Complete):
                end = b.offset
                if memo is not None and (kept is None or b.offset != kept.offset):
                    stats_memo.save(memo, by == "entry", tally, b.offset, b.lines, bad,
                                    problems)
                continue
            tail = end is not None  # a last line without its newline: not in the memo
            if isinstance(b, LedgerProblem):
                bad += 1
                if len(problems) < MAX_PROBLEMS:
                    problems.append(str(b))
                continue
            if seen is not None:
                fresh = [r for r in b if r not in seen]
                duplicates += len(b) - len(fresh)
                seen.update(fresh)
                b = fresh
            tally.add(b)
            if len(tally.starts) > MAX_STARTS or (seen is not None and len(seen) > MAX_SEEN):
                del tally, seen, kept
                return _spilled(paths, since, by, models)
    part = _summary(tally, by, models)
    part.bad, part.problems, part.duplicates = bad, problems, duplicates
    if memo is not None and end is not None and not tail:
        stats_memo.save_summary(memo, by, digest, part, end)
    return part


MAX_SEEN = 4 * MAX_STARTS
"""Events kept to merge a host's copies by event, before its ledgers are counted in parts."""
SPILL_PART_BYTES = 96 << 20
"""Ledger bytes per part when a host's ledgers are counted in parts (~40k starts of 1-8
workers in the recorder's lines, well under :data:`~.stats_tally.MAX_STARTS`)."""
MAX_LEVEL = 3
RESPLIT_PARTS = 8


_host_key: Callable[[StatsEvent], str] = operator.attrgetter("host")


def _start_key(level: int) -> Callable[[StatsEvent], str]:
    def key(r: StatsEvent) -> str:
        return f"{level}:{r.start or f'{r.host}:{r.pid}'}"
    return key


def _spilled(paths: Sequence[tuple[Path, str]], since: float | None, by: str,
             models: Mapping[str, str]) -> _Partial:
    """One host's ledgers (one file group: it may hold many hosts) counted in parts on disk,
    by host; the hosts past :data:`MAX_GROUPS` folded after each part. Not memoized."""
    size = sum(_size(p) for p, _ in paths)
    bad = 0
    problems: list[str] = []
    out = _Partial()
    with Spill(parts_for(size, SPILL_PART_BYTES), _host_key, "vllm-cache-stats-") as sp:
        for p, label in paths:
            for b in read_batches(p, label):
                if isinstance(b, LedgerProblem):
                    bad += 1
                    if len(problems) < MAX_PROBLEMS:
                        problems.append(str(b))
                    continue
                sp.add(b)
        sp.finish()
        for i in range(sp.parts):
            out.merge(_part(sp, i, since, by, models, len(paths) > 1, 1))
            sp.drop(i)
            if by in ("host", "entry"):  # groups by host (--by entry: for the totals)
                out.fold(slack=2)
            out.fold_hosts()
        names = ", ".join(label for _, label in paths)
        out.spilled.append(
            f"{names}: more than {MAX_STARTS:,} starts at once; counted in {sp.parts} parts "
            f"by host ({sp.bytes / 1e6:,.0f} MB in a temporary folder, removed), exactly")
    out.bad, out.problems = bad, problems
    return out


def _part(sp: Spill, i: int, since: float | None, by: str, models: Mapping[str, str],
          dedupe: bool, level: int) -> _Partial:
    """Part ``i`` of ``sp`` counted; split again by start when it is still too large."""
    tally = _Tally(since, by == "entry")
    seen: set[StatsEvent] | None = set() if dedupe else None
    duplicates = 0
    for b in sp.read(i):
        if seen is not None:
            fresh = [r for r in b if r not in seen]
            duplicates += len(b) - len(fresh)
            seen.update(fresh)
            b = fresh
        tally.add(b)
        if (len(tally.starts) > MAX_STARTS or (seen is not None and len(seen) > MAX_SEEN)) \
                and level < MAX_LEVEL:
            del tally, seen
            out = _Partial()
            with Spill(RESPLIT_PARTS, _start_key(level), "vllm-cache-stats-") as sub:
                for rows in sp.read(i):
                    sub.add(rows)
                sub.finish()
                for j in range(sub.parts):
                    out.merge(_part(sub, j, since, by, models, dedupe, level + 1))
                    sub.drop(j)
            return out
    part = _summary(tally, by, models)
    part.duplicates = duplicates
    return part


def _kept_sums(work: Work, since: float | None, by: str, models: Mapping[str, str],
               parts: list[_Partial | None]) -> list[tuple[int, str | None,
                                                            Sequence[tuple[Path, str]]]]:
    """Fill in ``parts`` for the hosts whose kept sums still hold
    (:func:`.stats_memo.load_summary`: nothing appended since); returns the other hosts,
    which are to be read."""
    if since is not None or not stats_memo.enabled():
        return list(work)
    digest = stats_memo.models_digest(by, models)
    rest = []
    for i, host, paths in work:
        memo = stats_memo.memoizable(list(paths), since)
        got = stats_memo.load_summary(memo, by, digest) if memo is not None else None
        if got is None:
            rest.append((i, host, paths))
        else:
            parts[i] = got
    return rest


def _partial_nogc(work: Work, since: float | None, by: str, models: Mapping[str, str]
                  ) -> list[tuple[int, _Partial]]:
    """:func:`_partial` with the cyclic garbage collector paused: the tally makes a few
    hundred thousand small lists and tuples and no cycle, and each collection would walk them
    all again (~10% of the time for 1M events)."""
    was = gc.isenabled()
    gc.disable()
    try:
        return _partial(work, since, by, models)
    finally:
        if was:
            gc.enable()


PARALLEL_BYTES = 64 << 20
"""Ledgers smaller than this are read in this process (a worker costs more than it saves)."""
MAX_JOBS = 8


def jobs_default() -> int:
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, MAX_JOBS))


def read_all(ledgers: Sequence[Path], since: float | None, by: str,
              models: Mapping[str, str], jobs: int) -> _Partial:
    """Every ledger, one host's files together, spread over ``jobs`` worker processes when
    they are large (hosts are independent: a start's processes log on one host)."""
    by_host: dict[str | None, list[tuple[Path, str]]] = {}
    size = 0
    one_folder = len({p.parent for p in ledgers}) <= 1
    for p in ledgers:
        by_host.setdefault(_first_host(p), []).append((p, _label(p, one_folder)))
        with contextlib.suppress(OSError):
            size += p.stat().st_size
    hosts = [(i, host, paths) for i, (host, paths) in enumerate(by_host.items())]
    parts: list[_Partial | None] = [None] * len(hosts)
    work = _kept_sums(hosts, since, by, models, parts)
    if len(work) < len(hosts):
        size = sum(_size(p) for _, _, paths in work for p, _ in paths)
    n = min(jobs, len(work)) if size >= PARALLEL_BYTES else 1
    if n <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        done = _partial_nogc(work, since, by, models)
    else:
        # Largest hosts first, each to the least loaded worker.
        bins: list[list[tuple[int, str | None, Sequence[tuple[Path, str]]]]] = [
            [] for _ in range(n)]
        load = [0] * n
        for w in sorted(work, key=lambda w: -sum(_size(p) for p, _ in w[2])):
            i = load.index(min(load))
            bins[i].append(w)
            load[i] += sum(_size(p) for p, _ in w[2])
        ctx = multiprocessing.get_context("fork")
        with concurrent.futures.ProcessPoolExecutor(n, mp_context=ctx) as pool:
            done = [x for got in pool.map(_partial_nogc, bins, [since] * n, [by] * n,
                                          [models] * n) for x in got]
    for i, got in done:
        parts[i] = got
    out = _Partial()
    for host_sums in parts:
        if host_sums is not None:
            out.merge(host_sums)
    out.fold()
    if by == "entry":
        out.fold(entries=True)
    out.saved()
    if out.bad > MAX_PROBLEMS:
        out.problems.append(f"... and {out.bad - MAX_PROBLEMS} more damaged ledger lines")
    return out


def _size(p: Path) -> int:
    try:
        return p.stat().st_size
    except OSError:
        return 0


def _label(p: Path, one_folder: bool) -> str:
    """A ledger's name in messages: its file name when every ledger read is in one folder (a
    root's), else with the root it is in (``vm.jsonl of root /data/pods/pod-b``; a folder of
    roots said ``ledger/vm.jsonl`` for every one), or its whole path when it is in none."""
    if one_folder:
        return p.name
    state = p.parent.parent
    if (p.parent.name, state.name) == (LEDGER_DIRNAME, STATE_DIRNAME) and \
            state.parent.name == COMPILE_CACHE_DIRNAME:
        return f"{p.name} of root {display_path(state.parent.parent)}"
    return display_path(p)
