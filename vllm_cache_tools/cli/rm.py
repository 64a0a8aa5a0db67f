"""``vllm-cache rm KEY...``: remove named entries, with prune's plan and protections."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from vllm_cache_tools.cli.common import fail
from vllm_cache_tools.cli.ls import RootOpt
from vllm_cache_tools.cli.prune import (
    AllUsersOpt,
    DryRunOpt,
    ForceOpt,
    GraceOpt,
    JsonOpt,
    YesOpt,
    load_root,
    parse_grace,
    run_plan,
)
from vllm_cache_tools.maintain.plan import Protections, plan_prune
from vllm_cache_tools.maintain.policies import Policies
from vllm_cache_tools.maintain.trash import entry_tree
from vllm_cache_tools.store.locate import display_path
from vllm_cache_tools.store.lookup import locate_entry


def rm(
    refs: Annotated[list[str], typer.Argument(
        metavar="KEY...", help="Entry keys, unique key prefixes, or paths inside entries.",
        show_default=False)],
    root: RootOpt = None,
    grace: GraceOpt = "10m",
    all_users: AllUsersOpt = False,
    dry_run: DryRunOpt = False,
    yes: YesOpt = False,
    json_out: JsonOpt = False,
    force: ForceOpt = False,
) -> None:
    """Remove the named entries (whole: every rank and, for AOT entries, the shared
    inductor_cache). In-use, recently modified (--grace) and other users' entries stay.
    Exit 1 when a named entry could not be removed."""
    prot = Protections(grace_s=parse_grace(grace), all_users=all_users)
    info = load_root(root, force, verb="rm")
    named: list[tuple[Path, str]] = []
    for ref in refs:
        path = locate_entry(ref, info.root)
        if entry_tree(path, info.root) is None:
            # A path into another root: never map it onto a same-named entry of this one.
            fail(f"{display_path(path)} is not an entry of {display_path(info.root)} "
                 "(pass that root with --root)")
        named.append((path, "named on the command line"))
    known = {os.path.realpath(e.path) for e in info.entries}
    for path, _ in named:
        if os.path.realpath(path) not in known:
            fail(f"{display_path(path)} is not a compile-cache entry of {display_path(info.root)}")
    plan = plan_prune(info, Policies(named=tuple(named)), prot, link_sources=True)
    res = run_plan(plan, dry_run=dry_run, yes=yes, json_out=json_out)
    if res is not None and (len(res.deleted) < len(named) or res.errors):
        raise typer.Exit(1)
    if dry_run and plan.skipped:
        raise typer.Exit(1)
