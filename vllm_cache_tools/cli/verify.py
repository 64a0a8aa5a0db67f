"""``vllm-cache verify [--fix]``: check every entry is whole and named by its own factors."""

from __future__ import annotations

from typing import Annotated

import typer

from vllm_cache_tools.cli.common import fail, print_json, write_out
from vllm_cache_tools.cli.ls import RootOpt
from vllm_cache_tools.cli.prune import (
    AllUsersOpt,
    ForceOpt,
    GraceOpt,
    JsonOpt,
    YesOpt,
    confirm,
    parse_grace,
    render_plan,
    render_result,
)
from vllm_cache_tools.layout import short_key
from vllm_cache_tools.maintain.execute import execute_plan
from vllm_cache_tools.maintain.plan import (
    Protections,
    check_prunable_root,
    plan_prune,
)
from vllm_cache_tools.maintain.policies import Policies
from vllm_cache_tools.maintain.verify import VerifyReport, remove_orphan_tmps, verify
from vllm_cache_tools.store.filesystem import filesystem_of
from vllm_cache_tools.store.locate import display_path, resolve_root
from vllm_cache_tools.store.scan import scan
from vllm_cache_tools.views.filesystem import filesystem_json
from vllm_cache_tools.views.payloads import with_schema
from vllm_cache_tools.views.prune import prune_report
from vllm_cache_tools.views.verify import verify_json


def _p(line: str = "") -> None:
    write_out(line + "\n")


def _render(report: VerifyReport) -> None:
    n = len(report.failures)
    entries = len({(p.layout, p.key) for p in report.failures if p.layout != "root"})
    where = [f"{entries} entries" if entries else "",
             "the root" if any(p.layout == "root" for p in report.failures) else ""]
    notes = len(report.problems) - n
    _p(f"checked {report.checked} entries under {display_path(report.root)}: "
       + ("no problems" if not n else f"{n} problem(s) in {' and '.join(w for w in where if w)}")
       + (f", {notes} note(s)" if notes else ""))
    for p in report.problems:
        key = short_key(p.key)
        _p(f"  {p.kind:<17} {p.layout:<8} {key:<12} {p.path}")
        _p(f"  {'':<17} {p.detail}")


def verify_cmd(
    root: RootOpt = None,
    fix: Annotated[bool, typer.Option(
        "--fix", help="Remove entries found corrupt or partial, through prune's safe deletion "
        "(in-use, recent and other users' entries stay), and leftover *.tmp files of entries "
        "that are otherwise whole (the file only). Unreadable entries are never removed.")
    ] = False,
    grace: GraceOpt = "10m",
    all_users: AllUsersOpt = False,
    yes: YesOpt = False,
    json_out: JsonOpt = False,
    force: ForceOpt = False,
) -> None:
    """Check every entry: empty or truncated AOT models (read by the restricted reader, never
    executed), leftover *.tmp files, artifacts named but missing, factors without compiled
    artifacts, unreadable files, AOT artifacts vLLM can never load, and factors that do not
    re-hash to the entry's key. Exit 0 when clean (notes such as graph-only backend folders
    do not count), 1 when problems were found (and, with --fix, not all removed)."""
    prot = Protections(grace_s=parse_grace(grace), all_users=all_users)
    croot = resolve_root(root)
    if fix:
        check_prunable_root(croot, force, verb="fix")
    report = verify(croot)
    fs = filesystem_of(croot.vllm_root)
    out: dict[str, object] = with_schema("verify", verify_json(report))
    out["filesystem"] = filesystem_json(fs)
    fixable = report.fixable_entries()
    remaining = len(report.failures)
    if not json_out:
        _render(report)
        for note in fs.notes:
            _p(f"  note: {note}")
    tmps = report.orphan_tmps() if fix else []
    plan = None
    if fix and fixable:
        reasons: dict[tuple[str, str], str] = {}
        for p in report.problems:
            if p.fixable:
                reasons.setdefault((p.layout, p.key), p.kind)
        named = tuple((e.path, f"verify: {reasons[(e.layout, e.key)]}") for e in fixable)
        # Plan from a fresh summary scan: the same view prune has.
        info = scan(croot, check_in_use=False, use_index=False)
        plan = plan_prune(info, Policies(named=named), prot, link_sources=True)
        if not json_out:
            _p("")
            render_plan(plan, dry_run=False)
    # One question before anything is removed, leftover files included.
    go = fix and confirm(plan, yes, json_out, tmp_files=len(tmps),
                         look_only="leave out --fix to only see the problems")
    tmp_gone: set[str] = set()
    if tmps and go:
        removals = remove_orphan_tmps(croot.vllm_root, tmps, grace_s=prot.grace_s,
                                      uid=None if all_users else prot.uid)
        tmp_gone = {r.path for r in removals if r.removed}
        out["tmp_removed"] = [{"path": r.path, "removed": r.removed, "why": r.why}
                              for r in removals]
        remaining -= len(tmp_gone)
        if not json_out:
            _p("")
            for r in removals:
                _p(f"  {'removed' if r.removed else 'kept':<8} {r.path}"
                   + ("" if r.removed else f" ({r.why})"))
    elif tmps:  # not confirmed
        out["tmp_removed"] = [{"path": t.path, "removed": False, "why": "not confirmed"}
                              for t in tmps]
    if plan is not None:
        if go:
            try:
                res = execute_plan(plan)
            except OSError as exc:  # e.g. a planted link as the trash or its lock
                fail(f"cannot remove entries under {plan.root}: {exc.strerror or exc}",
                     code=1)
            gone = set(res.deleted)
            remaining = sum(1 for p in report.failures
                            if p.key not in gone and p.path not in tmp_gone)
            out["fix"] = prune_report(plan, res)
            out["fixed"] = sorted(gone)
            if not json_out:
                _p("")
                render_result(res)
        else:
            out["fix"] = prune_report(plan, None)
            out["fixed"] = []
    out["remaining"] = remaining
    if json_out:
        print_json(out)
    raise typer.Exit(1 if remaining else 0)
