"""Which entries of the other tree come from the same start as the selected ones: the proof
of :mod:`vllm_cache_tools.keys.link` (an AOT entry's traced sources, hashed the backend way,
give the backend entry's code hash), its results kept in the pack memo (:mod:`.pack_memo`)
by the two entries' fingerprints, so unchanged entries are not read again to prove it."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from vllm_cache_tools.fleet.pack_memo import PackMemo
from vllm_cache_tools.keys.entry_proof import same_start
from vllm_cache_tools.keys.recipes import env_hash_from_factors
from vllm_cache_tools.keys.source_link import SourceLinker
from vllm_cache_tools.store.entries import read_entry
from vllm_cache_tools.store.types import Entry

Walk = tuple[list[tuple[str, Path, bool, tuple[int, ...]]], str]

PACKABLE = ("complete", "unloadable")
"""States whose files are whole (``unloadable`` backend folders of the mega-AOT mode are part
of the start: vLLM writes them beside the AOT entry that holds the compiled model)."""


class EntryFacts:
    """The entries of one root by real path, walked and deep-read at most once each."""

    def __init__(self, by_path: Mapping[str, Entry], memo: PackMemo,
                 walker: Callable[[Path], Walk]) -> None:
        self.by_path, self.memo, self.walker = by_path, memo, walker
        self._walks: dict[str, Walk] = {}
        self._deep: dict[str, Entry] = {}

    def walk(self, p: str) -> Walk:
        """(files, fingerprint) of the entry at real path ``p``."""
        w = self._walks.get(p)
        if w is None:
            w = self._walks[p] = self.walker(self.by_path[p].path)
        return w

    def full(self, p: str) -> Entry:
        e = self._deep.get(p)
        if e is None:
            e = self._deep[p] = read_entry(self.by_path[p].path, deep=True)
        return e


def link_entries(all_entries: Sequence[Entry], facts: EntryFacts,
                 links: dict[str, set[str]]) -> None:
    """Add to ``links`` (real path -> linked keys) the other tree's entries of the same starts
    as the entries already there, with the proof's pairs (both directions)."""
    # Every pair of the two trees may be tried (B x A pairs): what a pair's checks need of
    # each entry alone is worked out once per entry (its graph's files, its env hash), once
    # per (graph files, AOT entry) for the install prefix and once per (AOT entry, prefix)
    # for the code hashes of its sources (keys.source_link.SourceLinker).
    linker = SourceLinker()
    envs: dict[str, str | None] = {}
    named: dict[tuple[str, str | None], bool] = {}

    def names(bp: str, aot: Entry) -> bool:
        """:func:`same_model_file` of the backend entry at ``bp``, once per forward file (the
        starts of one model share it: 100 x 100 pairs, one answer per backend entry)."""
        k = (bp, model_file(aot))
        got = named.get(k)
        if got is None:
            got = named[k] = graph_names(linker.graph_files(facts.full(bp)), k[1])
        return got

    def started_alike(bp: str, b: Entry, a: Entry) -> bool:
        if bp not in envs:
            f = b.factors
            envs[bp] = env_hash_from_factors(f.env) if f is not None and f.env is not None \
                else None
        return same_start(b, a, backend_env_hash=envs[bp])

    def pair(bp: str, ap: str, backend_chosen: bool) -> bool:
        bfp, afp = facts.walk(bp)[1], facts.walk(ap)[1]
        known = facts.memo.proof(bfp, afp)
        if known is not None:
            return known
        fb = facts.full(bp)
        # From the backend side, the cheap pre-check runs on the listing's AOT entry first
        # (no pickle read of unrelated AOT entries).
        if backend_chosen and not names(bp, facts.by_path[ap]):
            ok = False
        else:
            fa = facts.full(ap)
            ok = names(bp, fa) and started_alike(bp, fb, fa) and linker.linked(fb, fa)
        facts.memo.put_proof(bfp, afp, ok)
        return ok

    real = {id(e): os.path.realpath(e.path) for e in all_entries}
    aots = [real[id(e)] for e in all_entries if e.layout == "aot" and e.state in PACKABLE]
    backends = [real[id(e)] for e in all_entries
                if e.layout == "backend" and e.state in PACKABLE]
    pairs: list[tuple[str, str]] = []
    for p in list(links):
        if facts.by_path[p].layout == "backend":
            pairs += [(p, a) for a in aots if pair(p, a, True)]
        else:
            pairs += [(b, p) for b in backends if pair(b, p, False)]
    for b, a in pairs:
        for x, y in ((b, a), (a, b)):
            links.setdefault(x, set()).add(facts.by_path[y].key)


def model_file(aot: Entry) -> str | None:
    """The file of an AOT entry's compiled forward (its artifact's, else the listing's)."""
    info = aot.aot_info
    loc = info.filename if info is not None else None
    if loc is None and aot.model:
        loc = aot.model.split(" (", 1)[-1].rsplit(":", 1)[0]
    return loc or None


def graph_names(graph: Iterable[str], loc: str | None) -> bool:
    """Whether one of a backend entry's graph files is ``loc`` (:func:`model_file`)."""
    if not loc:
        return False
    tail = loc.split("site-packages/")[-1]
    return any(g.endswith("/" + tail) or g == loc for g in graph)


def same_model_file(backend: Entry, aot: Entry, graph: Iterable[str] | None = None) -> bool:
    """Cheap pre-check before the proof: the AOT forward's file is one the graph names
    (``graph``: the backend entry's graph files, when the caller has them)."""
    if graph is None:
        graph = (g for p in backend.prefix_dirs if p.graph for g in p.graph.files)
    return graph_names(graph, model_file(aot))


__all__ = ["EntryFacts", "graph_names", "link_entries", "model_file", "same_model_file"]
