"""Remote stores on existing object storage, through fsspec (``s3://`` with s3fs, ``gs://``
with gcsfs, ``file:///shared/nfs/path`` with nothing extra).

Layout under the URL::

    vllm-cache-store.json                 format marker (written once)
    blobs/<sha256[:2]>/<sha256>           every file's bytes, content-addressed: one copy of a
                                          file shared by entries, ranks and pushes
    entries/<layout>/<key>.json           one index object per entry: its record (the bundle
                                          manifest's element) and the snapshots it names

Why it is safe with concurrent pushers and resumable: a blob's name is its content's sha256,
so two pushers write the same bytes to the same name (an object store's PUT is atomic; on a
file system the blob is written under a temporary name and renamed); blobs already there are
skipped, so a push interrupted half way re-sends only what is missing. An entry's index object
is published last, after every blob it lists exists: an entry is visible only when complete.
A pull checks every blob's size and sha256 before anything is placed (:mod:`.place`); a blob
that the index lists but the store lacks is a one-line error with nothing placed.

Credentials and endpoints come the standard way for each backend (for S3: ``AWS_*``
variables including ``AWS_ENDPOINT_URL``, ``~/.aws``; or fsspec ``storage_options``) and are
never printed."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vllm_cache_tools import __version__
from vllm_cache_tools.fleet.errors import FleetError, StoreError
from vllm_cache_tools.fleet.records import (
    EntryRecord,
    FileRecord,
    entry_from_json,
    entry_json,
    extra_from_json,
    file_json,
)
from vllm_cache_tools.read.noatime import open_noatime

STORE_FORMAT = "vllm-cache-store"
STORE_VERSION = 1
MARKER = "vllm-cache-store.json"
CHUNK = 8 << 20
"""Upload/download piece: s3fs sends parts of at least 5 MiB; 8 MiB keeps few round trips."""
DEFAULT_WORKERS = 8
BACKENDS = {"s3": ("s3fs", "s3"), "s3a": ("s3fs", "s3"), "gs": ("gcsfs", "gcs"),
            "gcs": ("gcsfs", "gcs")}

Progress = Callable[[int], None]


@dataclass(frozen=True)
class StoreEntry:
    """One index object: the entry's record, the snapshots it names, when and by what it was
    pushed, and the pushing host's facts (the bundle's ``packed_on``)."""

    record: EntryRecord
    extras: tuple[FileRecord, ...] = ()
    pushed_at: float | None = None
    pushed_by: str = ""
    packed_on: Mapping[str, Any] = field(default_factory=dict, hash=False)
    url: str = ""


def is_url(text: str) -> bool:
    return "://" in text and not text.startswith("/")


def parse_storage_options(items: Iterable[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs (a JSON value where it parses: ``anon=true``, ``client_kwargs=
    {...}``) as fsspec ``storage_options``."""
    out: dict[str, Any] = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise FleetError(f"storage option {k or item!r} is not KEY=VALUE")
        try:
            out[k] = json.loads(v)
        except ValueError:
            out[k] = v
    return out


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]


def store_error(exc: BaseException, url: str, what: str) -> FleetError:
    """One line for a backend's exception (never its credentials)."""
    if isinstance(exc, FleetError):
        return exc
    name = type(exc).__name__
    text = _first_line(exc)
    if "Credentials" in name or "credentials" in text.lower():
        return StoreError(f"{url}: no credentials found (AWS_ACCESS_KEY_ID with "
                          "AWS_SECRET_ACCESS_KEY, AWS_PROFILE, ~/.aws, or --storage-option)")
    if isinstance(exc, PermissionError) or "AccessDenied" in text or "Forbidden" in text:
        return StoreError(f"{url}: access denied while {what}")
    if isinstance(exc, FileNotFoundError) or "NoSuchBucket" in text:
        return StoreError(f"{url}: not found while {what} ({text})")
    return StoreError(f"{url}: {what} failed: {name}: {text}")


class Store:
    """One remote store (see the module docstring for its layout)."""

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        self.url = url.rstrip("/")
        scheme = url.split("://", 1)[0].lower()
        try:
            from fsspec.core import url_to_fs  # type: ignore[import-untyped]

            self.fs, self.base = url_to_fs(self.url, **dict(storage_options or {}))
        except ImportError as exc:
            pkg, extra = BACKENDS.get(scheme, (str(exc.name or "?"), None))
            hint = (f"pip install 'vllm-cache-tools[{extra}]'" if extra else f"pip install "
                    f"{pkg}")
            raise StoreError(f"{scheme}:// stores need {pkg}: {hint}") from None
        except (ValueError, TypeError) as exc:
            raise StoreError(f"{url}: {_first_line(exc)}") from None
        except Exception as exc:
            raise store_error(exc, self.url, "opening the store") from None
        self.base = self.base.rstrip("/")
        self.local = "file" in _protocols(self.fs)
        # fsspec shares one instance per URL and options in a process, with its listing
        # cache: another pusher's objects must be seen.
        self.fs.invalidate_cache()

    # ---- paths ----
    def blob_path(self, sha: str) -> str:
        return f"{self.base}/blobs/{sha[:2]}/{sha}"

    def index_path(self, layout: str, key: str) -> str:
        return f"{self.base}/entries/{layout}/{key}.json"

    # ---- primitives, every failure one line ----
    def _do(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except FleetError:
            raise
        except Exception as exc:
            raise store_error(exc, self.url, what) from None

    def exists(self, path: str) -> bool:
        return bool(self._do("looking up an object", self.fs.exists, path))

    def cat(self, path: str) -> bytes:
        return bytes(self._do("reading an object", self.fs.cat_file, path))

    def put_bytes(self, path: str, data: bytes) -> None:
        """Whole or not at all: an object PUT, or on a file system a temporary name then a
        rename (readers never see half an index or blob)."""
        if not self.local:
            self._do("writing an object", self.fs.pipe_file, path, data)
            return
        tmp = f"{path}.{secrets.token_hex(6)}.tmp"
        self._do("writing a file", self._local_write, tmp, path, [data])

    def _local_write(self, tmp: str, path: str, chunks: Iterable[bytes]) -> None:
        self.fs.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            with open(tmp, "xb") as f:
                for c in chunks:
                    f.write(c)
            os.replace(tmp, path)
        except BaseException:
            with _suppress():
                os.unlink(tmp)
            raise

    def put_file(self, path: str, source: Path, rec: FileRecord,
                 on_bytes: Progress | None = None) -> None:
        """Upload a cache file (read the store's way) as the blob ``path``, checking that its
        bytes still have the digest its record names."""
        h = hashlib.sha256()

        def chunks() -> Iterable[bytes]:
            with open_noatime(source, buffering=0) as f:
                while b := f.read(CHUNK):
                    h.update(b)
                    if on_bytes is not None:
                        on_bytes(len(b))
                    yield b

        if self.local:
            tmp = f"{path}.{secrets.token_hex(6)}.tmp"
            self._do("writing a file", self._local_write, tmp, path, chunks())
        else:
            def upload() -> None:
                with self.fs.open(path, "wb", block_size=CHUNK) as out:
                    for c in chunks():
                        out.write(c)
            self._do("uploading a blob", upload)
        if h.hexdigest() != rec.sha256:
            with _suppress():
                self.fs.rm_file(path)
            raise FleetError(f"{source} changed while it was pushed (being written?): push "
                             "again")

    def open_blob(self, sha: str, key: str) -> Any:
        try:
            return self.fs.open(self.blob_path(sha), "rb", block_size=CHUNK)
        except FileNotFoundError:
            raise StoreError(f"{self.url}: entry {key[:16]} lists blob {sha[:16]}, which the "
                             "store does not have (pushed incompletely or pruned): nothing "
                             "placed; push the entry again") from None
        except Exception as exc:
            raise store_error(exc, self.url, "downloading a blob") from None

    # ---- the store marker and index objects ----
    def ensure_marker(self, create: bool) -> None:
        path = f"{self.base}/{MARKER}"
        if self.exists(path):
            try:
                data = json.loads(self.cat(path))
            except ValueError:
                data = None
            if not isinstance(data, dict) or data.get("format") != STORE_FORMAT:
                raise StoreError(f"{self.url}: {MARKER} is not a vllm-cache store marker")
            if data.get("format_version") != STORE_VERSION:
                raise StoreError(f"{self.url}: store format version "
                                 f"{data.get('format_version')!r} is not supported (this "
                                 f"vllm-cache reads {STORE_VERSION})")
            return
        if not create:
            if not self.exists(self.base) and not self.local:
                raise StoreError(f"{self.url}: no vllm-cache store here")
            return
        self.put_bytes(path, json.dumps({"format": STORE_FORMAT,
                                         "format_version": STORE_VERSION}).encode())

    def index_paths(self) -> list[str]:
        root = f"{self.base}/entries"
        try:
            found = self.fs.find(root)
        except FileNotFoundError:
            return []
        except Exception as exc:
            raise store_error(exc, self.url, "listing entries") from None
        return sorted(p for p in found if p.endswith(".json"))

    def read_index(self, path: str) -> StoreEntry:
        try:
            data = json.loads(self.cat(path))
            if not isinstance(data, dict) or data.get("format") != STORE_FORMAT:
                raise ValueError("not an index object")
            if data.get("format_version") != STORE_VERSION:
                raise StoreError(f"{self.url}: index {os.path.basename(path)} has format "
                                 f"version {data.get('format_version')!r} (this vllm-cache "
                                 f"reads {STORE_VERSION})")
            rec = entry_from_json(data.get("entry"))
            extras = tuple(extra_from_json(x) for x in data.get("extras") or [])
        except FleetError as exc:
            if isinstance(exc, StoreError):
                raise
            raise StoreError(f"{self.url}: index {os.path.basename(path)}: {exc}") from None
        except ValueError as exc:
            raise StoreError(f"{self.url}: index {os.path.basename(path)} is not a vllm-cache "
                             f"index object ({_first_line(exc)})") from None
        if path != self.index_path(rec.layout, rec.key):
            raise StoreError(f"{self.url}: index {path} names entry {rec.key} of another place")
        at = data.get("pushed_at")
        return StoreEntry(rec, extras, float(at) if isinstance(at, (int, float)) else None,
                          str(data.get("pushed_by") or ""), data.get("packed_on") or {},
                          self.url)

    def entries(self, workers: int = DEFAULT_WORKERS) -> list[StoreEntry]:
        paths = self.index_paths()
        with ThreadPoolExecutor(max(1, workers)) as pool:
            return list(pool.map(self.read_index, paths))


def _protocols(fs: Any) -> tuple[str, ...]:
    p = fs.protocol
    return (p,) if isinstance(p, str) else tuple(p)


class _suppress:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return True


def index_bytes(rec: EntryRecord, extras: Sequence[FileRecord], packed_on: Mapping[str, Any],
                pushed_at: float) -> bytes:
    return json.dumps({"format": STORE_FORMAT, "format_version": STORE_VERSION,
                       "entry": entry_json(rec), "extras": [file_json(x) for x in extras],
                       "pushed_at": round(pushed_at, 3),
                       "pushed_by": f"vllm-cache-tools {__version__}",
                       "packed_on": dict(packed_on)}, sort_keys=True).encode()


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
    """What the pushed entries hold, before deduplication."""
    seconds: float


def _snapshot_shas(entry: Any) -> set[str]:
    out = set()
    for m in entry.manifests:
        for f in m.data.get("traced_files") or []:
            if isinstance(f, dict) and f.get("snapshot") and isinstance(f.get("sha256"), str):
                out.add(f["sha256"])
    return out


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
    for i, rec in enumerate(sel.records):
        path = store.index_path(rec.layout, rec.key)
        if store.exists(path):
            old = store.read_index(path)
            if entry_json(old.record) == entry_json(rec):
                results.append(PushedEntry(rec.key, rec.layout, "present",
                                           "the store has this entry with the same files"))
                todo.append(i)  # its blobs are re-checked: the index is kept either way
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
        rec = sel.records[i]
        shas = _snapshot_shas(sel.entries[i])
        extras = [x.record for x in sel.extras if x.record.sha256 in shas]
        if rec.key not in pushed_keys:
            store.put_bytes(store.index_path(rec.layout, rec.key),
                            index_bytes(rec, extras, facts, now))
            results.append(PushedEntry(rec.key, rec.layout, "pushed"))
    order = {(r.layout, r.key): n for n, r in enumerate(sel.records)}
    results.sort(key=lambda r: order[(r.layout, r.key)])
    return PushResult(store.url, tuple(results), len(missing) + len(gone),
                      len(blobs) - len(missing) - len(gone),
                      sum(blobs[s][1].size for s in [*missing, *gone]),
                      sum(r.size_bytes for r in sel.records), time.perf_counter() - t0)


# ---- pull ------------------------------------------------------------------------------------

def match_refs(entries: Sequence[StoreEntry], refs: Sequence[str]) -> list[StoreEntry]:
    """Store entries named by keys or unique key prefixes."""
    out: list[StoreEntry] = []
    for ref in refs:
        found = [e for e in entries if e.record.key.startswith(ref)]
        exact = [e for e in found if e.record.key == ref]
        if not found:
            raise FleetError(f"no entry of the store matches {ref!r}")
        if len(found) > 1 and len(exact) != 1:
            raise FleetError(f"key prefix {ref!r} is ambiguous in the store: "
                             + ", ".join(e.record.key[:16] for e in found[:5]))
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
                raise StoreError(f"{store.url}: blob {sha[:16]} of entry {key[:16]}: {exc}: "
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


__all__ = ["DEFAULT_WORKERS", "PushResult", "PushedEntry", "Store", "StoreEntry",
           "StorePrune", "download", "is_url", "match_refs", "parse_storage_options",
           "prune_store", "push", "with_linked"]
