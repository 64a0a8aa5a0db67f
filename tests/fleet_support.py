"""Fixtures of the fleet tests: moto's standalone S3 server on a free loopback port (a real
S3-compatible HTTP server speaking the S3 protocol to the real s3fs/aiobotocore client: no
mocked fsspec), and bundles made from the harness's real caches.

Why moto: it installs from PyPI with the test extra (``moto[server]``), starts in ~1.5 s as
a plain process on 127.0.0.1 with no Docker, no network and no account, and implements the
S3 calls s3fs makes (multipart upload, list-objects-v2 pagination, HEAD, DELETE). MinIO would
be closer to production but ships as a binary download, which this machine cannot fetch."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

# Never let botocore look for EC2 instance credentials (a request to a link-local address):
# the tests talk to 127.0.0.1 only.
NO_IMDS = {"AWS_EC2_METADATA_DISABLED": "true"}
CREDS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", **NO_IMDS}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LoopbackServer:
    """A server process on a free port of 127.0.0.1, its output in ``<tmp>/<name>.log``,
    ready once the port accepts connections."""

    def __init__(self, tmp: Path, name: str, argv: list[str], env: dict[str, str] | None = None
                 ) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log = open(tmp / f"{name}.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen([a.format(port=self.port) for a in argv], stdout=self.log,
                                     stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"{name} did not start (see {self.log.name})") from None
                time.sleep(0.1)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


class MotoServer(LoopbackServer):
    def __init__(self, tmp: Path) -> None:
        super().__init__(tmp, "moto", [sys.executable, "-m", "moto.server", "-H", "127.0.0.1",
                                       "-p", "{port}"], env={**os.environ, **NO_IMDS})

    @property
    def env(self) -> dict[str, str]:
        return {**CREDS, "AWS_ENDPOINT_URL": self.endpoint}

    def bucket(self, name: str) -> str:
        import s3fs

        fs = s3fs.S3FileSystem(key="testing", secret="testing", endpoint_url=self.endpoint,
                               skip_instance_cache=True)
        fs.mkdir(name)
        return f"s3://{name}"


@pytest.fixture(scope="session")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    pytest.importorskip("s3fs")
    pytest.importorskip("moto")
    server = MotoServer(tmp_path_factory.mktemp("moto"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3(moto: MotoServer, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
       ) -> str:
    """A fresh bucket on the moto server, with this process's AWS_* variables pointing at
    it (CLI children inherit them)."""
    for k, v in moto.env.items():
        monkeypatch.setenv(k, v)
    import fsspec
    import s3fs

    fsspec.config.conf.clear()
    # Each test module that imports these fixtures gets its own moto server (a session
    # fixture is per defining module), and s3fs caches filesystem instances without the
    # endpoint (it comes from AWS_ENDPOINT_URL): a cached instance from an earlier module
    # would still talk to that module's server ("The specified bucket does not exist").
    s3fs.S3FileSystem.clear_instance_cache()
    name = "b" + str(abs(hash(request.node.nodeid)) % 10**10)
    return moto.bucket(name)


def tree_digests(root: Path) -> dict[str, str]:
    import hashlib

    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink():
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out
