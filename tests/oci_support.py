"""Real OCI registries on loopback for the ``oci://`` store tests: Debian's ``docker-registry``
(CNCF distribution 2.8) as a plain process on a free port, filesystem storage in a temporary
folder, deletes enabled (``prune-remote`` removes manifests); one more with htpasswd basic
auth (a bcrypt file made by ``htpasswd -B``, as an operator makes it). ``skopeo`` (Debian) is
the independent client of the interop tests.

The binaries come from Debian (``apt-get install docker-registry skopeo apache2-utils``); nothing
installs them for the tests: without them the registry tests skip, naming what is missing."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fleet_support import LoopbackServer

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
