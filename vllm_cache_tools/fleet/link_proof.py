"""Which entries of the other tree come from the same start as the selected ones: the proof
of :mod:`vllm_cache_tools.keys.link` (an AOT entry's traced sources, hashed the backend way,
give the backend entry's code hash).

What the proof compares of each entry alone (:class:`.pack_memo.LinkFacts`) is read once per
entry and kept in the pack memo by the entry's fingerprint, so unchanged entries are not read
again to prove it. The pairs are not tried one by one (B x A: 129,600 at 360 starts): the
backend entries are grouped by their graph's files (which fix the install prefix), and per
group the AOT entries are indexed by the code hashes their sources give under that prefix, so
a backend entry meets only the AOT entries whose sources give its code hash (and, where the AOT
entry's manifests name one, its config hash): O(groups x A + B + matching pairs)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from multiprocessing.pool import Pool
from pathlib import Path
from typing import TYPE_CHECKING

from msgspec.structs import replace as struct_replace

from vllm_cache_tools.fleet.pack_memo import LinkFacts, PackMemo
from vllm_cache_tools.keys.entry_proof import manifest_parts
from vllm_cache_tools.keys.recipes import env_hash_from_factors
from vllm_cache_tools.keys.source_link import LayoutHashes, install_prefix, layout_code_hashes
from vllm_cache_tools.store.entries import read_entry
from vllm_cache_tools.store.parallel_read import spread
from vllm_cache_tools.store.types import Entry

if TYPE_CHECKING:
    from vllm_cache_tools.fleet.prepared import Prepared

Walk = tuple[list[tuple[str, str, bool, tuple[int, ...]]], str]

PACKABLE = ("complete", "unloadable")
"""States whose files are whole (``unloadable`` backend folders of the mega-AOT mode are part
of the start: vLLM writes them beside the AOT entry that holds the compiled model)."""


class EntryFacts:
    """The entries of one root by real path, walked, deep-read and reduced to their link
    facts at most once each (the link facts from the pack memo while the entry's files are
    unchanged)."""

    def __init__(self, by_path: Mapping[str, Entry], memo: PackMemo,
                 walker: Callable[[Path], Walk]) -> None:
        self.by_path, self.memo, self.walker = by_path, memo, walker
        self._walks: dict[str, Walk] = {}
        self._deep: dict[str, Entry] = {}
        self._links: dict[str, LinkFacts] = {}
        self.layouts: LayoutHashes = {}
        self.prepared: dict[str, Prepared] = {}
        """Entries read ahead and reduced where they were read (:meth:`read_ahead`'s
        ``prepare``), by real path."""

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

    def read_ahead(self, paths: Iterable[str],
                   prepare: Callable[[tuple[str, str]], Prepared | None],
                   workers: int | None = None, pool: Pool | None = None) -> Iterator[str]:
        """Deep-read the entries at ``paths`` not read yet and reduce each by ``prepare`` (a
        module's function, or a ``partial`` of one, of (layout, path)) where it is read,
        keeping its result in :attr:`prepared`: spread over forked processes where there are
        enough of them and the cores (:func:`.parallel_read.spread`: a process each, the safe
        pickle reader being pure Python; in this process when it has threads; ``pool``'s
        processes when given), yielding each path once its result is kept. The first
        ``next`` starts the workers: call it before this process starts threads."""
        todo = [p for p in dict.fromkeys(paths) if p not in self._deep and p not in self.prepared]
        if not todo:
            return
        items = [(self.by_path[p].layout, os.fspath(self.by_path[p].path)) for p in todo]
        got = spread(prepare, items, workers, chunks_per_worker=4, pool=pool)
        for p, d in zip(todo, got, strict=True):
            if d is not None:  # else read again where needed (full), its error raised there
                self.prepared[p] = d
            yield p

    def link(self, p: str) -> LinkFacts:
        """What the link proof compares of the entry at ``p`` (memo, else a deep read)."""
        got = self._links.get(p)
        if got is None:
            fp = self.walk(p)[1]
            got = self.memo.link_facts(p, fp)
            if got is None:
                d = self.prepared.get(p)
                got = struct_replace(d.link, fp=fp) if d is not None else link_facts(
                    self.full(p), fp)
                self.memo.put_link_facts(p, got)
            self._links[p] = got
        return got

    def code_hashes(self, p: str, prefix: str) -> tuple[str, ...]:
        """Backend code hashes of the AOT entry at ``p``'s compile-time sources under
        ``prefix`` (:func:`.source_link.sources_code_hashes`), worked out once per entry and
        prefix and kept with its link facts."""
        facts = self.link(p)
        got = facts.hashes.get(prefix)
        if got is None:
            info = self.full(p).aot_info
            got = ()
            if info is not None:
                got = layout_code_hashes(self.layouts, info, prefix)
            facts = self._links[p] = struct_replace(facts, hashes={**facts.hashes, prefix: got})
            self.memo.put_link_facts(p, facts)
        return got


def link_facts(e: Entry, fp: str) -> LinkFacts:
    """The link facts of a deep-read entry whose fingerprint is ``fp``."""
    if e.layout == "aot":
        info = e.aot_info
        env, cfg = manifest_parts(e)
        return LinkFacts(fp, "aot", model_file=model_file(e),
                         modules=tuple(s.module for s in info.inlined_sources)
                         if info is not None else None, manifest_env=env, manifest_cfg=cfg)
    f = e.factors
    return LinkFacts(fp, e.layout,
                     graph=tuple(g for p in e.prefix_dirs if p.graph for g in p.graph.files),
                     code_hash=(f.code_hash or None) if f is not None else None,
                     has_factors=f is not None,
                     config_hash=f.config_hash if f is not None else None,
                     env_hash=env_hash_from_factors(f.env)
                     if f is not None and f.env is not None else None)


def started_alike(b: LinkFacts, a: LinkFacts) -> bool:
    """:func:`.entry_proof.same_start` over link facts: what the AOT entry's recorder
    manifests say of its key parts (when anything) agrees with the backend entry's
    factors."""
    if not b.has_factors or not (a.manifest_env or a.manifest_cfg):
        return True
    if a.manifest_cfg and b.config_hash and a.manifest_cfg != b.config_hash:
        return False
    if not a.manifest_env or b.env_hash is None:
        return True
    return a.manifest_env == b.env_hash


def link_entries(all_entries: Sequence[Entry], facts: EntryFacts,
                 links: dict[str, set[str]]) -> None:
    """Add to ``links`` (real path -> linked keys) the other tree's entries of the same starts
    as the entries already there, with the proof's pairs (both directions).

    A pair links when the AOT entry's sources, laid out under the install prefix that the
    backend entry's graph files give, reproduce the backend entry's code hash, the AOT
    forward's file is one of the graph's files, and the AOT entry's manifests agree with the
    backend's env and config hashes. From a selected backend entry only AOT entries whose
    listing already names a file of its graph are read (no pickle read of other models)."""
    # The real paths the facts' entries were mapped by (each resolved once: a pass over 720
    # entries' realpaths took ~0.03 s under cProfile).
    real = {id(e): p for p, e in facts.by_path.items()}
    real.update((id(e), os.path.realpath(e.path)) for e in all_entries if id(e) not in real)
    aots = [real[id(e)] for e in all_entries if e.layout == "aot" and e.state in PACKABLE]
    backends = [real[id(e)] for e in all_entries
                if e.layout == "backend" and e.state in PACKABLE]
    chosen = list(links)
    chosen_b = [p for p in chosen if facts.by_path[p].layout == "backend"]
    chosen_a = [p for p in chosen if facts.by_path[p].layout == "aot"]
    chosen_b_set = set(chosen_b)
    # Backends that can link: the selected ones (from their side), and, where AOT entries are
    # selected, every packable one; grouped by graph files (one group per install and model).
    # Per group: code hash -> config hash ("" when none) -> (backend, selected).
    groups: dict[tuple[str, ...], dict[str, dict[str, list[tuple[str, bool]]]]] = {}
    for bp, chosen_side in [*((p, True) for p in chosen_b),
                            *((p, False) for p in (backends if chosen_a else ())
                              if p not in chosen_b_set)]:
        fb = facts.link(bp)
        if fb.code_hash:
            groups.setdefault(fb.graph, {}).setdefault(fb.code_hash, {}).setdefault(
                fb.config_hash or "", []).append((bp, chosen_side))
    named: dict[tuple[tuple[str, ...], str | None], bool] = {}

    def names(graph: tuple[str, ...], loc: str | None) -> bool:
        k = (graph, loc)
        got = named.get(k)
        if got is None:
            got = named[k] = graph_names(graph, loc)
        return got

    prefixes: dict[tuple[tuple[str, ...], tuple[str, ...]], str | None] = {}
    pairs: set[tuple[str, str]] = set()
    chosen_a_set = set(chosen_a)
    for graph, by_code in groups.items():
        from_backend = any(side for cfgs in by_code.values() for bs in cfgs.values()
                           for _, side in bs)
        # AOT candidates: the selected ones, and (for a selected backend) those whose
        # listing's forward file this graph names (read only then).
        cands = dict.fromkeys(chosen_a)
        if from_backend:
            cands.update(dict.fromkeys(a for a in aots
                                       if names(graph, model_file(facts.by_path[a]))))
        for ap in cands:
            fa = facts.link(ap)
            if fa.modules is None or not names(graph, fa.model_file):
                continue
            pk = (graph, fa.modules)
            if pk not in prefixes:
                prefixes[pk] = install_prefix(graph, fa.modules)
            prefix = prefixes[pk]
            if prefix is None:
                continue
            for h in facts.code_hashes(ap, prefix):
                cfgs = by_code.get(h, {})
                # The starts of one code differ by config: an AOT entry whose manifests name
                # its config hash meets only the backend entries of that config (or none).
                same = [*cfgs.get(fa.manifest_cfg, ()), *cfgs.get("", ())] \
                    if fa.manifest_cfg else [b for bs in cfgs.values() for b in bs]
                for bp, side in same:
                    if not side and ap not in chosen_a_set:
                        continue  # neither end selected
                    if side and ap not in chosen_a_set and \
                            not names(graph, model_file(facts.by_path[ap])):
                        continue
                    if started_alike(facts.link(bp), fa):
                        pairs.add((bp, ap))
    for b, a in sorted(pairs):
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


__all__ = ["EntryFacts", "graph_names", "link_entries", "link_facts", "model_file",
           "same_model_file", "started_alike"]
