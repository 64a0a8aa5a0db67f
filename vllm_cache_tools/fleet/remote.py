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
import threading
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
from vllm_cache_tools.layout import short_key
from vllm_cache_tools.read.noatime import open_noatime
from vllm_cache_tools.redaction import dumps as redacted_dumps

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


_importing: list[threading.Thread] = []
_prefetched: set[str] = set()


def prefetch_backend(url: str) -> None:
    """Import the URL's fsspec backend in a daemon thread (s3fs with aiobotocore and aiohttp:
    0.4-0.9 s here, the largest part of a ``pull --if-hit`` decision), so that it overlaps
    the caller's own imports; :class:`Store` waits for it before it touches fsspec (two
    threads importing the same package can see it half made). A failure there is left for
    :class:`Store` to meet and report. Once per scheme and process."""
    scheme = url.split("://", 1)[0].lower()

    def load() -> None:
        try:
            from fsspec.registry import get_filesystem_class  # type: ignore[import-untyped]

            get_filesystem_class(scheme)
        except BaseException:  # Store imports again and says what is missing
            pass

    if scheme in _prefetched:
        return
    _prefetched.add(scheme)
    t = threading.Thread(target=load, name="vllm-cache-import-backend", daemon=True)
    _importing.append(t)
    t.start()


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
        for t in list(_importing):  # done at most once per scheme; joining again is free
            t.join()
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

    def cat_if_exists(self, path: str) -> bytes | None:
        try:
            return bytes(self.fs.cat_file(path))
        except FileNotFoundError:
            return None
        except Exception as exc:
            raise store_error(exc, self.url, "reading an object") from None

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
            raise StoreError(f"{self.url}: entry {short_key(key)} lists blob {sha[:16]}, which the "
                             "store does not have (pushed incompletely or pruned): nothing "
                             "placed; push the entry again") from None
        except Exception as exc:
            raise store_error(exc, self.url, "downloading a blob") from None

    # ---- the store marker and index objects ----
    def ensure_marker(self, create: bool) -> None:
        path = f"{self.base}/{MARKER}"
        text = self.cat_if_exists(path)  # one request, not exists + cat (a round trip less)
        if text is not None:
            try:
                data = json.loads(text)
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
            # A store's folder that is not there is no store, on a local disk too (a typo
            # listed "No entries", exit 0); an empty folder is an empty store.
            if not self.exists(self.base):
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
    # redaction.dumps: no secret in clear in an index object (select redacts the records).
    return redacted_dumps({"format": STORE_FORMAT, "format_version": STORE_VERSION,
                           "entry": entry_json(rec), "extras": [file_json(x) for x in extras],
                           "pushed_at": round(pushed_at, 3),
                           "pushed_by": f"vllm-cache-tools {__version__}",
                           "packed_on": dict(packed_on)}, sort_keys=True).encode()


__all__ = ["BACKENDS", "CHUNK", "DEFAULT_WORKERS", "MARKER", "STORE_FORMAT", "STORE_VERSION",
           "Store", "StoreEntry", "index_bytes", "is_url", "parse_storage_options",
           "prefetch_backend",
           "store_error"]
