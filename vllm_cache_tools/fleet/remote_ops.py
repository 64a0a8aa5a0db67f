"""What the verbs do with a remote store (:mod:`.remote` owns the store itself: its layout,
the :class:`~.remote.Store` primitives and the index objects): :func:`push` (blobs first,
each index last), pull's choice of entries (:func:`match_refs`, :func:`with_linked`) and
:func:`download` into a staging folder, and :func:`prune_store`."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vllm_cache_tools.fleet.errors import FleetError, StoreError
from vllm_cache_tools.fleet.records import FileRecord, Footprint, entry_json, footprint
from vllm_cache_tools.fleet.remote import (
    CHUNK,
    DEFAULT_WORKERS,
    Store,
    StoreEntry,
    index_bytes,
    store_error,
)
from vllm_cache_tools.layout import short_key
from vllm_cache_tools.store.lookup import key_prefix

if TYPE_CHECKING:
    from vllm_cache_tools.fleet.selection import Selection

# ---- push ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PushedEntry:
    key: str
    layout: str
    action: str
    """``pushed``, ``present`` (the same record was already there) or ``refused``."""
    detail: str = ""


@dataclass(frozen=True)
class PushResult:
    url: str
    entries: tuple[PushedEntry, ...]
    blobs_uploaded: int
    blobs_present: int
    bytes_uploaded: int
    logical_bytes: int
    """What the pushed (or already present) entries and their snapshots hold, before
    deduplication: never less than ``bytes_uploaded``."""
    seconds: float
    footprint: Footprint | None = None
    """Those entries and snapshots, counted as every verb counts them (blobs are their
    deduplicated contents)."""


def push(root: str | os.PathLike[str] | None, refs: Sequence[str], url: str, *,
         model: str | None = None, filter_expr: str | None = None, force: bool = False,
         workers: int = DEFAULT_WORKERS, storage_options: Mapping[str, Any] | None = None,
         progress: Callable[[int, int], None] | None = None) -> PushResult:
    """Push entries (and their linked partners, manifests, snapshots) to the store at
    ``url``. ``progress(done_bytes, total_bytes)`` is called as blobs go."""
    from vllm_cache_tools.fleet.host import host_facts
    from vllm_cache_tools.fleet.selection import select

    t0 = time.perf_counter()
    sel = select(root, refs, model=model, filter_expr=filter_expr)
    store = Store(url, storage_options)
    store.ensure_marker(create=True)
    results: list[PushedEntry] = []
    todo: list[int] = []
    records = list(sel.records)
    relink: dict[int, float | None] = {}
    """Entries there with fewer links, and when they were pushed (kept)."""
    for i, rec in enumerate(sel.records):
        path = store.index_path(rec.layout, rec.key)
        if store.exists(path):
            old = store.read_index(path)
            # Which entries of the other tree are proven linked depends on what was named
            # (a push of one backend entry links its AOT entries to it alone): the same
            # files with other links is this entry, its links the union of both.
            union = tuple(sorted({*old.record.linked, *rec.linked}))
            if entry_json(replace(old.record, linked=union)) == entry_json(
                    replace(rec, linked=union)):
                results.append(PushedEntry(rec.key, rec.layout, "present",
                                           "the store has this entry with the same files"))
                todo.append(i)  # its blobs are re-checked
                if union != old.record.linked:
                    records[i] = replace(rec, linked=union)
                    relink[i] = old.pushed_at
                continue
            if not force:
                results.append(PushedEntry(rec.key, rec.layout, "refused",
                                           "the store has another version of this entry "
                                           "(--force replaces its index)"))
                continue
        todo.append(i)
    blobs: dict[str, tuple[Path, FileRecord]] = {}
    for i in todo:
        for lf in sel.files[i]:
            blobs.setdefault(lf.record.sha256, (lf.source, lf.record))
    for x in sel.extras:
        blobs.setdefault(x.record.sha256, (x.source, x.record))
    with ThreadPoolExecutor(max(1, workers)) as pool:
        present = dict(zip(blobs, pool.map(lambda s: store.exists(store.blob_path(s)), blobs),
                           strict=True))
        missing = [s for s, there in present.items() if not there]
        total = sum(blobs[s][1].size for s in missing)
        done = [0]

        def tick(n: int) -> None:
            done[0] += n
            if progress is not None:
                progress(done[0], total)

        list(pool.map(lambda s: store.put_file(store.blob_path(s), blobs[s][0], blobs[s][1],
                                               tick), missing))
        # Published last, and only over blobs that exist now (a concurrent prune may have
        # taken one that was there when this push looked).
        again = [s for s in blobs if present[s]]
        gone = [s for s, ok in zip(again, pool.map(
            lambda s: store.exists(store.blob_path(s)), again), strict=True) if not ok]
        list(pool.map(lambda s: store.put_file(store.blob_path(s), blobs[s][0], blobs[s][1],
                                               tick), gone))
    facts = host_facts()
    now = time.time()
    pushed_keys = {r.key for r in results}
    for i in todo:
        rec = records[i]
        shas = set(sel.snapshot_shas[i])
        extras = [x.record for x in sel.extras if x.record.sha256 in shas]
        if i in relink:
            store.put_bytes(store.index_path(rec.layout, rec.key),
                            index_bytes(rec, extras, facts, relink[i] or now))
        elif rec.key not in pushed_keys:
            store.put_bytes(store.index_path(rec.layout, rec.key),
                            index_bytes(rec, extras, facts, now))
            results.append(PushedEntry(rec.key, rec.layout, "pushed"))
    order = {(r.layout, r.key): n for n, r in enumerate(sel.records)}
    results.sort(key=lambda r: order[(r.layout, r.key)])
    return PushResult(store.url, tuple(results), len(missing) + len(gone),
                      len(blobs) - len(missing) - len(gone),
                      sum(blobs[s][1].size for s in [*missing, *gone]),
                      _logical_bytes(sel, todo), time.perf_counter() - t0,
                      footprint([sel.records[i] for i in todo], [x.record for x in sel.extras]))


def _logical_bytes(sel: Selection, todo: Sequence[int]) -> int:
    """Every file this push covered, each counted where it occurs (entries not refused, and
    the snapshots that go along): the blobs uploaded are a deduplicated part of these, so
    never more. (Entry sizes alone left the snapshots out: "-546K of 7.7M not sent".)"""
    return (sum(lf.record.size for i in todo for lf in sel.files[i])
            + sum(x.record.size for x in sel.extras))


# ---- pull ------------------------------------------------------------------------------------

def match_refs(entries: Sequence[StoreEntry], refs: Sequence[str]) -> list[StoreEntry]:
    """Store entries named by keys or unique key prefixes (in either case, as locally)."""
    out: list[StoreEntry] = []
    for ref in refs:
        key = key_prefix(ref) or ref
        found = [e for e in entries if e.record.key.startswith(key)]
        exact = [e for e in found if e.record.key == key]
        if not found:
            raise FleetError(f"no entry of the store matches {ref!r}")
        if len(found) > 1 and len(exact) != 1:
            raise FleetError(f"key prefix {ref!r} is ambiguous in the store: "
                             + ", ".join(short_key(e.record.key) for e in found[:5]))
        e = (exact or found)[0]
        if e not in out:
            out.append(e)
    return out


def with_linked(entries: Sequence[StoreEntry], chosen: Sequence[StoreEntry]
                ) -> list[StoreEntry]:
    by_key = {e.record.key: e for e in entries}
    out = list(chosen)
    for e in chosen:
        for k in e.record.linked:
            if k in by_key and by_key[k] not in out:
                out.append(by_key[k])
    return out


def download(store: Store, chosen: Sequence[StoreEntry], staging: Any, *,
             workers: int = DEFAULT_WORKERS,
             progress: Callable[[int, int], None] | None = None) -> int:
    """Write every file of ``chosen`` (and their snapshots) into ``staging``, each blob
    fetched once and checked; returns the bytes downloaded."""
    jobs: dict[str, list[tuple[str, FileRecord, str]]] = {}
    for e in chosen:
        for f in e.record.files:
            jobs.setdefault(f.sha256, []).append((f"{e.record.path}/{f.path}", f, e.record.key))
        for x in e.extras:
            if not any(j[0] == x.path for j in jobs.get(x.sha256, [])):
                jobs.setdefault(x.sha256, []).append((x.path, x, e.record.key))
    total = sum(v[0][1].size for v in jobs.values())
    done = [0]

    def tick(n: int) -> None:
        done[0] += n
        if progress is not None:
            progress(done[0], total)

    def fetch(sha: str) -> None:
        targets = jobs[sha]
        first, rec, key = targets[0]
        f = store.open_blob(sha, key)
        try:
            try:
                staging.write(first, f, rec, chunk=CHUNK, on_bytes=tick)
            except FleetError as exc:
                raise StoreError(f"{store.url}: blob {sha[:16]} of entry {short_key(key)}: {exc}: "
                                 "nothing placed") from None
            except OSError:
                raise
            except Exception as exc:
                raise store_error(exc, store.url, "downloading a blob") from None
        finally:
            f.close()
        for rel, rec2, _ in targets[1:]:
            with open(staging.path / first, "rb") as src:
                staging.write(rel, src, rec2)

    with ThreadPoolExecutor(max(1, workers)) as pool:
        list(pool.map(fetch, sorted(jobs)))
    return total


@dataclass(frozen=True)
class StorePrune:
    url: str
    removed: tuple[str, ...]
    """Keys whose index objects were removed (``dry_run``: would be)."""
    blobs_removed: int
    bytes_freed: int
    kept: int
    dry_run: bool


def prune_store(url: str, *, older_than_s: float | None = None, max_bytes: int | None = None,
                dry_run: bool = False, grace_s: float = 3600.0,
                storage_options: Mapping[str, Any] | None = None,
                now: float | None = None) -> StorePrune:
    """Remove entries pushed more than ``older_than_s`` ago, then the oldest until the
    store's entries hold at most ``max_bytes`` (deduplicated); then the blobs no remaining
    entry lists, unless younger than ``grace_s`` (a push in progress uploads blobs before it
    publishes its index; a push re-checks its blobs just before publishing)."""
    store = Store(url, storage_options)
    store.ensure_marker(create=False)
    now = time.time() if now is None else now
    entries = sorted(store.entries(), key=lambda e: e.pushed_at or 0.0)
    drop: list[StoreEntry] = []
    if older_than_s is not None:
        drop += [e for e in entries if e.pushed_at is not None
                 and now - e.pushed_at > older_than_s]
    keep = [e for e in entries if e not in drop]
    if max_bytes is not None:
        def size(es: Sequence[StoreEntry]) -> int:
            return sum({f.sha256: f.size for e in es for f in (*e.record.files, *e.extras)
                        }.values())
        while keep and size(keep) > max_bytes:
            drop.append(keep.pop(0))
    referenced = {f.sha256 for e in keep for f in (*e.record.files, *e.extras)}
    blob_root = f"{store.base}/blobs"
    try:
        listed = store.fs.find(blob_root, detail=True)
    except FileNotFoundError:
        listed = {}
    except Exception as exc:
        raise store_error(exc, store.url, "listing blobs") from None
    doomed: list[tuple[str, int]] = []
    for path, info in listed.items():
        sha = path.rsplit("/", 1)[-1]
        if sha in referenced or sha.endswith(".tmp"):
            continue
        t = _mtime(info)
        if t is not None and now - t < grace_s:
            continue
        doomed.append((path, int(info.get("size") or 0)))
    if not dry_run:
        for e in drop:
            store._do("removing an index", store.fs.rm_file,
                      store.index_path(e.record.layout, e.record.key))
        for path, _ in doomed:
            store._do("removing a blob", store.fs.rm_file, path)
    return StorePrune(store.url, tuple(e.record.key for e in drop), len(doomed),
                      sum(n for _, n in doomed), len(keep), dry_run)


def _mtime(info: Mapping[str, Any]) -> float | None:
    for k in ("mtime", "LastModified", "last_modified", "updated", "created"):
        v = info.get(k)
        if isinstance(v, (int, float)):
            return float(v)
        stamp = getattr(v, "timestamp", None)
        if callable(stamp):
            return float(stamp())
    return None


__all__ = ["PushResult", "PushedEntry", "StorePrune", "download", "match_refs", "prune_store",
           "push", "with_linked"]
