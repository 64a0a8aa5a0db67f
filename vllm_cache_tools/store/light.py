"""The light read of an entry: its folder walk (:func:`tree_stats`) and nothing else, for
callers that judge entries by file times, sizes and owners alone (``prune --older-than``).

No key file is parsed (the quick read's AOT artifact scan and ``vllm_compile_cache.py``
parse were ~60% of a streamed prune's CPU on many small entries), so a light entry knows no
model, versions or ranks, and its state is not judged (:data:`LIGHT_DETAIL`), except
``unknown`` where a part could not be read: a folder or file the walk could not list or
stat, or a key file this process may not read (``access``), as the full read, which opens
them, would find; protections keep such entries either way.

Measured (benchmarks/bench_prune.py --light-read, 100k files, 3,941 entries, 2 cores): see
docs/prune.md. The walk is a Python loop around ``scandir``/``lstat``; both release the GIL
around the system call, which is where threads can overlap.
"""

from __future__ import annotations

import os
from pathlib import Path

from vllm_cache_tools.layout import AOT_DIRNAME
from vllm_cache_tools.store.folders import entry_times
from vllm_cache_tools.store.tree_stats import Listing, tree_stats
from vllm_cache_tools.store.types import Entry, Layout, Problem, State

LIGHT_DETAIL = "not judged: light read (file times, sizes and owners only)"


def light_entry(path: Path, layout: str | None = None, listing: Listing | None = None
                ) -> Entry:
    """``path``'s entry (``layout``: ``aot`` or ``backend``, else told by its parent's name)
    from its walk alone (see the module's doc); ``listing``: filled with the names the walk
    saw (:func:`~vllm_cache_tools.store.tree_stats.tree_stats`)."""
    if layout is None:
        layout = "aot" if path.parent.name == AOT_DIRNAME else "backend"
    lay: Layout = "aot" if layout == "aot" else "backend"
    stats = tree_stats(os.fsdecode(path), listing=listing)
    state: State = "complete"
    detail = LIGHT_DETAIL
    problems: tuple[Problem, ...] = ()
    if stats.unreadable:
        state, detail = "unknown", f"not judged: {len(stats.unreadable)} unreadable"
    else:
        # The full read opens the key files; one this process may not read leaves what is
        # in the entry unknown there too (root may read all: access() says so as well).
        top = os.fsdecode(path)
        for rel, *_ in stats.key_files:
            if not os.access(os.path.join(top, rel), os.R_OK, effective_ids=True,
                             follow_symlinks=False):
                state, detail = "unknown", f"not judged: {rel}: permission denied"
                problems = (Problem(rel, "unreadable", "permission denied"),)
                break
    t = entry_times(stats)
    return Entry(key=path.name, layout=lay, path=path, stats=stats, ranks=(), prefixes=(),
                 state=state, state_detail=detail, created=t.created,
                 created_source=t.created_source, modified=t.modified,
                 last_used=t.last_used, last_used_source=t.last_used_source,
                 vllm_version=None, torch_version=None, model=None, hardware=None,
                 problems=problems)


__all__ = ["LIGHT_DETAIL", "light_entry"]
