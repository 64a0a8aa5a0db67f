"""Link a backend entry to the AOT entry of the same start, by proof rather than timestamps.

An AOT ``model`` keeps a copy of every traced source file (``source_info.inlined_sources``:
module name and content). Mapping each module to its path (the install prefix is learnt from
the backend entry's ``computation_graph.py`` ``# File:`` paths) and applying the backend
code-hash recipe to those (path, compile-time content) pairs reproduces the backend entry's
``code_hash`` exactly when both were compiled from the same sources (FACTS.md measured this;
tests/test_link.py checks it on real caches). Pure apart from reading entries.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from vllm_cache_tools.keys import backend_code_hash
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

    A module is ``<name>.py`` or, for a package, ``<name>/__init__.py``; where the prefix
    exists on this machine and holds the module the file system says which, otherwise every
    layout is tried (up to ``limit``): a prefix here may lack modules the compiling host had
    (a venv being installed, another vLLM version at the same path)."""
    contents: dict[str, str] = {}
    for s in info.inlined_sources:
        if s.content is None:
            return []
        contents[s.module] = s.content
    fixed: dict[str, str] = {}
    ambiguous: list[str] = []
    local = os.path.isdir(prefix)
    for m in sorted(contents):
        py, init = _module_rel(m)
        has_py = local and os.path.exists(prefix + py)
        if local and os.path.exists(prefix + init) and not has_py:
            fixed[m] = init
        elif has_py:
            fixed[m] = py
        else:
            ambiguous.append(m)
    out = []
    for combo in itertools.islice(itertools.product((0, 1), repeat=len(ambiguous)), limit):
        layout = dict(fixed)
        layout.update({m: _module_rel(m)[pick] for m, pick in zip(ambiguous, combo,
                                                                 strict=True)})
        out.append(backend_code_hash({prefix + rel: contents[m] for m, rel in layout.items()}))
    return out


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
