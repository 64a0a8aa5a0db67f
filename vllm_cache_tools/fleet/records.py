"""What a bundle or a remote store says about the entries it carries: frozen records, their
JSON form, and the checks every record read from outside passes before anything trusts it.

One :class:`EntryRecord` per entry folder (either tree), listing every file with its size and
sha256, the key parts, the versions and hardware it was built for and the traced files'
build-time paths (the backend code hash includes them: see :mod:`.checks`). The same record is
the bundle manifest's element and a remote store's per-entry index object, so a bundle and a
store describe an entry identically. No times: the same entries give the same bytes."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

import msgspec

from vllm_cache_tools.fleet.errors import BundleError
from vllm_cache_tools.layout import (
    AOT_DIRNAME,
    COMPILE_CACHE_DIRNAME,
    SOURCES_DIRNAME,
    STATE_DIRNAME,
    short_key,
)

FORMAT = "vllm-cache-bundle"
FORMAT_VERSION = 1
"""Goes up when a field changes meaning or goes away (readers refuse other versions); new
fields keep it."""
MANIFEST_NAME = "vllm-cache-bundle.json"
"""The bundle's first member."""
DEFAULT_LEVEL = 3
"""The bundle's zstd level, zstd's own default: ~3x on Inductor caches at several hundred
MB/s."""

_BACKEND_KEY = re.compile(r"^[0-9a-f]{10}(-\d+)?$")
_AOT_KEY = re.compile(r"^[0-9a-f]{64}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_SNAPSHOT_DIR = f"{COMPILE_CACHE_DIRNAME}/{STATE_DIRNAME}/{SOURCES_DIRNAME}"
MAX_FILES = 1_000_000
MAX_FILE_BYTES = 1 << 40


@dataclass(frozen=True)
class FileRecord:
    """One regular file: ``path`` relative to its entry folder (extras: to the vLLM root),
    ``/``-separated."""

    path: str
    size: int
    sha256: str
    executable: bool = False


@dataclass(frozen=True)
class SourceRecord:
    """A traced module whose compile-time copy an AOT artifact holds (vLLM's loader compares
    it with the file on disk): ``sha256`` of that copy, ``path`` at build time when known."""

    module: str
    sha256: str | None
    path: str | None = None


@dataclass(frozen=True)
class EntryRecord:
    """One entry folder as packed or pushed."""

    key: str
    layout: str
    """``backend`` or ``aot``."""
    path: str
    """The entry folder relative to the vLLM root, e.g. ``torch_compile_cache/28fd362d4e``."""
    ranks: tuple[str, ...]
    prefixes: tuple[str, ...]
    state: str
    """The store's state of the entry when it was packed (``complete``, ``unloadable``...)."""
    state_detail: str
    files: tuple[FileRecord, ...]
    model: str | None = None
    """The model code it was traced from (``LlamaModel.forward (...llama.py:406)``)."""
    checkpoint: str | None = None
    """The served model, when the recorder wrote it down."""
    versions: Mapping[str, str | None] = field(default_factory=dict, hash=False)
    """``vllm``, ``torch``, ``triton``, ``python``, ``cuda``: what is known of each."""
    hardware: Mapping[str, str | None] = field(default_factory=dict, hash=False)
    """``device_type``, ``gpu_name`` (AOT system info), ``label`` (as ``ls`` shows it)."""
    key_parts: Mapping[str, str | None] = field(default_factory=dict, hash=False)
    """Backend entries: ``env_hash``, ``config_hash``, ``code_hash``, ``compiler_hash``."""
    env_factors: Mapping[str, object] = field(default_factory=dict, hash=False)
    """Backend entries: the env factors vLLM hashed (``cache_key_factors.json``), so a miss
    is explained variable by variable before any byte moves."""
    traced_files: tuple[str, ...] = ()
    """Build-time absolute paths of the traced files (graph ``# File:`` comments, recorder
    manifests, the AOT forward's file)."""
    sources: tuple[SourceRecord, ...] = ()
    forward: tuple[str, int] | None = None
    """AOT: (qualname, first line) of the compiled ``forward``: inputs of the AOT key."""
    loader: str | None = None
    linked: tuple[str, ...] = ()
    """Keys of the other tree's entries of the same start, proven by :mod:`..link`."""
    recorded: Mapping[str, object] = field(default_factory=dict, hash=False)
    """What the newest recorder manifest of the entry says of its keys (``config`` parts with
    their fields, ``env``, ``inductor``, ``traced_files``, ``key_parts``; no times, no host):
    a miss is itemised field by field before any byte moves. Empty without a manifest."""

    @property
    def size_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def lock_name(self) -> str:
        """The name prune and verify lock this entry by (``delete.EntryLocks``)."""
        return f"{self.layout}-{self.key}"


@dataclass(frozen=True)
class Footprint:
    """The one count of what a set of entries holds, for every verb that moves them (``pack``,
    ``unpack``, ``push``, ``pull``) and as ``ls`` counts entries: the files of the entry
    folders (every rank, manifests included) and their bytes as file sizes (logical bytes;
    ``ls`` adds the on-disk bytes where the files are on this machine), and apart from them
    the recorder's source snapshots that go along (files outside the entry folders). The
    verbs printed four different pairs for one bundle (entries only, entries with snapshots,
    blobs after deduplication) without saying which."""

    entries: int
    files: int
    size_bytes: int
    snapshot_files: int = 0
    snapshot_bytes: int = 0

    @property
    def total_files(self) -> int:
        return self.files + self.snapshot_files

    @property
    def total_bytes(self) -> int:
        return self.size_bytes + self.snapshot_bytes


def footprint(records: Sequence[EntryRecord], extras: Sequence[FileRecord] = ()) -> Footprint:
    """:class:`Footprint` of entry records and the snapshots that go with them (each snapshot
    once: two entries of one start name the same files)."""
    snaps = {f.path: f.size for f in extras}
    return Footprint(len(records), sum(len(r.files) for r in records),
                     sum(r.size_bytes for r in records), len(snaps), sum(snaps.values()))


@dataclass(frozen=True)
class BundleManifest:
    """The bundle's first member: what it holds and what it was built for."""

    entries: tuple[EntryRecord, ...]
    extras: tuple[FileRecord, ...] = ()
    """Files outside the entry folders: the recorder's source snapshots the manifests name."""
    packed_on: Mapping[str, Any] = field(default_factory=dict, hash=False)
    """The packing host's CPU model and instruction-set flags that vLLM or Inductor key on,
    GPU names, Python: where the entries were (most likely) built."""
    created_by: str = ""
    format_version: int = FORMAT_VERSION
    provenance: Mapping[str, Any] = field(default_factory=dict, hash=False)
    """Who built it, when, with what, from which serve arguments (:mod:`.provenance`):
    written when the bundle is signed (a signature vouches for it), empty otherwise, so an
    unsigned bundle of the same entries keeps the same bytes."""

    @property
    def size_bytes(self) -> int:
        return sum(e.size_bytes for e in self.entries) + sum(f.size for f in self.extras)

    @property
    def footprint(self) -> Footprint:
        return footprint(self.entries, self.extras)

    @property
    def files(self) -> int:
        return sum(len(e.files) for e in self.entries) + len(self.extras)


# ---- JSON -----------------------------------------------------------------------------------

def file_json(f: FileRecord) -> dict[str, Any]:
    out: dict[str, Any] = {"path": f.path, "size": f.size, "sha256": f.sha256}
    if f.executable:
        out["executable"] = True
    return out


def entry_json(e: EntryRecord) -> dict[str, Any]:
    return {
        "key": e.key, "layout": e.layout, "path": e.path, "ranks": list(e.ranks),
        "prefixes": list(e.prefixes), "state": e.state, "state_detail": e.state_detail,
        "model": e.model, "checkpoint": e.checkpoint, "versions": dict(e.versions),
        "hardware": dict(e.hardware), "key_parts": dict(e.key_parts),
        "env_factors": dict(e.env_factors), "traced_files": list(e.traced_files),
        "sources": [{"module": s.module, "sha256": s.sha256, "path": s.path}
                    for s in e.sources],
        "forward": list(e.forward) if e.forward else None, "loader": e.loader,
        "linked": list(e.linked), "files": [file_json(f) for f in e.files],
        **({"recorded": dict(e.recorded)} if e.recorded else {}),
    }


def manifest_json(m: BundleManifest) -> dict[str, Any]:
    return {"format": FORMAT, "format_version": m.format_version, "created_by": m.created_by,
            "packed_on": dict(m.packed_on), "entries": [entry_json(e) for e in m.entries],
            "extras": [file_json(f) for f in m.extras],
            **({"provenance": dict(m.provenance)} if m.provenance else {})}


# ---- reading records from outside: every field checked ----------------------------------------

def _bad(what: str) -> BundleError:
    return BundleError(f"invalid bundle manifest: {what}")


def _str(d: Mapping[str, Any], k: str, optional: bool = False) -> str:
    v = d.get(k)
    if v is None and optional:
        return ""
    if not isinstance(v, str):
        raise _bad(f"{k!r} is not a string")
    return v


def _opt_str(v: Any, what: str) -> str | None:
    if v is not None and not isinstance(v, str):
        raise _bad(f"{what} is not a string")
    return v


_NOT_PLAIN = frozenset({"", ".", ".."})


def safe_rel_path(p: str, what: str) -> str:
    """``p`` when it is a plain relative path that stays below its folder: no ``..``, no
    absolute or empty component, no NUL or backslash."""
    if (not p or p.startswith("/") or "\\" in p or "\x00" in p
            or not _NOT_PLAIN.isdisjoint(p.split("/"))):
        raise BundleError(f"refused: {what} {p!r} is not a plain relative path "
                          "(absolute, '..' or empty component)")
    return p


def entry_rel_path(layout: str, key: str) -> tuple[str, ...]:
    """The places an entry of ``layout`` may occupy, relative to the vLLM root."""
    if layout == "backend":
        return (f"{COMPILE_CACHE_DIRNAME}/{key}",)
    return (f"{COMPILE_CACHE_DIRNAME}/{AOT_DIRNAME}/{key}", f"{AOT_DIRNAME}/{key}")


def _file(d: Any, what: str) -> FileRecord:
    if not isinstance(d, dict):
        raise _bad(f"{what}: a file record is not an object")
    size = d.get("size")
    if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= MAX_FILE_BYTES:
        raise _bad(f"{what}: bad size")
    sha = _str(d, "sha256")
    if not _SHA256.match(sha):
        raise _bad(f"{what}: bad sha256")
    return FileRecord(safe_rel_path(_str(d, "path"), f"{what} file"), size, sha,
                      bool(d.get("executable", False)))


def _str_map(v: Any, what: str) -> dict[str, str | None]:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise _bad(f"{what} is not an object")
    return {str(k): _opt_str(x, f"{what}.{k}") for k, x in v.items()}


class RecordedJSON(Mapping[str, object]):
    """An entry's ``recorded`` object as a bundle manifest carries it, parsed when first used
    (by the hit check's causes, on a miss): it is most of a manifest's bytes (~50 KB an entry:
    the recorder's config and Inductor fields), and an unpack that hits never reads it. Its
    JSON syntax and that it is an object are checked when the manifest is read
    (:func:`.bundle_read.parse_manifest`); its nesting bound (:data:`RECORDED_DEPTH`) and the
    rest of ``json.loads``' rules when it is parsed, where a failure raises
    :class:`BundleError`."""

    __slots__ = ("_data", "raw")

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self._data: dict[str, object] | None = None

    def _got(self) -> dict[str, object]:
        if self._data is None:
            from vllm_cache_tools.read import jsontext

            try:
                v = jsontext.loads(self.raw, "bundle manifest", max_depth=RECORDED_DEPTH,
                                   max_containers=None)
            except ValueError as exc:
                raise _bad(f"recorded: {exc}") from None
            if not isinstance(v, dict):
                raise _bad("recorded is not an object")
            self._data = {str(k): x for k, x in v.items()}
        return self._data

    def __getitem__(self, key: str) -> object:
        return self._got()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._got())

    def __len__(self) -> int:
        return len(self._got())

    def __reduce__(self) -> tuple[Any, ...]:
        return (RecordedJSON, (self.raw,))

    def __repr__(self) -> str:
        return f"RecordedJSON({len(self.raw)} bytes)"


RECORDED_DEPTH = 61
"""The nesting ``recorded`` may have: the manifest's bound (``jsontext.MAX_DEPTH``, 64) less
the levels above it (the document, its entries, the entry)."""


def _recorded(v: Any) -> Mapping[str, object]:
    return v if isinstance(v, RecordedJSON) else _obj(v, "recorded")


def _obj(v: Any, what: str) -> dict[str, object]:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise _bad(f"{what} is not an object")
    return {str(k): x for k, x in v.items()}


def _str_list(v: Any, what: str) -> tuple[str, ...]:
    if v is None:
        return ()
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise _bad(f"{what} is not a list of strings")
    return tuple(v)


def entry_from_json(d: Any) -> EntryRecord:
    if not isinstance(d, dict):
        raise _bad("an entry is not an object")
    key, layout = _str(d, "key"), _str(d, "layout")
    if layout not in ("backend", "aot"):
        raise _bad(f"entry layout {layout!r}")
    if not (_BACKEND_KEY if layout == "backend" else _AOT_KEY).match(key):
        raise _bad(f"{key!r} is not a {layout} entry key")
    path = _str(d, "path")
    if path not in entry_rel_path(layout, key):
        raise BundleError(f"refused: entry {key} would be placed at {path!r}, not where vLLM "
                          "keeps its entries")
    files = d.get("files")
    if not isinstance(files, list) or len(files) > MAX_FILES:
        raise _bad(f"entry {key}: files")
    recs = tuple(_file(f, f"entry {short_key(key)}") for f in files)
    if len({f.path for f in recs}) != len(recs):
        raise _bad(f"entry {key}: a file is listed twice")
    sources = []
    for s in d.get("sources") or []:
        if not isinstance(s, dict):
            raise _bad(f"entry {key}: sources")
        sources.append(SourceRecord(_str(s, "module"), _opt_str(s.get("sha256"), "sha256"),
                                    _opt_str(s.get("path"), "path")))
    fw = d.get("forward")
    forward = None
    if fw is not None:
        if not (isinstance(fw, list) and len(fw) == 2 and isinstance(fw[0], str)
                and isinstance(fw[1], int)):
            raise _bad(f"entry {key}: forward")
        forward = (fw[0], fw[1])
    return EntryRecord(
        key=key, layout=layout, path=path, ranks=_str_list(d.get("ranks"), "ranks"),
        prefixes=_str_list(d.get("prefixes"), "prefixes"), state=_str(d, "state"),
        state_detail=_str(d, "state_detail", optional=True), files=recs,
        model=_opt_str(d.get("model"), "model"),
        checkpoint=_opt_str(d.get("checkpoint"), "checkpoint"),
        versions=_str_map(d.get("versions"), "versions"),
        hardware=_str_map(d.get("hardware"), "hardware"),
        key_parts=_str_map(d.get("key_parts"), "key_parts"),
        env_factors=_obj(d.get("env_factors"), "env_factors"),
        traced_files=_str_list(d.get("traced_files"), "traced_files"),
        sources=tuple(sources), forward=forward,
        loader=_opt_str(d.get("loader"), "loader"),
        linked=_str_list(d.get("linked"), "linked"),
        recorded=_recorded(d.get("recorded")))


def extra_from_json(d: Any) -> FileRecord:
    f = _file(d, "extra")
    parent, _, name = f.path.rpartition("/")
    if parent != _SNAPSHOT_DIR or not _SHA256.match(name):
        raise BundleError(f"refused: extra file {f.path!r} is not a recorder source snapshot")
    if name != f.sha256:
        raise BundleError(f"refused: source snapshot {name[:12]} holds content of sha256 "
                          f"{f.sha256[:12]} (snapshots are named by their content's sha256)")
    return f


def manifest_from_json(d: Any) -> BundleManifest:
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        raise BundleError("not a vllm-cache bundle (no bundle manifest)")
    v = d.get("format_version")
    if v != FORMAT_VERSION:
        raise BundleError(f"bundle format version {v!r} is not supported (this vllm-cache "
                          f"reads version {FORMAT_VERSION}): use a matching vllm-cache-tools")
    entries = d.get("entries")
    if not isinstance(entries, list) or not entries:
        raise _bad("no entries")
    recs = tuple(entry_from_json(e) for e in entries)
    if len({(e.layout, e.key) for e in recs}) != len(recs):
        raise _bad("an entry is listed twice")
    extras = tuple(extra_from_json(x) for x in d.get("extras") or [])
    packed_on = d.get("packed_on") or {}
    if not isinstance(packed_on, dict):
        raise _bad("packed_on")
    prov = d.get("provenance") or {}
    if not isinstance(prov, dict):
        raise _bad("provenance")
    return BundleManifest(recs, extras, packed_on, str(d.get("created_by") or ""), v, prov)


def snapshot_path(sha256: str) -> str:
    """A recorder source snapshot's path relative to the vLLM root."""
    return f"{_SNAPSHOT_DIR}/{sha256}"


class _FileJSON(msgspec.Struct):
    path: str
    size: Annotated[int, msgspec.Meta(ge=0, le=MAX_FILE_BYTES)]
    sha256: Annotated[str, msgspec.Meta(pattern=_SHA256.pattern)]
    executable: bool = False


class _EntryFilesJSON(msgspec.Struct):
    path: str
    key: str = ""
    layout: str = ""
    files: list[_FileJSON] = []


class _ManifestFilesJSON(msgspec.Struct):
    entries: list[_EntryFilesJSON] = []
    extras: list[_FileJSON] = []


_MANIFEST_FILES = msgspec.json.Decoder(_ManifestFilesJSON)


@dataclass(frozen=True)
class ManifestFiles:
    """What :func:`manifest_files` reads: each file by member name, each entry's path with
    its number of files, and the index of the entry of each entry file (by member name)."""

    files: Mapping[str, FileRecord]
    entries: tuple[tuple[str, int], ...]
    owner: Mapping[str, int]


def manifest_files(raw: bytes) -> ManifestFiles | None:
    """The files a manifest's bytes list, by member name (``entry path/file path``; an extra:
    its path), read in a few ms (msgspec: the rest of the document is skipped) so that the
    files can be written while the manifest is read in full; ``None`` where the bytes do not
    decode so, or a size, digest, path or entry folder is not one :func:`manifest_from_json`
    accepts (that check, of everything else, follows: a reader that uses this must find the
    same records in the manifest it reads in full)."""
    try:
        got = _MANIFEST_FILES.decode(raw)
        for e in got.entries:
            if e.layout not in ("backend", "aot") or e.path not in entry_rel_path(
                    e.layout, e.key) or not (_BACKEND_KEY if e.layout == "backend"
                                             else _AOT_KEY).match(e.key):
                return None
            for f in e.files:
                safe_rel_path(f.path, "file")
        for x in got.extras:
            safe_rel_path(x.path, "extra")
    except (msgspec.DecodeError, RecursionError, MemoryError, BundleError):
        return None
    out = {f"{e.path}/{f.path}": FileRecord(f.path, f.size, f.sha256, f.executable)
           for e in got.entries for f in e.files}
    out.update((x.path, FileRecord(x.path, x.size, x.sha256, x.executable))
               for x in got.extras)
    return ManifestFiles(out, tuple((e.path, len(e.files)) for e in got.entries),
                         {f"{e.path}/{f.path}": k for k, e in enumerate(got.entries)
                          for f in e.files})


__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "MANIFEST_NAME",
    "BundleManifest",
    "EntryRecord",
    "FileRecord",
    "ManifestFiles",
    "SourceRecord",
    "entry_from_json",
    "entry_json",
    "entry_rel_path",
    "manifest_files",
    "manifest_from_json",
    "manifest_json",
    "safe_rel_path",
    "snapshot_path",
]
