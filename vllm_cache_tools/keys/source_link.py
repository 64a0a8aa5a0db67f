"""Link a backend entry to the AOT entry of the same start, by proof rather than timestamps.

An AOT ``model`` keeps a copy of every traced source file (``source_info.inlined_sources``:
module name and content). Mapping each module to its path (the install prefix is learnt from
the backend entry's ``computation_graph.py`` ``# File:`` paths) and applying the backend
code-hash recipe to those (path, compile-time content) pairs reproduces the backend entry's
``code_hash`` exactly when both were compiled from the same sources (FACTS.md measured this;
tests/test_link.py checks it on real caches). Pure apart from reading entries.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from vllm_cache_tools.keys.recipes import backend_code_piece
from vllm_cache_tools.read.aot_model import AotModelInfo
from vllm_cache_tools.store.types import Entry


def _module_rel(module: str) -> tuple[str, str]:
    base = module.replace(".", "/")
    return base + ".py", base + "/__init__.py"


def install_prefix(graph_files: Iterable[str], modules: Iterable[str]) -> str | None:
    """The folder that holds the traced packages (e.g. ``.../site-packages/``), from a graph
    file path that ends with a traced module's relative path."""
    rels = [r for m in modules for r in _module_rel(m)]
    for path in graph_files:
        for rel in rels:
            if path.endswith("/" + rel):
                return path[: -len(rel)]
    return None


def sources_code_hashes(info: AotModelInfo, prefix: str, limit: int = 256) -> list[str]:
    """Backend code hashes of the AOT entry's compile-time sources laid out under ``prefix``.

    A module is ``<name>.py`` or, for a package, ``<name>/__init__.py``. Where the prefix
    exists on this machine and holds the module, the file system says which; a module with
    traced submodules is a package; otherwise both layouts are tried, ``<name>.py`` first (up
    to ``limit`` hashes): a prefix here may lack modules the compiling host had (a venv being
    installed, another vLLM version at the same path, a cache copied from another host)."""
    contents: dict[str, str] = {}
    for s in info.inlined_sources:
        if s.content is None:
            return []
        contents[s.module] = s.content
    local = os.path.isdir(prefix)
    choices: list[tuple[str, tuple[str, ...]]] = []
    for m in sorted(contents):
        py, init = _module_rel(m)
        has_py = local and os.path.exists(prefix + py)
        if local and os.path.exists(prefix + init) and not has_py:
            choices.append((m, (init,)))
        elif has_py:
            choices.append((m, (py,)))
        elif any(o.startswith(m + ".") for o in contents):
            choices.append((m, (init,)))
        else:
            choices.append((m, (py, init)))
    return _layout_hashes(prefix, contents, choices, limit)


LayoutHashes = dict[tuple[str, tuple[tuple[str, str | None], ...]], tuple[str, ...]]
"""(prefix, the (module, content) of each traced source) -> :func:`sources_code_hashes`."""


def layout_code_hashes(seen: LayoutHashes, info: AotModelInfo, prefix: str) -> tuple[str, ...]:
    """:func:`sources_code_hashes`, once per layout in ``seen``: the starts of one model hold
    the same sources (comparing the texts is a memcmp, hashing them the backend way is not)."""
    k = (prefix, tuple((s.module, s.content) for s in info.inlined_sources))
    got = seen.get(k)
    if got is None:
        got = seen[k] = tuple(sources_code_hashes(info, prefix))
    return got


def _layout_hashes(prefix: str, contents: dict[str, str],
                   choices: list[tuple[str, tuple[str, ...]]], limit: int) -> list[str]:
    """:func:`backend_code_hash` of every layout (one path per module), without joining and
    encoding all sources again per layout: the hash state of the part before a choice is
    copied for each of its options. The modules' order does not depend on the choice: only
    a path that starts with ``<name>/`` and sorts before ``__init__.py`` could fall between
    ``<name>.py`` and ``<name>/__init__.py``, and that is a submodule, which makes
    ``<name>`` a package (one option)."""
    ranked = sorted((prefix + rel, i) for i, (_, opts) in enumerate(choices) for rel in opts)
    seen: dict[int, int] = {}
    for k, (_, i) in enumerate(ranked):
        seen.setdefault(i, k)
    order = sorted(seen, key=seen.__getitem__)
    pieces = [tuple(backend_code_piece(prefix + rel, contents[choices[i][0]], first=n == 0)
                    for rel in choices[i][1]) for n, i in enumerate(order)]
    hashes: list[str] = []

    def walk(k: int, h: Any) -> bool:
        while k < len(pieces) and len(pieces[k]) == 1:
            h.update(pieces[k][0])
            k += 1
        if k == len(pieces):
            hashes.append(h.hexdigest())
            return len(hashes) >= limit
        for piece in pieces[k]:
            branch = h.copy()
            branch.update(piece)
            if walk(k + 1, branch):
                return True
        return False

    if limit > 0:
        walk(0, hashlib.sha256())
    return hashes


def linked_aot_entries(backend: Entry, aot_entries: Iterable[Entry]) -> list[str]:
    """Keys of AOT entries whose compile-time sources reproduce ``backend``'s code hash.
    Both must be deep reads (``read_entry``)."""
    f = backend.factors
    if f is None or not f.code_hash:
        return []
    graph_files = [g for p in backend.prefix_dirs if p.graph for g in p.graph.files]
    out = []
    for a in aot_entries:
        info = a.aot_info
        if info is None:
            continue
        prefix = install_prefix(graph_files, (s.module for s in info.inlined_sources))
        if prefix is not None and f.code_hash in sources_code_hashes(info, prefix):
            out.append(a.key)
    return out


class SourceLinker:
    """:func:`linked_aot_entries` one pair at a time, for many pairs (every AOT entry of a
    bundle against every backend entry): each backend entry's graph files, each (graph
    files, traced modules) install prefix and each (AOT entry, prefix) set of code hashes worked
    out once, where hashing the traced sources per pair made unpacking 100 starts cost
    10,000 source hashings. Entries are told apart by identity (kept alive here)."""

    def __init__(self) -> None:
        self._graphs: dict[int, tuple[Entry, tuple[str, ...]]] = {}
        self._prefixes: dict[tuple[tuple[str, ...], tuple[str, ...]], str | None] = {}
        self._hashes: dict[tuple[int, str], tuple[Entry, frozenset[str]]] = {}
        self._layouts: LayoutHashes = {}

    def graph_files(self, backend: Entry) -> tuple[str, ...]:
        got = self._graphs.get(id(backend))
        if got is None:
            got = self._graphs[id(backend)] = (backend, tuple(
                g for p in backend.prefix_dirs if p.graph for g in p.graph.files))
        return got[1]

    def linked(self, backend: Entry, aot: Entry) -> bool:
        """Whether ``aot``'s compile-time sources reproduce ``backend``'s code hash (both
        deep reads): ``aot.key in linked_aot_entries(backend, [aot])``."""
        f = backend.factors
        if f is None or not f.code_hash:
            return False
        return f.code_hash in self.code_hashes(self.graph_files(backend), aot)

    def code_hashes(self, graph: tuple[str, ...], aot: Entry) -> frozenset[str]:
        """The backend code hashes ``aot``'s compile-time sources give under the install
        prefix that backend graph files ``graph`` (:meth:`graph_files`) tell (none where
        there is none): a backend entry of those graph files is linked to ``aot`` exactly
        when its code hash is one of them."""
        info = aot.aot_info
        if info is None:
            return frozenset()
        modules = tuple(s.module for s in info.inlined_sources)
        pk = (graph, modules)  # the starts of one model trace the same modules
        if pk not in self._prefixes:
            self._prefixes[pk] = install_prefix(graph, modules)
        prefix = self._prefixes[pk]
        if prefix is None:
            return frozenset()
        hk = (id(aot), prefix)
        got = self._hashes.get(hk)
        if got is None:
            got = self._hashes[hk] = (aot, frozenset(
                layout_code_hashes(self._layouts, info, prefix)))
        return got[1]


def same_source_aot_keys(backend: Entry, candidates: Iterable[Entry],
                         read: Callable[[Path], Entry]) -> list[str]:
    """:func:`linked_aot_entries` over quick-scan ``candidates`` of the same model, each
    read in full with ``read`` (only AOT entries whose compiled function is in a file that
    the backend graph names are read)."""
    graph_files = {g for p in backend.prefix_dirs if p.graph for g in p.graph.files}
    deep = []
    for c in candidates:
        if c.layout != "aot" or c.model is None:
            continue
        loc = c.model.split(" (", 1)[-1].rsplit(":", 1)[0]
        if any(g.endswith("/" + loc) for g in graph_files):
            deep.append(read(c.path))
    return linked_aot_entries(backend, deep)
