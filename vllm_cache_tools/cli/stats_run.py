"""What ``vllm-cache stats`` does (:func:`run_stats`): the verb's options are typer's, in
:mod:`vllm_cache_tools.cli.stats`."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vllm_cache_tools.analyze.stats import GROUPINGS, Counters, StatsReport, stats
from vllm_cache_tools.cli.common import fail, print_json, warn, write_out
from vllm_cache_tools.units import fmt_duration, human_size, iso, parse_age

if TYPE_CHECKING:
    from vllm_cache_tools.analyze.drift import DriftReport

def run_stats(source: str | None = None, root: Path | None = None, *, since: str | None = None,
              by: str = "model", json_out: bool = False, wide: bool = False,
              jobs: int | None = None, storage_option: Sequence[str] | None = None,
              fmt: str | None = None, drift: bool = False) -> None:
    """``vllm-cache stats`` (see :func:`vllm_cache_tools.cli.stats.stats_cmd` for the
    options)."""
    if by not in GROUPINGS:
        fail(f"--by must be one of {', '.join(GROUPINGS)}")
    if fmt is not None:
        check_metrics_options(fmt, by, json_out)
    elif drift:
        fail("--drift adds drift's factor counts to the metrics: give it with --format")
    if source is not None and root is not None:
        fail("give the source either as SOURCE or as --root, not both")
    cutoff = None
    if since is not None:
        import time

        cutoff = max(0.0, time.time() - parse_age(since))  # older than 1970: every event
    options = None
    if storage_option:
        from vllm_cache_tools.cli.fleetout import run
        from vllm_cache_tools.fleet.remote import parse_storage_options

        options = run(lambda: parse_storage_options(storage_option))
    where: str | Path | None = source if source is not None else root
    try:
        if drift:
            report, drifted = count_metrics(where, by, drift=True, since=cutoff,
                                            storage_options=options, jobs=jobs)
        else:
            report = stats(where, by=by, since=cutoff, storage_options=options, jobs=jobs)
            drifted = None
    except ValueError as exc:  # also what the readers raise that is not one of ours
        fail(str(exc))
    for p in report.problems:
        warn(p)
    if fmt is not None:
        from vllm_cache_tools.views.metrics import exposition, problems

        for p in problems(report, drifted)[len(report.problems):]:
            warn(p)

        write_out(exposition(report, fmt, drifted).decode())  # labels already shown-safe
        return
    if json_out:
        from vllm_cache_tools.views.insight import stats_document

        print_json(stats_document(report))
        return
    import shutil

    width = None if wide or not sys.stdout.isatty() else shutil.get_terminal_size((80, 24)).columns
    keys = _shown_keys(report)
    write_out("\n".join([*_summary(report), *_groups(report, width, keys),
                         *_never(report, width, keys)])
              + "\n")


def check_metrics_options(fmt: str, by: str, json_out: bool = False) -> None:
    """``--format`` asks for metrics: one of the exposition formats, grouped by a bounded
    label (one line, exit 2, before anything is read)."""
    from vllm_cache_tools.views.metrics import FORMATS, METRIC_BY

    if fmt not in FORMATS:
        fail(f"--format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    if json_out:
        fail("give either --json or --format, not both")
    if by not in METRIC_BY:
        fail(f"metrics group by {' or '.join(METRIC_BY)}, not {by} (one label value per "
             f"{by} is unbounded)")


def count_metrics(where: str | Path | None, by: str, *, drift: bool = False,
                  since: float | None = None, storage_options: Any = None,
                  jobs: int | None = None) -> tuple[StatsReport, DriftReport | None]:
    """What the metrics are rendered from: the source's stats and, with ``drift``, its drift
    over the same gathered inputs (the manifests read once for both)."""
    if not drift:
        return stats(where, by=by, since=since, storage_options=storage_options,
                     jobs=jobs), None
    from vllm_cache_tools.analyze.drift import drift_of
    from vllm_cache_tools.analyze.inputs import gather
    from vllm_cache_tools.analyze.stats import stats_of

    inputs = gather(where, manifests=True, storage_options=storage_options)
    return stats_of(inputs, by=by, since=since, jobs=jobs), drift_of(inputs)


NEVER_HIT_SHOWN = 10


def _secs(s: float | None) -> str:
    """Seconds as durations; a negative net (hits that cost more than they saved) keeps
    its sign."""
    if s is None:
        return "-"
    return "-" + fmt_duration(-s) if s < 0 else fmt_duration(s)


def _pct(c: Counters) -> str:
    return "-" if c.hit_ratio is None else f"{100 * c.hit_ratio:.1f}%"


def _num(n: int | None) -> str:
    return "-" if n is None else f"{n:,}"


def _day(t: float | None) -> str:
    return (iso(t) or "?")[:10]


def _summary(r: StatsReport) -> list[str]:
    t = r.totals
    out = []
    if r.basis == "ledger":
        out.append(f"stats of {r.source} ({r.kind}): {r.ledgers} ledger(s), {r.hosts} host(s),"
                   + (f" events {_day(r.first)} .. {_day(r.last)}" if r.first is not None
                      else " no event")
                   + (f", since {iso(r.since)}" if r.since is not None else ""))
        out.append(f"  starts          {_num(t.starts):>9}")
        out.append(f"  hits            {_num(t.hits):>9}  ({_pct(t)} of starts that decided)")
        out.append(f"  misses          {_num(t.misses):>9}")
        out.append(f"  load failures   {_num(t.load_failures):>9}")
        if t.disabled:
            out.append(f"  cache disabled  {_num(t.disabled):>9}")
        timed = (f" ({t.compile_unknown} start(s) compiled untimed: vLLM's AOT-only mode)"
                 if t.compile_unknown else "")
        out.append(f"  compiling       {_secs(t.compile_seconds):>9}  on misses{timed}")
        unknown = (f" (+{t.saved_unknown} hit(s) on entries never timed)"
                   if t.saved_unknown else "")
        out.append(f"  net saved       {_secs(t.net_seconds):>9}  compile time avoided minus "
                   "time spent loading")
        out.append(f"    gross saved   {_secs(t.saved_seconds):>9}  by hits, each credited "
                   f"with its entry's compile time{unknown}")
        out.append(f"    loading       {_secs(t.load_seconds):>9}  spent by hits")
        out += _regressions(r)
    else:
        none = (f"{r.ledgers} ledger(s) without a readable event" if r.ledgers else
                "no recorder ledger")
        out.append(f"stats of {r.source} ({r.kind}): {none}, so only what the cache files "
                   "prove")
        out.append(f"  entries written {_num(t.misses):>9}  (each compiled at least once)")
    never = sum(u.size_bytes or 0 for u in r.never_hit)
    out.append(f"  cache           {r.entries:,} entries, {human_size(r.size_bytes)}"
               + (f"; {len(r.never_hit)} never hit since written ({human_size(never)})"
                  if r.never_hit else "")
               + (f"; {r.placed} placed by unpack/pull (recorder manifests came with them; "
                  "no start here used them yet)" if r.placed and r.basis == "ledger" else "")
               + (f"; {r.untracked} written with the recorder off" if r.untracked and
                  r.basis == "ledger" else ""))
    if r.duplicates:
        out.append(f"  merged          {r.duplicates:,} events seen in more than one copy of a "
                   "host's ledger, counted once")
    out += [f"  unknown: {u}" for u in r.unknown]
    out += [f"  limit: {c}" for c in r.caps]
    return out


MAX_REGRESSIONS = 10
"""Regression lines shown (--json lists all groups with ``regression``)."""


def _regressions(r: StatsReport) -> list[str]:
    """A line where hits cost more loading than the compiles they avoided: for all starts,
    then per group (with ``--by entry``, per entry)."""
    out = []
    t = r.totals
    if t.regression:
        out.append(f"  regression: hits spent {_secs(t.load_seconds)} loading, more than the "
                   f"{_secs(t.saved_seconds)} their compiles took")
    groups = r.regressions
    for g in groups[:MAX_REGRESSIONS]:
        c = g.counters
        out.append(f"  regression: {r.by} {g.name}: {c.hits} hit(s) spent "
                   f"{_secs(c.load_seconds)} loading, compiling took {_secs(c.saved_seconds)}")
    if len(groups) > MAX_REGRESSIONS:
        out.append(f"  ... and {len(groups) - MAX_REGRESSIONS} more regressions (--json)")
    return out


def _shown_keys(r: StatsReport) -> dict[str, str]:
    """The entry keys of the report as ls shows them (was: AOT keys cut to 16 in the
    never-hit table, whole in --by entry)."""
    from vllm_cache_tools.cli.render import shown_keys

    return shown_keys([*(u.key for u in r.never_hit),
                       *(g.name for g in r.groups if r.by == "entry")])


def _groups(r: StatsReport, width: int | None, keys: dict[str, str]) -> list[str]:
    if not r.groups:
        return []
    from vllm_cache_tools.cli.render import Column, render

    label = r.by.upper()
    cols = [Column(label, shrink_to=40), Column("STARTS", "right", drop=None),
            Column("HITS", "right"), Column("MISSES", "right"),
            Column("LOADFAIL", "right", drop=3), Column("HIT%", "right"),
            Column("COMPILING", "right", drop=4), Column("NET", "right", drop=2),
            Column("ENTRIES", "right", drop=5), Column("SIZE", "right", drop=1)]
    rows = [[keys.get(g.name, g.name) if r.by == "entry" else g.name,
             _num(g.counters.starts), _num(g.counters.hits), _num(g.counters.misses),
             _num(g.counters.load_failures), _pct(g.counters),
             _secs(g.counters.compile_seconds), _secs(g.counters.net_seconds),
             _num(g.entries), human_size(g.size_bytes)] for g in r.groups]
    return ["", f"by {r.by}:", *render(cols, rows, width)]


def _never(r: StatsReport, width: int | None, keys: dict[str, str]) -> list[str]:
    if not r.never_hit:
        return []
    from vllm_cache_tools.cli.render import Column, render

    cols = [Column("KEY"), Column("LAYOUT"), Column("SIZE", "right"),
            Column("WRITTEN", drop=2), Column("MODEL", shrink_to=30, drop=1)]
    shown = r.never_hit[:NEVER_HIT_SHOWN]
    rows = [[keys[u.key], u.layout, human_size(u.size_bytes),
             (iso(u.written) or "?")[:16].replace("T", " "), u.model or "?"] for u in shown]
    more = len(r.never_hit) - len(shown)
    return ["", "never hit since written (largest first):", *render(cols, rows, width),
            *([f"... and {more} more (--json lists all)"] if more > 0 else [])]
