"""A real Google Cloud Storage server on loopback for the ``gs://`` store tests:
``gcp-storage-emulator`` (PyPI, pure Python: the JSON API gcsfs speaks, incl. simple and
resumable uploads), started as a plain process on a free port; gcsfs finds it through
``STORAGE_EMULATOR_HOST``, as it would a real emulator in CI.

gcsfs >= 2026.x probes a bucket for zonal / hierarchical-namespace support over gRPC, which no
emulator answers (a TLS hello to the HTTP port, then a hang): ``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT
=false`` turns that probe off, and is what a user of an emulator sets too."""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fleet_support import LoopbackServer


class GcsServer(LoopbackServer):
    def __init__(self, tmp: Path, exe: str) -> None:
        super().__init__(tmp, "gcs", [exe, "start", "--host", "127.0.0.1", "--port", "{port}",
                                      "--in-memory", "--default-bucket", "fleet", "--quiet"])

    @property
    def env(self) -> dict[str, str]:
        return {"STORAGE_EMULATOR_HOST": self.endpoint,
                "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"}


@pytest.fixture(scope="session")
def gcs_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GcsServer]:
    # Both come with the test extra: a missing one is a broken test environment, not a skip.
    exe = shutil.which("gcp-storage-emulator") or os.path.join(
        os.path.dirname(sys.executable), "gcp-storage-emulator")
    server = GcsServer(tmp_path_factory.mktemp("gcs"), exe)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def gcs(gcs_server: GcsServer, monkeypatch: pytest.MonkeyPatch) -> str:
    """``gs://fleet/<test>``: the emulator's bucket, a prefix per test, with this process's
    environment pointing gcsfs at the emulator (CLI children inherit it)."""
    for k, v in gcs_server.env.items():
        monkeypatch.setenv(k, v)
    import fsspec

    fsspec.config.conf.clear()
    return f"gs://fleet/t{time.monotonic_ns()}"
