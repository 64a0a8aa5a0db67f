"""``vllm-cache drift``: the factors that split one model's cache across a fleet's starts."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from vllm_cache_tools.analyze.drift import DriftReport, Factor, drift
from vllm_cache_tools.cli.common import fail, print_json, warn, write_out
from vllm_cache_tools.cli.ls import RootOpt
from vllm_cache_tools.cli.options import StorageOpt
from vllm_cache_tools.units import fmt_duration, human_size
from vllm_cache_tools.views.insight import drift_document

VALUES_SHOWN = 4


def _values(f: Factor) -> str:
    items = list(f.values.items())
    shown = ", ".join(f"{v} ({n})" for v, n in items[:VALUES_SHOWN])
    more = len(items) - VALUES_SHOWN
    return shown + (f", ... {more} more" if more > 0 else "")


def _factor_lines(f: Factor) -> list[str]:
    what = f"{f.component} {f.item}"
    if f.in_key and f.entries > 1:
        head = (f"  {what}: {len(f.values)} values -> {f.entries} entries [{f.kind}]; "
                f"wasted {human_size(f.wasted_bytes)}, {fmt_duration(f.wasted_seconds)} "
                f"compiling ({f.wasted_starts} start(s))")
    else:
        head = f"  {what}: {len(f.values)} values, not in vLLM's key: no new entries [{f.kind}]"
    return [head, f"      values: {_values(f)}", f"      fix: {f.fix}"]


def _render(r: DriftReport) -> str:
    basis = ("the ledgers" if r.basis == "ledger" else
             "the manifests alone: identical starts count once")
    out = [f"drift in {r.source} ({r.kind}; starts from {basis})"]
    if not r.models:
        out.append("no start with a recorder manifest: install vllm-cache-tools where vLLM "
                   "runs (its recorder plugin is on by default) and start vLLM")
    out += [f"limit: {c}" for c in r.caps]
    for m in r.models:
        splitting = [f for f in m.factors if f.in_key and f.entries > 1]
        out += ["", f"{m.model}: {m.starts} start(s), {m.entries} entries "
                f"({human_size(m.size_bytes)})"]
        if not m.factors:
            out.append("  every start recorded the same factors")
        elif not splitting:
            out.append("  nothing that differs between starts is in vLLM's key: no split")
        for f in m.factors:
            out += _factor_lines(f)
    return "\n".join(out) + "\n"


def drift_cmd(
    source: Annotated[str | None, typer.Argument(
        metavar="[SOURCE]", help="A cache root, a folder of collected roots/ledgers/manifests, "
        "or a remote store URL (default: --root, else the root vLLM uses).")] = None,
    root: RootOpt = None,
    model: Annotated[str | None, typer.Option(
        "--model", help="Only models whose name contains this.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable report.")] = False,
    storage_option: StorageOpt = None,
) -> None:
    """For each model, the factors that take more than one value across its starts (env
    variables, config fields, Inductor options, traced-file paths, versions, hardware, host),
    how many entries each split the cache into, per host / per run / per install, and the fix;
    ranked by the bytes and compile seconds they wasted. Needs the recorder's manifests (and
    its ledgers, to count every start)."""
    if source is not None and root is not None:
        fail("give the source either as SOURCE or as --root, not both")
    options = None
    if storage_option:
        from vllm_cache_tools.cli.fleetcommon import run
        from vllm_cache_tools.fleet.remote import parse_storage_options

        options = run(lambda: parse_storage_options(storage_option))
    where: str | Path | None = source if source is not None else root
    report = drift(where, model=model, storage_options=options)
    for p in report.problems:
        warn(p)
    if model is not None and not report.models:
        fail(f"no recorded start of a model matching {model!r}", code=1)
    if json_out:
        print_json(drift_document(report))
    else:
        write_out(_render(report))
