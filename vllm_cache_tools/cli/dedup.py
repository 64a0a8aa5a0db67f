"""``vllm-cache dedup``: hard-link identical cache files (plan by default, ``--yes`` links);
``--undo`` gives linked files their own copies again."""

from __future__ import annotations

from typing import Annotated

import typer

from vllm_cache_tools.cli.common import print_json, write_out
from vllm_cache_tools.cli.ls import RootOpt
from vllm_cache_tools.cli.prune import DryRunOpt, ForceOpt, JsonOpt, parse_grace
from vllm_cache_tools.maintain.dedup import DedupPlan, DedupResult, execute_dedup, plan_dedup
from vllm_cache_tools.maintain.dedup_undo import SplitPlan, SplitResult, execute_split, plan_split
from vllm_cache_tools.maintain.plan import check_prunable_root
from vllm_cache_tools.store.locate import display_path, resolve_root
from vllm_cache_tools.units import format_size
from vllm_cache_tools.views.dedup import dedup_report, undo_report
from vllm_cache_tools.views.payloads import with_schema

SHOW = 30

GraceOpt = Annotated[str, typer.Option(
    "--grace", metavar="AGE", help="Never link or split a file whose file or folder was "
    "modified within this long (a compile may be writing it); 0 turns it off.")]


def _p(line: str = "") -> None:
    write_out(line + "\n")


def _render_plan(plan: DedupPlan, apply: bool) -> None:
    head = "Plan: link" if apply else "Dry run: would link"
    _p(f"{head} {plan.files_to_link} files in {len(plan.groups)} groups of identical files, "
       f"saving {format_size(plan.saved_bytes)} ({plan.saved_bytes} B) of "
       f"{format_size(plan.bytes_seen)} in {plan.files_seen} files under {display_path(plan.root)}")
    for g in plan.groups[:SHOW]:
        _p(f"  {g.kind:<12} {format_size(g.size):>8} x{len(g.link) + 1 + len(g.already)}"
           f"  keep {g.keep.rel}")
        for f in g.link:
            _p(f"    link {f.rel}")
    if len(plan.groups) > SHOW:
        _p(f"  ... and {len(plan.groups) - SHOW} more groups (--json lists all)")
    for why, n in plan.excluded:
        _p(f"  left out: {n} file(s): {why}")
    for s in plan.skipped[:SHOW]:
        _p(f"  kept apart: {s.rel}: {s.reason}")
    if not apply and plan.groups:
        _p("pass --yes to link them (undo: vllm-cache dedup --undo --yes)")


def _render_result(res: DedupResult) -> None:
    late = res.skipped[len(res.plan.skipped):]
    _p(f"linked {len(res.linked)} files, saved {format_size(res.saved_bytes)} "
       f"({res.saved_bytes} B)")
    for s in late[:SHOW]:
        _p(f"  not linked: {s.rel}: {s.reason}")


def _render_split(plan: SplitPlan, res: SplitResult | None) -> None:
    if res is None:
        _p(f"Dry run: would give {len(plan.files)} linked files their own copy (at most "
           f"{format_size(plan.added_bytes)} more) under {display_path(plan.root)}")
        for f in plan.files[:SHOW]:
            _p(f"  {f.rel} ({f.nlink} names)")
        if plan.files:
            _p("pass --yes to split them")
    else:
        _p(f"split {len(res.split)} files into their own copies")
    for s in (*plan.skipped, *(res.skipped if res else ()))[:SHOW]:
        _p(f"  kept linked: {s.rel}: {s.reason}")


def dedup(
    root: RootOpt = None,
    yes: Annotated[bool, typer.Option(
        "--yes", "-y", help="Link (or, with --undo, split) the files; without it only the "
        "plan is printed.")] = False,
    dry_run: DryRunOpt = False,
    undo: Annotated[bool, typer.Option(
        "--undo", help="Give every hard-linked cache file its own copy again.")] = False,
    min_size: Annotated[int, typer.Option(
        "--min-size", metavar="BYTES", min=1, help="Only link files of at least this size.")
    ] = 1,
    grace: GraceOpt = "10m",
    json_out: JsonOpt = False,
    force: ForceOpt = False,
) -> None:
    """Hard-link identical files across ranks and entries (same size, then content) of the
    kinds vLLM, Inductor and Triton never modify in place, within one filesystem. Your own
    files only; entries in use or modified within the grace period are left alone."""
    croot = resolve_root(root)
    check_prunable_root(croot, force, verb="dedup")
    apply = yes and not dry_run
    grace_s = parse_grace(grace)
    if undo:
        splan = plan_split(croot.vllm_root, grace_s=grace_s)
        sres = execute_split(splan) if apply else None
        if json_out:
            print_json(with_schema("dedup", undo_report(splan, sres)))
        else:
            _render_split(splan, sres)
        if sres is not None and sres.skipped:
            raise typer.Exit(1)
        return
    plan = plan_dedup(croot.vllm_root, grace_s=grace_s, min_size=min_size)
    if not json_out:
        _render_plan(plan, apply)
    res = execute_dedup(plan) if apply and plan.groups else None
    if json_out:
        print_json(with_schema("dedup", dedup_report(plan, res)))
    elif res is not None:
        _render_result(res)
