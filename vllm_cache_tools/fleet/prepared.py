"""What a pack keeps of an entry it reads whole (its record, its link facts, whether what it
writes about it holds a secret), worked out where the entry is read: in a forked worker of the
selection's read-ahead, only that crosses back to the packing process, not the deep read
itself (an AOT entry's is ~0.8 MB, its traced sources: unpickling 100 of them was ~0.2 s of
the packing process's time, and the redaction of their records ~0.25 s more, after the last
entry was compressed)."""

from __future__ import annotations

import hashlib
import marshal
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from msgspec.structs import replace as struct_replace

from vllm_cache_tools.fleet.link_proof import link_facts
from vllm_cache_tools.fleet.pack_memo import LinkFacts
from vllm_cache_tools.fleet.records import EntryRecord, FileRecord, SourceRecord
from vllm_cache_tools.fleet.redacted import RECORD_DEPTH, Seen, redact_fields, redacted_record
from vllm_cache_tools.keys.key_check import key_check
from vllm_cache_tools.keys.source_link import LayoutHashes, install_prefix, layout_code_hashes
from vllm_cache_tools.store.parallel_read import deep_read
from vllm_cache_tools.store.types import Entry


@dataclass(frozen=True)
class Prepared:
    """An entry read whole, reduced to what a pack keeps of it."""

    entry: Entry
    """The deep read without its traced source texts and recorder manifests (its state,
    counts and names)."""
    link: LinkFacts
    """:func:`.link_proof.link_facts` (its ``fp`` empty: the packing process's walk gives
    it), an AOT entry's code hashes under the install prefix of its own traced files
    included."""
    record: EntryRecord
    """:func:`record_of`, without files (they are hashed where they are compressed)."""
    record_clean: bool
    """Whether the redaction of ``record`` where it sits in a bundle manifest
    (:data:`.redacted.RECORD_DEPTH`) leaves it as it is."""
    snapshots: tuple[str, ...]
    """:func:`manifest_snapshots`."""
    clean_manifests: Mapping[str, str]
    """Recorder manifests found to hold no secret: path -> sha256 of the bytes checked."""


def prepare(e: Entry, root: str | os.PathLike[str], seen: Seen,
            layouts: LayoutHashes) -> Prepared:
    """The :class:`Prepared` of a deep-read entry of the vLLM root ``root``; ``seen`` and
    ``layouts``: the redaction's and the code hashes' memos of this process."""
    rec = record_of(e, root)
    facts = link_facts(e, "")
    info = e.aot_info
    if info is not None and facts.modules:
        prefix = install_prefix(rec.traced_files, facts.modules)
        if prefix is not None:
            facts = struct_replace(facts, hashes={
                **facts.hashes, prefix: layout_code_hashes(layouts, info, prefix)})
    clean = {os.fspath(m.path): m.sha256 for m in e.manifests
             if m.sha256 and redact_fields(m.data, seen) == m.data}
    return Prepared(_slim(e), facts, rec, redacted_record(rec, seen, RECORD_DEPTH) is rec,
                    manifest_snapshots(e), clean)


def _slim(e: Entry) -> Entry:
    """``e`` without its traced source texts and recorder manifests."""
    ranks = tuple(r if r.info is None or not r.info.inlined_sources else replace(
        r, info=replace(r.info, inlined_sources=tuple(
            replace(s, content=None) for s in r.info.inlined_sources)))
        for r in e.aot_ranks)
    return replace(e, aot_ranks=ranks, manifests=())


_SEEN: Seen = {}
_LAYOUTS: LayoutHashes = {}
_MEMO_BOUND = 4096


def prepare_at(root: str, item: tuple[str, str]) -> Prepared | None:
    """:func:`prepare` of the entry folder ``item`` (layout, path) read deep; ``None`` where
    the read raised ``OSError`` (read again where needed, its error raised there). The memos
    are this process's (a forked worker's: the starts of one host share most of what is
    redacted and every traced source)."""
    e = deep_read(item[0], Path(item[1]))
    if e is None:
        return None
    if len(_SEEN) > _MEMO_BOUND or len(_LAYOUTS) > _MEMO_BOUND or len(_SHARED) > _MEMO_BOUND:
        _SEEN.clear()
        _LAYOUTS.clear()
        _SHARED.clear()
    d = prepare(e, root, _SEEN, _LAYOUTS)
    rec = d.record
    return replace(d, record=replace(rec, env_factors=_shared(rec.env_factors), recorded={
        k: _shared(v) for k, v in rec.recorded.items()}))


_SHARED: dict[bytes, Any] = {}
"""Values equal between the records of one host's starts (the recorder's config and Inductor
fields, ~40 KB a record; the env factors), one object each in a worker: a chunk of results
crosses the pipe pickled as one object, each shared value once."""


def _shared(v: Any) -> Any:
    try:
        k = marshal.dumps(v, 2)  # format 2: equal values give equal bytes
    except ValueError:  # not plain data
        return v
    return _SHARED.setdefault(k, v)


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


def record_of(e: Entry, root: str | os.PathLike[str], files: Sequence[FileRecord] = (),
              linked: Iterable[str] = ()) -> EntryRecord:
    """The record of a deep-read entry whose files are ``files``."""
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
        files=tuple(files), model=e.model, checkpoint=e.checkpoint,
        versions=_versions(e),
        hardware={"device_type": info.device_type if info else None,
                  "gpu_name": info.gpu_name if info else None, "label": e.hardware},
        key_parts=key_parts, env_factors=dict(f.env or {}) if f is not None else {},
        traced_files=traced, sources=_sources(e, traced),
        forward=(info.qualname, info.firstlineno) if info and info.qualname
        and info.firstlineno is not None else None,
        loader=info.loader if info else None, linked=tuple(sorted(linked)),
        recorded=recorded_keys(e))


RECORDED_FIELDS = ("config_hash", "config", "env", "inductor", "traced_files", "key_parts")
"""What a record keeps of the entry's newest recorder manifest: its key inputs only (the
manifest file itself travels too; times and hosts would make equal entries differ)."""


def recorded_keys(e: Entry) -> dict[str, object]:
    m = e.manifests[-1] if e.manifests else None
    if m is None:
        return {}
    return {k: m.data[k] for k in RECORDED_FIELDS if m.data.get(k) is not None}




def manifest_snapshots(e: Entry) -> tuple[str, ...]:
    """sha256 of the source snapshots the recorder's manifests of ``e`` name."""
    shas: set[str] = set()
    for m in e.manifests:
        for f in m.data.get("traced_files") or []:
            if isinstance(f, dict) and f.get("snapshot") and isinstance(f.get("sha256"), str):
                shas.add(f["sha256"])
    return tuple(sorted(shas))


__all__ = ["RECORDED_FIELDS", "Prepared", "manifest_snapshots", "prepare", "prepare_at",
           "record_of", "recorded_keys"]
