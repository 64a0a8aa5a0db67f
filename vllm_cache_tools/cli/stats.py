"""``vllm-cache stats``: hits, misses and seconds saved, from the recorder's ledgers (the work:
:mod:`vllm_cache_tools.cli.stats_run`)."""

from __future__ import annotations

from typing import Annotated

import typer

from vllm_cache_tools.cli.ls import RootOpt
from vllm_cache_tools.cli.options import StorageOpt
from vllm_cache_tools.cli.stats_run import run_stats


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
    fmt: Annotated[str | None, typer.Option(
        "--format", metavar="openmetrics|prometheus",
        help="Prometheus metrics instead of the report: openmetrics (OpenMetrics 1.0, ends "
        "'# EOF') or prometheus (text 0.0.4, what node_exporter's textfile collector reads); "
        "--by model (default) or host.")] = None,
    drift: Annotated[bool, typer.Option(
        "--drift", help="With --format: also the drift factor counts per model (reads every "
        "recorder manifest, as vllm-cache drift does).")] = False,
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
    run_stats(source, root, since=since, by=by, json_out=json_out, wide=wide, jobs=jobs,
              storage_option=storage_option, fmt=fmt, drift=drift)
