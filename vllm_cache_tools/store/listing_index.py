"""The listing index: what ``ls`` learned about each entry, reused while the entry is
unchanged, so a second ``ls`` of a big root does not recurse into unchanged folders.

An entry is unchanged when every folder where vLLM and Inductor create files has the mtime it
had (adding, removing or renaming a file, which is how they write, changes the folder's mtime)
and every key file (``model``, ``cache_key_factors.json``, ...) has the same size and mtime.
Content-addressed kernel buckets are not compared (most of an entry's folders; see
:func:`vllm_cache_tools.store.tree_stats.is_bucket` for why, and what that misses). Key files'
atimes are re-read on every use, so last-use evidence stays current. The index is a JSON file
in our own cache dir (never inside vLLM's root), one per root, written atomically; a
mismatched format or tool version is ignored and rebuilt. ``ls --rescan`` bypasses it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import xxhash
from filelock import FileLock, Timeout

from vllm_cache_tools import safeio
from vllm_cache_tools.store.locate import user_cache_dir
from vllm_cache_tools.store.tree_stats import watched_dirs
from vllm_cache_tools.store.types import Entry, EntryTimes, Problem, TreeStats

FORMAT = 5


def index_path(compile_cache: Path) -> Path:
    real = os.path.realpath(compile_cache)
    return user_cache_dir() / "index" / f"{xxhash.xxh3_64_hexdigest(os.fsencode(real))}.json"


def storable(e: Entry) -> bool:
    """Entries still being written (or broken) are read afresh next time, never indexed."""
    return e.state in ("complete", "unloadable") and not e.stats.unreadable


def to_record(e: Entry) -> dict[str, Any]:
    """What the index keeps of an entry (built where the entry was read: a scan worker)."""
    st = e.stats
    watched = watched_dirs(st.dir_mtimes)
    return {
        "key": e.key, "layout": e.layout, "path": os.fsdecode(e.path),
        "stats": {"size_bytes": st.size_bytes, "disk_bytes": st.disk_bytes,
                  "files": st.files, "dirs": st.dirs, "oldest_mtime": st.oldest_mtime,
                  "newest_mtime": st.newest_mtime, "tmp_files": st.tmp_files,
                  "symlinks": st.symlinks, "unreadable": st.unreadable, "owners": st.owners,
                  "dir_names": "\n".join(r for r, _ in watched),
                  "dir_mtimes": [m for _, m in watched],
                  "key_files": [list(k) for k in st.key_files]},
        "ranks": list(e.ranks), "prefixes": list(e.prefixes), "state": e.state,
        "state_detail": e.state_detail, "created": e.created,
        "created_source": e.created_source, "modified": e.modified,
        "vllm_version": e.vllm_version, "torch_version": e.torch_version, "model": e.model,
        "hardware": e.hardware, "checkpoint": e.checkpoint,
        "checkpoint_detail": e.checkpoint_detail,
        "problems": [[p.path, p.kind, p.detail] for p in e.problems],
    }


def _stats_from(rec: dict[str, Any], key_files: tuple[tuple[str, int, int, float], ...]
                ) -> TreeStats:
    s = dict(rec)
    dirs = s.pop("dir_names").split("\n")
    mtimes = s.pop("dir_mtimes")
    s.pop("key_files")
    for k in ("tmp_files", "symlinks", "unreadable", "owners"):
        s[k] = tuple(s[k])
    return TreeStats(**s, dir_mtimes=tuple(zip(dirs, mtimes, strict=True)), key_files=key_files)


def encode_record(rec: dict[str, Any]) -> bytes:
    """A record as JSON (json for names that are not UTF-8, which msgspec refuses)."""
    try:
        return msgspec.json.encode(rec)
    except (UnicodeEncodeError, ValueError):
        return json.dumps(rec, separators=(",", ":")).encode()


class _IndexDoc(msgspec.Struct):
    format: int
    version: str
    entries: dict[str, msgspec.Raw]


class ListingIndex:
    """Per-root index of entry summaries, validated by folder and key-file stats."""

    def __init__(self, compile_cache: Path, version: str, *, load: bool = True) -> None:
        """``load=False``: start empty (a rescan that rewrites every record)."""
        self.path = index_path(compile_cache)
        self.version = version
        self.records: dict[str, Any] = {}
        """path -> record: a dict (read from the index, or put), or msgspec.Raw (JSON bytes
        a scan worker encoded)."""
        self.seen: set[str] = set()
        self.dirty = False
        if not load:
            return
        try:
            raw = self.path.read_bytes()
            try:
                # Each record stays JSON bytes until an entry is looked up: decoding them all
                # to dicts would hold ~4 KB per entry (160 MB for a 1M-file root).
                doc = msgspec.json.decode(raw, type=_IndexDoc)
                if doc.format == FORMAT and doc.version == version:
                    self.records = dict(doc.entries)
                return
            except msgspec.DecodeError:  # names that are not UTF-8 (escaped surrogates)
                data = json.loads(raw)
            if data.get("format") == FORMAT and data.get("version") == version:
                self.records = data["entries"]
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            self.records = {}

    def lookup(self, path: Path, times: Callable[[TreeStats], EntryTimes]) -> Entry | None:
        """The indexed entry if nothing under it changed, with fresh key-file atimes.
        ``times`` turns stats into (created, source, modified, last_used, source)."""
        p = os.fsdecode(path)
        self.seen.add(p)
        rec = self.records.get(p)
        if rec is None:
            return None
        try:
            if isinstance(rec, msgspec.Raw):
                rec = msgspec.json.decode(rec)
            st = rec["stats"]
            # Relative lstat from the entry's folder: no full-path lookup per folder.
            fd = os.open(p, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
            try:
                lstat = os.lstat
                for rel, mtime in zip(st["dir_names"].split("\n"), st["dir_mtimes"],
                                      strict=True):
                    if lstat(rel, dir_fd=fd).st_mtime_ns != mtime:
                        return None
                keys = []
                for rel, size, mtime, _ in st["key_files"]:
                    s = lstat(rel, dir_fd=fd)
                    if s.st_size != size or s.st_mtime_ns != mtime:
                        return None
                    keys.append((rel, size, mtime, s.st_atime))
            finally:
                os.close(fd)
            stats = _stats_from(st, tuple(keys))
            t = times(stats)
            return Entry(
                key=rec["key"], layout=rec["layout"], path=path, stats=stats,
                ranks=tuple(rec["ranks"]), prefixes=tuple(rec["prefixes"]),
                state=rec["state"], state_detail=rec["state_detail"], created=t.created,
                created_source=t.created_source, modified=t.modified, last_used=t.last_used,
                last_used_source=t.last_used_source, vllm_version=rec["vllm_version"],
                torch_version=rec["torch_version"], model=rec["model"],
                hardware=rec["hardware"], checkpoint=rec.get("checkpoint"),
                checkpoint_detail=rec.get("checkpoint_detail"),
                problems=tuple(Problem(*x) for x in rec["problems"]),
            )
        except (OSError, KeyError, TypeError, ValueError):
            return None

    def put(self, e: Entry, record: dict[str, Any] | msgspec.Raw | None = None) -> None:
        """Keep ``e`` (its :func:`to_record`, when already built; as encoded JSON too) if
        :func:`storable`."""
        p = os.fsdecode(e.path)
        self.seen.add(p)
        if storable(e):
            self.records[p] = to_record(e) if record is None else record
            self.dirty = True
        elif self.records.pop(p, None) is not None:
            self.dirty = True

    def save(self) -> None:
        gone = set(self.records) - self.seen
        for p in gone:
            del self.records[p]
        if not (self.dirty or gone):
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            doc = {"format": FORMAT, "version": self.version, "entries": self.records}
            try:
                data = msgspec.json.encode(doc)
            except (UnicodeEncodeError, ValueError):  # a name that is not UTF-8
                data = json.dumps({**doc, "entries": {
                    p: json.loads(bytes(r)) if isinstance(r, msgspec.Raw) else r
                    for p, r in self.records.items()}}, separators=(",", ":")).encode()
            with FileLock(str(self.path) + ".lock", timeout=5):
                fd = safeio.open_dirs(self.path.parent)
                try:
                    safeio.replace_at(fd, self.path.name, data, 0o600)
                finally:
                    os.close(fd)
        except (OSError, Timeout):
            pass  # the index is an optimisation; a read-only home must not break ls
