"""``vllm-cache ls --all-caches``: every JIT cache of this host, per kind, then the parts of
those we understand (Triton kernel folders, Inductor's folders, vLLM's other folders; vLLM's
own entries are what plain ``vllm-cache ls`` lists)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from vllm_cache_tools.cli.common import fail, print_json, warn, write_out
from vllm_cache_tools.cli.render import Column, render
from vllm_cache_tools.maintain.evidence import owner_name
from vllm_cache_tools.store.caches.kinds import UNDERSTOOD
from vllm_cache_tools.store.caches.listing import (
    SKIPPED_SHARED,
    CacheListing,
    list_all_caches,
)
from vllm_cache_tools.store.locate import display_path, resolve_root
from vllm_cache_tools.store.scan import RootError, check_root
from vllm_cache_tools.units import human_age, human_size
from vllm_cache_tools.views.caches import all_caches_report

SHOW_PARTS = 15

SUMMARY_COLUMNS = (
    Column("CACHE"), Column("SIZE", align="right"), Column("FILES", align="right"),
    Column("ENTRIES", align="right", drop=3), Column("OLDEST", drop=2), Column("LAST USED"),
    Column("OWNER", drop=1), Column("FROM", drop=4), Column("PATH", shrink_to=40),
)
TRITON_COLUMNS = (
    Column("FOLDER"), Column("KERNEL", shrink_to=30), Column("TARGET"), Column("TRITON"),
    Column("SIZE", align="right"), Column("FILES", align="right"), Column("LAST USED"),
)
PART_COLUMNS = (
    Column("PART"), Column("SIZE", align="right"), Column("FILES", align="right"),
    Column("LAST USED"), Column("WHAT", shrink_to=36),
)


def _last(m: float | None, a: float | None) -> float | None:
    return max((t for t in (m, a) if t is not None), default=None)


def _summary_row(c: CacheListing) -> list[str]:
    path = display_path(c.location.path)
    unsafe = any(p.startswith(SKIPPED_SHARED) for p in c.problems)
    if c.location.link_target and not unsafe:
        path += f" -> {c.location.link_target}"
    if not c.exists:
        return [c.kind, "-", "-", "-", "-", "-", "-", c.location.source, path + " (none)"]
    s = c.stats
    if s is None:
        why = "skipped: not safe" if unsafe else "not walked" if any(
            p.startswith("not walked") for p in c.problems) else "unreadable"
        return [c.kind, "?", "?", "?", "?", "?", "?", c.location.source, f"{path} ({why})"]
    n = len(c.vllm.entries) if c.vllm is not None else len(c.items)
    owners = "+".join(owner_name(u) for u in s.owners) or "-"
    return [c.kind, human_size(s.size_bytes), str(s.files),
            str(n) if c.kind in UNDERSTOOD or c.kind == "vllm-other" else "-",
            human_age(s.oldest_mtime), human_age(_last(s.newest_mtime, s.newest_atime)),
            owners, c.location.source, path]


def ls_all_caches(root: Path | None, *, json_out: bool, rescan: bool, wide: bool) -> None:
    if root is not None:
        # A root the user named is checked as plain ls checks it (a default one that is not
        # there yet is a row saying "(none)", as for the other caches).
        try:
            check_root(resolve_root(root))
        except RootError as exc:
            fail(str(exc))
    info = list_all_caches(root, use_index=not rescan)
    for c in info.caches:
        for p in c.problems[:10]:
            warn(f"{c.kind}: {p}")
    if json_out:
        print_json(all_caches_report(info))
        return
    out = write_out
    tty = sys.stdout.isatty()
    width = None if wide or not tty else shutil.get_terminal_size((80, 24)).columns
    for line in render(SUMMARY_COLUMNS, [_summary_row(c) for c in info.caches], width):
        out(line + "\n")
    total = sum(c.stats.size_bytes for c in info.caches if c.stats is not None)
    files = sum(c.stats.files for c in info.caches if c.stats is not None)
    out(f"\n{human_size(total)} in {files} files in all ({len(info.caches)} places; a cache "
        "inside another is counted in both)\n")
    for c in info.caches:
        if not c.items or c.kind == "vllm":
            continue
        out(f"\n{c.kind}: {display_path(c.location.path)}\n")
        items = sorted(c.items, key=lambda i: -(_last(i.stats.newest_mtime,
                                                      i.stats.newest_atime) or 0.0))
        if c.kind == "triton":
            rows = [[i.name[:12], ",".join(i.kernels) or "-", i.target or "-",
                     i.triton_version or "-", human_size(i.stats.size_bytes),
                     str(i.stats.files), human_age(_last(i.stats.newest_mtime,
                                                         i.stats.newest_atime))]
                    for i in items[:SHOW_PARTS]]
            lines = render(TRITON_COLUMNS, rows, width)
        else:
            rows = [[i.name, human_size(i.stats.size_bytes), str(i.stats.files),
                     human_age(_last(i.stats.newest_mtime, i.stats.newest_atime)),
                     i.what or "-"] for i in items[:SHOW_PARTS]]
            lines = render(PART_COLUMNS, rows, width)
        for line in lines:
            out("  " + line + "\n")
        if len(items) > SHOW_PARTS:
            out(f"  ... and {len(items) - SHOW_PARTS} more (--json lists all)\n")
    vllm = next((c for c in info.caches if c.vllm is not None), None)
    if vllm is not None and vllm.vllm is not None and vllm.vllm.entries:
        out(f"\nvllm: {len(vllm.vllm.entries)} entries (`vllm-cache ls"
            f"{' --root ' + display_path(root) if root else ''}` lists them)\n")
