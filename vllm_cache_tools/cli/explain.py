"""``vllm-cache explain A B`` / ``--logs OLD NEW``: why vLLM recompiled."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from vllm_cache_tools.analyze.explain import (
    Explanation,
    against_current,
    explain_logs,
    latest_pair,
    show_value,
)
from vllm_cache_tools.analyze.explain import explain as explain_refs
from vllm_cache_tools.cli.common import (
    console,
    fail,
    print_json,
    redact_record,
    warn,
    warn_unread,
)
from vllm_cache_tools.cli.ls import RootOpt
from vllm_cache_tools.read.logs.refs import parse_ref, read_pair
from vllm_cache_tools.store.entries import read_entry
from vllm_cache_tools.store.locate import display_path
from vllm_cache_tools.store.lookup import AmbiguousKey, EntryNotFound, locate_entry
from vllm_cache_tools.store.scan import RootError, scan
from vllm_cache_tools.store.types import Cause
from vllm_cache_tools.views.explain import explanation_json
from vllm_cache_tools.views.payloads import with_schema


def explain(
    refs: Annotated[list[str] | None, typer.Argument(
        metavar="A B", help="Two entries (keys, unique prefixes or paths), or with --logs two "
        "log files (FILE or FILE@N for its N-th start).")] = None,
    root: RootOpt = None,
    logs: Annotated[bool, typer.Option("--logs", help="A and B are vLLM logs.")] = False,
    against_current: Annotated[str | None, typer.Option(
        "--against-current", metavar="A", help="Why this environment, now, would miss (or "
        "hit) entry A; vLLM serve arguments follow --.")] = None,
    python: Annotated[str | None, typer.Option(
        "--python", help="With --against-current: the interpreter that runs vLLM.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Explain why vLLM compiled again: the exact env variable, traced file (with a diff),
    config field, torch/GPU change... and what stayed unexplained.

    Exit status: 0 every difference explained (or same key), 1 something unexplained,
    2 usage error."""
    refs = refs or []
    _refuse_unused(logs=logs, against_current=against_current, python=python, root=root)
    if against_current is not None:
        x = _against_current(against_current, refs, root, python)
    elif not refs and not logs:
        x = _latest(root)
    elif len(refs) != 2:
        fail("give two entries (or, with --logs, two log files) to compare")
    else:
        x = _from_logs(refs[0], refs[1]) if logs else _from_entries(refs[0], refs[1], root)
    x = redact_record(x)  # secrets hidden in causes, and in the headline made from them
    if json_out:
        print_json(with_schema("explain", explanation_json(x)))
    else:
        _render(x)
    raise typer.Exit(1 if x.unexplained else 0)


def _refuse_unused(*, logs: bool, against_current: str | None, python: str | None,
                   root: Path | None) -> None:
    """Options the question asked does not read are refused, not dropped: the user meant
    them to change the answer."""
    if logs and against_current is not None:
        fail("--logs compares two logged starts, --against-current an entry with this "
             "environment: give one")
    if python is not None and against_current is None:
        fail("--python is the interpreter --against-current probes; it needs --against-current")
    if logs and root is not None:
        fail("--root does not apply to --logs (the logs name their entries' folders)")


def _from_entries(a: str, b: str, root: Path | None) -> Explanation:
    try:
        return explain_refs(a, b, root)
    except EntryNotFound as exc:
        # Two log files given without --logs: say how to compare them.
        if all(Path(parse_ref(r)[0]).is_file() for r in (a, b)):
            fail(f"{exc} (to compare two vLLM logs, pass --logs)")
        raise


def _latest(root: Path | None) -> Explanation:
    info = scan(root, check_in_use=False)
    warn_unread(info.problems)  # a symlinked torch_compile_cache: no entries, said why
    pick = latest_pair(info.entries)
    if pick is None:
        # A usage error: the answer needs two entries, and the root given has not got them.
        what = ("no entries" if not info.entries else
                f"{len(info.entries)} entr{'y' if len(info.entries) == 1 else 'ies'}, "
                "no two of the same model and tree")
        fail(f"nothing to compare: {what} in {display_path(info.root)} (name two: "
             "explain A B)")
    old, new, why = pick
    x = _from_entries(str(old.path), str(new.path), root)
    return Explanation(x.old, x.new, x.same_key, x.causes, x.unexplained,
                       (f"chose {why}", *x.notes))


def _against_current(ref: str, args: list[str], root: Path | None,
                     python: str | None) -> Explanation:
    from vllm_cache_tools.analyze.predict import PredictError, predict

    if not args:
        fail("give the vLLM serve arguments after --")
    try:
        path = locate_entry(ref, root)
        p = predict(args, root=root or path.parents[1 if path.parent.name !=
                                                    "torch_aot_compile" else 2].parent,
                    python=python)
    except (EntryNotFound, RootError, AmbiguousKey) as exc:
        fail(str(exc))
    except PredictError as exc:
        fail(str(exc))
    return against_current(read_entry(path), p)


def _from_logs(old_ref: str, new_ref: str) -> Explanation:
    old, new, warnings = read_pair(old_ref, new_ref, True)  # as log --compare reads them
    for w in warnings:  # a log read in part (cut, damaged) is said, as log --compare says it
        warn(w)
    (op, on), (np_, nn) = parse_ref(old_ref), parse_ref(new_ref)
    if op == np_ and on is None and nn is None:  # the file's last two starts: say which
        old_ref, new_ref = f"{op}@{old.index}", f"{np_}@{new.index}"
    return explain_logs(old, new, old_ref, new_ref, _code_from_cache)


def _code_from_cache(old_dir: str, new_dir: str) -> list[Cause]:
    """Code causes from the entries two logs name, when they are still on disk."""
    try:
        pa, pb = locate_entry(old_dir), locate_entry(new_dir)
    except (EntryNotFound, RootError, AmbiguousKey):
        return []
    if pa == pb:
        return []
    x = _from_entries(str(pa), str(pb), None)
    return [c for c in x.causes if c.component == "code"]


def _render(x: Explanation) -> None:
    con = console()
    con.print(x.headline, style="bold", markup=False)
    con.print(f"  old {x.old}\n  new {x.new}", markup=False)
    for c in x.causes:
        con.print(f"  {c.component:<9} {c.item}: {show_value(c.old)} -> {show_value(c.new)}  "
                  f"[{c.evidence}]", markup=False)
        if c.detail:
            for line in c.detail.rstrip("\n").splitlines():
                con.print(f"            {line}", markup=False)
    for u in x.unexplained:
        con.print(f"  unexplained {u.component}: {u.detail} (would settle it: {u.needs})",
                  markup=False)
    for n in x.notes:
        con.print(f"  note: {n}", markup=False)
