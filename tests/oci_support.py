"""Real OCI registries on loopback for the ``oci://`` store tests: Debian's ``docker-registry``
(CNCF distribution 2.8) as a plain process on a free port, filesystem storage in a temporary
folder, deletes enabled (``prune-remote`` removes manifests); one more with htpasswd basic
auth (a bcrypt file made by ``htpasswd -B``, as an operator makes it). ``skopeo`` (Debian) is
the independent client of the interop tests.

The binaries come from Debian (``apt-get install docker-registry skopeo apache2-utils``); nothing
installs them for the tests: without them the registry tests skip, naming what is missing."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fleet_support import LoopbackServer

MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"

REGISTRY = "/usr/bin/docker-registry"
USER, PASSWORD = "alice", "pw-Zq81-never-printed"


def _needs(*exes: str) -> None:
    missing = [e for e in exes if not shutil.which(e) and not Path(e).is_file()]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (apt-get install docker-registry "
                    "skopeo apache2-utils)")


class Registry(LoopbackServer):
    def __init__(self, tmp: Path, name: str, htpasswd: Path | None = None,
                 auth: str = "") -> None:
        if htpasswd:
            auth = f"auth:\n  htpasswd:\n    realm: {name}\n    path: {htpasswd}\n"
        config = tmp / "config.yml"
        config.write_text(
            "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\n"
            f"storage:\n  filesystem:\n    rootdirectory: {tmp / 'data'}\n"
            "  delete:\n    enabled: true\n"
            f"{auth}http:\n  secret: tests-only\n")
        super().__init__(tmp, name, ["sh", "-c", "REGISTRY_HTTP_ADDR=127.0.0.1:{port} exec "
                                     f"{REGISTRY} serve {config}"])
        self.host = f"127.0.0.1:{self.port}"

    def url(self, repo: str) -> str:
        return f"oci://{self.host}/{repo}"


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    _needs(REGISTRY)
    server = Registry(tmp_path_factory.mktemp("registry"), "registry")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def auth_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    _needs(REGISTRY, "htpasswd")
    tmp = tmp_path_factory.mktemp("auth-registry")
    # bcrypt's lowest cost: the registry checks it on every request (cost 5 is the default)
    pw = subprocess.run(["htpasswd", "-Bbn", "-C", "4", USER, PASSWORD],
                        capture_output=True, text=True, check=True).stdout
    (tmp / "htpasswd").write_text(pw)
    server = Registry(tmp, "auth-registry", tmp / "htpasswd")
    try:
        yield server
    finally:
        server.stop()


def docker_config(folder: Path, host: str, user: str = USER, password: str = PASSWORD
                  ) -> Path:
    """``folder/config.json`` as ``docker login`` writes it (``auths`` with base64
    ``user:password``)."""
    folder.mkdir(parents=True, exist_ok=True)
    auth = base64.b64encode(f"{user}:{password}".encode()).decode()
    path = folder / "config.json"
    path.write_text(json.dumps({"auths": {host: {"auth": auth}}}))
    return path


class TokenService:
    """A Docker-token-spec service on loopback (``GET /token?service=&scope=`` with Basic
    credentials -> ``{"token": JWT}``), signing RS256 JWTs with a self-signed certificate sent
    in ``x5c``, which distribution checks against its ``rootcertbundle``: the bearer
    challenge a hosted registry gives, without one."""

    def __init__(self, tmp: Path) -> None:
        import datetime
        import http.server
        import threading

        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import padding, rsa
        from cryptography.x509.oid import NameOID

        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "token-issuer")])
        now = datetime.datetime.now(datetime.timezone.utc)
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                .public_key(key.public_key()).serial_number(1)
                .not_valid_before(now - datetime.timedelta(hours=1))
                .not_valid_after(now + datetime.timedelta(days=1)).sign(key, hashes.SHA256()))
        self.bundle = tmp / "token-root.pem"
        self.bundle.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        x5c = base64.b64encode(cert.public_bytes(serialization.Encoding.DER)).decode()
        self.requests = 0
        svc = self

        def b64(data: bytes) -> str:
            return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                from urllib.parse import parse_qs, urlsplit

                svc.requests += 1
                want = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
                if self.headers.get("Authorization") != want:
                    self.send_response(401)
                    self.end_headers()
                    return
                q = parse_qs(urlsplit(self.path).query)
                access = []
                for scope in q.get("scope", []):
                    kind, repo, actions = scope.split(":")
                    access.append({"type": kind, "name": repo,
                                   "actions": actions.split(",")})
                t = int(time.time())
                claims = {"iss": "token-issuer", "sub": USER, "aud": q["service"][0],
                          "exp": t + 300, "nbf": t - 10, "iat": t, "jti": str(t),
                          "access": access}
                head = b64(json.dumps({"typ": "JWT", "alg": "RS256", "x5c": [x5c]}).encode())
                body = b64(json.dumps(claims).encode())
                sig = key.sign(f"{head}.{body}".encode(), padding.PKCS1v15(), hashes.SHA256())
                out = json.dumps({"token": f"{head}.{body}.{b64(sig)}"}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.realm = f"http://127.0.0.1:{self.server.server_address[1]}/token"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="session")
def token_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """A registry behind bearer tokens from :class:`TokenService` (distribution's ``token``
    auth)."""
    _needs(REGISTRY)
    pytest.importorskip("cryptography")
    tmp = tmp_path_factory.mktemp("token-registry")
    svc = TokenService(tmp)
    auth = (f"auth:\n  token:\n    realm: {svc.realm}\n    service: test-registry\n"
            f"    issuer: token-issuer\n    rootcertbundle: {svc.bundle}\n")
    server = Registry(tmp, "token-registry", auth=auth)
    try:
        yield server
    finally:
        server.stop()
        svc.stop()


class LyingRegistry:
    """A loopback HTTP proxy in front of a real :class:`Registry` that lies in one way
    (``mode``), the rest passed through byte for byte:

    * ``index-sizes``: every entry artifact's index object (its config) claims each file is
      one byte shorter than it is; the manifest's config descriptor and the served config
      blob agree with the lie (a registry that lies coherently);
    * ``index-digests``: the same, with each file's sha256 replaced by another blob's of the
      same entry (when it has two) or a digest the registry has no blob for;
    * ``config-size``: the manifest's config descriptor claims a size its blob is not;
    * ``blob-bytes``: every file blob is served with one byte changed (same length);
    * ``blob-longer``: every file blob is served with 4 KiB more than claimed;
    * ``drip``: every file blob is served one byte per 0.2 s, never ending;
    * ``huge-index``: the URL's tag (and every manifest) is an endless JSON body;
    * ``foreign-tag``: the URL's tag names an image manifest that is none of ours.

    Blobs are told from our index objects by the manifests the proxy has served: a config
    digest is an index object, a layer digest a file."""

    def __init__(self, upstream: Registry, mode: str) -> None:
        import http.client
        import http.server
        import threading

        self.upstream, self.mode = upstream, mode
        self.configs: dict[str, bytes] = {}
        """Rewritten index objects served by their (new) digest."""
        self.files: set[str] = set()
        self.requests: list[str] = []
        self.stopping = threading.Event()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _forward(self) -> tuple[int, dict[str, str], bytes]:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else None
                conn = http.client.HTTPConnection("127.0.0.1", upstream.port, timeout=30)
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() in ("accept", "authorization", "content-type",
                                            "content-length", "content-range")}
                conn.request(self.command, self.path, body=body, headers=headers)
                r = conn.getresponse()
                data = r.read()
                out = {k: v for k, v in r.getheaders()
                       if k.lower() not in ("content-length", "connection",
                                            "transfer-encoding")}
                conn.close()
                return r.status, out, data

            def _send(self, status: int, headers: dict[str, str], data: bytes) -> None:
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            def _any(self) -> None:
                proxy.requests.append(f"{self.command} {self.path}")
                path = self.path.split("?", 1)[0]
                if "/blobs/sha256:" in path and self.command in ("GET", "HEAD"):
                    sha = path.rsplit("sha256:", 1)[1]
                    if sha in proxy.configs:
                        self._send(200, {"Docker-Content-Digest": f"sha256:{sha}"},
                                   proxy.configs[sha])
                        return
                    if sha in proxy.files and self.command == "GET":
                        self._blob(sha)
                        return
                if "/manifests/" in path and self.command == "GET":
                    if proxy.mode == "huge-index":
                        self._endless()
                        return
                    status, headers, data = self._forward()
                    if status == 200:
                        data = proxy._manifest(path, data)
                        headers["Docker-Content-Digest"] = (
                            "sha256:" + hashlib.sha256(data).hexdigest())
                    self._send(status, headers, data)
                    return
                self._send(*self._forward())

            def _blob(self, sha: str) -> None:
                status, headers, data = self._forward()
                if status != 200 or proxy.mode not in ("blob-bytes", "blob-longer", "drip"):
                    self._send(status, headers, data)
                    return
                if proxy.mode == "blob-bytes":
                    data = data[:-1] + bytes([data[-1] ^ 1]) if data else b"x"
                elif proxy.mode == "blob-longer":
                    data += b"\0" * 4096
                else:
                    self.send_response(200)
                    self.send_header("Content-Length", str(1 << 40))
                    self.end_headers()
                    for _ in range(10_000):
                        if proxy.stopping.wait(0.2):
                            break
                        try:
                            self.wfile.write(b"\0")
                            self.wfile.flush()
                        except OSError:
                            break
                    return
                self._send(status, headers, data)

            def _endless(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", MEDIA_INDEX)
                self.send_header("Content-Length", str(1 << 40))
                self.end_headers()
                chunk = b" " * (1 << 20)
                self.wfile.write(b'{"manifests": [')
                while not proxy.stopping.is_set():
                    try:
                        self.wfile.write(chunk)
                    except OSError:
                        break

            do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = _any

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: object, client_address: object) -> None:
                pass  # a client that gave up on a lie (the point of the test)

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.host = f"127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, repo: str) -> str:
        return f"oci://{self.host}/{repo}"

    def _manifest(self, path: str, data: bytes) -> bytes:
        """A manifest as the mode serves it (the files it lists remembered)."""
        repo, _, ref = path.removeprefix("/v2/").rpartition("/manifests/")
        try:
            m = json.loads(data)
        except ValueError:
            return data
        if not isinstance(m, dict):
            return data
        if self.mode == "foreign-tag" and not ref.startswith(("aot-", "backend-", "sha256:")) \
                and "." not in ref:
            foreign = {"schemaVersion": 2,
                       "mediaType": "application/vnd.oci.image.manifest.v1+json",
                       "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                  "digest": "sha256:" + "ab" * 32, "size": 2},
                       "layers": []}
            return json.dumps(foreign).encode()
        if m.get("artifactType") != "application/vnd.vllm-cache.entry.v1+json":
            return data
        self.files.update(x["digest"].removeprefix("sha256:") for x in m.get("layers") or [])
        cfg = m["config"]
        if self.mode == "config-size":
            cfg["size"] = int(cfg["size"]) // 2
            return json.dumps(m).encode()
        if self.mode not in ("index-sizes", "index-digests"):
            return data
        import requests

        sha = cfg["digest"].removeprefix("sha256:")
        raw = requests.get(f"http://{self.upstream.host}/v2/{repo}"
                           f"/blobs/sha256:{sha}", timeout=30).content
        doc = json.loads(raw)
        files = doc["entry"]["files"]
        shas = [f["sha256"] for f in files]
        for f in files:
            if self.mode == "index-sizes":
                f["size"] = max(0, int(f["size"]) - 1)
            else:
                other = [s for s in shas if s != f["sha256"]]
                f["sha256"] = other[0] if other else "0" * 64
        new = json.dumps(doc).encode()
        new_sha = hashlib.sha256(new).hexdigest()
        self.configs[new_sha] = new
        cfg.update(digest=f"sha256:{new_sha}", size=len(new))
        return json.dumps(m).encode()


    def stop(self) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()
