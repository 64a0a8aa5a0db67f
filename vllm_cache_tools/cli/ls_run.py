"""What ``vllm-cache ls`` does (:func:`run_ls`): the verb's options are typer's, in
:mod:`vllm_cache_tools.cli.ls`."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vllm_cache_tools.cli.common import (
    DelayedProgress,
    fail,
    print_json,
    problem_line,
    warn,
    write_json_text,
    write_out,
)
from vllm_cache_tools.layout import COMPILE_CACHE_DIRNAME, QUARANTINE_DIRNAME, STATE_DIRNAME
from vllm_cache_tools.store.locate import display_path
from vllm_cache_tools.store.scan import RootError, scan
from vllm_cache_tools.store.types import Entry, Problem
from vllm_cache_tools.units import human_age, human_size


def run_ls(refs: list[str] | None = None, root: Path | None = None, *, json_out: bool = False,
           sort: str = "last-used", filter_expr: str | None = None, rescan: bool = False,
           by_owner: bool = False, wide: bool = False, all_caches: bool = False,
           trust: Path | None = None, storage_option: list[str] | None = None) -> None:
    """``vllm-cache ls`` (see :func:`vllm_cache_tools.cli.ls.ls` for the options)."""
    from vllm_cache_tools.store.filters import parse_filter, sort_entries

    remote = bool(refs and len(refs) == 1 and "://" in refs[0])
    if trust is not None and not remote:
        fail("--trust judges the signatures of a store's entries: give its URL (ls URL "
             "--trust FILE)")
    if storage_option and not remote:
        fail("-o/--storage-option is for a store: give its URL (ls URL -o KEY=VALUE)")

    if all_caches:
        if refs or filter_expr or by_owner:
            fail("--all-caches lists every cache kind; it takes no KEY, --filter or --by-owner")
        from vllm_cache_tools.cli.ls_caches import ls_all_caches

        return ls_all_caches(root, json_out=json_out, rescan=rescan, wide=wide)
    if refs and remote:  # a remote store (vllm-cache push)
        from vllm_cache_tools.cli.ls_remote import ls_remote

        return ls_remote(refs[0], json_out=json_out, sort=sort, filter_expr=filter_expr,
                         wide=wide, trust=trust, storage_option=storage_option)
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
    if not info.entries and info.root_source == "--root":
        from vllm_cache_tools.store.locate import CacheRoot, not_a_cache_root

        # A named folder that is no cache root listed nothing, exit 0 (a typo'd path looked
        # like an empty cache); prune refuses the same folder in the same words.
        why = not_a_cache_root(CacheRoot(info.root, info.root_source), None)
        if why is not None:
            fail(why)
    entries = [e for e in info.entries if pred is None or pred(e)]
    if refs:
        from vllm_cache_tools.store.lookup import locate_entry

        named = {os.path.realpath(locate_entry(ref, info.root)) for ref in refs}
        known = {os.path.realpath(e.path) for e in info.entries}
        for path in named:
            if path not in known:  # a path into another root: nothing of this one
                fail(f"{display_path(path)} is not an entry of {display_path(info.root)} "
                     "(pass that root with --root)")
        entries = [e for e in entries if os.path.realpath(e.path) in named]
    entries = sort_entries(entries, sort)
    _warn_problems(info.problems, [p for e in entries for p in e.problems
                                   if p.kind in ("unreadable", "symlink", "foreign")])
    if by_owner:
        _print_owners(info.root, entries, json_out)
        return
    from vllm_cache_tools.store.filesystem import filesystem_of
    from vllm_cache_tools.views.filesystem import filesystem_json

    fs = filesystem_of(info.root)
    from vllm_cache_tools.fleet.placed import placed_by_key

    placed = placed_by_key(info.root / "torch_compile_cache",
                           [(e.layout, e.key) for e in entries])
    if json_out:
        from vllm_cache_tools.views.payloads import ls_report

        _print_listing({**ls_report(info, entries, summaries=False),
                        "filesystem": filesystem_json(fs), "placed": placed}, entries)
        return
    from vllm_cache_tools.cli.render import print_table, shown_keys

    for note in fs.notes:  # a shared filesystem, or atime not kept: stderr, like problems
        warn(f"note: {note}")
    cc = info.root / COMPILE_CACHE_DIRNAME
    if os.path.isdir(cc / STATE_DIRNAME / QUARANTINE_DIRNAME):  # the reader only then
        from vllm_cache_tools.store.quarantine import quarantine_dir, quarantined

        moved = quarantined(cc)
        if moved:  # not entries (vLLM never loads them), but disk the user may want back
            warn(f"note: {len(moved)} folder(s) of files the recorder moved aside at load "
                 f"failures ({human_size(sum(q.size for q in moved))}) in "
                 f"{display_path(quarantine_dir(cc))} (vllm-cache verify lists them)")
    if placed:  # who vouched for entries that came from a bundle or a store
        keys_shown = shown_keys(e.key for e in info.entries)
        for (source, signer, status), ks in _group_placed(placed).items():
            who = f"signed by {signer}" if signer else f"signature {status}"
            warn(f"note: placed from {source} ({who}): "
                 + ", ".join(keys_shown.get(k, k) for k in ks)
                 + " (vllm-cache show KEY: provenance)")
    out = write_out
    if not info.entries:
        out(f"No compile-cache entries under {display_path(info.root)} "
            f"(root from {info.root_source}).\n")
        return
    keys = shown_keys(e.key for e in info.entries)
    print_table(f"{display_path(info.root)}/torch_compile_cache", ls_columns(),
                [_row(e, keys) for e in entries], wide=wide)
    total = sum(e.size_bytes for e in entries)
    shown = f"{len(entries)} of {len(info.entries)}" if pred or refs else str(len(entries))
    out(f"\n{shown} entries, {human_size(total)} total "
        f"({human_size(sum(e.disk_bytes for e in entries))} on disk), "
        f"{sum(e.stats.files for e in entries)} files\n")


def _group_placed(placed: dict[str, dict[str, Any]]
                  ) -> dict[tuple[str, str | None, str], list[str]]:
    groups: dict[tuple[str, str | None, str], list[str]] = {}
    for k, p in placed.items():
        groups.setdefault((str(p.get("source")), p.get("signer"), str(p.get("signature"))),
                          []).append(k)
    return groups


def _print_listing(head: dict[str, Any], entries: Sequence[Entry]) -> None:
    """``print_json`` of ``head`` with ``entries`` summarised in its empty ``entries`` list,
    written entry by entry: the same bytes (a JSON list is its items joined by commas, and
    secrets are hidden value by value either way), without holding every summary and the
    whole text at once (~40k entries on a root of 1M files)."""
    from vllm_cache_tools.redaction import dumps
    from vllm_cache_tools.store.summary import summary_text

    text = dumps(head, separators=(",", ":"))
    # Quotes inside strings are escaped, so only the key itself matches.
    cut = text.index(',"entries":[]') + len(',"entries":[')
    write = write_json_text
    write(text[:cut])
    # In batches: the redaction check looks at each distinct string of a batch once (field
    # names, states, models repeat), one entry at a time cost 4x the CPU. Rows kept in the
    # listing index are spliced, not built again (store/summary.py).
    for i in range(0, len(entries), _BATCH):
        write(("," if i else "") + summary_text(entries[i:i + _BATCH]))
    write(text[cut:] + "\n")


_BATCH = 500


def ls_columns() -> tuple[Any, ...]:
    """The table's columns. What goes first when the terminal is narrow: what the key already
    tells (layout), then what is there for the curious (torch, hardware, files, ranks). Key,
    state, size, last use and the model always stay; --wide, and piped output, show every
    column."""
    from vllm_cache_tools.cli.render import Column

    return (
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


def _row(e: Entry, keys: dict[str, str]) -> list[str]:
    return [keys.get(e.key, e.key), e.layout, human_size(e.size_bytes), str(e.stats.files),
            ",".join(r.removeprefix("rank_") for r in e.ranks) or "-", state_cell(e), _last_used(e),
            "-" if e.hits is None else str(e.hits), e.torch_version or "-", e.hardware or "-",
            model_label(e)]


def state_cell(e: Entry) -> str:
    """The STATE column: ``load-failed (N times)`` says how often vLLM paid for it."""
    if e.state == "load-failed":
        return f"load-failed ({e.load_failed} time{'' if e.load_failed == 1 else 's'})"
    return e.state


def model_label(e: Entry) -> str:
    """The served model when it was recorded, else the model code it was traced from."""
    checkpoint: str | None = getattr(e, "checkpoint", None)
    return checkpoint or _short_model(e.model)


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
        warn(problem_line(p))
    if len(allp) > limit:
        warn(f"... and {len(allp) - limit} more problems (see --json)")


def _print_owners(root: Path, entries: Sequence[Entry], json_out: bool) -> None:
    from vllm_cache_tools.cli.render import Column, render
    from vllm_cache_tools.maintain.evidence import owner_usage
    from vllm_cache_tools.views.payloads import with_schema

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
    write_out(f"{display_path(root)}/torch_compile_cache by owner\n\n"
                     + "".join(line + "\n" for line in lines))


def _last_used(e: Entry) -> str:
    if e.last_used is None:
        return "-"
    return f"{human_age(e.last_used)} ({e.last_used_source or '?'})"
