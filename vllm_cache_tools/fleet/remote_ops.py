"""What the verbs do with a remote store (:mod:`.remote` owns the store itself: its layout,
the :class:`~.remote.Store` primitives and the index objects): :func:`push` (blobs first,
each index last), pull's choice of entries (:func:`match_refs`, :func:`with_linked`) and
:func:`download` into a staging folder, and :func:`prune_store`."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from vllm_cache_tools.fleet.errors import BadIndex, FleetError, StoreError
from vllm_cache_tools.fleet.records import (
    EntryRecord,
    FileRecord,
    Footprint,
    entry_json,
    footprint,
)
from vllm_cache_tools.fleet.remote import (
    CHUNK,
    DEFAULT_WORKERS,
    SkippedIndex,
    Store,
    StoreEntry,
    index_bytes,
    store_error,
)
from vllm_cache_tools.fleet.trust import sig_path
from vllm_cache_tools.layout import short_key
from vllm_cache_tools.store.lookup import key_prefix

if TYPE_CHECKING:
    from vllm_cache_tools.fleet.selection import Selection
    from vllm_cache_tools.fleet.sshsig import SigningKey

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
    pinned: str | None = None
    """``oci://.../REPO:TAG``: the tag now naming an index of the entries pushed (or already
    there) in this push."""


def push(root: str | os.PathLike[str] | None, refs: Sequence[str], url: str, *,
         model: str | None = None, filter_expr: str | None = None, force: bool = False,
         workers: int = DEFAULT_WORKERS, storage_options: Mapping[str, Any] | None = None,
         progress: Callable[[int, int], None] | None = None,
         signing_key: SigningKey | None = None) -> PushResult:
    """Push entries (and their linked partners, manifests, snapshots) to the store at
    ``url``. ``progress(done_bytes, total_bytes)`` is called as blobs go. Every index object
    carries its entry's provenance; ``signing_key``: each index object is signed, the
    signature written beside it (``<index>.sig``) before the index is published, and an
    entry already there with the same files is signed too (its index rewritten with this
    push's provenance, its push time kept)."""
    from vllm_cache_tools.fleet.host import host_facts
    from vllm_cache_tools.fleet.provenance import provenance, read_recorder_manifests
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
    had_index: set[str] = set()
    """Entries whose index object was there (a signature beside it may be stale)."""
    for i, rec in enumerate(sel.records):
        path = store.index_path(rec.layout, rec.key)
        if store.exists(path):
            had_index.add(rec.key)
            try:
                old = store.read_index(path)
            except BadIndex as exc:
                if not force:
                    results.append(PushedEntry(rec.key, rec.layout, "refused",
                                               f"{exc} (--force replaces it)"))
                    continue
                todo.append(i)
                continue
            # Which entries of the other tree are proven linked depends on what was named
            # (a push of one backend entry links its AOT entries to it alone): the same
            # files with other links is this entry, its links the union of both.
            union = tuple(sorted({*old.record.linked, *rec.linked}))
            if entry_json(replace(old.record, linked=union)) == entry_json(
                    replace(rec, linked=union)):
                results.append(PushedEntry(rec.key, rec.layout, "present",
                                           "the store has this entry with the same files"
                                           + ("; signed now" if signing_key else "")))
                todo.append(i)  # its blobs are re-checked
                if union != old.record.linked or signing_key is not None:
                    records[i] = replace(rec, linked=union)
                    relink[i] = old.pushed_at
                continue
            if not force:
                results.append(PushedEntry(rec.key, rec.layout, "refused",
                                           "the store has another version of this entry "
                                           "(--force replaces its index)"))
                continue
        todo.append(i)
    blobs: dict[str, tuple[str, FileRecord]] = {}
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
    def publish(rec: EntryRecord, data: bytes) -> None:
        path = store.index_path(rec.layout, rec.key)
        if signing_key is not None:  # the signature first: the index makes the entry visible
            store.put_bytes(sig_path(path), signing_key.sign(data))
        elif rec.key in had_index and store.exists(sig_path(path)):  # of other bytes
            store._do("removing a signature", store.remove, sig_path(path))
        store.put_bytes(path, data)

    for i in todo:
        rec = records[i]
        shas = set(sel.snapshot_shas[i])
        extras = [x.record for x in sel.extras if x.record.sha256 in shas]
        if i not in relink and rec.key in pushed_keys:
            continue
        prov = provenance([rec], facts, read_recorder_manifests(
            [lf.source for lf in sel.files[i]]), now)
        if i in relink:
            publish(rec, index_bytes(rec, extras, facts, relink[i] or now, prov))
        else:
            publish(rec, index_bytes(rec, extras, facts, now, prov))
            results.append(PushedEntry(rec.key, rec.layout, "pushed"))
    pinned = store.pin([records[i] for i in todo]) if todo else None
    order = {(r.layout, r.key): n for n, r in enumerate(sel.records)}
    results.sort(key=lambda r: order[(r.layout, r.key)])
    return PushResult(store.url, tuple(results), len(missing) + len(gone),
                      len(blobs) - len(missing) - len(gone),
                      sum(blobs[s][1].size for s in [*missing, *gone]),
                      _logical_bytes(sel, todo), time.perf_counter() - t0,
                      footprint([sel.records[i] for i in todo], [x.record for x in sel.extras]),
                      pinned)


def _logical_bytes(sel: Selection, todo: Sequence[int]) -> int:
    """Every file this push covered, each counted where it occurs (entries not refused, and
    the snapshots that go along): the blobs uploaded are a deduplicated part of these, so
    never more. (Entry sizes alone left the snapshots out: "-546K of 7.7M not sent".)"""
    return (sum(lf.record.size for i in todo for lf in sel.files[i])
            + sum(x.record.size for x in sel.extras))


# ---- pull ------------------------------------------------------------------------------------

def match_refs(entries: Sequence[StoreEntry], refs: Sequence[str],
               skipped: Sequence[SkippedIndex] = ()) -> list[StoreEntry]:
    """Store entries named by keys or unique key prefixes (in either case, as locally). A ref
    that names an entry whose index object was skipped fails with the reason it was."""
    out: list[StoreEntry] = []
    for ref in refs:
        key = key_prefix(ref) or ref
        found: list[StoreEntry | SkippedIndex] = [
            *(e for e in entries if e.record.key.startswith(key)),
            *(s for s in skipped if s.key is not None and s.key.startswith(key))]
        exact = [x for x in found if _key_of(x) == key]
        if not found:
            raise FleetError(f"no entry of the store matches {ref!r}")
        if len(found) > 1 and len(exact) != 1:
            raise FleetError(f"key prefix {ref!r} is ambiguous in the store: "
                             + ", ".join(short_key(_key_of(x)) for x in found[:5]))
        e = (exact or found)[0]
        if isinstance(e, SkippedIndex):
            raise BadIndex(f"{e.reason}: entry {short_key(_key_of(e))} cannot be pulled")
        if e not in out:
            out.append(e)
    return out


def _key_of(x: StoreEntry | SkippedIndex) -> str:
    return x.record.key if isinstance(x, StoreEntry) else x.key or ""


def with_linked(entries: Sequence[StoreEntry], chosen: Sequence[StoreEntry]
                ) -> list[StoreEntry]:
    by_key = {e.record.key: e for e in entries}
    out = list(chosen)
    for e in chosen:
        for k in e.record.linked:
            if k in by_key and by_key[k] not in out:
                out.append(by_key[k])
    return out


def download_size(chosen: Sequence[StoreEntry]) -> tuple[int, int]:
    """``(bytes, files)`` that :func:`download` writes for ``chosen``: every entry file (a
    blob listed twice is written twice) and each snapshot once."""
    extras = {x.path: x.size for e in chosen for x in e.extras}
    files = sum(len(e.record.files) for e in chosen) + len(extras)
    return sum(e.record.size_bytes for e in chosen) + sum(extras.values()), files


class _Stopped(Exception):
    """Another blob failed: this one is abandoned (its partial file goes with the staging
    folder)."""


class _UntilStopped:
    """A blob reader that gives up as soon as ``stop`` is set."""

    def __init__(self, f: Any, stop: threading.Event) -> None:
        self.f, self.stop = f, stop

    def read(self, n: int = -1) -> bytes:
        if self.stop.is_set():
            raise _Stopped
        return bytes(self.f.read(n))


def _linkable(rel: str) -> bool:
    """Whether a second name of a blob may be a hard link to the first in the staging
    folder (and so in the root): the kinds ``vllm-cache dedup`` links (files vLLM, Inductor
    and Triton never write in place), shared objects excepted (``dlopen`` of two names of
    one inode gives one library)."""
    from vllm_cache_tools.maintain.dedup_kinds import file_kind

    return file_kind(rel.split("/"))[0] is not None and not rel.endswith(".so")


def download(store: Store, chosen: Sequence[StoreEntry], staging: Any, *,
             workers: int = DEFAULT_WORKERS,
             progress: Callable[[int, int], None] | None = None) -> int:
    """Write every file of ``chosen`` (and their snapshots) into ``staging``, each blob
    fetched once and checked; returns the bytes downloaded. The first missing or bad blob
    ends the transfer: no blob is started after it, those under way stop at their next
    read, and its error is raised (the caller removes the staging folder). At most
    ``2 * workers`` blobs are queued at a time, however many an index lists."""
    jobs: dict[str, list[tuple[str, FileRecord, str]]] = {}
    for e in chosen:
        for f in e.record.files:
            jobs.setdefault(f.sha256, []).append((f"{e.record.path}/{f.path}", f, e.record.key))
        for x in e.extras:
            if not any(j[0] == x.path for j in jobs.get(x.sha256, [])):
                jobs.setdefault(x.sha256, []).append((x.path, x, e.record.key))
    total = sum(v[0][1].size for v in jobs.values())
    done = [0]
    stop = threading.Event()
    failed: list[BaseException] = []
    lock = threading.Lock()

    def tick(n: int) -> None:
        with lock:
            done[0] += n
            now = done[0]
        if progress is not None:
            progress(now, total)

    def fetch(sha: str) -> None:
        if stop.is_set():
            return
        try:
            _fetch(sha)
        except _Stopped:
            pass
        except BaseException as exc:
            with lock:
                if not stop.is_set():
                    failed.append(exc)
                    stop.set()

    def _fetch(sha: str) -> None:
        targets = jobs[sha]
        first, rec, key = targets[0]
        f = store.open_blob(sha, key)
        try:
            try:
                staging.write(first, _UntilStopped(f, stop), rec, chunk=CHUNK, on_bytes=tick)
            except FleetError as exc:
                raise StoreError(f"{store.url}: blob {sha[:16]} of entry {short_key(key)}: {exc}: "
                                 "nothing placed") from None
            except (OSError, _Stopped):
                raise
            except Exception as exc:
                raise store_error(exc, store.url, "downloading a blob") from None
        finally:
            f.close()
        for rel, rec2, key2 in targets[1:]:  # the same blob under other names: copies of
            if stop.is_set():                # the checked bytes, not hashed again
                return
            try:
                staging.copy_checked(rel, first, rec, rec2, link=_linkable(rel))
            except FleetError as exc:
                raise StoreError(f"{store.url}: blob {sha[:16]} of entry {short_key(key2)}: "
                                 f"{exc}: nothing placed") from None

    with ThreadPoolExecutor(max(1, workers)) as pool:
        pending: set[Future[None]] = set()
        try:
            for sha in sorted(jobs):
                if stop.is_set():
                    break
                if len(pending) >= 2 * max(1, workers):
                    _, pending = wait(pending, return_when=FIRST_COMPLETED)
                pending.add(pool.submit(fetch, sha))
            wait(pending)
        except BaseException:  # a signal in this thread: the blobs under way stop too
            stop.set()
            raise
    if failed:
        raise failed[0]
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
    skipped: tuple[str, ...] = ()
    """Warnings for the index objects that could not be read (their entries are kept, and
    no blob is removed while one is there: which blobs it lists is not known)."""
    pinned: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """``(key, tags)`` of each entry the policy would have removed but a tag pins (an
    ``oci://`` store's image index of what a push named): kept."""


def prune_store(url: str, *, older_than_s: float | None = None, max_bytes: int | None = None,
                dry_run: bool = False, grace_s: float = 3600.0,
                storage_options: Mapping[str, Any] | None = None,
                now: float | None = None) -> StorePrune:
    """Remove entries pushed more than ``older_than_s`` ago, then the oldest until the
    store's entries hold at most ``max_bytes`` (deduplicated), never an entry a tag pins
    (:meth:`.Store.pinned_entries`: those are kept and reported); then the blobs no remaining
    entry lists, unless younger than ``grace_s`` (a push in progress uploads blobs before it
    publishes its index; a push re-checks its blobs just before publishing)."""
    store = Store(url, storage_options)
    store.ensure_marker(create=False)
    now = time.time() if now is None else now
    listing = store.listing()
    pins = store.pinned_entries()
    entries = sorted(listing.entries, key=lambda e: e.pushed_at or 0.0)
    drop: list[StoreEntry] = []
    held: list[StoreEntry] = []  # chosen by the policy, kept: a tag pins them

    if older_than_s is not None:
        for e in entries:
            if e.pushed_at is not None and now - e.pushed_at > older_than_s:
                (held if (e.record.layout, e.record.key) in pins else drop).append(e)
    keep = [e for e in entries if e not in drop]
    if max_bytes is not None:
        def size(es: Sequence[StoreEntry]) -> int:
            return sum({f.sha256: f.size for e in es for f in (*e.record.files, *e.extras)
                        }.values())
        for e in [e for e in keep if e not in held]:  # the oldest first
            if size(keep) <= max_bytes:
                break
            if (e.record.layout, e.record.key) in pins:
                held.append(e)
            else:
                keep.remove(e)
                drop.append(e)
    referenced = {f.sha256 for e in keep for f in (*e.record.files, *e.extras)}
    doomed: list[tuple[str, int]] = []
    # The blobs of an index object that could not be read are not known: none is removed.
    for path, nbytes, t in ([] if listing.skipped else store.blob_listing()):
        sha = path.rsplit("/", 1)[-1]
        if sha in referenced or sha.endswith(".tmp"):
            continue
        if t is not None and now - t < grace_s:
            continue
        doomed.append((path, nbytes))
    if not dry_run:
        for e in drop:
            path = store.index_path(e.record.layout, e.record.key)
            store._do("removing an index", store.remove, path)
            if store.exists(sig_path(path)):
                store._do("removing a signature", store.remove, sig_path(path))
        for path, _ in doomed:
            store._do("removing a blob", store.remove, path)
    return StorePrune(store.url, tuple(e.record.key for e in drop), len(doomed),
                      sum(n for _, n in doomed), len(keep), dry_run,
                      tuple(x.warning for x in listing.skipped),
                      tuple((e.record.key, pins[(e.record.layout, e.record.key)])
                            for e in held))


__all__ = ["PushResult", "PushedEntry", "StorePrune", "download", "download_size", "match_refs",
           "prune_store", "push", "with_linked"]
