"""What we read from a cache, as frozen dataclasses. No I/O here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # annotations only: a listing from the index imports none of the readers
    from vllm_cache_tools.read.aot_model import AotModelInfo
    from vllm_cache_tools.read.compile_cache import CompiledGraphRecord
    from vllm_cache_tools.read.factors import CacheKeyFactors
    from vllm_cache_tools.read.graph import GraphInfo
    from vllm_cache_tools.read.manifest import Manifest

Layout = Literal["backend", "aot"]
State = Literal["complete", "partial", "corrupt", "unloadable", "in-use", "unknown",
                "load-failed"]
"""``unloadable``: whole and readable, but vLLM can never load it (its AOT artifact holds a
function vLLM's loader cannot finalize, or a backend folder holds no compiled graph);
``load-failed``: otherwise complete, but the recorder's ledger says vLLM failed to load it
since its last hit (issue 29 item 4: ``prune --load-failed``);
``unknown``: parts could not be read, so nothing is claimed about them."""
LastUsedSource = Literal["ledger", "atime", "mtime"]


@dataclass(frozen=True)
class Problem:
    """Something wrong or odd under the root; scanning goes on past it."""

    path: str
    kind: str
    """``unreadable``, ``symlink``, ``corrupt``, ``partial``, ``foreign``, ``tmp-leftover``..."""
    detail: str


UNREAD_KINDS = frozenset({"symlink", "unreadable"})
"""Problem kinds that leave part of the root unread (a symlinked ``torch_compile_cache`` or
entry folder, a folder that cannot be listed): unchecked, not clean. verify reports them as
the root's problems; ls, audit and explain warn of them."""


@dataclass(frozen=True)
class TreeStats:
    """Sizes and times of a folder tree, from ``lstat`` (symlinks are never followed)."""

    size_bytes: int = 0
    disk_bytes: int = 0
    files: int = 0
    dirs: int = 0
    oldest_mtime: float | None = None
    newest_mtime: float | None = None
    tmp_files: tuple[str, ...] = ()
    symlinks: tuple[str, ...] = ()
    unreadable: tuple[str, ...] = ()
    owners: tuple[int, ...] = ()
    dir_mtimes: tuple[tuple[str, int], ...] = ()
    """(folder relative to the entry, mtime_ns): adding, removing or renaming a file changes
    its folder's mtime, so equal values mean the same set of files (the index relies on it)."""
    key_files: tuple[tuple[str, int, int, float], ...] = ()
    """(relative path, size, mtime_ns, atime) of the files vLLM loads and we parse."""

    @property
    def last_read(self) -> float | None:
        """Newest atime of a key file that was read after it was last written (a load by
        vLLM: our own reads use O_NOATIME), else ``None``."""
        reads = [a for _, _, m, a in self.key_files if a > m / 1e9]
        return max(reads) if reads else None


@dataclass(frozen=True)
class EntryTimes:
    """When an entry was created, modified and last used, and what says so."""

    created: float | None
    """Earliest file mtime (artifacts are written once; Linux gives no birth time)."""
    created_source: str
    """``oldest-mtime``."""
    modified: float | None
    """Newest file mtime."""
    last_used: float | None
    """Newest evidence of use: a key file read after it was written, else the last write."""
    last_used_source: LastUsedSource | None
    """``atime``, ``mtime`` (``ledger`` once the recorder's ledger is applied)."""


@dataclass(frozen=True)
class PrefixDir:
    """``<backend key>/rank_i_j/<prefix>/``: one compiled model part (``backbone``, ...)."""

    rank: str
    prefix: str
    path: Path
    factors: CacheKeyFactors | None
    has_graph: bool
    graph: GraphInfo | None
    """Full ``computation_graph.py`` info (``show``); ``None`` in the quick read."""
    model_file: str | None
    """The model-definition file the graph was traced from (``# File:`` comments)."""
    compiled: tuple[CompiledGraphRecord, ...] | None
    """From ``vllm_compile_cache.py``; ``None`` when there is none (e.g. mega AOT artifact)."""
    missing_artifacts: tuple[str, ...]
    files: tuple[str, ...]


@dataclass(frozen=True)
class AotRank:
    """``torch_aot_compile/<key>/rank_i_j/model``."""

    rank: str
    path: Path
    size_bytes: int
    info: AotModelInfo | None
    error: str | None


@dataclass(frozen=True)
class Entry:
    key: str
    layout: Layout
    path: Path
    stats: TreeStats
    ranks: tuple[str, ...]
    prefixes: tuple[str, ...]
    state: State
    state_detail: str
    created: float | None
    created_source: str
    modified: float | None
    last_used: float | None
    last_used_source: LastUsedSource | None
    vllm_version: str | None
    torch_version: str | None
    model: str | None
    hardware: str | None
    problems: tuple[Problem, ...] = ()
    prefix_dirs: tuple[PrefixDir, ...] = ()
    aot_ranks: tuple[AotRank, ...] = ()
    deep: bool = False
    """True when artifacts were read whole (``show``), False for the quick ``ls`` read."""
    hits: int | None = None
    """Starts that reused this entry, from the recorder's ledger (``None``: no ledger)."""
    misses: int | None = None
    """Starts that had to compile it (normally 1: the one that created it)."""
    load_failed: int = 0
    """Load failures since its last hit (or since it was written), from the ledger."""
    manifests: tuple[Manifest, ...] = ()
    """The recorder's manifests (deep reads only), oldest first."""
    checkpoint: str | None = None
    """The model vLLM served when it wrote this entry (``--model``: a hub id or a local path),
    from the recorder's manifests; ``None`` when nothing recorded it (``model`` then says
    which model code it was traced from)."""
    checkpoint_detail: str | None = None
    """Revision, dtype and parallel sizes of that start, e.g. ``bfloat16, TP=2``."""
    listing: str = field(default="", compare=False, repr=False)
    """This entry's ``ls --json`` row as the listing index keeps it, without the fields the
    index does not hold (:mod:`vllm_cache_tools.store.summary`); ``""`` when the entry was not
    built from an index record."""

    @property
    def size_bytes(self) -> int:
        return self.stats.size_bytes

    @property
    def disk_bytes(self) -> int:
        return self.stats.disk_bytes

    @property
    def factors(self) -> CacheKeyFactors | None:
        """The first rank/prefix's factors (all ranks of one key share them)."""
        for p in self.prefix_dirs:
            if p.factors is not None:
                return p.factors
        return None

    @property
    def aot_info(self) -> AotModelInfo | None:
        for r in self.aot_ranks:
            if r.info is not None:
                return r.info
        return None


@dataclass(frozen=True)
class OtherItem:
    """Something in the root that is not a compile-cache entry."""

    path: Path
    kind: str
    """``modelinfos``, ``dummy_cache``, ``foreign``..."""
    size_bytes: int


@dataclass(frozen=True)
class CacheInfo:
    root: Path
    """The vLLM cache root (``VLLM_CACHE_ROOT``)."""
    root_source: str
    entries: tuple[Entry, ...]
    others: tuple[OtherItem, ...] = ()
    problems: tuple[Problem, ...] = field(default_factory=tuple)

    @property
    def total_size_bytes(self) -> int:
        return sum(e.size_bytes for e in self.entries)

    @property
    def total_disk_bytes(self) -> int:
        return sum(e.disk_bytes for e in self.entries)


@dataclass(frozen=True)
class Cause:
    """One reason two keys differ (or a start will miss): which part, which item, old and new
    values, and what evidence says so."""

    component: str
    """``env``, ``config``, ``code``, ``compiler``, ``model``, ``vllm``, ``rank``, ``cache``."""
    item: str
    old: object
    new: object
    evidence: str
    detail: str = ""


@dataclass(frozen=True)
class KeyParts:
    """Every input and output of vLLM's cache keys that is known for one start or entry,
    and where each came from (``provenance``: part -> recipe or evidence). Unknown parts are
    ``None``; nothing is guessed."""

    vllm_version: str | None = None
    torch_version: str | None = None
    env_factors: Mapping[str, object] | None = field(default=None, hash=False)
    env_hash: str | None = None
    config_hash: str | None = None
    config_parts: Mapping[str, object] | None = field(default=None, hash=False)
    """Sub-config name -> {"hash", "fields"} (live hashing or a recorder manifest)."""
    traced_files: tuple[str, ...] = ()
    file_digests: Mapping[str, str] = field(default_factory=dict, hash=False)
    """Traced file -> sha256 of the content hashed."""
    code_hash: str | None = None
    aot_source_hash: str | None = None
    compiler_hash: str | None = None
    compiler_factors: Mapping[str, object] | None = field(default=None, hash=False)
    backend_key: str | None = None
    aot_key: str | None = None
    model_key_inputs: tuple[str, str, int] | None = None
    """(vLLM version, forward qualname, forward first line) hashed into the AOT key."""
    provenance: Mapping[str, str] = field(default_factory=dict, hash=False)
