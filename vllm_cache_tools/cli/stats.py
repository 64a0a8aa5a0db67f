"""``vllm-cache stats``: hits, misses and seconds saved, from the recorder's ledgers."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Annotated

import typer

from vllm_cache_tools.analyze.stats import GROUPINGS, Counters, StatsReport, stats
from vllm_cache_tools.cli.common import fail, print_json, warn, write_out
from vllm_cache_tools.cli.fleetcommon import StorageOpt
from vllm_cache_tools.cli.ls import RootOpt
from vllm_cache_tools.cli.render import Column, render
from vllm_cache_tools.units import fmt_duration, human_size, iso, parse_age
from vllm_cache_tools.views.insight import stats_document

NEVER_HIT_SHOWN = 10


def _secs(s: float | None) -> str:
    return "-" if s is None else fmt_duration(s)


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
                   f" events {_day(r.first)} .. {_day(r.last)}"
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
        out.append(f"  saved           {_secs(t.saved_seconds):>9}  by hits, each credited "
                   f"with its entry's compile time{unknown}")
        out.append(f"  loading         {_secs(t.load_seconds):>9}  spent by hits")
    else:
        out.append(f"stats of {r.source} ({r.kind}): no recorder ledger, so only what the cache "
                   "files prove")
        out.append(f"  entries written {_num(t.misses):>9}  (each compiled at least once)")
    never = sum(u.size_bytes or 0 for u in r.never_hit)
    out.append(f"  cache           {r.entries:,} entries, {human_size(r.size_bytes)}"
               + (f"; {len(r.never_hit)} never hit since written ({human_size(never)})"
                  if r.never_hit else "")
               + (f"; {r.untracked} written with the recorder off" if r.untracked and
                  r.basis == "ledger" else ""))
    if r.duplicates:
        out.append(f"  merged          {r.duplicates:,} events seen in more than one copy of a "
                   "host's ledger, counted once")
    out += [f"  unknown: {u}" for u in r.unknown]
    return out


def _groups(r: StatsReport, width: int | None) -> list[str]:
    if not r.groups:
        return []
    label = r.by.upper()
    cols = [Column(label, shrink_to=40), Column("STARTS", "right", drop=None),
            Column("HITS", "right"), Column("MISSES", "right"),
            Column("LOADFAIL", "right", drop=3), Column("HIT%", "right"),
            Column("COMPILING", "right", drop=4), Column("SAVED", "right", drop=2),
            Column("ENTRIES", "right", drop=5), Column("SIZE", "right", drop=1)]
    rows = [[g.name, _num(g.counters.starts), _num(g.counters.hits), _num(g.counters.misses),
             _num(g.counters.load_failures), _pct(g.counters),
             _secs(g.counters.compile_seconds), _secs(g.counters.saved_seconds),
             _num(g.entries), human_size(g.size_bytes)] for g in r.groups]
    return ["", f"by {r.by}:", *render(cols, rows, width)]


def _never(r: StatsReport, width: int | None) -> list[str]:
    if not r.never_hit:
        return []
    cols = [Column("KEY"), Column("LAYOUT"), Column("SIZE", "right"),
            Column("WRITTEN", drop=2), Column("MODEL", shrink_to=30, drop=1)]
    shown = r.never_hit[:NEVER_HIT_SHOWN]
    rows = [[u.key[:16] if u.layout == "aot" else u.key, u.layout, human_size(u.size_bytes),
             (iso(u.written) or "?")[:16].replace("T", " "), u.model or "?"] for u in shown]
    more = len(r.never_hit) - len(shown)
    return ["", "never hit since written (largest first):", *render(cols, rows, width),
            *([f"... and {more} more (--json lists all)"] if more > 0 else [])]


def stats_cmd(
    source: Annotated[str | None, typer.Argument(
        metavar="[SOURCE]", help="A cache root, a folder of collected roots/ledgers/manifests, "
        "or a remote store URL (default: --root, else the root vLLM uses).")] = None,
    root: RootOpt = None,
    since: Annotated[str | None, typer.Option(
        "--since", help="Only starts in this last span, e.g. 12h, 7d, 2w.")] = None,
    by: Annotated[str, typer.Option(
        "--by", help="Group by model, host, day (UTC) or entry.")] = "model",
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable report.")] = False,
    wide: Annotated[bool, typer.Option("--wide", help="Every column, however wide.")] = False,
    jobs: Annotated[int | None, typer.Option(
        "--jobs", "-j", min=1, max=64, help="Worker processes for ledgers over 64 MB "
        "(default: the CPUs available, at most 8).")] = None,
    storage_option: StorageOpt = None,
) -> None:
    """Hit statistics, as ccache -s gives them: starts, hits, misses, load failures, hit
    ratio, seconds spent compiling on misses and saved by hits, bytes per model, entries never
    hit since written. From the recorder's ledgers: every host's ledger in a shared root, every
    ledger in a folder of collected files (copies of one host's ledger merged without double
    counting); without any ledger, what the cache files prove (fewer columns, said so)."""
    if by not in GROUPINGS:
        fail(f"--by must be one of {', '.join(GROUPINGS)}")
    if source is not None and root is not None:
        fail("give the source either as SOURCE or as --root, not both")
    cutoff = None
    if since is not None:
        import time

        cutoff = time.time() - parse_age(since)
    options = None
    if storage_option:
        from vllm_cache_tools.cli.fleetcommon import run
        from vllm_cache_tools.fleet.remote import parse_storage_options

        options = run(lambda: parse_storage_options(storage_option))
    where: str | Path | None = source if source is not None else root
    try:
        report = stats(where, by=by, since=cutoff, storage_options=options, jobs=jobs)
    except ValueError as exc:  # also what the readers raise that is not one of ours
        fail(str(exc))
    for p in report.problems:
        warn(p)
    if json_out:
        print_json(stats_document(report))
        return
    width = None if wide or not sys.stdout.isatty() else shutil.get_terminal_size((80, 24)).columns
    write_out("\n".join([*_summary(report), *_groups(report, width), *_never(report, width)])
              + "\n")
