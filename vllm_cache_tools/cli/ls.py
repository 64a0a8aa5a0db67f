"""``vllm-cache ls``: every entry of both trees with sizes, ages, ranks and state."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer

from vllm_cache_tools.cli.common import DelayedProgress, fail, print_json, warn
from vllm_cache_tools.cli.render import Column, render, unique_prefixes
from vllm_cache_tools.store.filesystem import filesystem_of
from vllm_cache_tools.store.filters import parse_filter, sort_entries
from vllm_cache_tools.store.locate import display_path
from vllm_cache_tools.store.lookup import locate_entry
from vllm_cache_tools.store.scan import RootError, scan
from vllm_cache_tools.store.types import Entry, Problem
from vllm_cache_tools.units import human_age, human_size
from vllm_cache_tools.views.filesystem import filesystem_json
from vllm_cache_tools.views.payloads import ls_report, with_schema

RootOpt = Annotated[Path | None, typer.Option(
    "--root", help="vLLM cache root (default: $VLLM_CACHE_ROOT, else $XDG_CACHE_HOME/vllm, "
    "else ~/.cache/vllm); its torch_compile_cache folder is accepted too.",
    show_default=False, readable=False, resolve_path=False)]


def ls(
    refs: Annotated[list[str] | None, typer.Argument(
        metavar="KEY", help="Only these entries: keys, unique key prefixes (as listed) "
        "or paths inside entries.", show_default=False)] = None,
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
        "unchanged ones (and refresh the index with what was read).")] = False,
    by_owner: Annotated[bool, typer.Option(
        "--by-owner", help="Print usage per owner (user owning the entries' files) instead "
        "of entries.")] = False,
    wide: Annotated[bool, typer.Option(
        "--wide", "-w", help="Every column, however wide the terminal (piped output always "
        "has every column).")] = False,
    all_caches: Annotated[bool, typer.Option(
        "--all-caches", help="Every JIT cache of this host, per kind: vLLM's compile cache, "
        "Inductor, Triton, FlashInfer, DeepGEMM, CUDA's ComputeCache and vLLM's other "
        "folders, each where its owner puts it (env var, else default), with size, files, "
        "age, last use, owner, and the parts of those we understand.")] = False,
) -> None:
    """List the compile-cache entries under a vLLM cache root.

    On a terminal the table fits its width by leaving out columns (torch, hardware, files,
    ranks, hits, layout, in that order); piped, it has every column, one line per entry. Keys
    are the shortest prefixes that name one entry (AOT keys at least 12 hex digits): paste
    them into show, rm or explain.

    The first listing of a root walks every file; later ones re-read only entries whose
    folders or key files changed (an index in the user cache dir; --rescan skips it)."""
    if all_caches:
        if refs or filter_expr or by_owner:
            fail("--all-caches lists every cache kind; it takes no KEY, --filter or --by-owner")
        from vllm_cache_tools.cli.ls_caches import ls_all_caches

        return ls_all_caches(root, json_out=json_out, rescan=rescan, wide=wide)
    if refs and len(refs) == 1 and "://" in refs[0]:  # a remote store (vllm-cache push)
        from vllm_cache_tools.cli.ls_remote import ls_remote

        return ls_remote(refs[0], json_out=json_out, sort=sort, filter_expr=filter_expr,
                         wide=wide)
    pred = parse_filter(filter_expr) if filter_expr else None
    sort_entries([], sort)
    progress = DelayedProgress(enabled=not json_out)
    try:
        info = scan(root, progress=progress.callback(), use_index=not rescan,
                    refresh_index=rescan)
    except RootError as exc:
        fail(str(exc))
    finally:
        progress.close()
    entries = [e for e in info.entries if pred is None or pred(e)]
    if refs:
        named = {os.path.realpath(_locate(ref, info.root)) for ref in refs}
        entries = [e for e in entries if os.path.realpath(e.path) in named]
    entries = sort_entries(entries, sort)
    _warn_problems(info.problems, [p for e in entries for p in e.problems
                                   if p.kind in ("unreadable", "symlink", "foreign")])
    if by_owner:
        _print_owners(info.root, entries, json_out)
        return
    fs = filesystem_of(info.root)
    if json_out:
        print_json({**ls_report(info, entries), "filesystem": filesystem_json(fs)})
        return
    for note in fs.notes:  # a shared filesystem, or atime not kept: stderr, like problems
        warn(f"note: {note}")
    out = sys.stdout.write
    if not info.entries:
        out(f"No compile-cache entries under {display_path(info.root)} "
            f"(root from {info.root_source}).\n")
        return
    tty = sys.stdout.isatty()
    width = None if wide or not tty else shutil.get_terminal_size((80, 24)).columns
    keys = unique_prefixes((e.key for e in info.entries), AOT_MIN_PREFIX)
    lines = render(LS_COLUMNS, [_row(e, keys) for e in entries], width)
    bold = tty and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"
    out(f"{display_path(info.root)}/torch_compile_cache\n\n")
    out((f"\x1b[1m{lines[0]}\x1b[0m" if bold else lines[0]) + "\n")
    for line in lines[1:]:
        out(line + "\n")
    total = sum(e.size_bytes for e in entries)
    shown = f"{len(entries)} of {len(info.entries)}" if pred or refs else str(len(entries))
    out(f"\n{shown} entries, {human_size(total)} total "
        f"({human_size(sum(e.disk_bytes for e in entries))} on disk), "
        f"{sum(e.stats.files for e in entries)} files\n")


# What goes first when the terminal is narrow: what the key already tells (layout), then what
# is there for the curious (torch, hardware, files, ranks). Key, state, size, last use and the
# model always stay; --wide, and piped output, show every column.
LS_COLUMNS = (
    Column("KEY"),
    Column("LAYOUT", drop=6),
    Column("SIZE", align="right"),
    Column("FILES", align="right", drop=3),
    Column("RANKS", drop=4),
    Column("STATE"),
    Column("LAST USED"),
    Column("HITS", align="right", drop=5),
    Column("TORCH", drop=1),
    Column("HARDWARE", drop=2),
    Column("MODEL", shrink_to=28),
)
# Shortest unique prefix of an AOT key (64 hex), but never shorter than this; backend keys
# (10 hex) are shown whole: they are the folder names vLLM logs.
AOT_MIN_PREFIX = {64: 12}


def _row(e: Entry, keys: dict[str, str]) -> list[str]:
    return [keys.get(e.key, e.key), e.layout, human_size(e.size_bytes), str(e.stats.files),
            ",".join(r.removeprefix("rank_") for r in e.ranks) or "-", e.state, _last_used(e),
            "-" if e.hits is None else str(e.hits), e.torch_version or "-", e.hardware or "-",
            model_label(e)]


def model_label(e: Entry) -> str:
    """The served model when it was recorded, else the model code it was traced from."""
    checkpoint: str | None = getattr(e, "checkpoint", None)
    return checkpoint or _short_model(e.model)


def _locate(ref: str, root: Path) -> Path:
    return locate_entry(ref, root)


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
    from vllm_cache_tools.maintain.evidence import owner_usage

    rows = owner_usage(entries)
    if json_out:
        print_json(with_schema("ls-by-owner", {"root": display_path(root), "owners": [
            {"owner": o.owner, "uids": list(o.uids), "entries": o.entries,
             "size_bytes": o.size_bytes, "disk_bytes": o.disk_bytes, "files": o.files}
            for o in rows]}))
        return
    cols = (Column("OWNER"), Column("ENTRIES", align="right"), Column("SIZE", align="right"),
            Column("ON DISK", align="right"), Column("FILES", align="right"))
    lines = render(cols, [[o.owner, str(o.entries), human_size(o.size_bytes),
                           human_size(o.disk_bytes), str(o.files)] for o in rows], None)
    sys.stdout.write(f"{display_path(root)}/torch_compile_cache by owner\n\n"
                     + "".join(line + "\n" for line in lines))


def _last_used(e: Entry) -> str:
    if e.last_used is None:
        return "-"
    return f"{human_age(e.last_used)} ({e.last_used_source or '?'})"
