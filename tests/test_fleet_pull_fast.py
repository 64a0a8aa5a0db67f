"""``pull`` through the one CLI layer (cli/coercion.py), a pod's init step: the keywords, help,
errors and exit codes are those of typer's own conversion, and the store's client is imported
beside the rest. The decision itself (store, checks, exit codes) is tested through the CLI in
test_fleet_remote.py and test_fleet_realvllm.py."""

from __future__ import annotations

from typing import Any

import pytest

from tests.cli_layer_support import layer_checks
from vllm_cache_tools.cli.pull_run import run_pull

URL = "s3://bucket/store"
PLAIN = [
    [URL],
    [URL, "--json"],
    [URL, "--root", "/some/root", "--if-hit", "--check", "--", "/models/m",
     "--max-model-len", "128"],
    [URL, "abc123", "def", "--force", "-j", "4", "--usage", "llm", "--python", "/v/bin/python"],
    ["file:///shared/x", "--storage-option", "anon=true", "-o", "k=v", "--jobs", "256"],
    [URL, "--if-hit", "--", "--json", "--root", "x"],
    [URL, "--root=/r", "--jobs=3"],
]
LEFT_TO_TYPER = [
    [], ["--help"], [URL, "-h"], [URL, "--version"], [URL, "--bogus"], [URL, "--json", "--json"],
    [URL, "--root"], [URL, "--root", "-x"], [URL, "--root="], [URL, "-j=3"], [URL, "-j", "0"],
    [URL, "-j", "x"], ["--", URL], [URL, "--jobs", "300"],
]


test_plain_values_are_the_ones_typer_converts, test_help_and_errors_are_typers = layer_checks(
    "pull", "vllm_cache_tools.cli.pull_run.run_pull", run_pull, PLAIN, LEFT_TO_TYPER)


def test_the_store_client_is_imported_beside_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    """run_pull starts the backend import before anything else; a second start is a no-op
    and the Store waits for it."""
    from vllm_cache_tools.fleet import remote

    started: list[str] = []
    monkeypatch.setattr(remote, "_prefetched", set())
    real = remote.threading.Thread

    def spy(*a: Any, **kw: Any) -> Any:
        started.append(kw.get("name", ""))
        return real(*a, **kw)

    monkeypatch.setattr(remote.threading, "Thread", spy)
    remote.prefetch_backend("file:///x")
    remote.prefetch_backend("file:///y")
    assert started == ["vllm-cache-import-backend"]
    monkeypatch.setattr(remote, "_importing", list(remote._importing))
    remote.Store("file:///tmp")  # joins it
    assert all(not t.is_alive() for t in remote._importing)
