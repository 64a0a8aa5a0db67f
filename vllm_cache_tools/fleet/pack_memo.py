"""What a pack learned about each entry, reused while the entry's files are the same: its
record (deep pickle reads, the key check), its files' sha256, the snapshots its manifests
name, and what the proof that links an AOT entry to a backend entry compares of each entry
alone (:class:`LinkFacts`: per entry, not per pair, so the memo grows with the root, never with
backends x AOT entries). A pack or push of unchanged entries then reads no pickle and hashes no
file before it writes.

"The same files" is a fingerprint of every file and folder of the entry folder: relative
path, executable bit and :func:`..selection.file_ident` (device, inode, size, mtime, ctime in
ns), from the one ``lstat`` walk a pack does anyway. vLLM and Inductor replace files by rename
(a new inode, a new ctime), and any write in place changes the ctime, so a file whose
fingerprint is unchanged holds the bytes that were hashed. The bundle stays what it would be
without the memo (the same records, so the same bytes), and the writer still compares each
file's identity before and after archiving it (:func:`..frames.write_known`).

One msgpack file per vLLM root in our own cache dir (beside the listing index, never inside
vLLM's root), written atomically under a lock; another format or tool version is ignored and
rebuilt, and an unreadable one is ignored (a memo is never needed: without it, pack reads
everything as before)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import msgspec
import xxhash
from filelock import FileLock, Timeout

from vllm_cache_tools import __version__, safeio
from vllm_cache_tools.fleet.records import EntryRecord, entry_from_json, entry_json
from vllm_cache_tools.store.locate import user_cache_dir

FORMAT = 6
"""2: a link proof also needs the AOT entry's recorder manifests to agree with the backend
entry's env and config hashes (format 1's proofs linked every start of the same code); 3: records
keep the manifest's key inputs (EntryRecord.recorded); 4: the link proof's facts per entry
(:class:`LinkFacts`) instead of one row per (backend, AOT) pair (100,000 rows at most, cleared
when full: 360 starts are 129,600 pairs, so every AOT pickle was read again); 5: which entries
were found clean (:meth:`PackMemo.is_clean`: no secret in their record or recorder manifests;
redacting the records and reading the manifests again was half of a pack from the memo), and
each record as msgpack instead of JSON text; 6: the records' ``recorded`` values once per
distinct value (:attr:`_Memo.values`: ~45 KB a record, most of it the same for one host's
starts; decoding them was two fifths of a pack's selection from the memo of 100 starts)."""


class LinkFacts(msgspec.Struct, array_like=True, frozen=True):
    """What the link proof (:mod:`.link_proof`) compares of one entry, read from it alone.
    Backend: its graph's files, code hash, config hash and env hash (``has_factors``: it has a
    ``cache_key_factors.json``). AOT: its forward's file, the traced modules (``None``: no
    artifact read), the env / config hashes its recorder manifests name, and per install
    prefix the backend code hashes its compile-time sources give there."""

    fp: str
    """The entry's :func:`fingerprint` when these were read."""
    layout: str
    graph: tuple[str, ...] = ()
    code_hash: str | None = None
    has_factors: bool = False
    config_hash: str | None = None
    env_hash: str | None = None
    model_file: str | None = None
    modules: tuple[str, ...] | None = None
    manifest_env: str | None = None
    manifest_cfg: str | None = None
    hashes: dict[str, tuple[str, ...]] = msgspec.field(default_factory=dict)


class _Memo(msgspec.Struct, array_like=True):
    format: int
    version: str
    entries: dict[str, msgspec.Raw]
    """entry path -> :data:`_Entry` (fingerprint, the record's JSON data without ``linked``
    as msgpack, snapshot sha256s), kept encoded until looked up: loading the memo decodes
    nothing per entry (as the listing index)."""
    links: dict[str, LinkFacts]
    """entry path -> what the link proof compares of it."""
    clean: dict[str, str] = msgspec.field(default_factory=dict)
    """entry path -> the fingerprint at which its record (``linked`` aside) and its recorder
    manifests were found to hold no secret (this tool version's redaction rules: the memo
    of another version is not read)."""
    values: dict[str, msgspec.Raw] = msgspec.field(default_factory=dict)
    """xxh3-128 of a record's ``recorded`` value as msgpack -> that msgpack: each distinct
    value once, named by the records (:data:`_Entry`'s last item)."""


_Entry = tuple[str, bytes, tuple[str, ...], dict[str, str]]
"""Fingerprint, the record's data without ``linked`` and ``recorded`` as msgpack, snapshot
sha256s, and ``recorded`` as field -> the digest of its value in :attr:`_Memo.values`."""
_DECODE = msgspec.msgpack.Decoder(_Memo).decode
_DECODE_ENTRY = msgspec.msgpack.Decoder(_Entry).decode
_ENCODE = msgspec.msgpack.Encoder().encode
_DECODE_DATA = msgspec.msgpack.Decoder().decode


def memo_path(compile_cache: Path) -> Path:
    real = os.path.realpath(compile_cache)
    name = xxhash.xxh3_64_hexdigest(os.fsencode(real))
    return user_cache_dir() / "fleet" / f"pack-{name}.msgpack"


def fingerprint(walk: Iterable[tuple[str, bool, tuple[int, ...]]]) -> str:
    """A digest of (relative path, executable, identity) of every file and folder."""
    h = xxhash.xxh3_128()
    for rel, exe, ident in walk:
        h.update(f"{rel}\0{int(exe)}\0{ident}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


class PackMemo:
    """The memo of one vLLM root; :meth:`save` writes it when something was learned."""

    def __init__(self, compile_cache: Path) -> None:
        self.path = memo_path(compile_cache)
        self.doc = _Memo(FORMAT, __version__, {}, {}, {})
        self.dirty = False
        self._values: dict[str, object] = {}  # decoded once per memo, shared by the records
        with contextlib.suppress(OSError, msgspec.DecodeError, ValueError):
            doc = _DECODE(self.path.read_bytes())
            if doc.format == FORMAT and doc.version == __version__:
                self.doc = doc

    def record(self, path: str, fp: str) -> tuple[EntryRecord, tuple[str, ...]] | None:
        """The record (``linked`` empty) and snapshot sha256s of the entry at ``path`` when
        its fingerprint is still ``fp``."""
        raw = self.doc.entries.get(path)
        if raw is None:
            return None
        try:
            hit = _DECODE_ENTRY(raw)
            if hit[0] != fp:
                return None
            # The record as msgpack (floats, NaN and infinities included, round-trip
            # exactly; depth bounded: RecursionError): a tenth of JSON's cost both ways.
            d = _DECODE_DATA(hit[1])
            if not isinstance(d, dict):
                return None
            recorded = {k: self._value(h) for k, h in hit[3].items()}
            if any(v is None for v in recorded.values()):
                return None
            if recorded:
                d["recorded"] = recorded
            return entry_from_json(d), hit[2]
        except (ValueError, msgspec.DecodeError, RecursionError):  # BundleError too: never
            return None  # trusted blindly

    def _value(self, digest: str) -> object | None:
        got = self._values.get(digest)
        if got is None:
            raw = self.doc.values.get(digest)
            if raw is None:
                return None
            got = self._values[digest] = _DECODE_DATA(raw)
        return got

    def put_record(self, path: str, fp: str, rec: EntryRecord, snaps: Sequence[str]) -> None:
        d = entry_json(rec)
        d["linked"] = []
        refs: dict[str, str] = {}
        try:
            for k, v in (d.pop("recorded", None) or {}).items():
                b = _ENCODE(v)
                h = refs[k] = xxhash.xxh3_128_hexdigest(b)
                self.doc.values.setdefault(h, msgspec.Raw(b))
            data = _ENCODE(d)
        except (OverflowError, TypeError, ValueError):  # an integer past 64 bits: not kept
            return
        self.doc.entries[path] = msgspec.Raw(_ENCODE((fp, data, tuple(sorted(snaps)), refs)))
        self.dirty = True

    def link_facts(self, path: str, fp: str) -> LinkFacts | None:
        """The link facts of the entry at ``path`` when its fingerprint is still ``fp``."""
        got = self.doc.links.get(path)
        return got if got is not None and got.fp == fp else None

    def put_link_facts(self, path: str, facts: LinkFacts) -> None:
        self.doc.links[path] = facts
        self.dirty = True

    def is_clean(self, path: str, fp: str) -> bool:
        """Whether the entry at ``path``, its fingerprint still ``fp``, was found to hold no
        secret in its record (``linked`` aside) or recorder manifests."""
        return self.doc.clean.get(path) == fp

    def mark_clean(self, path: str, fp: str) -> None:
        if self.doc.clean.get(path) != fp:
            self.doc.clean[path] = fp
            self.dirty = True

    def forget_missing(self, present: Iterable[str]) -> None:
        """Drop what is kept of entries no longer in the root."""
        keep = set(present)
        gone = 0
        for table in (self.doc.entries, self.doc.links, self.doc.clean):
            drop = [p for p in table if p not in keep]
            for p in drop:
                del table[p]
            gone += len(drop)
        self.dirty |= bool(gone)

    def save(self) -> None:
        """Write the memo if it changed; a failure (read-only home, a busy lock, a root path
        that is not UTF-8, which msgpack cannot hold) is ignored: the next pack reads the
        entries again."""
        if not self.dirty:
            return
        with contextlib.suppress(ValueError, msgspec.DecodeError):  # values no record names
            named = {h for raw in self.doc.entries.values() for h in _DECODE_ENTRY(raw)[3].values()}
            for h in [h for h in self.doc.values if h not in named]:
                del self.doc.values[h]
        with contextlib.suppress(OSError, Timeout, UnicodeEncodeError):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with FileLock(str(self.path) + ".lock", timeout=5):
                fd = safeio.open_dirs(self.path.parent)
                try:
                    safeio.replace_at(fd, self.path.name, _ENCODE(self.doc), 0o600)
                finally:
                    os.close(fd)
            self.dirty = False


__all__ = ["LinkFacts", "PackMemo", "fingerprint", "memo_path"]
