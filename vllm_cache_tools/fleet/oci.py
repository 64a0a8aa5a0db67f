"""``oci://HOST[:PORT]/REPO[:TAG]``: a remote store in an OCI registry (the distribution API),
behind the few filesystem calls :class:`.remote.Store` makes (``exists``, ``cat_file``,
``pipe_file``, ``open``, ``find``, ``rm_file``), so that push, pull, ``ls URL`` and
``prune-remote`` stay one code path for every store.

How the store's layout (:mod:`.remote`) maps onto a repository::

    blobs/<sha256[:2]>/<sha256>        the blob sha256:<sha256>: our digests are OCI digests,
                                       so a file is one blob for every entry and push
    entries/aot/<key>.json             an OCI artifact tagged aot-<key> (backend-<key> for
                                       entries/backend/<key>.json): its config is the index
                                       object, its layers the entry's blobs, its annotations
                                       key, layout, versions and hardware
    vllm-cache-store.json, any other   an artifact tagged after its path (``/`` -> ``__``,
    object (e.g. a signature beside    e.g. vllm-cache-store.json, entries__aot__<key>.json.sig):
    an index object)                   its config is the object's bytes
    :TAG in the URL                    an OCI image index tagged TAG listing the entry
                                       artifacts pushed with it, by digest: an operator pins a
                                       model/version with it; a store URL with a tag reads
                                       only the entries that index lists

A registry has no blob listing: ``prune-remote`` removes entries (their manifests) and the
registry's own garbage collection reclaims the blobs no manifest references any more.

Transport: plain HTTP(S) through ``requests`` with timeouts (a registry that hangs is an error
after :data:`TIMEOUT`; an answer's headers must all come within the read timeout,
:mod:`.oci_http`), streamed blob bodies (a blob is never held whole in memory) and a
page-capped tag list. A loopback host is reached over plain HTTP, any other over HTTPS unless
the store option ``plain_http=true`` is given. Credentials come from ``REGISTRY_AUTH_FILE``, else
``$DOCKER_CONFIG/config.json`` or ``~/.docker/config.json`` (``auths``), answered to a Basic or a
Bearer-token challenge; they are never printed, and never sent over plain HTTP to a host that is
not loopback unless asked for with ``plain_http=true``.

Why not ``oras`` (oras-py 0.2.43, tried first; docs/fleet.md has the figures): it reads a whole
blob into memory to upload it (289 MiB peak for a 256 MiB blob, 43 MiB here), sends requests
without a timeout and retries a failed one five times with sleeps of up to 83 s (an unreachable
registry was reported after 131 s), and reads ``~/.docker/config.json`` only (not
``REGISTRY_AUTH_FILE``); what it would save here is the token exchange, ~40 lines."""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urljoin, urlsplit

from vllm_cache_tools.fleet.errors import BadIndex, StoreError
from vllm_cache_tools.fleet.oci_auth import TIMEOUT, authorization, is_loopback
from vllm_cache_tools.read import jsontext

MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
ARTIFACT_ENTRY = "application/vnd.vllm-cache.entry.v1+json"
"""The artifactType (and config media type) of an entry: its config is the index object."""
ARTIFACT_OBJECT = "application/vnd.vllm-cache.object.v1"
"""Any other object of the store (the marker, a signature): its config is the bytes."""
ARTIFACT_PIN = "application/vnd.vllm-cache.pin.v1+json"
MEDIA_FILE = "application/vnd.vllm-cache.file.v1"
ANN = "io.github.vllm-cache-tools."
"""Prefix of our annotations (``key``, ``layout``, ``path``, ``vllm``, ``torch``, ...)."""
MAX_TAGS = 200_000
"""Tags one listing reads (pages of :data:`TAG_PAGE`); a longer list is refused in one line."""
TAG_PAGE = 1000
MAX_PIN_TAGS = 1000
"""Tags that are none of our objects' read by ``prune-remote`` to find what they pin."""
MIN_RATE = 64 << 10
"""Bytes a second a response body must average once its first ``TIMEOUT[1]`` seconds are
over (a slow drip is refused, not waited on)."""
_READ = 1 << 20
_ACCEPT = ", ".join((
    "application/vnd.oci.image.manifest.v1+json", "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json"))
"""What a manifest GET accepts: ours, and the others a tag of someone else may name (a
registry answers 400 to a GET that does not accept what the tag names)."""
_SMALL = 1 << 20
MAX_MANIFEST_BYTES = 32 << 20
MAX_OBJECT_BYTES = 32 << 20
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$")
_REPO = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)"
                   r"[a-z0-9]+)*)*$")
_ENTRY = re.compile(r"^entries/(backend|aot)/([0-9a-f]{10}(?:-\d+)?|[0-9a-f]{64})\.json$")
_ENTRY_TAG = re.compile(r"^(backend|aot)-([0-9a-f]{10}(?:-\d+)?|[0-9a-f]{64})$")
_OBJECT = re.compile(r"^[A-Za-z0-9.-]+(?:/[A-Za-z0-9.-]+)*$")
_BLOB = re.compile(r"^blobs/[0-9a-f]{2}/([0-9a-f]{64})$")
_BLANK = hashlib.sha256(b"").hexdigest()


def parse_url(url: str) -> tuple[str, str, str | None]:
    """``(host[:port], repository, tag or None)`` of ``oci://HOST[:PORT]/REPO[:TAG]``."""
    rest = url.split("://", 1)[1].rstrip("/")
    host, _, path = rest.partition("/")
    tag = None
    if ":" in path.rsplit("/", 1)[-1]:
        path, _, tag = path.rpartition(":")
    if "@" in host:
        raise StoreError(f"{url.split('@')[-1]}: put registry credentials in "
                         "~/.docker/config.json or REGISTRY_AUTH_FILE, not in the URL")
    if not host or not path:
        raise StoreError(f"{url}: an OCI store is oci://HOST[:PORT]/REPOSITORY[:TAG]")
    if not _REPO.match(path):
        raise StoreError(f"{url}: {path!r} is not an OCI repository name (lowercase letters, "
                         "digits, . _ - and /)")
    if tag is not None and not _TAG.match(tag):
        raise StoreError(f"{url}: {tag!r} is not an OCI tag ([A-Za-z0-9_][A-Za-z0-9._-], at "
                         "most 128)")
    return host, path, tag


def path_tag(rel: str) -> str:
    """The tag of a non-blob object of the store (its path relative to the store)."""
    m = _ENTRY.match(rel)
    if m:
        return f"{m.group(1)}-{m.group(2)}"
    if not _OBJECT.match(rel) or "__" in rel or rel.startswith(("blobs/", ".", "-")):
        raise StoreError(f"{rel!r} cannot be named by an OCI tag")
    tag = rel.replace("/", "__")
    if not _TAG.match(tag):
        raise StoreError(f"{rel!r} cannot be named by an OCI tag (over 128 characters)")
    return tag


def tag_path(tag: str) -> str | None:
    """The store path a tag holds (``None``: a tag of someone else, or a pin)."""
    m = _ENTRY_TAG.match(tag)
    if m:
        return f"entries/{m.group(1)}/{m.group(2)}.json"
    path = tag.replace("__", "/")
    if "." not in tag or not _OBJECT.match(path):
        return None
    return path


class OciFileSystem:
    """The registry side of one ``oci://`` store (see the module docstring)."""

    protocol = ("oci",)

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        from vllm_cache_tools.fleet import oci_http

        opts = dict(storage_options or {})
        plain = opts.pop("plain_http", False)
        if opts:
            raise StoreError(f"{url}: unknown option(s) for an oci:// store: "
                             f"{', '.join(sorted(opts))} (known: plain_http=true)")
        self.host, self.repo, self.tag = parse_url(url)
        hostname = urlsplit(f"//{self.host}").hostname or ""
        self.insecure = plain in (True, "true", "1") or is_loopback(hostname)
        self.scheme = "http" if self.insecure else "https"
        self.base = f"{self.host}/{self.repo}"
        self.display = f"oci://{self.base}" + (f":{self.tag}" if self.tag else "")
        self._api = f"{self.scheme}://{self.host}/v2/{self.repo}"
        self._session = oci_http.session()
        self._auth: str | None = None
        self._lock = threading.Lock()
        self._pin: dict[str, dict[str, Any]] | None = None

    # ---- HTTP with the registry's challenge answered ----
    def _request(self, method: str, url: str, *, ok: Iterable[int] = (200,),
                 stream: bool = False, **kw: Any) -> Any:
        import requests

        url = url if "://" in url else urljoin(f"{self.scheme}://{self.host}", url)
        headers = dict(kw.pop("headers", None) or {})
        for attempt in (0, 1):
            if self._auth:
                headers["Authorization"] = self._auth
            try:
                r = self._session.request(method, url, headers=headers, stream=True,
                                          timeout=TIMEOUT, allow_redirects=True, **kw)
            except requests.exceptions.SSLError:
                raise StoreError(f"{self.display}: TLS with {self.host} failed (a registry "
                                 "served over plain HTTP: push, pull, ls, stats and "
                                 "prune-remote take -o plain_http=true)") from None
            except requests.exceptions.Timeout:
                raise StoreError(f"{self.display}: {self.host} did not answer within "
                                 f"{TIMEOUT[1]:.0f} s") from None
            except requests.exceptions.ConnectionError as exc:
                why = _reason(exc)
                raise StoreError(f"{self.display}: cannot reach {self.host} ({why})") from None
            except requests.exceptions.RequestException as exc:
                raise StoreError(f"{self.display}: {type(exc).__name__}") from None
            if not stream or r.status_code not in ok:
                _drain(r)
            if r.status_code == 401 and attempt == 0:
                r.close()
                self._authenticate(r.headers.get("WWW-Authenticate", ""))
                if hasattr(kw.get("data"), "seek"):
                    kw["data"].seek(0)
                continue
            break
        if r.status_code == 401:
            r.close()
            raise StoreError(f"{self.display}: the registry refused the credentials for "
                             f"{self.host} (401)")
        if r.status_code not in ok:
            r.close()
            raise self._error(method, r)
        return r

    def _authenticate(self, header: str) -> None:
        self._auth = authorization(header, host=self.host, repo=self.repo,
                                   display=self.display, insecure=self.insecure,
                                   read=lambda r, n: _Reader(r, "token answer").read(n),
                                   session=self._session)

    def _error(self, method: str, r: Any) -> StoreError:
        code = ""
        try:
            errs = json.loads(r.content[:4096]).get("errors") or []
            code = f": {errs[0].get('code')} {str(errs[0].get('message'))[:200]}"
        except (ValueError, AttributeError, IndexError, TypeError):
            pass
        if r.status_code == 403:
            return StoreError(f"{self.display}: access denied ({method} {r.status_code}{code})")
        if r.status_code == 405 and method == "DELETE":
            return StoreError(f"{self.display}: the registry does not allow deletes (405): "
                              "enable them there (distribution: storage.delete.enabled)")
        return StoreError(f"{self.display}: the registry answered {r.status_code} to a "
                          f"{method}{code}")

    # ---- the store's paths ----
    def _rel(self, path: str) -> str:
        path = path.rstrip("/")
        if path == self.base:
            return ""
        if not path.startswith(self.base + "/"):
            raise StoreError(f"{self.display}: {path} is outside the store")
        return path[len(self.base) + 1:]

    def _blob(self, rel: str) -> str | None:
        m = _BLOB.match(rel)
        return m.group(1) if m else None

    # ---- manifests ----
    def _manifest(self, ref: str) -> tuple[str, int, dict[str, Any]] | None:
        """``(digest, size, manifest)`` of a tag or digest, ``None`` when there is none."""
        r = self._request("GET", f"{self._api}/manifests/{ref}", ok=(200, 404), stream=True,
                          headers={"Accept": _ACCEPT})
        with r:
            if r.status_code == 404:
                return None
            raw = _Reader(r, "manifest").read(MAX_MANIFEST_BYTES + 1)
        if len(raw) > MAX_MANIFEST_BYTES:
            raise StoreError(f"{self.display}: manifest {ref[:80]} is over "
                             f"{MAX_MANIFEST_BYTES >> 20} MiB (not read)")
        digest = "sha256:" + hashlib.sha256(raw).hexdigest()
        if ref.startswith("sha256:") and ref != digest:
            raise StoreError(f"{self.display}: manifest {ref[:23]} has other bytes than its "
                             "digest says")
        try:
            data = jsontext.loads(raw, f"manifest {ref[:80]}")
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise StoreError(f"{self.display}: manifest {ref[:80]} is not JSON")
        return digest, len(raw), data

    def _put_manifest(self, ref: str, manifest: Mapping[str, Any]) -> dict[str, Any]:
        body = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
        media = str(manifest["mediaType"])
        self._request("PUT", f"{self._api}/manifests/{ref}", ok=(201, 200), data=body,
                      headers={"Content-Type": media})
        return {"mediaType": media, "digest": "sha256:" + hashlib.sha256(body).hexdigest(),
                "size": len(body)}

    def _pinned(self) -> dict[str, dict[str, Any]]:
        """The entries the URL's tag pins: store path -> manifest descriptor."""
        if self._pin is None:
            got = self._manifest(str(self.tag))
            pins: dict[str, dict[str, Any]] = {}
            if got is not None:
                index = got[2]
                if index.get("mediaType") != MEDIA_INDEX:
                    raise StoreError(f"{self.display}: tag {self.tag} is not an index of "
                                     "vllm-cache entries")
                pins = _pin_paths(index)
            self._pin = pins
        return self._pin

    def pins(self) -> dict[str, tuple[str, ...]]:
        """Every pin of the repository: store path of an entry -> the tags whose index
        lists it (``prune-remote`` keeps those entries). A tag is a pin when it is none of
        our objects' and names an image index of ours (:data:`ARTIFACT_PIN`); more than
        :data:`MAX_PIN_TAGS` such candidates is an error (which entries they pin would not
        be known)."""
        candidates = [t for t in self.tags() if not _ENTRY_TAG.match(t)
                      and not t.startswith("entries__") and t != "vllm-cache-store.json"]
        if len(candidates) > MAX_PIN_TAGS:
            raise StoreError(f"{self.display}: {len(candidates)} tags might pin entries (over "
                             f"{MAX_PIN_TAGS} read): which entries they pin is not known")
        out: dict[str, list[str]] = {}
        for t in sorted(candidates):
            got = self._manifest(t)
            if got is None:
                continue
            index = got[2]
            if index.get("mediaType") != MEDIA_INDEX or index.get(
                    "artifactType") != ARTIFACT_PIN:
                continue
            for p in _pin_paths(index):
                out.setdefault(p, []).append(t)
        return {p: tuple(ts) for p, ts in out.items()}

    def _ref(self, rel: str) -> str:
        """What names the artifact of ``rel``: its digest in the pinned index when the URL
        has a tag and pins it, else its own tag."""
        if self.tag and rel in self._pinned():
            return str(self._pinned()[rel]["digest"])
        return path_tag(rel)

    def _object(self, rel: str, cap: int) -> bytes | None:
        got = self._manifest(self._ref(rel))
        if got is None:
            return None
        _ours(got[2], rel, self.display)
        cfg = got[2].get("config")
        if not isinstance(cfg, dict) or not isinstance(cfg.get("digest"), str):
            raise StoreError(f"{self.display}: {rel} has no config")
        size = cfg.get("size")
        if not isinstance(size, int) or size < 0 or size > cap:
            return b"\0" * (cap + 1)  # over the caller's cap: it says so
        sha = cfg["digest"].removeprefix("sha256:")
        with self._open_blob(sha) as f:
            data = f.read(cap + 1)
        if len(data) <= cap and (len(data) != size
                                 or hashlib.sha256(data).hexdigest() != sha):
            raise StoreError(f"{self.display}: the config of {rel} has other bytes than its "
                             "descriptor says (size or digest)")
        return bytes(data)

    # ---- blobs ----
    def _open_blob(self, sha: str) -> Any:
        r = self._request("GET", f"{self._api}/blobs/sha256:{sha}", ok=(200, 404),
                          stream=True)
        if r.status_code == 404:
            r.close()
            raise FileNotFoundError(sha)
        return _Reader(r)

    def _upload(self, sha: str, chunks: Iterable[bytes]) -> None:
        with _Writer(self, sha) as w:
            for c in chunks:
                w.write(c)

    # ---- what Store calls ----
    def invalidate_cache(self, path: str | None = None) -> None:
        self._pin = None

    def unstrip_protocol(self, path: str) -> str:
        return f"oci://{path}"

    def exists(self, path: str) -> bool:
        rel = self._rel(path)
        if rel == "":
            r = self._request("GET", f"{self._api}/tags/list?n=1", ok=(200, 404))
            r.close()
            return bool(r.status_code == 200)
        sha = self._blob(rel)
        if sha is not None:
            r = self._request("HEAD", f"{self._api}/blobs/sha256:{sha}", ok=(200, 404))
            r.close()
            return bool(r.status_code == 200)
        if self.tag and rel in self._pinned():
            return True
        r = self._request("HEAD", f"{self._api}/manifests/{path_tag(rel)}", ok=(200, 404),
                          headers={"Accept": MEDIA_MANIFEST})
        r.close()
        return bool(r.status_code == 200)

    def cat_file(self, path: str, start: int | None = None, end: int | None = None) -> bytes:
        rel = self._rel(path)
        sha = self._blob(rel)
        cap = (end if end is not None else MAX_OBJECT_BYTES + 1)
        if sha is not None:
            with self._open_blob(sha) as f:
                data = bytes(f.read(cap))
        else:
            got = self._object(rel, min(cap, MAX_OBJECT_BYTES))
            if got is None:
                raise FileNotFoundError(path)
            data = got
        return data[start or 0:cap]

    def pipe_file(self, path: str, data: bytes) -> None:
        """An object: its bytes as a config blob, then the artifact that names it, tagged
        after the path (an index object also lists its entry's blobs as layers)."""
        rel = self._rel(path)
        sha = self._blob(rel)
        if sha is not None:
            self._upload(sha, [data])
            return
        cfg_sha = hashlib.sha256(data).hexdigest()
        self._upload(cfg_sha, [data])
        tag = path_tag(rel)
        entry = _ENTRY.match(rel)
        layers, ann = (_layers_and_annotations(data) if entry else ([], {}))
        manifest = {
            "schemaVersion": 2, "mediaType": MEDIA_MANIFEST,
            "artifactType": ARTIFACT_ENTRY if entry else ARTIFACT_OBJECT,
            "config": {"mediaType": ARTIFACT_ENTRY if entry else ARTIFACT_OBJECT,
                       "digest": f"sha256:{cfg_sha}", "size": len(data)},
            "layers": layers or [_empty_layer(self)],
            "annotations": {**ann, ANN + "path": rel},
        }
        self._put_manifest(tag, manifest)

    def open(self, path: str, mode: str = "rb", block_size: int | None = None) -> Any:
        rel = self._rel(path)
        sha = self._blob(rel)
        if sha is None:
            raise StoreError(f"{self.display}: {rel} is not a blob")
        if mode == "rb":
            return self._open_blob(sha)
        return _Writer(self, sha)

    def find(self, path: str, detail: bool = False) -> Any:
        """Store paths below ``path``: from the tag list (or the pinned index when the URL
        has a tag). Blobs are not listed: a registry cannot list them."""
        rel = self._rel(path)
        if rel == "blobs" or rel.startswith("blobs/"):
            return {} if detail else []
        if self.tag:
            rels = sorted(self._pinned())
        else:
            rels = sorted(p for p in (tag_path(t) for t in self.tags()) if p is not None)
        found = [f"{self.base}/{p}" for p in rels if rel == "" or p.startswith(rel + "/")]
        return {p: {"name": p, "size": None} for p in found} if detail else found

    def tags(self) -> list[str]:
        out: list[str] = []
        url = f"{self._api}/tags/list?n={TAG_PAGE}"
        while url:
            r = self._request("GET", url, ok=(200, 404), stream=True)
            with r:
                if r.status_code == 404:
                    return out
                try:
                    got = json.loads(_Reader(r, "tag list").read(8 << 20)).get("tags")
                except (ValueError, AttributeError):
                    raise StoreError(f"{self.display}: the tag list is not JSON") from None
                nxt = r.links.get("next", {}).get("url")
            out += [t for t in got or [] if isinstance(t, str)]
            if len(out) > MAX_TAGS:
                raise StoreError(f"{self.display}: the repository has over {MAX_TAGS} tags "
                                 "(not listed further)")
            url = urljoin(f"{self.scheme}://{self.host}", nxt) if nxt and got else ""
        return out

    def rm_file(self, path: str) -> None:
        """Remove an object's artifact (its manifest; the registry's garbage collection
        takes the blobs no manifest references)."""
        rel = self._rel(path)
        sha = self._blob(rel)
        if sha is not None:
            self._request("DELETE", f"{self._api}/blobs/sha256:{sha}", ok=(202, 404)).close()
            return
        got = self._manifest(path_tag(rel))
        if got is None:
            raise FileNotFoundError(path)
        _ours(got[2], rel, self.display, "not removed")
        self._request("DELETE", f"{self._api}/manifests/{got[0]}", ok=(202,)).close()

    # ---- the URL's tag ----
    def pin(self, rels: Iterable[str]) -> str | None:
        """Tag the URL's tag as an index of the entry artifacts at ``rels`` (by digest),
        with every object beside each (``entries/aot/<key>.json.sig``: any path that starts
        with the entry's path less ``.json``, then a dot), so a copy of the tag carries
        them; ``None`` (and nothing written) when the URL has no tag."""
        if not self.tag:
            return None
        entries = sorted(set(rels))
        beside = [p for p in (tag_path(t) for t in self.tags()) if p is not None]
        descs = []
        for rel in entries + sorted(p for p in beside if p not in entries and any(
                p.startswith(e[:-len(".json")] + ".") for e in entries)):
            got = self._manifest(path_tag(rel))
            if got is None:
                raise StoreError(f"{self.display}: {rel} is not in the registry")
            digest, size, m = got
            descs.append({"mediaType": MEDIA_MANIFEST, "digest": digest, "size": size,
                          "artifactType": m.get("artifactType") or ARTIFACT_OBJECT,
                          "annotations": {ANN + "path": rel, **{
                              k: v for k, v in (m.get("annotations") or {}).items()
                              if k in (ANN + "key", ANN + "layout")}}})
        self._put_manifest(self.tag, {"schemaVersion": 2, "mediaType": MEDIA_INDEX,
                                      "artifactType": ARTIFACT_PIN, "manifests": descs})
        self._pin = None
        return self.tag


def _ours(m: Mapping[str, Any], rel: str, display: str, what: str = "not read") -> None:
    """Refuse a manifest under one of our tags that is not an artifact of ours (an image,
    another tool's artifact): it is never read as ours, nor removed."""
    want = ARTIFACT_ENTRY if _ENTRY.match(rel) else ARTIFACT_OBJECT
    cfg = m.get("config")
    media = cfg.get("mediaType") if isinstance(cfg, dict) else None
    if m.get("mediaType") != MEDIA_MANIFEST or m.get("artifactType") != want or media != want:
        kind = str(m.get("artifactType") or media or m.get("mediaType"))[:100]
        error = BadIndex if want == ARTIFACT_ENTRY and what == "not read" else StoreError
        raise error(f"{display}: {rel} names an artifact that is not vllm-cache's "
                         f"({kind}): {what}")


def _pin_paths(index: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The entries a pin index lists: store path -> manifest descriptor."""
    pins: dict[str, dict[str, Any]] = {}
    for d in index.get("manifests") or []:
        p = (d.get("annotations") or {}).get(ANN + "path") if isinstance(d, dict) else None
        if isinstance(p, str) and _OBJECT.match(p) and p.startswith("entries/"):
            pins[p] = d
    return pins


def _empty_layer(fs: OciFileSystem) -> dict[str, Any]:
    """OCI 1.1's empty descriptor (``{}``), for an artifact with no files."""
    data = b"{}"
    sha = hashlib.sha256(data).hexdigest()
    fs._upload(sha, [data])
    return {"mediaType": "application/vnd.oci.empty.v1+json", "digest": f"sha256:{sha}",
            "size": 2}


def _layers_and_annotations(data: bytes) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The layers (each distinct blob of the entry and its snapshots, once) and the
    annotations of an index object's artifact."""
    try:
        doc = jsontext.loads(data, "index object", max_containers=1 << 22)
    except ValueError:
        doc = None
    entry = doc.get("entry") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or not isinstance(entry, dict):
        raise StoreError("an index object to publish is not one")
    seen: dict[str, int] = {}
    for f in [*(entry.get("files") or []), *(doc.get("extras") or [])]:
        if isinstance(f, dict) and isinstance(f.get("sha256"), str):
            seen.setdefault(f["sha256"], int(f.get("size") or 0))
    layers = [{"mediaType": MEDIA_FILE, "digest": f"sha256:{s}", "size": n}
              for s, n in seen.items()]
    versions: dict[str, Any] = entry.get("versions") or {}
    hw: dict[str, Any] = entry.get("hardware") or {}
    if not isinstance(versions, dict) or not isinstance(hw, dict):
        versions, hw = {}, {}
    ann = {ANN + "key": str(entry.get("key", "")), ANN + "layout": str(entry.get("layout", ""))}
    for k in ("vllm", "torch", "triton", "cuda"):
        if versions.get(k):
            ann[ANN + k] = str(versions[k])
    if hw.get("label"):
        ann[ANN + "hardware"] = str(hw["label"])
    if isinstance(doc.get("pushed_at"), (int, float)):
        import time

        ann["org.opencontainers.image.created"] = time.strftime(
            "%Y-%m-%dT%H:%M:%SZ", time.gmtime(doc["pushed_at"]))
    return layers, ann


class _Reader:
    """A response body, read as it arrives (``read(n)``: ``n`` bytes unless it ends first; a
    context manager). A body that comes slower than :data:`MIN_RATE` on average once its
    first ``TIMEOUT[1]`` seconds are over is an error: a registry that drips a blob byte by
    byte (each under the read timeout) is refused in bounded time, not waited on forever."""

    def __init__(self, r: Any, what: str = "blob download") -> None:
        self.r, self.what = r, what
        self.t0 = time.monotonic()
        self.got = 0

    def read(self, n: int = -1) -> bytes:
        import requests

        parts: list[bytes] = []
        left = n if n >= 0 else 1 << 62
        try:
            while left > 0:
                b = self.r.raw.read1(min(left, _READ), decode_content=True)
                if not b:
                    break
                parts.append(b)
                left -= len(b)
                self.got += len(b)
                slow = time.monotonic() - self.t0 - TIMEOUT[1] - self.got / MIN_RATE
                if slow > 0:
                    raise StoreError(f"the registry's {self.what} came at under "
                                     f"{MIN_RATE >> 10} KiB/s ({self.got} bytes in "
                                     f"{time.monotonic() - self.t0:.0f} s): given up")
        except StoreError:
            raise
        except (requests.exceptions.RequestException, OSError, Exception) as exc:
            raise StoreError(f"the registry's {self.what} broke off ({_reason(exc)})"
                             ) from None
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def close(self) -> None:
        self.r.close()

    def __enter__(self) -> _Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Writer:
    """``open(blob, "wb")``: an upload session, each ``write`` one PATCH of it (never more
    than one chunk in memory), closed with the digest the blob's name gives."""

    def __init__(self, fs: OciFileSystem, sha: str) -> None:
        self.fs, self.sha = fs, sha
        self.loc = ""
        self.start = 0

    def write(self, b: bytes) -> int:
        fs = self.fs
        if not self.loc:
            r = fs._request("POST", f"{fs._api}/blobs/uploads/", ok=(202,),
                            headers={"Content-Length": "0"})
            self.loc = r.headers.get("Location", "")
            r.close()
        if b:
            r = fs._request("PATCH", self.loc, ok=(202,), data=bytes(b), headers={
                "Content-Type": "application/octet-stream",
                "Content-Range": f"{self.start}-{self.start + len(b) - 1}"})
            self.loc = r.headers.get("Location", self.loc)
            r.close()
            self.start += len(b)
        return len(b)

    def close(self) -> None:
        if not self.loc:
            self.write(b"")
        sep = "&" if "?" in self.loc else "?"
        self.fs._request("PUT", f"{self.loc}{sep}digest=sha256:{self.sha}", ok=(201,),
                         headers={"Content-Length": "0"}).close()

    def __enter__(self) -> _Writer:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None:  # a failed source leaves the session unfinished: nothing made
            self.close()


def _drain(r: Any) -> None:
    """Read a short answer's body (at most :data:`_SMALL` bytes kept, the rest refused) so
    that its connection goes back to the pool; an answer that is not short, or comes at a
    drip, is an error (``requests`` would read it whole, in unbounded time)."""
    body = _Reader(r, "answer").read(_SMALL + 1)
    if len(body) > _SMALL:
        r.close()
        raise StoreError(f"the registry answered {r.status_code} with a body over "
                         f"{_SMALL >> 10} KiB (not read)")
    r._content = body
    r._content_consumed = True


def _reason(exc: BaseException) -> str:
    text = str(exc)
    for word in ("Connection refused", "Name or service not known", "timed out",
                 "No route to host", "Connection reset"):
        if word in text:
            return word
    return type(exc).__name__


__all__ = ["ANN", "ARTIFACT_ENTRY", "MAX_TAGS", "OciFileSystem", "parse_url", "path_tag",
           "tag_path"]
