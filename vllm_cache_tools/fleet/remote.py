"""Remote stores on existing object storage, through fsspec (``s3://`` with s3fs, ``gs://``
with gcsfs, ``file:///shared/nfs/path`` with nothing extra).

Layout under the URL::

    vllm-cache-store.json                 format marker (written once)
    blobs/<sha256[:2]>/<sha256>           every file's bytes, content-addressed: one copy of a
                                          file shared by entries, ranks and pushes
    entries/<layout>/<key>.json           one index object per entry: its record (the bundle
                                          manifest's element) and the snapshots it names
    entries/<layout>/<key>.json.sig       its SSHSIG signature when pushed with --sign
                                          (:mod:`.trust`; not ``.json``: never listed as an
                                          index)

Why it is safe with concurrent pushers and resumable: a blob's name is its content's sha256,
so two pushers write the same bytes to the same name (an object store's PUT is atomic; on a
file system the blob is written under a temporary name and renamed); blobs already there are
skipped, so a push interrupted half way re-sends only what is missing. An entry's index object
is published last, after every blob it lists exists: an entry is visible only when complete.
A pull checks every blob's size and sha256 before anything is placed (:mod:`.place`); a blob
that the index lists but the store lacks is a one-line error with nothing placed.

What a store may not do to a reader (issue 23): an index object is read up to
:data:`MAX_INDEX_BYTES` and may list at most :data:`MAX_INDEX_FILES` files, through the bounded
JSON reader of cache files; one that is malformed, over a cap, or named for another entry is
named in a warning and skipped (:class:`StoreListing`), so the rest of the store still lists
and pulls. In a ``file://`` store every path below the store's folder is opened fd-relative
without following links, and a blob or index object must be a regular file (opened
non-blocking, checked with ``fstat``): a symlink to ``/etc/shadow`` or a FIFO is refused, never
read. Object names are checked against the layout above (a key, a sha256) before use.

Credentials and endpoints come the standard way for each backend (for S3: ``AWS_*``
variables including ``AWS_ENDPOINT_URL``, ``~/.aws``; or fsspec ``storage_options``) and are
never printed."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import secrets
import stat
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from vllm_cache_tools import __version__, safeio
from vllm_cache_tools.fleet.errors import BadIndex, FleetError, StoreError
from vllm_cache_tools.fleet.records import (
    EntryRecord,
    FileRecord,
    entry_from_json,
    entry_json,
    extra_from_json,
    file_json,
)
from vllm_cache_tools.layout import short_key
from vllm_cache_tools.read import jsontext
from vllm_cache_tools.read.errors import ReadError
from vllm_cache_tools.read.noatime import open_noatime
from vllm_cache_tools.redaction import dumps as redacted_dumps

if TYPE_CHECKING:
    from vllm_cache_tools.fleet.oci import OciFileSystem

STORE_FORMAT = "vllm-cache-store"
STORE_VERSION = 1
MARKER = "vllm-cache-store.json"
CHUNK = 8 << 20
"""Upload/download piece: s3fs sends parts of at least 5 MiB; 8 MiB keeps few round trips."""
DEFAULT_WORKERS = 8
BACKENDS = {"s3": ("s3fs", "s3"), "s3a": ("s3fs", "s3"), "gs": ("gcsfs", "gcs"),
            "gcs": ("gcsfs", "gcs")}

MAX_INDEX_BYTES = 32 << 20
"""An index object is read up to this size (one of a real entry: 15-20 KB; one listing
100,000 Inductor-like files: 16-20 MB); a bigger one is skipped unread."""
MAX_INDEX_FILES = 100_000
"""Files (and snapshots) one index object may list: a pull of that many keeps its records
and download plan well under 300 MB."""
_INDEX_NAME = re.compile(r"^entries/(backend/[0-9a-f]{10}(?:-\d+)?|aot/[0-9a-f]{64})\.json$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")

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
    provenance: Mapping[str, Any] = field(default_factory=dict, hash=False)
    """Who pushed it, when, with what (:mod:`.provenance`); empty in older index objects."""
    index_sha512: bytes = b""
    """SHA-512 of the index object's bytes as read: what its signature (``<index>.sig``,
    :mod:`.trust`) is checked against, with no second read that could return other bytes."""


@dataclass(frozen=True)
class SkippedIndex:
    """An index object that could not be used: its entry (when its name says which), and
    why, in one line that names it."""

    path: str
    """Relative to the store, e.g. ``entries/aot/<key>.json``."""
    layout: str | None
    key: str | None
    reason: str

    @property
    def warning(self) -> str:
        return f"{self.reason}: skipped (the other entries are used)"


@dataclass(frozen=True)
class StoreListing:
    """Every usable index object of a store, and the ones skipped."""

    entries: tuple[StoreEntry, ...]
    skipped: tuple[SkippedIndex, ...] = ()


def index_name(rel: str) -> tuple[str, str] | None:
    """``(layout, key)`` of an index object's path relative to the store, or ``None`` when
    the path is not ``entries/backend/<10 hex>.json`` or ``entries/aot/<64 hex>.json``."""
    if not _INDEX_NAME.match(rel):
        return None
    layout, _, name = rel[len("entries/"):].partition("/")
    return layout, name[:-len(".json")]


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
            if scheme == "oci":
                import requests  # noqa: F401
                return
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
            out[k] = jsontext.loads(v, f"storage option {k}")
        except ValueError:
            out[k] = v
    return out


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]


SCHEMES = ("file", "oci", *BACKENDS)
"""What a store URL may start with: the layout needs listing and atomic writes, which plain
http:// has not (it was "http:// stores need ?: pip install ?", or a DNS error)."""


def check_scheme(url: str) -> None:
    """Refuse a URL whose scheme is no store of ours, in one line."""
    scheme = url.split("://", 1)[0].lower()
    if scheme not in SCHEMES:
        raise StoreError(f"{url}: {scheme}:// is not a store vllm-cache can use (s3://, gs://, "
                         "oci://registry/repo or file:///path; an S3-compatible server serves "
                         "s3:// with AWS_ENDPOINT_URL)")


def endpoint_of(url: str, storage_options: Mapping[str, Any] | None = None) -> str | None:
    """The S3 endpoint a store talks to when one is set (``endpoint_url`` in the storage
    options or their ``client_kwargs``, else ``AWS_ENDPOINT_URL``); ``None`` for AWS itself
    and for other schemes."""
    if BACKENDS.get(url.split("://", 1)[0].lower(), ("", ""))[1] != "s3":
        return None
    opts = dict(storage_options or {})
    ck = opts.get("client_kwargs")
    for v in (opts.get("endpoint_url"), ck.get("endpoint_url") if isinstance(ck, dict) else None,
              os.environ.get("AWS_ENDPOINT_URL_S3"), os.environ.get("AWS_ENDPOINT_URL")):
        if isinstance(v, str) and v:
            return v
    return None


def unreachable(endpoint: str, timeout: float = 3.0) -> str | None:
    """Why a TCP connection to ``endpoint`` (``http[s]://host[:port]``) fails, or ``None``."""
    import socket
    from urllib.parse import urlsplit

    try:
        u = urlsplit(endpoint)
        host, port = u.hostname, u.port or (443 if u.scheme == "https" else 80)
    except ValueError as exc:
        return f"not a URL: {exc}"
    if not host:
        return "no host in it"
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    return None


def store_error(exc: BaseException, url: str, what: str,
                endpoint: str | None = None) -> FleetError:
    """One line for a backend's exception (never its credentials). ``endpoint``: the S3
    endpoint set for the store (default: ``AWS_ENDPOINT_URL``), checked when the backend
    says it found no credentials: botocore asks for them before it connects, so an endpoint
    that cannot be reached was reported as "no credentials found"."""
    if isinstance(exc, FleetError):
        return exc
    name = type(exc).__name__
    text = _first_line(exc)
    if "Credentials" in name or "credentials" in text.lower():
        ep = endpoint or endpoint_of(url)
        why = unreachable(ep) if ep else None
        if ep and why:
            return StoreError(f"{url}: cannot reach the endpoint {ep} ({why}) while {what}; "
                              "no credentials were found either")
        return StoreError(f"{url}: no credentials found (AWS_ACCESS_KEY_ID with "
                          "AWS_SECRET_ACCESS_KEY, AWS_PROFILE, ~/.aws, or --storage-option)")
    if isinstance(exc, ConnectionError) or "Connect" in name:
        return StoreError(f"{url}: cannot reach the store while {what} ({text})")
    if isinstance(exc, PermissionError) or "AccessDenied" in text or "Forbidden" in text:
        return StoreError(f"{url}: access denied while {what}")
    if isinstance(exc, NotADirectoryError):
        return StoreError(f"{url}: a file, not a folder, is in the store's path "
                          f"while {what} ({exc.filename or text})")
    if isinstance(exc, FileNotFoundError) or "NoSuchBucket" in text:
        return StoreError(f"{url}: not found while {what} ({text})")
    return StoreError(f"{url}: {what} failed: {name}: {text}")


class Store:
    """One remote store (see the module docstring for its layout)."""

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        self.url = url.rstrip("/")
        scheme = url.split("://", 1)[0].lower()
        check_scheme(url)
        self.endpoint = endpoint_of(url, storage_options)
        for t in list(_importing):  # done at most once per scheme; joining again is free
            t.join()
        if scheme == "oci":  # a registry: fleet/oci.py maps the layout onto artifacts
            from vllm_cache_tools.fleet.oci import OciFileSystem  # only for oci:// (10 ms)

            try:
                self.oci: OciFileSystem | None = OciFileSystem(url, storage_options)
            except ImportError:
                raise StoreError("oci:// stores need requests: pip install "
                                 "'vllm-cache-tools[oci]'") from None
            self.fs: Any = self.oci
            self.base, self.local = self.oci.base, False
            return
        self.oci = None
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
            raise store_error(exc, self.url, "opening the store", self.endpoint) from None
        self.base = self.base.rstrip("/")
        self.local = "file" in _protocols(self.fs)
        if self.local and os.path.lexists(self.base) and not os.path.isdir(self.base):
            # push to a file path showed a raw NotADirectoryError
            raise StoreError(f"{url}: {self.base} is a file, not a store folder")
        # fsspec shares one instance per URL and options in a process, with its listing
        # cache: another pusher's objects must be seen.
        self.fs.invalidate_cache()

    # ---- paths ----
    def blob_path(self, sha: str) -> str:
        if not _SHA256.match(sha):  # records are checked on reading; this is the last guard
            raise StoreError(f"{self.url}: {sha[:80]!r} is not a blob name (a sha256)")
        return f"{self.base}/blobs/{sha[:2]}/{sha}"

    def _rel(self, path: str) -> str:
        """``path`` relative to the store's folder (every path this class makes is below
        it)."""
        if not path.startswith(self.base + "/"):
            raise StoreError(f"{self.url}: {path} is outside the store")
        rel = path[len(self.base) + 1:]
        if not _NOT_PLAIN.isdisjoint(rel.split("/")):
            raise StoreError(f"{self.url}: {rel!r} is not a plain path below the store")
        return rel

    def _local_dir(self, rel_dir: str, create: bool = False) -> int:
        """An fd on a folder below a ``file://`` store, every component opened without
        following a link (the store's own folder is the one the user named: followed, and
        made by a writer when missing)."""
        if create:
            os.makedirs(self.base, exist_ok=True)
        return safeio.open_dirs(self.base, rel_dir, create=create, mode=0o755)

    def index_path(self, layout: str, key: str) -> str:
        return f"{self.base}/entries/{layout}/{key}.json"

    def pin(self, records: Iterable[EntryRecord]) -> str | None:
        """An ``oci://`` store whose URL has a ``:TAG``: that tag made an index of these
        entries' artifacts (by digest), so an operator pins a model/version with it. The
        tag, or ``None`` for every other store (nothing written)."""
        if self.oci is None:
            return None
        return self.oci.pin([self._rel(self.index_path(r.layout, r.key)) for r in records])

    def pinned_entries(self) -> dict[tuple[str, str], tuple[str, ...]]:
        """``(layout, key)`` -> the tags that pin that entry (an ``oci://`` store: every
        image index of ours in the repository, see :meth:`.OciFileSystem.pins`); empty for
        every other store."""
        if self.oci is None:
            return {}
        out: dict[tuple[str, str], tuple[str, ...]] = {}
        for rel, tags in self.oci.pins().items():
            name = index_name(rel)
            if name is not None:
                out[name] = tags
        return out

    # ---- primitives, every failure one line ----
    def _do(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except FleetError:
            raise
        except Exception as exc:
            raise store_error(exc, self.url, what, self.endpoint) from None

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
            raise store_error(exc, self.url, "reading an object", self.endpoint) from None

    def put_bytes(self, path: str, data: bytes) -> None:
        """Whole or not at all: an object PUT, or on a file system a temporary name then a
        rename (readers never see half an index or blob)."""
        if not self.local:
            self._do("writing an object", self.fs.pipe_file, path, data)
            return
        self._do("writing a file", self._local_write, path, [data])

    def _local_write(self, path: str, chunks: Iterable[bytes]) -> None:
        """A new file under a random name in the target's folder (opened without following
        links, created with ``O_EXCL``), renamed over ``path``'s name."""
        parent, _, name = self._rel(path).rpartition("/")
        dfd = self._local_dir(parent, create=True)
        tmp = f"{name}.{secrets.token_hex(6)}.tmp"
        try:
            fd = os.open(tmp, _NEW_FILE, 0o644, dir_fd=dfd)
            try:
                with open(fd, "wb", closefd=False) as f:
                    for c in chunks:
                        f.write(c)
            finally:
                os.close(fd)
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            with _suppress():
                os.unlink(tmp, dir_fd=dfd)
            raise
        finally:
            os.close(dfd)

    def put_file(self, path: str, source: str | os.PathLike[str], rec: FileRecord,
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
            self._do("writing a file", self._local_write, path, chunks())
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
        """A reader of the blob ``sha`` (entry ``key`` lists it). In a ``file://`` store: a
        regular file reached without following links, never a FIFO, device or symlink."""
        where = f"{self.url}: entry {short_key(key)} lists blob {sha[:16]}"
        try:
            if not self.local:
                return self.fs.open(self.blob_path(sha), "rb", block_size=CHUNK)
            dfd = self._local_dir(self._rel(self.blob_path(sha)).rpartition("/")[0])
            try:
                fd = safeio.open_regular(sha, dir_fd=dfd)
            finally:
                os.close(dfd)
            return os.fdopen(fd, "rb")
        except FileNotFoundError:
            raise StoreError(f"{where}, which the store does not have (pushed incompletely or "
                             "pruned): nothing placed; push the entry again") from None
        except safeio.UnsafeTree as exc:
            raise StoreError(f"{where}: {exc.strerror}: nothing placed") from None
        except FleetError:
            raise
        except Exception as exc:
            raise store_error(exc, self.url, "downloading a blob", self.endpoint) from None

    def blob_listing(self) -> list[tuple[str, int, float | None]]:
        """``(path, size, mtime)`` of every object under ``blobs/``; in a ``file://`` store
        only regular files in real folders (a link planted there is not followed)."""
        if not self.local:
            try:
                listed = self.fs.find(f"{self.base}/blobs", detail=True)
            except FileNotFoundError:
                return []
            except Exception as exc:
                raise store_error(exc, self.url, "listing blobs", self.endpoint) from None
            return [(p, int(info.get("size") or 0), _mtime(info))
                    for p, info in listed.items()]
        out: list[tuple[str, int, float | None]] = []
        try:
            bfd = self._local_dir("blobs")
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise store_error(exc, self.url, "listing blobs", self.endpoint) from None
        try:
            with os.scandir(bfd) as it:
                subs = [e.name for e in it if e.is_dir(follow_symlinks=False)]
            for sub in subs:
                try:
                    sfd = safeio.open_dir(sub, bfd)
                except OSError:
                    continue
                try:
                    with os.scandir(sfd) as it:
                        for e in it:
                            st = e.stat(follow_symlinks=False)
                            if stat.S_ISREG(st.st_mode):
                                out.append((f"{self.base}/blobs/{sub}/{e.name}", st.st_size,
                                            st.st_mtime))
                finally:
                    os.close(sfd)
        finally:
            os.close(bfd)
        return out

    def remove(self, path: str) -> None:
        """Remove one object (in a ``file://`` store: its name, fd-relative, never through
        a link)."""
        if not self.local:
            self.fs.rm_file(path)
            return
        parent, _, name = self._rel(path).rpartition("/")
        dfd = self._local_dir(parent)
        try:
            os.unlink(name, dir_fd=dfd)
        finally:
            os.close(dfd)

    def read_blob(self, sha: str, cap: int) -> bytes:
        """A blob's bytes, at most ``cap`` (read as :meth:`open_blob` opens it)."""
        with self.open_blob(sha, "?") as f:
            data = bytes(self._do("downloading a blob", f.read, cap + 1))
        if len(data) > cap:
            raise StoreError(f"{self.url}: blob {sha[:16]} is over {cap} bytes (not read)")
        return data

    # ---- the store marker and index objects ----
    def ensure_marker(self, create: bool) -> None:
        path = f"{self.base}/{MARKER}"
        text = self._marker_bytes(path)
        if text is not None:
            try:
                data = jsontext.loads(text, MARKER)
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

    def _marker_bytes(self, path: str) -> bytes | None:
        """The marker's bytes (one request, not exists + cat: a round trip less), or
        ``None`` when there is none; in a ``file://`` store a regular file only, capped."""
        if not self.local:
            return self.cat_if_exists(path)
        try:
            fd = safeio.open_dirs(self.base)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise store_error(exc, self.url, "reading the store marker", self.endpoint) from None
        try:
            return safeio.read_regular(MARKER, 64 << 10, dir_fd=fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreError(f"{self.url}: {MARKER}: {exc.strerror or exc}") from None
        finally:
            os.close(fd)

    def index_paths(self) -> tuple[list[str], list[SkippedIndex]]:
        """The index objects' paths, and the ``.json`` objects under ``entries/`` whose names
        are not an entry's (named, never read). In a ``file://`` store the folders are
        listed without following links."""
        if self.local:
            return self._local_index_paths()
        root = f"{self.base}/entries"
        try:
            found = self.fs.find(root)
        except FileNotFoundError:
            return [], []
        except Exception as exc:
            raise store_error(exc, self.url, "listing entries", self.endpoint) from None
        good: list[str] = []
        bad: list[SkippedIndex] = []
        for p in sorted(found):
            if not p.endswith(".json") or not p.startswith(self.base + "/"):
                continue
            rel = p[len(self.base) + 1:]
            if index_name(rel) is None:
                bad.append(SkippedIndex(rel, None, None, f"{self.url}: {rel[:200]!r} is not "
                                        "named entries/<backend|aot>/<key>.json"))
            else:
                good.append(p)
        return good, bad

    def _local_index_paths(self) -> tuple[list[str], list[SkippedIndex]]:
        good: list[str] = []
        for layout in ("backend", "aot"):
            try:
                dfd = self._local_dir(f"entries/{layout}")
            except FileNotFoundError:
                continue
            except safeio.UnsafeTree:
                raise StoreError(f"{self.url}: entries/{layout} is a symlink or not a folder "
                                 "(not followed)") from None
            except OSError as exc:
                raise store_error(exc, self.url, "listing entries", self.endpoint) from None
            try:
                with os.scandir(dfd) as it:
                    names = [e.name for e in it]
            finally:
                os.close(dfd)
            good += [f"{self.base}/entries/{layout}/{n}" for n in names
                     if n.endswith(".json")]
        good.sort()
        bad = [SkippedIndex(self._rel(p), None, None, f"{self.url}: {self._rel(p)[:200]!r} is "
                            "not named entries/<backend|aot>/<key>.json")
               for p in good if index_name(self._rel(p)) is None]
        return [p for p in good if index_name(self._rel(p)) is not None], bad

    def _index_bytes(self, path: str) -> bytes:
        """At most :data:`MAX_INDEX_BYTES` + 1 bytes of an index object."""
        if not self.local:
            return bytes(self._do("reading an index", lambda: self.fs.cat_file(
                path, start=0, end=MAX_INDEX_BYTES + 1)))
        parent, _, name = self._rel(path).rpartition("/")
        try:
            dfd = self._local_dir(parent)
            try:
                return safeio.read_regular(name, MAX_INDEX_BYTES, dir_fd=dfd)
            finally:
                os.close(dfd)
        except safeio.UnsafeTree as exc:
            raise BadIndex(f"{self.url}: index {name}: {exc.strerror}") from None
        except OSError as exc:
            if exc.errno == errno.EFBIG:
                raise BadIndex(_over_cap(self.url, name)) from None
            raise store_error(exc, self.url, "reading an index", self.endpoint) from None

    def read_index(self, path: str) -> StoreEntry:
        """The index object at ``path``; :class:`BadIndex` (one line naming it) when it is
        not a usable index of the entry its name says."""
        name = os.path.basename(path)
        raw = self._index_bytes(path)
        if len(raw) > MAX_INDEX_BYTES:
            raise BadIndex(_over_cap(self.url, name))
        try:
            data = jsontext.loads(raw, f"index {name}",
                                  max_containers=2 * MAX_INDEX_FILES + 10_000)
            if not isinstance(data, dict) or data.get("format") != STORE_FORMAT:
                raise ValueError("not an index object")
            if data.get("format_version") != STORE_VERSION:
                raise BadIndex(f"{self.url}: index {name} has format version "
                               f"{data.get('format_version')!r} (this vllm-cache reads "
                               f"{STORE_VERSION})")
            entry, extra = data.get("entry"), data.get("extras") or []
            n = (len(entry.get("files") or []) if isinstance(entry, dict) else 0) + (
                len(extra) if isinstance(extra, list) else 0)
            if n > MAX_INDEX_FILES:
                raise BadIndex(f"{self.url}: index {name} lists {n} files, over the cap of "
                               f"{MAX_INDEX_FILES}")
            rec = entry_from_json(entry)
            if not isinstance(extra, list):
                raise ValueError("extras is not a list")
            extras = tuple(extra_from_json(x) for x in extra)
        except BadIndex:
            raise
        except FleetError as exc:
            raise BadIndex(f"{self.url}: index {name}: {exc}") from None
        except ReadError as exc:
            raise BadIndex(f"{self.url}: {exc}") from None
        except ValueError as exc:
            raise BadIndex(f"{self.url}: index {name} is not a vllm-cache index object "
                           f"({_first_line(exc)})") from None
        if path != self.index_path(rec.layout, rec.key):
            raise BadIndex(f"{self.url}: index {name} names entry {short_key(rec.key)} of "
                           "another place")
        at = data.get("pushed_at")
        packed_on = data.get("packed_on")
        prov = data.get("provenance")
        return StoreEntry(rec, extras, float(at) if isinstance(at, (int, float)) else None,
                          str(data.get("pushed_by") or ""),
                          packed_on if isinstance(packed_on, dict) else {}, self.url,
                          prov if isinstance(prov, dict) else {},
                          hashlib.sha512(raw).digest())

    def listing(self, workers: int = DEFAULT_WORKERS) -> StoreListing:
        """Every index object read (``workers`` at a time); the unusable ones skipped and
        named, in the order of their paths."""
        paths, skipped = self.index_paths()

        def one(path: str) -> StoreEntry | SkippedIndex:
            try:
                return self.read_index(path)
            except BadIndex as exc:
                rel = self._rel(path)
                layout, key = index_name(rel) or (None, None)
                return SkippedIndex(rel, layout, key, str(exc))

        with ThreadPoolExecutor(max(1, workers)) as pool:
            got = list(pool.map(one, paths))
        return StoreListing(tuple(g for g in got if isinstance(g, StoreEntry)),
                            tuple(skipped) + tuple(g for g in got
                                                   if isinstance(g, SkippedIndex)))

    def entries(self, workers: int = DEFAULT_WORKERS) -> list[StoreEntry]:
        """The usable entries (:meth:`listing` without the skipped ones)."""
        return list(self.listing(workers).entries)


def _over_cap(url: str, name: str) -> str:
    return f"{url}: index {name} is over {MAX_INDEX_BYTES >> 20} MiB (not read)"


def _mtime(info: Mapping[str, Any]) -> float | None:
    for k in ("mtime", "LastModified", "last_modified", "updated", "created"):
        v = info.get(k)
        if isinstance(v, (int, float)):
            return float(v)
        stamp = getattr(v, "timestamp", None)
        if callable(stamp):
            return float(stamp())
    return None


def _protocols(fs: Any) -> tuple[str, ...]:
    p = fs.protocol
    return (p,) if isinstance(p, str) else tuple(p)


_NOT_PLAIN = frozenset({"", ".", ".."})
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class _suppress:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return True


def index_bytes(rec: EntryRecord, extras: Sequence[FileRecord], packed_on: Mapping[str, Any],
                pushed_at: float, provenance: Mapping[str, Any] | None = None) -> bytes:
    # redaction.dumps: no secret in clear in an index object (select redacts the records).
    return redacted_dumps({"format": STORE_FORMAT, "format_version": STORE_VERSION,
                           "entry": entry_json(rec), "extras": [file_json(x) for x in extras],
                           "pushed_at": round(pushed_at, 3),
                           "pushed_by": f"vllm-cache-tools {__version__}",
                           "packed_on": dict(packed_on),
                           **({"provenance": dict(provenance)} if provenance else {})},
                          sort_keys=True).encode()


__all__ = ["BACKENDS", "CHUNK", "DEFAULT_WORKERS", "MARKER", "MAX_INDEX_BYTES",
           "MAX_INDEX_FILES", "STORE_FORMAT", "STORE_VERSION", "SkippedIndex", "Store",
           "StoreEntry", "StoreListing", "index_bytes", "index_name", "is_url",
           "parse_storage_options", "prefetch_backend", "store_error"]
