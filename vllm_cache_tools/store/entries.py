"""Reading one compile-cache entry folder: a backend entry (:func:`read_backend_entry`), an AOT
entry (:func:`read_aot_entry`), either by path (:func:`read_entry`), and how their states
(complete, partial, corrupt, unloadable, unknown) are judged from what was read.

Layout (see docs/layout.md and shared FACTS):
  <root>/torch_compile_cache/<10-hex>/rank_<r>_<dp>/<prefix>/...        backend tree
  <root>/torch_compile_cache/torch_aot_compile/<64-hex>/inductor_cache/ AOT tree (shared)
  <root>/torch_compile_cache/torch_aot_compile/<64-hex>/rank_<r>_<dp>/model

Walking a whole root is :mod:`vllm_cache_tools.store.scan`; finding one entry from a key is
:mod:`vllm_cache_tools.store.lookup`.
"""

from __future__ import annotations

import os
import re
from contextlib import suppress
from dataclasses import replace
from pathlib import Path

from vllm_cache_tools.layout import AOT_DIRNAME
from vllm_cache_tools.read.aot_model import read_aot_model
from vllm_cache_tools.read.compile_cache import read_compile_cache
from vllm_cache_tools.read.errors import ReadError, UnreadableError
from vllm_cache_tools.read.factors import read_factors
from vllm_cache_tools.read.graph import GraphInfo, model_file_from_head, read_graph
from vllm_cache_tools.read.manifest import Manifest, manifest_paths, read_manifest, read_manifests
from vllm_cache_tools.read.noatime import read_noatime
from vllm_cache_tools.read.triton import read_triton_meta
from vllm_cache_tools.store.folders import (
    Progress,
    entry_times,
    is_dir_entry,
    list_dir,
)
from vllm_cache_tools.store.locate import display_path
from vllm_cache_tools.store.tree_stats import tree_stats
from vllm_cache_tools.store.types import (
    AotRank,
    Entry,
    PrefixDir,
    Problem,
    State,
    TreeStats,
)

# rank_<r> before vLLM 0.8.0, rank_<r>_<dp> since.
RANK_DIR = re.compile(r"^rank_(\d+)(?:_(\d+))?$")
# Files that sit directly in a rank folder in layouts without a <prefix> level (< 0.9.2).
FLAT_RANK_FILES = {"cache_key_factors.json", "computation_graph.py", "vllm_compile_cache.py",
                   "inductor_hash_cache.py", "transformed_code.py"}
GRAPH_HEAD_BYTES = 256 * 1024


def _short_src(path: str | None) -> str | None:
    if not path:
        return path
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def _read_problem(path: Path, exc: ReadError) -> Problem:
    """``unreadable`` when the bytes could not be had (nothing is known: the entry is
    ``unknown``), ``corrupt`` when they were read and found broken."""
    kind = "unreadable" if isinstance(exc, UnreadableError) else "corrupt"
    return Problem(display_path(path), kind, str(exc))


def _stat_problems(stats: TreeStats) -> list[Problem]:
    out = [Problem(display_path(p), "tmp-leftover", "temporary file left by an interrupted write")
           for p in stats.tmp_files]
    out += [Problem(display_path(p), "symlink", "symlink inside the cache (not followed)")
            for p in stats.symlinks]
    out += [Problem(display_path(p), "unreadable", "cannot be read (permission denied or vanished)")
            for p in stats.unreadable]
    return out


def _graph_info(path: Path, deep: bool) -> tuple[GraphInfo | None, str | None]:
    """(full graph info when deep, the model file named in it)."""
    if deep:
        g = read_graph(path)
        return g, g.model_file
    return None, model_file_from_head(read_noatime(path, GRAPH_HEAD_BYTES))


def _hardware_from_tree(top: Path) -> str | None:
    """Evidence of the target device in a backend rank dir: Triton metadata (GPU) or Inductor
    C++ kernels (CPU)."""
    triton = top / "triton_cache"
    if triton.is_dir() and not triton.is_symlink():
        for d in sorted(os.listdir(triton))[:50]:
            sub = triton / d
            try:
                names = os.listdir(sub)
            except OSError:
                continue
            for n in names:
                if n.endswith(".json") and not n.startswith("__grp__"):
                    try:
                        return read_triton_meta(sub / n).target
                    except ReadError:
                        continue
    ind = top / "inductor_cache"
    if ind.is_dir() and not ind.is_symlink():
        for d in sorted(os.listdir(ind))[:200]:
            try:
                if any(n.endswith(".so") for n in os.listdir(ind / d)):
                    return "CPU"
            except OSError:
                continue
    return None


def _read_prefix(rank: str, e: os.DirEntry[str], deep: bool,
                 problems: list[Problem], prefix: str | None = None) -> PrefixDir:
    path = Path(e.path)
    names = tuple(sorted(n.name for n in list_dir(path, problems)))
    factors = graph = compiled = model_file = None
    missing: list[str] = []
    if "cache_key_factors.json" in names:
        try:
            factors = read_factors(path / "cache_key_factors.json")
        except ReadError as exc:
            problems.append(_read_problem(path / "cache_key_factors.json", exc))
    if "computation_graph.py" in names:
        try:
            graph, model_file = _graph_info(path / "computation_graph.py", deep)
        except (ReadError, OSError) as exc:
            problems.append(Problem(display_path(path / "computation_graph.py"), "unreadable",
                                    str(exc)))
    table = next((n for n in ("vllm_compile_cache.py", "inductor_hash_cache.py") if n in names),
                 None)
    if table is not None:
        try:
            compiled = read_compile_cache(path / table)
        except ReadError as exc:
            problems.append(_read_problem(path / table, exc))
        else:
            for rec in compiled:
                art = rec.artifact
                # Standalone-compile handles name a file beside vllm_compile_cache.py.
                if art and art.startswith("artifact_") and art not in names:
                    missing.append(art)
    return PrefixDir(rank=rank, prefix=e.name if prefix is None else prefix, path=path,
                     factors=factors,
                     has_graph="computation_graph.py" in names, graph=graph,
                     model_file=model_file, compiled=compiled,
                     missing_artifacts=tuple(missing), files=names)


def read_backend_entry(path: Path, deep: bool = False, progress: Progress | None = None,
                       stats: TreeStats | None = None) -> Entry:
    """``stats``: the entry's :func:`tree_stats`, when already walked."""
    problems: list[Problem] = []
    stats = tree_stats(str(path), progress) if stats is None else stats
    problems += _stat_problems(stats)
    ranks: list[str] = []
    prefix_dirs: list[PrefixDir] = []
    hardware = None
    for r in list_dir(path, problems):
        if not (is_dir_entry(r) and RANK_DIR.match(r.name)):
            problems.append(Problem(display_path(r.path), "foreign", "not a rank_<r>_<dp> folder"))
            continue
        ranks.append(r.name)
        with suppress(OSError):  # an unreadable rank folder: the walk reports it
            hardware = hardware or _hardware_from_tree(Path(r.path))
        children = list_dir(Path(r.path), problems)
        if any(c.name in FLAT_RANK_FILES for c in children):
            # vLLM < 0.9.2: no <prefix> level, the rank folder holds the artifacts.
            prefix_dirs.append(_read_prefix(r.name, r, deep, problems, prefix=""))
            continue
        for p in children:
            if not is_dir_entry(p):
                continue
            if p.name in ("inductor_cache", "triton_cache"):
                continue
            prefix_dirs.append(_read_prefix(r.name, p, deep, problems))
    prefixes = tuple(dict.fromkeys(p.prefix for p in prefix_dirs))
    model = next((_short_src(pd.model_file) for pd in prefix_dirs if pd.model_file), None)
    state, detail = _backend_state(prefix_dirs, problems, ranks)
    t = entry_times(stats)
    return _versions_from_manifests(Entry(
        key=path.name, layout="backend", path=path, stats=stats, ranks=tuple(ranks),
        prefixes=prefixes, state=state, state_detail=detail, created=t.created,
        created_source=t.created_source, modified=t.modified, last_used=t.last_used,
        last_used_source=t.last_used_source,
        vllm_version=None, torch_version=None, model=model, hardware=hardware,
        manifests=_manifests(path, "backend", deep, problems),
        problems=tuple(problems), prefix_dirs=tuple(prefix_dirs), deep=deep,
    ))


def _backend_state(prefix_dirs: list[PrefixDir], problems: list[Problem],
                   ranks: list[str]) -> tuple[State, str]:
    corrupt = [p for p in problems if p.kind == "corrupt"]
    if corrupt:
        return "corrupt", corrupt[0].detail
    unreadable = [p for p in problems if p.kind == "unreadable"]
    if unreadable:
        # Judged before anything that depends on what those files hold.
        return "unknown", f"not judged: {unreadable[0].detail}"
    if not ranks or not prefix_dirs:
        return "partial", "no rank/prefix folders"
    for p in prefix_dirs:
        if p.missing_artifacts:
            return "partial", f"{p.rank}/{p.prefix}: missing {', '.join(p.missing_artifacts)}"
        if p.factors is None and not p.has_graph and p.compiled is None:
            return "partial", f"{p.rank}/{p.prefix}: no factors, graph or artifacts"
        if not p.has_graph and p.compiled is None:
            return "partial", (f"{p.rank}/{p.prefix}: factors written but no compiled graph "
                               "(interrupted compile)")
    tmps = [p for p in problems if p.kind == "tmp-leftover"]
    if tmps:
        return "partial", f"leftover temporary file {tmps[0].path}"
    if all(p.compiled is None for p in prefix_dirs):
        return "unloadable", NO_COMPILED_GRAPH
    return "complete", ""


NO_COMPILED_GRAPH = (
    "no compiled graph (no vllm_compile_cache.py or artifacts, only factors and the traced "
    "graph): vLLM loads nothing from this folder; with the AOT tree on, the compiled model of "
    "this start lives in its AOT entry")


def read_aot_entry(path: Path, deep: bool = False, progress: Progress | None = None,
                   stats: TreeStats | None = None) -> Entry:
    """``stats``: the entry's :func:`tree_stats`, when already walked."""
    problems: list[Problem] = []
    stats = tree_stats(str(path), progress) if stats is None else stats
    problems += _stat_problems(stats)
    ranks: list[AotRank] = []
    has_inductor = False
    for r in list_dir(path, problems):
        if r.name == "inductor_cache" and is_dir_entry(r):
            has_inductor = True
            continue
        if not (is_dir_entry(r) and RANK_DIR.match(r.name)):
            problems.append(Problem(display_path(r.path), "foreign",
                                    "unexpected item in AOT entry"))
            continue
        model = Path(r.path) / "model"
        try:
            size = model.lstat().st_size
        except OSError:
            problems.append(Problem(display_path(r.path), "partial", "rank folder without model"))
            ranks.append(AotRank(r.name, model, 0, None, "missing model"))
            continue
        if model.is_symlink():
            ranks.append(AotRank(r.name, model, size, None, "model is a symlink (not followed)"))
            continue
        try:
            info = read_aot_model(model, full=deep)
            ranks.append(AotRank(r.name, model, size, info, None))
        except ReadError as exc:
            problems.append(_read_problem(model, exc))
            ranks.append(AotRank(r.name, model, size, None, str(exc)))
    first = next((r.info for r in ranks if r.info is not None), None)
    state: State = "complete"
    detail = ""
    unloadable = next((r.info.unloadable_reason for r in ranks
                       if r.info is not None and r.info.unloadable_reason), None)
    if any(p.kind == "corrupt" for p in problems):
        state, detail = "corrupt", next(p.detail for p in problems if p.kind == "corrupt")
    elif any(p.kind == "unreadable" for p in problems):
        state, detail = "unknown", "not judged: " + next(p.detail for p in problems
                                                          if p.kind == "unreadable")
    elif not ranks or any(r.error for r in ranks):
        state = "partial"
        detail = next((f"{r.rank}: {r.error}" for r in ranks if r.error),
                      "inductor_cache but no rank_*/model" if has_inductor else "empty entry")
    elif stats.tmp_files:
        state, detail = "partial", f"leftover temporary file {display_path(stats.tmp_files[0])}"
    elif unloadable:
        state, detail = "unloadable", unloadable
    t = entry_times(stats)
    model_desc = None
    if first is not None and first.qualname:
        loc = _short_src(first.filename)
        model_desc = f"{first.qualname} ({loc}:{first.firstlineno})" if loc else first.qualname
    prefixes: tuple[str, ...] = ()
    if first is not None and first.compiled_fn is not None and first.compiled_fn.prefix:
        prefixes = (first.compiled_fn.prefix,)
    return _versions_from_manifests(Entry(
        key=path.name, layout="aot", path=path, stats=stats,
        ranks=tuple(r.rank for r in ranks), prefixes=prefixes, state=state,
        state_detail=detail, created=t.created, created_source=t.created_source,
        modified=t.modified, last_used=t.last_used, last_used_source=t.last_used_source,
        vllm_version=None, torch_version=first.torch_version if first else None,
        model=model_desc, hardware=first.hardware if first else None,
        manifests=_manifests(path, "aot", deep, problems),
        problems=tuple(problems), aot_ranks=tuple(ranks), deep=deep,
    ))


def _versions_from_manifests(e: Entry) -> Entry:
    """vLLM records neither its own version nor the served model in either tree; the
    recorder's manifests do (deep reads hold them all; quick reads read the first one)."""
    manifests = e.manifests
    if not manifests:
        first = next(manifest_paths(e.path, e.layout), None)
        try:
            manifests = (read_manifest(first),) if first is not None else ()
        except ReadError:
            manifests = ()
    if not manifests:
        return e
    data = manifests[0].data
    v = (data.get("versions") or {}).get("vllm") if isinstance(data.get("versions"),
                                                                 dict) else None
    checkpoint, detail = checkpoint_of(data.get("model"))
    return replace(e, vllm_version=e.vllm_version or (v if isinstance(v, str) else None),
                   checkpoint=checkpoint, checkpoint_detail=detail)


def checkpoint_of(model: object) -> tuple[str | None, str | None]:
    """(served model, "revision, dtype, TP=.." detail) from a manifest's ``model`` block."""
    if not isinstance(model, dict):
        return None, None
    name = model.get("model")
    if not isinstance(name, str) or not name:
        return None, None
    bits = []
    if isinstance(model.get("revision"), str):
        bits.append(f"rev {model['revision']}")
    if isinstance(model.get("dtype"), str):
        bits.append(model["dtype"].removeprefix("torch."))
    for key, label in (("tensor_parallel_size", "TP"), ("pipeline_parallel_size", "PP"),
                       ("data_parallel_size", "DP")):
        n = model.get(key)
        if isinstance(n, int) and not isinstance(n, bool) and n > 1:
            bits.append(f"{label}={n}")
    return name, ", ".join(bits) or None


def _manifests(path: Path, layout: str, deep: bool,
               problems: list[Problem]) -> tuple[Manifest, ...]:
    if not deep:
        return ()
    found, bad = read_manifests(path, layout)
    problems += [Problem(display_path(path), "corrupt-manifest", b) for b in bad]
    return tuple(found)


def layout_at(path: Path) -> str:
    """The layout of the entry folder at ``path``, by where it sits."""
    return "aot" if path.parent.name == AOT_DIRNAME else "backend"


def read_entry(path: Path, deep: bool = True) -> Entry:
    """Read one entry folder (either layout) by its path."""
    return (read_aot_entry if layout_at(path) == "aot" else read_backend_entry)(path,
                                                                                deep=deep)
