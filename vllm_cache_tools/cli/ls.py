"""``vllm-cache ls``: every entry of both trees with sizes, ages, ranks and state."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.table import Table

from vllm_cache_tools.cli.common import (
    DelayedProgress,
    console,
    fail,
    human_age,
    human_size,
    print_json,
    warn,
)
from vllm_cache_tools.locate import display_path
from vllm_cache_tools.model import Entry, Problem
from vllm_cache_tools.query import QueryError, parse_filter, sort_entries
from vllm_cache_tools.serialize import ls_report
from vllm_cache_tools.store import RootError, scan

RootOpt = Annotated[Path | None, typer.Option(
    "--root", help="vLLM cache root (default: $VLLM_CACHE_ROOT, else $XDG_CACHE_HOME/vllm, "
    "else ~/.cache/vllm); its torch_compile_cache folder is accepted too.",
    show_default=False, readable=False, resolve_path=False)]


def ls(
    root: RootOpt = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
    = False,
    sort: Annotated[str, typer.Option(
        "--sort", help="size | modified | last-used | key")] = "last-used",
    filter_expr: Annotated[str | None, typer.Option(
        "--filter", help="Conditions joined by commas, e.g. 'layout=aot,size>1M,age>7d'. "
        "Fields: key layout state model hardware torch vllm rank prefix path (= != ~ !~), "
        "size disk files (> < >= <= = !=), age mage (since last use / modification).")]
    = None,
    rescan: Annotated[bool, typer.Option(
        "--rescan", help="Walk every entry afresh instead of reusing the listing index for "
        "unchanged ones.")] = False,
    by_owner: Annotated[bool, typer.Option(
        "--by-owner", help="Print usage per owner (user owning the entries' files) instead "
        "of entries.")] = False,
) -> None:
    """List the compile-cache entries under a vLLM cache root.

    The first listing of a root walks every file; later ones re-read only entries whose
    folders or key files changed (an index in the user cache dir; --rescan skips it)."""
    try:
        pred = parse_filter(filter_expr) if filter_expr else None
        sort_entries([], sort)
    except QueryError as exc:
        fail(str(exc))
    progress = DelayedProgress(enabled=not json_out)
    try:
        info = scan(root, progress=progress.callback(), use_index=not rescan)
    except RootError as exc:
        fail(str(exc))
    finally:
        progress.close()
    entries = [e for e in info.entries if pred is None or pred(e)]
    entries = sort_entries(entries, sort)
    _warn_problems(info.problems, [p for e in entries for p in e.problems
                                   if p.kind in ("unreadable", "symlink", "foreign")])
    if by_owner:
        _print_owners(info.root, entries, json_out)
        return
    if json_out:
        print_json(ls_report(info, entries))
        return
    con = console()
    if not info.entries:
        con.print(f"No compile-cache entries under {display_path(info.root)} "
                  f"(root from {info.root_source}).")
    else:
        table = Table(title=f"{display_path(info.root)}/torch_compile_cache", title_justify="left",
                      box=box.SIMPLE_HEAD, pad_edge=False)
        for col, kw in (("KEY", {}), ("LAYOUT", {}), ("SIZE", {"justify": "right"}),
                        ("FILES", {"justify": "right"}), ("RANKS", {}), ("STATE", {}),
                        ("LAST USED", {}), ("TORCH", {}), ("HARDWARE", {}), ("MODEL", {})):
            table.add_column(col, **kw)  # type: ignore[arg-type]
        for e in entries:
            table.add_row(
                e.key[:12] if e.layout == "aot" else e.key, e.layout, human_size(e.size_bytes),
                str(e.stats.files), ",".join(r.removeprefix("rank_") for r in e.ranks) or "-",
                e.state, _last_used(e),
                e.torch_version or "-", e.hardware or "-", _short_model(e.model))
        con.print(table)
        total = sum(e.size_bytes for e in entries)
        shown = f"{len(entries)} of {len(info.entries)}" if pred else str(len(entries))
        con.print(f"{shown} entries, {human_size(total)} total "
                  f"({human_size(sum(e.disk_bytes for e in entries))} on disk)")


def _short_model(model: str | None) -> str:
    """``LlamaModel.forward (vllm/.../llama.py:406)`` -> ``LlamaModel.forward``; a backend's
    model file -> its name."""
    if not model:
        return "-"
    return model.split(" (", 1)[0].rsplit("/", 1)[-1]


def _warn_problems(root_problems: Sequence[Problem], entry_problems: Sequence[Problem],
                   limit: int = 20) -> None:
    """Problems go to stderr (stdout stays parseable); states already show corrupt/partial."""
    allp = [*root_problems, *entry_problems]
    for p in allp[:limit]:
        warn(f"{p.kind}: {p.path}: {p.detail}")
    if len(allp) > limit:
        warn(f"... and {len(allp) - limit} more problems (see --json)")


def _print_owners(root: Path, entries: Sequence[Entry], json_out: bool) -> None:
    from vllm_cache_tools.prune import owner_usage

    rows = owner_usage(entries)
    if json_out:
        print_json({"root": display_path(root), "owners": [
            {"owner": o.owner, "uids": list(o.uids), "entries": o.entries,
             "size_bytes": o.size_bytes, "disk_bytes": o.disk_bytes} for o in rows]})
        return
    table = Table(title=f"{display_path(root)}/torch_compile_cache by owner",
                  title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("OWNER", "ENTRIES", "SIZE", "ON DISK"):
        table.add_column(col, justify="left" if col == "OWNER" else "right")
    for o in rows:
        table.add_row(o.owner, str(o.entries), human_size(o.size_bytes),
                      human_size(o.disk_bytes))
    console().print(table)


def _last_used(e: Entry) -> str:
    src: str = e.last_used_source or "-"
    if e.hits is not None:
        src += f", {e.hits} hit" + ("" if e.hits == 1 else "s")
    return f"{human_age(e.last_used)} ({src})"
