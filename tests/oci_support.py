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
    def __init__(self, tmp: Path, name: str, htpasswd: Path | None = None) -> None:
        auth = (f"auth:\n  htpasswd:\n    realm: {name}\n    path: {htpasswd}\n"
                if htpasswd else "")
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
