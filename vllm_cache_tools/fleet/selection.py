"""Which entries a pack or push carries, and their records: the named entries, the entries of
the other tree proven to come from the same start
(:mod:`vllm_cache_tools.keys.source_link`), and the recorder's source snapshots their
manifests name. Files are read the store's way (no symlink followed, no atime left, regular
files only)."""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from vllm_cache_tools.errors import UsageError
from vllm_cache_tools.fleet.errors import FleetError, Refused
from vllm_cache_tools.fleet.records import EntryRecord, FileRecord, SourceRecord, snapshot_path
from vllm_cache_tools.keys.key_check import key_check
from vllm_cache_tools.keys.source_link import install_prefix, sources_code_hashes
from vllm_cache_tools.layout import SOURCES_DIRNAME, STATE_DIRNAME
from vllm_cache_tools.read.noatime import open_noatime
from vllm_cache_tools.store.entries import read_entry
from vllm_cache_tools.store.filters import parse_filter
from vllm_cache_tools.store.locate import CacheRoot, display_path, resolve_root
from vllm_cache_tools.store.lookup import AmbiguousKey, EntryNotFound, locate_entry
from vllm_cache_tools.store.scan import RootError, scan
from vllm_cache_tools.store.types import Entry

CHUNK = 1 << 20
PACKABLE = ("complete", "unloadable")
"""States whose files are whole (``unloadable`` backend folders of the mega-AOT mode are part
of the start: vLLM writes them beside the AOT entry that holds the compiled model)."""


@dataclass(frozen=True)
class LocalFile:
    """A file to carry: its record and where it is here."""

    record: FileRecord
    source: Path
    ident: tuple[int, ...] | None = None
    """:func:`file_ident` when it was hashed: a pack compares it instead of hashing again."""


def file_ident(st: os.stat_result) -> tuple[int, ...]:
    """What changes when a file is replaced or written: device, inode, size, mtime and ctime
    (ns). vLLM and Inductor replace files by rename (a new inode), never in place."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@dataclass(frozen=True)
class Selection:
    """Entries (deep reads) with their records and files, and the snapshots they name."""

    root: Path
    entries: tuple[Entry, ...]
    records: tuple[EntryRecord, ...]
    files: tuple[tuple[LocalFile, ...], ...]
    """Per entry, in the order of ``records``."""
    extras: tuple[LocalFile, ...]


def file_digest(path: Path) -> tuple[str, int]:
    """(sha256, size) of a regular file, read without following a link or leaving an atime."""
    sha, n, _ = file_digest_ident(path)
    return sha, n


def file_digest_ident(path: Path) -> tuple[str, int, tuple[int, ...]]:
    """(sha256, size, :func:`file_ident` after the read) of a regular file."""
    h = hashlib.sha256()
    n = 0
    with open_noatime(path, buffering=0) as f:
        while True:
            b = f.read(CHUNK)
            if not b:
                break
            h.update(b)
            n += len(b)
        ident = file_ident(os.fstat(f.fileno()))
    return h.hexdigest(), n, ident


def entry_files(top: Path) -> list[tuple[str, Path, bool]]:
    """(relative path, path, executable) of every file under an entry folder, sorted. A
    symlink, FIFO, socket or device inside is refused: what it points at is not the entry."""
    out: list[tuple[str, Path, bool]] = []
    stack = [""]
    while stack:
        rel = stack.pop()
        folder = top / rel if rel else top
        with os.scandir(folder) as it:
            items = list(it)
        for e in items:
            r = f"{rel}/{e.name}" if rel else e.name
            s = e.stat(follow_symlinks=False)
            if stat.S_ISDIR(s.st_mode):
                stack.append(r)
            elif stat.S_ISREG(s.st_mode):
                out.append((r, Path(e.path), bool(s.st_mode & 0o111)))
            else:
                raise Refused(f"{display_path(e.path)} is not a regular file or folder "
                              "(symlink, FIFO, device): not packed")
    return sorted(out)


def _traced_files(e: Entry) -> tuple[str, ...]:
    files: dict[str, None] = {}
    for p in e.prefix_dirs:
        if p.graph is not None:
            files.update(dict.fromkeys(p.graph.files))
    for m in e.manifests:
        for f in m.data.get("traced_files") or []:
            if isinstance(f, dict) and isinstance(f.get("path"), str):
                files[f["path"]] = None
    info = e.aot_info
    if info is not None and info.filename:
        files[info.filename] = None
    return tuple(sorted(f for f in files if f.startswith("/")))


_DIGESTS: dict[str, str] = {}


def _text_digest(text: str) -> str:
    """sha256 of a traced file's compile-time copy; every start of a model holds the same
    copies, so each is hashed once per process."""
    d = _DIGESTS.get(text)
    if d is None:
        d = _DIGESTS[text] = hashlib.sha256(text.encode()).hexdigest()
        if len(_DIGESTS) > 4096:
            _DIGESTS.clear()
    return d


def _sources(e: Entry, traced: Sequence[str]) -> tuple[SourceRecord, ...]:
    info = e.aot_info
    if info is None:
        return ()
    prefix = install_prefix(traced, (s.module for s in info.inlined_sources))
    out: dict[str, SourceRecord] = {}
    for s in info.inlined_sources:
        if s.module in out:
            continue
        sha = _text_digest(s.content) if s.content is not None else None
        path = None
        if prefix is not None:
            base = prefix + s.module.replace(".", "/")
            path = next((c for c in (base + ".py", base + "/__init__.py") if c in traced),
                        base + ".py")
        out[s.module] = SourceRecord(s.module, sha, path)
    return tuple(out[m] for m in sorted(out))


def _versions(e: Entry) -> dict[str, str | None]:
    info = e.aot_info
    v: dict[str, str | None] = {"vllm": e.vllm_version, "torch": e.torch_version}
    for m in e.manifests:
        vs = m.data.get("versions")
        if isinstance(vs, dict):
            for k in ("vllm", "torch", "triton", "python"):
                if v.get(k) is None and isinstance(vs.get(k), str):
                    v[k] = vs[k]
    if info is not None:
        v.update({k: x for k, x in (("torch", info.torch_version),
                                    ("python", info.python_version),
                                    ("triton", info.triton_version),
                                    ("cuda", info.cuda_version)) if x})
    return {k: v.get(k) for k in ("vllm", "torch", "triton", "python", "cuda")}


def record_of(e: Entry, root: Path, files: Sequence[LocalFile],
              linked: Iterable[str] = ()) -> EntryRecord:
    """The record of a deep-read entry."""
    info = e.aot_info
    traced = _traced_files(e)
    key_parts: dict[str, str | None] = {}
    f = e.factors
    if f is not None:
        check = key_check(e)
        key_parts = {"env_hash": check["env_hash"] if check else f.env_hash,
                     "config_hash": f.config_hash, "code_hash": f.code_hash,
                     "compiler_hash": f.compiler_hash}
    return EntryRecord(
        key=e.key, layout=e.layout, path=os.path.relpath(e.path, root).replace(os.sep, "/"),
        ranks=e.ranks, prefixes=e.prefixes, state=e.state, state_detail=e.state_detail,
        files=tuple(x.record for x in files), model=e.model, checkpoint=e.checkpoint,
        versions=_versions(e),
        hardware={"device_type": info.device_type if info else None,
                  "gpu_name": info.gpu_name if info else None, "label": e.hardware},
        key_parts=key_parts, env_factors=dict(f.env or {}) if f is not None else {},
        traced_files=traced, sources=_sources(e, traced),
        forward=(info.qualname, info.firstlineno) if info and info.qualname
        and info.firstlineno is not None else None,
        loader=info.loader if info else None, linked=tuple(sorted(linked)))


def _local_files(e: Entry) -> tuple[LocalFile, ...]:
    out = []
    for rel, path, exe in entry_files(e.path):
        sha, size, ident = file_digest_ident(path)
        out.append(LocalFile(FileRecord(rel, size, sha, exe), path, ident))
    return tuple(out)


def _snapshots(entries: Iterable[Entry], cc: Path) -> tuple[LocalFile, ...]:
    shas: set[str] = set()
    for e in entries:
        for m in e.manifests:
            for f in m.data.get("traced_files") or []:
                if isinstance(f, dict) and f.get("snapshot") and isinstance(f.get("sha256"), str):
                    shas.add(f["sha256"])
    out = []
    for sha in sorted(shas):
        p = cc / STATE_DIRNAME / SOURCES_DIRNAME / sha
        try:
            digest, size, ident = file_digest_ident(p)
        except OSError:
            continue  # swept or never kept: the manifest still names its hash
        if digest == sha:
            out.append(LocalFile(FileRecord(snapshot_path(sha), size, sha), p, ident))
    return tuple(out)


def _locate(ref: str, croot: CacheRoot) -> Path:
    try:
        return locate_entry(ref, croot)
    except (AmbiguousKey, EntryNotFound, RootError) as exc:
        raise FleetError(str(exc)) from None


def select(root: str | os.PathLike[str] | CacheRoot | None, refs: Sequence[str] = (), *,
           model: str | None = None, filter_expr: str | None = None, linked: bool = True,
           allow_states: Sequence[str] = PACKABLE,
           progress: Callable[[str], None] | None = None) -> Selection:
    """The entries named by ``refs`` (keys, unique prefixes, paths), by ``model`` (a
    substring of the served model or traced model code) or by ``filter_expr`` (``ls
    --filter``), plus (``linked``) the other tree's entries proven to be of the same starts.
    Raises :class:`FleetError` when nothing is selected, :class:`Refused` for an entry in a
    state whose files are not whole (partial, corrupt, unknown)."""
    croot = root if isinstance(root, CacheRoot) else resolve_root(root)
    if not refs and model is None and filter_expr is None:
        raise FleetError("name the entries: KEY..., --model or --filter")
    try:
        # The listing index (as ls uses it) answers for unchanged entries: every entry that
        # is packed, and every candidate of a link proof, is read again in full below, so
        # its state and files come from the disk, not from the index.
        info = scan(croot, check_in_use=False)
        pred = parse_filter(filter_expr) if filter_expr else None
    except (RootError, UsageError) as exc:
        raise FleetError(str(exc)) from None
    by_path = {os.path.realpath(e.path): e for e in info.entries}
    chosen: dict[str, Entry] = {}
    for ref in refs:
        p = os.path.realpath(_locate(ref, croot))
        chosen[p] = by_path[p]
    if model is not None or pred is not None:
        for e in info.entries:
            if model is not None and model not in f"{e.checkpoint or ''} {e.model or ''}":
                continue
            if pred is not None and not pred(e):
                continue
            chosen[os.path.realpath(e.path)] = e
    if not chosen:
        raise FleetError("no entry matches the selection")
    deep: dict[str, Entry] = {p: read_entry(e.path, deep=True) for p, e in chosen.items()}
    links: dict[str, set[str]] = {p: set() for p in deep}
    if linked:
        _link(info.entries, deep, links, progress)
    bad = [e for e in deep.values() if e.state not in allow_states]
    if bad:
        e = bad[0]
        raise Refused(f"entry {e.key[:16]} is {e.state}"
                      + (f" ({e.state_detail})" if e.state_detail else "")
                      + ": its files are not whole, not packed")
    ordered = sorted(deep.values(), key=lambda e: (e.layout, e.key))
    if progress is not None:
        progress(f"hashing {sum(e.stats.files for e in ordered)} files")
    files = [_local_files(e) for e in ordered]
    records = tuple(record_of(e, info.root, fs, links[os.path.realpath(e.path)])
                    for e, fs in zip(ordered, files, strict=True))
    extras = _snapshots(ordered, croot.compile_cache)
    return Selection(info.root, tuple(ordered), records, tuple(files), extras)


def _link(all_entries: Sequence[Entry], deep: dict[str, Entry], links: dict[str, set[str]],
          progress: Callable[[str], None] | None) -> None:
    """Add to ``deep`` the other tree's entries of the same starts, with the proof's pairs in
    ``links`` (both directions)."""
    if progress is not None:
        progress("linking the two trees' entries of each start")
    cache: dict[str, Entry] = dict(deep)

    def full(e: Entry) -> Entry:
        p = os.path.realpath(e.path)
        if p not in cache:
            cache[p] = read_entry(e.path, deep=True)
        return cache[p]

    aots = [e for e in all_entries if e.layout == "aot" and e.state in PACKABLE]
    backends = [e for e in all_entries if e.layout == "backend" and e.state in PACKABLE]
    # The proof of link.linked_aot_entries, with each AOT entry's code hashes computed once
    # per install prefix (hashing its traced sources is the cost; many starts share them).
    hashes: dict[tuple[str, str], set[str]] = {}

    def proven(b: Entry, a: Entry) -> bool:
        f, info = b.factors, a.aot_info
        if f is None or not f.code_hash or info is None:
            return False
        graph = [g for p in b.prefix_dirs if p.graph for g in p.graph.files]
        prefix = install_prefix(graph, (s.module for s in info.inlined_sources))
        if prefix is None:
            return False
        k = (a.key, prefix)
        if k not in hashes:
            hashes[k] = set(sources_code_hashes(info, prefix))
        return f.code_hash in hashes[k]

    pairs: list[tuple[Entry, Entry]] = []
    for e in list(deep.values()):
        if e.layout == "backend":
            pairs += [(e, fa) for a in aots if _same_model_file(e, a)
                      and proven(e, fa := full(a))]
        else:
            for b in backends:
                fb = full(b)
                if _same_model_file(fb, e) and proven(fb, e):
                    pairs.append((fb, e))
    for b, a in pairs:
        for x, y in ((b, a), (a, b)):
            px = os.path.realpath(x.path)
            deep.setdefault(px, x)
            links.setdefault(px, set()).add(y.key)


def _same_model_file(backend: Entry, aot: Entry) -> bool:
    """Cheap pre-check before the proof: the AOT forward's file is one the graph names."""
    info = aot.aot_info
    loc = info.filename if info is not None else None
    if loc is None and aot.model:
        loc = aot.model.split(" (", 1)[-1].rsplit(":", 1)[0]
    if not loc:
        return False
    tail = loc.split("site-packages/")[-1]
    graph = {g for p in backend.prefix_dirs if p.graph for g in p.graph.files}
    return any(g.endswith("/" + tail) or g == loc for g in graph)


__all__ = ["PACKABLE", "LocalFile", "Selection", "entry_files", "file_digest",
           "file_digest_ident", "file_ident", "record_of", "select"]
