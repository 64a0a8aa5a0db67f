"""``vllm-cache prune``: remove entries chosen by policies, safely. The plan is printed first."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from vllm_cache_tools.cli.common import fail, print_json, warn, write_err, write_out
from vllm_cache_tools.cli.ls import RootOpt
from vllm_cache_tools.errors import UsageError
from vllm_cache_tools.keys.compat import Environment, detect_environment
from vllm_cache_tools.layout import short_key
from vllm_cache_tools.maintain.evidence import owner_name
from vllm_cache_tools.maintain.execute import (
    PruneResult,
    execute_plan,
    finishes,
    trash_leftovers,
)
from vllm_cache_tools.maintain.plan import (
    Protections,
    PrunePlan,
    check_prunable_root,
    plan_prune,
)
from vllm_cache_tools.maintain.policies import Policies
from vllm_cache_tools.maintain.stream import stream_prune, streams
from vllm_cache_tools.store.locate import display_path, resolve_root
from vllm_cache_tools.store.scan import scan
from vllm_cache_tools.store.types import CacheInfo
from vllm_cache_tools.units import fmt_duration, format_size, parse_age, parse_size
from vllm_cache_tools.views.payloads import with_schema
from vllm_cache_tools.views.prune import prune_report

SHOW_SKIPPED = 30

GraceOpt = Annotated[str, typer.Option(
    "--grace", metavar="AGE", help="Never remove an entry modified within this long (a compile "
    "may be writing it); 0 turns it off.")]
AllUsersOpt = Annotated[bool, typer.Option(
    "--all-users", help="Also remove entries with files owned by other users (where "
    "permissions allow); by default only your own.")]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", "-n", help="Print the plan and stop.")]
YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]
ForceOpt = Annotated[bool, typer.Option(
    "--force", help="Allow a root that is /, your home folder, or has no torch_compile_cache.")]


def parse_grace(text: str) -> float:
    t = text.strip()
    if t in ("0", "0s", "off"):
        return 0.0
    try:
        return parse_age(t)
    except UsageError as exc:
        fail(f"--grace: {exc}")


def load_root(root: Path | None, force: bool, verb: str = "prune") -> CacheInfo:
    """Resolve, refuse unsafe roots (``verb`` names the refused command), and scan afresh: a
    deleting command does not plan from the listing index. In use is judged by the
    planner."""
    croot = resolve_root(root)
    check_prunable_root(croot, force, verb=verb)
    return scan(croot, check_in_use=False, use_index=False)


def confirm(plan: PrunePlan | None, yes: bool, json_out: bool, *, tmp_files: int = 0,
            look_only: str = "--dry-run to only see the plan") -> bool:
    """Ask on the terminal (stderr, so --json stays clean); refuse when nobody can answer.
    ``tmp_files``: leftover files (verify --fix) asked about with the entries; ``look_only``:
    how this verb shows what it would do without doing it."""
    n = len(plan.entries) if plan is not None else 0
    if yes or not (n or tmp_files):
        return True
    if not sys.stdin.isatty():
        fail("not deleting without confirmation: stdin is not a terminal; pass --yes, or "
             + look_only)
    what = [f"{n} entries ({format_size(plan.bytes)})" if plan is not None and n else "",
            f"{tmp_files} leftover *.tmp file(s)" if tmp_files else ""]
    write_err(f"Delete {' and '.join(w for w in what if w)}? [y/N] ", flush=True)
    answer = sys.stdin.readline().strip().lower()
    return answer in ("y", "yes")


def _p(line: str = "") -> None:
    write_out(line + "\n")


def render_plan(plan: PrunePlan, dry_run: bool) -> None:
    _p(f"{'Dry run: would remove' if dry_run else 'Plan: remove'} {len(plan.entries)} of "
       f"{plan.entry_count} entries, {format_size(plan.bytes)} of {format_size(plan.total_bytes)}, "
       f"{plan.files} of {plan.total_files} files under {display_path(plan.root)}")
    grace = fmt_duration(plan.protections.grace_s) if plan.protections.grace_s else "off"
    _p(f"  policies: {', '.join(plan.policies)}; grace {grace}; "
       f"{'all users' if plan.protections.all_users else 'your entries only'}")
    for n in plan.notes:
        _p(f"  {n}")
    for model, group in plan.groups():
        layouts = sorted({p.layout for p in group})
        head = f"model {model}" if model else "model unknown"
        if model and len(layouts) > 1 and not any(p.same_start for p in group):
            head += (" (backend and AOT entries of one model; which of them came from the same "
                     "start is not recorded)")
        _p("")
        _p(f"  {head}")
        for p in group:
            key = short_key(p.key)
            used = (f"last used {fmt_duration(plan.made_at - p.last_used)} ago "
                    f"({p.last_used_source})" if p.last_used else "never used")
            _p(f"    {p.layout:<8} {key:<12} {format_size(p.size_bytes):>7} {p.files:>6} files  "
               f"{used}")
            for r in p.reasons:
                _p(f"      - {r}")
            if p.same_start:
                _p("      = one start with " + ", ".join(map(short_key, p.same_start))
                   + " (recorder ledger)")
            if p.same_sources_aot:
                _p("      = same traced sources as aot "
                   + ", ".join(map(short_key, p.same_sources_aot))
                   + " (proven by re-hashing; sources alone do not tell which start)")
    if plan.skipped:
        _p("")
        _p(f"  kept {len(plan.skipped)}:")
        for s in plan.skipped[:SHOW_SKIPPED]:
            key = short_key(s.key)
            _p(f"    {s.layout:<8} {key:<12} {s.reason}")
        if len(plan.skipped) > SHOW_SKIPPED:
            _p(f"    ... and {len(plan.skipped) - SHOW_SKIPPED} more (--json lists all)")


def render_result(res: PruneResult) -> None:
    plan_skips = set(map(id, res.plan.skipped))
    failed = set(map(id, res.failed))
    late = [s for s in res.skipped if id(s) not in plan_skips]
    if res.finished_trash:
        _p(f"finished {len(res.finished_trash)} item(s) an interrupted run left in the trash")
    _p(f"deleted {len(res.deleted)} entries, freed {format_size(res.freed_bytes)}")
    for s in late[:SHOW_SKIPPED]:
        key = short_key(s.key)
        _p(f"  {'not removed' if id(s) in failed else 'kept'} {s.layout} {key}: {s.reason}")
    if len(late) > SHOW_SKIPPED:
        _p(f"  ... and {len(late) - SHOW_SKIPPED} more kept (--json lists all)")
    sw = res.snapshots
    if sw is not None and (sw.removed or sw.stopped):
        _p(f"removed {len(sw.removed)} recorder source snapshot(s) no manifest names any more, "
           f"freed {format_size(sw.freed_bytes)}" if not sw.stopped else
           f"recorder source snapshots not swept: {sw.stopped}")
    for e in (*res.errors, *(sw.errors if sw is not None else ())):
        warn(e)


def _trash_note(plan: PrunePlan, dry_run: bool) -> None:
    """What interrupted runs left in the trash: ours (a real run removes them first), and
    other users' (left for them)."""
    leftovers = trash_leftovers(plan.root)
    ours = [i for i in leftovers if finishes(i, plan.protections)]
    if ours and dry_run:
        _p(f"  the trash holds {len(ours)} item(s) from an interrupted run; a real run "
           "removes them first")
    theirs = sorted({owner_name(i.uid) for i in leftovers if i not in ours})
    if theirs:
        _p(f"  the trash holds {len(leftovers) - len(ours)} item(s) of {', '.join(theirs)} "
           "from an interrupted run: left for them (or a run with --all-users)")


def run_plan(plan: PrunePlan, *, dry_run: bool, yes: bool, json_out: bool) -> PruneResult | None:
    """Print the plan, stop on --dry-run, confirm, execute, print the outcome."""
    if not json_out:
        render_plan(plan, dry_run)
        _trash_note(plan, dry_run)
    if dry_run:
        if json_out:
            print_json(with_schema("prune", prune_report(plan, None)))
        return None
    if not confirm(plan, yes, json_out):
        if json_out:
            print_json(with_schema("prune", prune_report(plan, None)))
        else:
            _p("nothing deleted")
        raise typer.Exit(1)
    try:
        res = execute_plan(plan)
    except OSError as exc:
        fail(f"cannot prune {plan.root}: {exc.strerror or exc}", code=1)
    show_outcome(res, json_out, plan_shown=True)
    return res


def show_outcome(res: PruneResult, json_out: bool, plan_shown: bool = False) -> None:
    """The result (and, for a streamed run, the plan it followed, known only now)."""
    if json_out:
        print_json(with_schema("prune", prune_report(res.plan, res)))
        return
    if not plan_shown:
        render_plan(res.plan, dry_run=False)
        _trash_note(res.plan, dry_run=False)
    _p("")
    render_result(res)


def prune(
    root: RootOpt = None,
    older_than: Annotated[str | None, typer.Option(
        "--older-than", metavar="AGE", help="Remove entries last used longer ago than AGE "
        "(e.g. 30d, 12h); last use from the hit ledger, else atime, else mtime.",
        show_default=False)] = None,
    max_size: Annotated[str | None, typer.Option(
        "--max-size", metavar="SIZE", help="Remove least recently used entries until the "
        "entries total at most SIZE (e.g. 50G).", show_default=False)] = None,
    max_files: Annotated[int | None, typer.Option(
        "--max-files", metavar="N", min=0, help="Remove least recently used entries until the "
        "entries hold at most N files (GPFS/Lustre quotas count files).",
        show_default=False)] = None,
    keep: Annotated[int | None, typer.Option(
        "--keep", metavar="N", min=0, help="Keep the N most recently used entries per model "
        "(and layout); remove older ones.", show_default=False)] = None,
    unhittable: Annotated[bool, typer.Option(
        "--unhittable", help="Remove AOT entries this environment can never load: built with "
        "another Python, torch, CUDA toolkit, Triton or GPU. Unknown never deletes.")] = False,
    corrupt: Annotated[bool, typer.Option("--corrupt", help="Remove corrupt entries.")] = False,
    partial: Annotated[bool, typer.Option(
        "--partial", help="Remove partial entries (interrupted compiles).")] = False,
    load_failed: Annotated[bool, typer.Option(
        "--load-failed", help="Remove entries vLLM failed to load since their last hit (the "
        "recorder's ledger; ls shows them load-failed).")] = False,
    python: Annotated[str | None, typer.Option(
        "--python", metavar="PATH", help="For --unhittable: the Python of the environment "
        "that runs vLLM (default: this one). torch is never imported.",
        show_default=False)] = None,
    grace: GraceOpt = "10m",
    all_users: AllUsersOpt = False,
    dry_run: DryRunOpt = False,
    yes: YesOpt = False,
    json_out: JsonOpt = False,
    force: ForceOpt = False,
    cache: Annotated[str, typer.Option(
        "--cache", metavar="KIND", help="Which cache: vllm (the compile cache, default), "
        "inductor, triton, flashinfer, deepgemm, cuda or vllm-other (see ls --all-caches). "
        "Other kinds take --older-than and --max-size over their parts (Triton kernel "
        "folders, top-level folders of the others); a kind is only touched when named.")]
    = "vllm",
) -> None:
    """Remove compile-cache entries chosen by policies (combinable; an entry goes if any
    chooses it). Entries in use, modified within the grace period, or owned by others stay.
    Each entry is moved into a trash folder inside the root in one rename, then removed."""
    if cache != "vllm":
        if (keep is not None or unhittable or corrupt or partial or load_failed or python
                or max_files):
            fail(f"--cache {cache}: only --older-than and --max-size apply to it")
        from vllm_cache_tools.cli.prune_caches import prune_cache

        return prune_cache(
            cache, root=root, older_than_s=parse_age(older_than) if older_than else None,
            max_size_bytes=parse_size(max_size) if max_size else None,
            grace_s=parse_grace(grace), all_users=all_users, dry_run=dry_run, yes=yes,
            json_out=json_out, force=force)
    if python is not None and not unhittable:
        fail("--python is the environment --unhittable judges entries against; it needs "
             "--unhittable")
    pol = Policies(
        older_than_s=parse_age(older_than) if older_than is not None else None,
        max_size_bytes=parse_size(max_size) if max_size is not None else None,
        max_files=max_files, keep=keep, unhittable=unhittable, corrupt=corrupt, partial=partial,
        load_failed=load_failed)
    if pol.empty:
        fail("choose at least one policy: --older-than, --max-size, --max-files, --keep, "
             "--unhittable, --corrupt, --partial or --load-failed (or use `vllm-cache rm "
             "KEY`)")
    prot = Protections(grace_s=parse_grace(grace), all_users=all_users,
                       leases_when_planning=dry_run or not yes)
    env: Environment | None = detect_environment(python) if unhittable else None
    if env is not None and env.error and python:
        fail(f"--python {python}: {env.error}")
    res: PruneResult | None
    if yes and not dry_run and streams(pol):
        # Each entry judged and moved as the scan reads it (maintain/stream.py).
        croot = resolve_root(root)
        check_prunable_root(croot, force)
        try:
            res = stream_prune(croot, pol, prot, environment=env)
        except OSError as exc:
            fail(f"cannot prune {croot.vllm_root}: {exc.strerror or exc}", code=1)
        show_outcome(res, json_out)
    else:
        plan = plan_prune(load_root(root, force), pol, prot, environment=env,
                          link_sources=True)
        res = run_plan(plan, dry_run=dry_run, yes=yes, json_out=json_out)
    if res is not None and (res.errors or res.failed):
        raise typer.Exit(1)  # a partial failure: some of what the plan deletes stays
