"""``vllm-cache prune --cache KIND``: the per-kind prune of
:mod:`vllm_cache_tools.maintain.cache_prune` (plan printed first, same protections as the
compile-cache prune)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from vllm_cache_tools.cli.common import fail, print_json, warn, write_err, write_out
from vllm_cache_tools.maintain.cache_prune import (
    CachePolicies,
    CachePrunePlan,
    CachePruneResult,
    execute_cache_plan,
    plan_cache_kind_prune,
)
from vllm_cache_tools.store.caches.kinds import KINDS, CacheKind, locate_caches
from vllm_cache_tools.store.locate import display_path, resolve_root
from vllm_cache_tools.units import fmt_duration, format_size
from vllm_cache_tools.views.caches import cache_prune_report

SHOW = 30


def parse_kind(text: str) -> CacheKind:
    for k in KINDS:
        if text == k:
            return k
    fail(f"--cache: unknown cache kind {text!r} (one of: {', '.join(KINDS)})")


def _p(line: str = "") -> None:
    write_out(line + "\n")


def render_cache_plan(plan: CachePrunePlan, dry_run: bool) -> None:
    where = ", ".join(display_path(loc.path) for loc in plan.locations) or "nowhere"
    _p(f"{'Dry run: would remove' if dry_run else 'Plan: remove'} {len(plan.parts)} of "
       f"{plan.part_count} {plan.kind} parts, {format_size(plan.bytes)} of "
       f"{format_size(plan.total_bytes)} under {where}")
    grace = fmt_duration(plan.grace_s) if plan.grace_s else "off"
    _p(f"  policies: {', '.join(plan.policies)}; grace {grace}; "
       f"{'all users' if plan.all_users else 'your files only'}")
    for n in plan.notes:
        _p(f"  {n}")
    for p in plan.parts[:SHOW]:
        _p(f"    {display_path(p.path)}  {format_size(p.size_bytes)}, {p.files} files")
        for r in p.reasons:
            _p(f"      - {r}")
    if len(plan.parts) > SHOW:
        _p(f"    ... and {len(plan.parts) - SHOW} more (--json lists all)")
    if plan.skipped:
        _p(f"  kept {len(plan.skipped)}:")
        for s in plan.skipped[:SHOW]:
            _p(f"    {display_path(s.path)}: {s.reason}")


def _confirm(plan: CachePrunePlan, yes: bool) -> bool:
    if yes or not plan.parts:
        return True
    if not sys.stdin.isatty():
        fail("not deleting without confirmation: stdin is not a terminal; pass --yes, or "
             "--dry-run to only see the plan")
    write_err(f"Delete {len(plan.parts)} {plan.kind} parts "
              f"({format_size(plan.bytes)})? [y/N] ", flush=True)
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def prune_cache(kind_text: str, *, root: Path | None, older_than_s: float | None,
                max_size_bytes: int | None, grace_s: float, all_users: bool, dry_run: bool,
                yes: bool, json_out: bool, force: bool) -> None:
    kind = parse_kind(kind_text)
    pol = CachePolicies(older_than_s, max_size_bytes)
    if not pol.describe():
        fail(f"--cache {kind}: choose --older-than and/or --max-size")
    vllm_root = resolve_root(root).vllm_root
    locs = locate_caches(root, kinds=(kind,))
    plan = plan_cache_kind_prune(locs, pol, vllm_root=vllm_root, grace_s=grace_s,
                         all_users=all_users, force=force)
    if not json_out:
        render_cache_plan(plan, dry_run)
    if dry_run:
        if json_out:
            print_json(cache_prune_report(plan, None))
        return
    if not _confirm(plan, yes):
        if json_out:
            print_json(cache_prune_report(plan, None))
        else:
            _p("nothing deleted")
        raise typer.Exit(1)
    res: CachePruneResult = execute_cache_plan(plan)
    if json_out:
        print_json(cache_prune_report(plan, res))
    else:
        _p(f"deleted {len(res.deleted)} {kind} parts, freed {format_size(res.freed_bytes)}")
        late = res.skipped[len(plan.skipped):]
        for s in late[:SHOW]:
            _p(f"  kept {display_path(s.path)}: {s.reason}")
    for e in res.errors:
        warn(e)
    if res.errors:
        raise typer.Exit(1)
