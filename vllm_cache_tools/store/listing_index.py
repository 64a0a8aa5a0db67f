"""The listing index: what ``ls`` learned about each entry, reused while the entry is
unchanged, so a second ``ls`` of a big root does not recurse into unchanged folders.

An entry is unchanged when every folder where vLLM and Inductor create files has the mtime it
had (adding, removing or renaming a file, which is how they write, changes the folder's mtime)
and every key file (``model``, ``cache_key_factors.json``, ...) has the same size and mtime.
Content-addressed kernel buckets are not compared (most of an entry's folders; see
:func:`vllm_cache_tools.store.tree_stats.is_bucket` for why, and what that misses). Key files'
atimes are re-read on every use, so last-use evidence stays current. So an unchanged entry
costs one ``lstat`` per watched folder and key file (7 on the benchmark tree's entries) and
nothing else.

The index is one binary file in our own cache dir (never inside vLLM's root), one per root,
written atomically: msgpack, one per-entry aggregate (:class:`Record`, a typed msgspec struct
stored as an array) kept as raw bytes until the entry is looked up, so loading the index
decodes nothing per entry and holds one bytes object (JSON records decoded to dicts held ~4 KB
per entry). A mismatched format or tool version is ignored and rebuilt; an entry with a name
msgpack cannot hold (not UTF-8) is not indexed, so it is read afresh each time. ``ls --rescan``
walks every entry, reuses a record where the walk finds the entry unchanged (:func:`reuse`), and
rewrites the index only when a record changed.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec
import xxhash

from vllm_cache_tools.store.folders import entry_times
from vllm_cache_tools.store.locate import user_cache_dir
from vllm_cache_tools.store.pool_end import end_pool
from vllm_cache_tools.store.tree_stats import watched_dirs
from vllm_cache_tools.store.types import Entry, EntryTimes, Problem, TreeStats

FORMAT = 7
# O_PATH (Linux): the folder is only a base for the lookups below, never read, so nothing is
# opened for reading; O_NOFOLLOW then still refuses a symlink (O_DIRECTORY: ENOTDIR).
_DIR_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW


class Record(msgspec.Struct, array_like=True, frozen=True):
    """What the index keeps of one entry: its listing summary and what tells it unchanged."""

    key: str
    layout: str
    size_bytes: int
    disk_bytes: int
    files: int
    dirs: int
    oldest_mtime: float | None
    newest_mtime: float | None
    tmp_files: tuple[str, ...]
    symlinks: tuple[str, ...]
    unreadable: tuple[str, ...]
    owners: tuple[int, ...]
    dir_names: tuple[str, ...]
    """Watched folders, relative to the entry (:func:`watched_dirs`) ..."""
    dir_mtimes: tuple[int, ...]
    """... and their mtimes (ns)."""
    key_files: tuple[tuple[str, int, int], ...]
    """(relative path, size, mtime_ns); atimes are read afresh."""
    ranks: tuple[str, ...]
    prefixes: tuple[str, ...]
    state: str
    state_detail: str
    vllm_version: str | None
    torch_version: str | None
    model: str | None
    hardware: str | None
    checkpoint: str | None
    checkpoint_detail: str | None
    problems: tuple[tuple[str, str, str], ...]
    tree: int
    """:func:`tree_digest` of the walk that read the entry: ``--rescan`` walks every entry
    afresh and reuses the rest of the record while it is the same (:func:`reuse`)."""
    listing: str = ""
    """The entry's ``ls --json`` row without its fields that are not in the record
    (:func:`vllm_cache_tools.store.summary.static_row`), made from the record's own fields,
    so it is rebuilt whenever they change."""


class _IndexDoc(msgspec.Struct, array_like=True):
    format: int
    version: str
    entries: dict[str, msgspec.Raw]


_DECODE_RECORD = msgspec.msgpack.Decoder(Record).decode
_DECODE_DOC = msgspec.msgpack.Decoder(_IndexDoc).decode
_ENCODE = msgspec.msgpack.Encoder().encode


def index_path(compile_cache: Path) -> Path:
    real = os.path.realpath(compile_cache)
    return user_cache_dir() / "index" / f"{xxhash.xxh3_64_hexdigest(os.fsencode(real))}.msgpack"


def tree_digest(st: TreeStats) -> int:
    """A digest of every folder's mtime (all of them, buckets included) and of the leftover
    temporary files and symlinks: equal digests mean the same names everywhere in the entry."""
    text = "\n".join([*(f"{r}\0{m}" for r, m in sorted(st.dir_mtimes)), "\0tmp",
                       *st.tmp_files, "\0links", *st.symlinks])
    return xxhash.xxh3_64_intdigest(text.encode("utf-8", "surrogateescape"))


def storable(e: Entry) -> bool:
    """Entries still being written (or broken) are read afresh next time, never indexed."""
    return e.state in ("complete", "unloadable") and not e.stats.unreadable


def encode_record(e: Entry) -> msgspec.Raw | None:
    """What the index keeps of ``e``, encoded (built where the entry was read: a scan
    worker), or ``None`` when it is not to be indexed."""
    if not storable(e):
        return None
    st = e.stats
    watched = watched_dirs(st.dir_mtimes)
    rec = Record(
        e.key, e.layout, st.size_bytes, st.disk_bytes, st.files, st.dirs, st.oldest_mtime,
        st.newest_mtime, st.tmp_files, st.symlinks, st.unreadable, st.owners,
        tuple(r for r, _ in watched), tuple(m for _, m in watched),
        tuple((r, s, m) for r, s, m, _ in st.key_files), e.ranks, e.prefixes, e.state,
        e.state_detail, e.vllm_version, e.torch_version, e.model, e.hardware, e.checkpoint,
        e.checkpoint_detail, tuple((p.path, p.kind, p.detail) for p in e.problems),
        tree_digest(st))
    try:
        return msgspec.Raw(_ENCODE(_with_listing(rec)))
    except UnicodeEncodeError:  # a name that is not UTF-8: read afresh each time
        return None


def _with_listing(rec: Record) -> Record:
    """``rec`` with the ``ls --json`` row of the entry it lists (:func:`_listed` at any path
    with any atimes: those are among the fields left out of the row)."""
    # Imported here: only a record being written needs it (and with it the secrets rules).
    from vllm_cache_tools.store.summary import static_row

    keys = tuple((r, s, m, 0.0) for r, s, m in rec.key_files)
    e = _entry(rec, Path("."), _stats(rec), entry_times(_stats(rec, keys)))
    return msgspec.structs.replace(rec, listing=static_row(e))


def _entry(rec: Record, path: Path, stats: TreeStats, t: EntryTimes) -> Entry:
    return Entry(
        key=rec.key, layout=rec.layout,  # type: ignore[arg-type]
        path=path, stats=stats, ranks=rec.ranks, prefixes=rec.prefixes,
        state=rec.state,  # type: ignore[arg-type]
        state_detail=rec.state_detail, created=t.created,
        created_source=t.created_source, modified=t.modified, last_used=t.last_used,
        last_used_source=t.last_used_source, vllm_version=rec.vllm_version,
        torch_version=rec.torch_version, model=rec.model, hardware=rec.hardware,
        checkpoint=rec.checkpoint, checkpoint_detail=rec.checkpoint_detail,
        problems=tuple(Problem(*x) for x in rec.problems), listing=rec.listing,
    )


def _summary_stats(st: TreeStats) -> tuple[object, ...]:
    return (st.size_bytes, st.disk_bytes, st.files, st.dirs, st.oldest_mtime, st.newest_mtime,
            st.tmp_files, st.symlinks, st.unreadable, st.owners)


Unchanged = tuple[msgspec.Raw | None, tuple[float, ...]]
"""What a rescan's worker sends for an entry its walk found unchanged (:func:`reuse`): the
record re-encoded with the walk's sizes and times (``None``: the earlier bytes hold them), and
the key files' atimes; the parent builds the entry from these (:func:`rebuild`). A whole entry
pickled, sent and unpickled cost more of the parent's time than decoding its record again."""


def reuse(raw: msgspec.Raw | bytes, stats: TreeStats) -> Unchanged | None:
    """What the earlier record ``raw`` and a fresh walk (``stats``) tell when the walk found the
    same folders with the same mtimes (so the same names everywhere) and the same key files
    with the same sizes and mtimes: then what the readers would find in its files is what they
    found before, and only the walk's sizes and times are new (:data:`Unchanged`). ``None``
    when anything differs (the entry is then read whole)."""
    try:
        rec = _DECODE_RECORD(raw)
    except msgspec.DecodeError:
        return None
    if (stats.unreadable or rec.tree != tree_digest(stats)
            or rec.key_files != tuple((r, s, m) for r, s, m, _ in stats.key_files)):
        return None
    atimes = tuple(a for _, _, _, a in stats.key_files)
    if _summary_stats(stats) == _record_stats(rec):
        return None, atimes  # the usual case: nothing to encode
    # The same names with other sizes or times (a file rewritten in place): the same readers'
    # findings, the walk's figures.
    rec = msgspec.structs.replace(
        rec, size_bytes=stats.size_bytes, disk_bytes=stats.disk_bytes, files=stats.files,
        dirs=stats.dirs, oldest_mtime=stats.oldest_mtime, newest_mtime=stats.newest_mtime,
        tmp_files=stats.tmp_files, symlinks=stats.symlinks, owners=stats.owners)
    return msgspec.Raw(_ENCODE(_with_listing(rec))), atimes


def rebuild(raw: msgspec.Raw, path: Path, atimes: tuple[float, ...],
            times: Callable[[TreeStats], EntryTimes]) -> Entry:
    """The entry at ``path`` as a listing keeps it, from its record and its key files' fresh
    atimes (:func:`reuse`, :meth:`ListingIndex.lookup_all`)."""
    return _listed(_DECODE_RECORD(raw), path, atimes, times)


def _record_stats(rec: Record) -> tuple[Any, ...]:
    return (rec.size_bytes, rec.disk_bytes, rec.files, rec.dirs, rec.oldest_mtime,
            rec.newest_mtime, rec.tmp_files, rec.symlinks, rec.unreadable, rec.owners)


def _listed(rec: Record, path: Path, atimes: tuple[float, ...],
            times: Callable[[TreeStats], EntryTimes]) -> Entry:
    keys = tuple((r, s, m, a) for (r, s, m), a in zip(rec.key_files, atimes, strict=True))
    # A listing needs no per-folder mtimes (prune and verify scan without the index), nor the
    # key files' stats once the times are derived (as parallel_read._summary).
    return _entry(rec, path, _stats(rec), times(_stats(rec, keys)))


def _stats(rec: Record, keys: tuple[tuple[str, int, int, float], ...] = ()) -> TreeStats:
    return TreeStats(rec.size_bytes, rec.disk_bytes, rec.files, rec.dirs, rec.oldest_mtime,
                     rec.newest_mtime, rec.tmp_files, rec.symlinks, rec.unreadable, rec.owners,
                     (), keys)


def _decode(raw: msgspec.Raw | None) -> Record | None:
    try:
        return None if raw is None else _DECODE_RECORD(raw)
    except msgspec.DecodeError:
        return None


def unchanged(path: str, rec: Record) -> tuple[float, ...] | None:
    """The atimes of ``rec``'s key files when every folder it watches and every key file are
    as recorded (folder mtimes; key files' sizes and mtimes), else ``None``. One ``lstat``
    each, relative to the entry's folder (no full-path lookup per item)."""
    lstat = os.lstat
    try:
        fd = os.open(path, _DIR_FLAGS)
        try:
            for rel, mtime in zip(rec.dir_names, rec.dir_mtimes, strict=True):
                # The entry folder itself (always first: tree_stats) from the descriptor,
                # without a second lookup of its name.
                s = os.fstat(fd) if rel == "." else lstat(rel, dir_fd=fd)
                if s.st_mtime_ns != mtime:
                    return None
            atimes = []
            for rel, size, mtime in rec.key_files:
                s = lstat(rel, dir_fd=fd)
                if s.st_size != size or s.st_mtime_ns != mtime:
                    return None
                atimes.append(s.st_atime)
            return tuple(atimes)
        finally:
            os.close(fd)
    except (OSError, ValueError):
        return None


PARALLEL_MIN_LOOKUPS = 2000
"""Below this many indexed entries, forking checkers costs more than their ``lstat``s."""
PARALLEL_MIN_WORKERS = 4
"""Nor with fewer cores: on 2 shared cores (benchmarks/bench_scan.py, 7.9k entries) two
forked checkers cost more CPU than the ~57k ``lstat``s they split (0.95 s against 0.79 s)."""

_FORKED: tuple[list[str], list[msgspec.Raw | None]] = ([], [])
"""What forked checkers inherit (no copy through a pipe): the paths and their records."""


def _check(path: str, raw: msgspec.Raw | None) -> tuple[float, ...] | None:
    rec = _decode(raw)
    return None if rec is None else unchanged(path, rec)


def _check_span(span: tuple[int, int]) -> list[tuple[float, ...] | None]:
    ps, raws = _FORKED
    return [_check(ps[i], raws[i]) for i in range(*span)]


def _check_forked(ps: list[str], raws: list[msgspec.Raw | None],
                  workers: int) -> list[tuple[float, ...] | None] | None:
    """:func:`unchanged` for each entry, in forked processes, or ``None`` when not worth it
    (the caller then checks each entry itself). An indexed listing is mostly these ``lstat``s
    (~7 per entry), and they spread over processes like the walk of a rescan: forked (they
    inherit the records), only from a single-threaded process, only for many entries. Each
    checker decodes its records itself: the parent holds one decoded record at a time (all of
    them decoded at once were ~1.4 KB an entry, ~55 MB on a root of 1M files)."""
    n = min(workers, len(ps) // (PARALLEL_MIN_LOOKUPS // 2))
    if workers < PARALLEL_MIN_WORKERS or n <= 1 or threading.active_count() > 1:
        return None
    import multiprocessing

    if "fork" not in multiprocessing.get_all_start_methods():
        return None
    global _FORKED
    _FORKED = (ps, raws)
    try:
        step = -(-len(ps) // (n * 4))  # a few spans per worker: none waits on a slow one
        spans = [(i, min(i + step, len(ps))) for i in range(0, len(ps), step)]
        pool = multiprocessing.get_context("fork").Pool(n)
        try:
            return [r for part in pool.map(_check_span, spans) for r in part]
        finally:
            end_pool(pool)
    finally:
        _FORKED = ([], [])


class ListingIndex:
    """Per-root index of entry summaries, validated by folder and key-file stats."""

    def __init__(self, compile_cache: Path, version: str, *, load: bool = True) -> None:
        """``load=False``: start empty (a rescan that rewrites every record)."""
        self.path = index_path(compile_cache)
        self.version = version
        self.records: dict[str, msgspec.Raw] = {}
        """entry path -> its encoded :class:`Record`."""
        self.seen: set[str] = set()
        self.dirty = False
        if not load:
            return
        try:
            doc = _DECODE_DOC(self.path.read_bytes())
            if doc.format == FORMAT and doc.version == version:
                self.records = doc.entries
        except (OSError, msgspec.DecodeError):
            self.records = {}

    def lookup(self, path: Path, times: Callable[[TreeStats], EntryTimes]) -> Entry | None:
        """The indexed entry if nothing under it changed, with fresh key-file atimes.
        ``times`` turns stats into (created, source, modified, last_used, source)."""
        return self.lookup_all([path], times)[0]

    def lookup_all(self, paths: Sequence[Path], times: Callable[[TreeStats], EntryTimes],
                   workers: int = 1) -> list[Entry | None]:
        """:meth:`lookup` of each path, in order; the ``lstat``s spread over ``workers``
        forked processes when there are many (:func:`_check_forked`)."""
        ps = [os.fsdecode(p) for p in paths]
        self.seen.update(ps)
        raws = [self.records.get(p) for p in ps]
        forked = _check_forked(ps, raws, workers)
        out: list[Entry | None] = []
        for i, (path, p, raw) in enumerate(zip(paths, ps, raws, strict=True)):
            rec = _decode(raw)
            atimes = (None if rec is None else
                      forked[i] if forked is not None else unchanged(p, rec))
            out.append(None if rec is None or atimes is None
                       else _listed(rec, path, atimes, times))
        return out

    def put(self, e: Entry, record: msgspec.Raw | None = None, *,
            encoded: bool = False) -> None:
        """Keep ``e`` if :func:`storable` (``record``: its :func:`encode_record`, when a
        worker already built it, ``encoded=True``)."""
        p = os.fsdecode(e.path)
        self.seen.add(p)
        rec = record if encoded else encode_record(e)
        if rec is not None:
            # A rescan that found the entry unchanged hands back the same bytes: nothing to
            # write then.
            if self.records.get(p) != rec:
                self.records[p] = rec
                self.dirty = True
        elif self.records.pop(p, None) is not None:
            self.dirty = True

    def save(self) -> None:
        gone = set(self.records) - self.seen
        for p in gone:
            del self.records[p]
        if not (self.dirty or gone):
            return
        # Imported only to write (~20 ms, most of them filelock's): an unchanged listing
        # writes nothing.
        from filelock import FileLock, Timeout

        from vllm_cache_tools import safeio

        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            data = _ENCODE(_IndexDoc(FORMAT, self.version, self.records))
            with FileLock(str(self.path) + ".lock", timeout=5):
                fd = safeio.open_dirs(self.path.parent)
                try:
                    safeio.replace_at(fd, self.path.name, data, 0o600)
                finally:
                    os.close(fd)
        except (OSError, UnicodeEncodeError, Timeout):
            pass  # the index is an optimisation; a read-only home must not break ls
