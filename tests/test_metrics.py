"""Fleet metrics outside vLLM (issue 29 item 2): ``stats --format openmetrics|prometheus`` and
``serve-metrics``, over the real ledgers of the harness' ``recorder`` scenario (hits, misses
and a real load failure) and ``fleet`` scenario (two hosts). Every exposition passes
``promtool check metrics`` (Debian's ``prometheus`` package; skipped, with the reason, where it
is absent) or, for OpenMetrics, prometheus_client's strict OpenMetrics parser; a real
Prometheus server scrapes ``serve-metrics`` over loopback and evaluates every expression of
docs/grafana-dashboard.json."""

from __future__ import annotations

import json
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse
from prometheus_client.parser import text_string_to_metric_families as text_parse

from tests.conftest import run_cli
from tests.realvllm.harness import SCENARIOS, ScenarioRun, copy_root, run_scenario
from vllm_cache_tools.analyze.stats import stats
from vllm_cache_tools.views.metrics import PREFIX, exported_names

pytestmark = pytest.mark.realvllm

REPO = Path(__file__).resolve().parent.parent
DASHBOARD = REPO / "docs" / "grafana-dashboard.json"
PROMTOOL = shutil.which("promtool")
PROMETHEUS = shutil.which("prometheus")
NO_PROMTOOL = "promtool is absent (apt-get install prometheus): the expositions are not linted"


@pytest.fixture(scope="module")
def recorder() -> ScenarioRun:
    return run_scenario(SCENARIOS["recorder"])


@pytest.fixture(scope="module")
def fleet() -> ScenarioRun:
    return run_scenario(SCENARIOS["fleet"])


def promtool_check(text: str) -> None:
    if PROMTOOL is None:
        pytest.skip(NO_PROMTOOL)
    res = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True,
                         text=True, timeout=30)
    assert res.returncode == 0 and not res.stdout.strip() and not res.stderr.strip(), (
        res.stdout + res.stderr)


def samples(text: str, openmetrics: bool = False) -> dict[tuple[str, frozenset[tuple[str, str]]],
                                                          float]:
    parse = om_parse if openmetrics else text_parse
    return {(s.name, frozenset(s.labels.items())): s.value
            for fam in parse(text) for s in fam.samples}


def value(got: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str,
          **labels: str) -> float:
    return got[PREFIX + name, frozenset(labels.items())]


def test_textfile_holds_the_stats_numbers(recorder: ScenarioRun) -> None:
    root = str(recorder.vllm_root)
    r = stats(root)
    res = run_cli("stats", root, "--format", "prometheus")
    assert res.returncode == 0 and not res.stderr, res.stderr
    promtool_check(res.stdout)
    om = run_cli("stats", root, "--format", "openmetrics")
    assert om.returncode == 0 and om.stdout.endswith("# EOF\n")
    for got in (samples(res.stdout), samples(om.stdout, openmetrics=True)):
        # The real load failure of the scenario (start 7's edited llama.py) and its hits.
        assert value(got, "load_failures_total", tree="aot") == r.events["aot"]["load-failure"] == 1
        assert value(got, "hits_total", tree="aot") == r.events["aot"]["hit"] == 2
        assert value(got, "misses_total", tree="backend") == r.events["backend"]["miss"]
        assert value(got, "hits_total", tree="backend") == 0
        (g,) = r.groups
        model = g.name
        t = r.totals
        assert [value(got, "starts_total", model=model, outcome=o) for o in
                ("hit", "miss", "load_failure", "disabled")] == [
            t.hits, t.misses, t.load_failures, t.disabled] == [2, 5, 1, 0]
        assert value(got, "compile_seconds_total", model=model) == pytest.approx(
            t.compile_seconds)
        net = value(got, "net_saved_seconds", model=model)
        assert net == pytest.approx(t.net_seconds)
        # Its sign is the machine's: the tiny model compiles in seconds, so its hits cost more
        # loading than they saved on a fast CPU and less on a slow one (+1.8 s on a 2-core CI
        # machine); stats calls the group a regression exactly where it is negative.
        assert (net < 0) == g.counters.regression
        assert value(got, "entries", model=model) == r.entries == 11
        assert value(got, "size_bytes", model=model) == r.size_bytes
        assert value(got, "ledger_hosts") == 1
        # Every name is ours and no label value is an entry key or a path of the root.
        assert {n for n, _ in got} <= exported_names()
        keys = {u.key for u in r.never_hit}
        for _, labels in got:
            for _k, v in labels:
                assert v not in keys and root not in v


def test_by_host_bounded_by_the_hosts(fleet: ScenarioRun) -> None:
    res = run_cli("stats", str(fleet.vllm_root), "--format", "prometheus", "--by", "host")
    assert res.returncode == 0, res.stderr
    promtool_check(res.stdout)
    got = samples(res.stdout)
    hosts = {dict(labels).get("host") for name, labels in got
             if name == PREFIX + "starts_total"}
    assert hosts == {"pod-a", "pod-b"}
    assert value(got, "starts_total", host="pod-a", outcome="hit") == 1
    assert value(got, "starts_total", host="pod-b", outcome="miss") == 1
    assert value(got, "ledger_hosts") == 2
    # Entries and bytes stay per model whatever --by is.
    assert sum(v for (n, _), v in got.items() if n == PREFIX + "entries") == 4


def test_drift_counts_are_drifts_factors(fleet: ScenarioRun) -> None:
    """The fleet's starts differ in a per-run worker id that vLLM hashes (two entries) and in
    three things it does not (VLLM_HOST_IP, the host name, an undeclared VLLM_* variable):
    test_insight_realvllm proves those against vLLM's own logs."""
    res = run_cli("stats", str(fleet.vllm_root), "--format", "prometheus", "--drift")
    assert res.returncode == 0, res.stderr
    promtool_check(res.stdout)
    got = samples(res.stdout)
    model = next(dict(labels)["model"] for n, labels in got if n == PREFIX + "entries")
    assert [value(got, "drift_factors", model=model, **{"class": c}) for c in
            ("per_host", "per_run", "per_install", "setting")] == [0, 1, 0, 0]
    assert value(got, "drift_unhashed_factors", model=model) == 3
    res = run_cli("stats", str(fleet.vllm_root), "--drift")
    assert res.returncode == 2 and "give it with --format" in res.stderr


@pytest.mark.parametrize("args,says", [
    (["--format", "xml"], "--format must be one of openmetrics, prometheus"),
    (["--format", "openmetrics", "--by", "day"], "not day (one label value per day is "
                                                 "unbounded)"),
    (["--format", "openmetrics", "--by", "entry"], "unbounded"),
    (["--format", "openmetrics", "--json"], "either --json or --format"),
])
def test_bad_options_one_line(tmp_path: Path, args: list[str], says: str) -> None:
    res = run_cli("stats", str(tmp_path), *args)
    assert res.returncode == 2 and not res.stdout
    assert res.stderr.count("\n") == 1 and says in res.stderr, res.stderr


def test_a_source_without_anything_is_one_line(tmp_path: Path) -> None:
    res = run_cli("stats", str(tmp_path / "none"), "--format", "openmetrics")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    res = run_cli("serve-metrics", "--port", "0", str(tmp_path / "none"))
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr


# ---- serve-metrics: a real exporter on loopback ----

class Exporter:
    def __init__(self, proc: subprocess.Popen[str], port: int, first_line: str) -> None:
        self.proc, self.port, self.first_line = proc, port, first_line

    def get(self, accept: str | None = None, path: str = "/metrics") -> tuple[int, str, str]:
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}")
        if accept:
            req.add_header("Accept", accept)
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, resp.headers["Content-Type"], resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers["Content-Type"], exc.read().decode()


# Ctrl-C as a terminal delivers it: SIGINT at its default disposition in the exporter, also
# where pytest itself was started in the background (a shell starts background jobs with
# SIGINT ignored, exec keeps it ignored, and Python then installs no KeyboardInterrupt).
_SIGINT_DEFAULT = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                   "os.execv(sys.argv[1], sys.argv[1:])")


def start_exporter(*args: str) -> Exporter:
    exe = str(Path(sys.executable).with_name("vllm-cache"))
    proc = subprocess.Popen([sys.executable, "-c", _SIGINT_DEFAULT, exe, "serve-metrics",
                             "--port", "0", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    line = proc.stderr.readline()
    m = re.search(r"http://127\.0\.0\.1:(\d+)/metrics", line)
    if m is None:
        proc.kill()
        raise AssertionError(f"no address in {line!r}: {proc.communicate()}")
    return Exporter(proc, int(m.group(1)), line)


@pytest.fixture
def exporter(recorder: ScenarioRun, tmp_path: Path) -> Iterator[tuple[Exporter, Path]]:
    root = copy_root(recorder.vllm_root, tmp_path / "root")
    ex = start_exporter(str(root), "--refresh", "1")
    try:
        yield ex, root
    finally:
        if ex.proc.poll() is None:
            ex.proc.kill()
            ex.proc.communicate()


def test_serve_metrics_scrape_refresh_and_sigterm(exporter: tuple[Exporter, Path]) -> None:
    ex, root = exporter
    status, ctype, body = ex.get()
    assert status == 200 and ctype.startswith("text/plain; version=0.0.4")
    promtool_check(body)
    status, ctype, om = ex.get("application/openmetrics-text; version=1.0.0,text/plain;q=0.5")
    assert status == 200 and ctype.startswith("application/openmetrics-text")
    got = samples(om, openmetrics=True)
    assert value(got, "hits_total", tree="aot") == 2
    assert samples(body) == got | {}  # one answer, two encodings
    assert ex.get(path="/nope")[0] == 404

    # A new start's hit appended to the real ledger: not seen until the answer is a second old.
    (ledger,) = (root / "torch_compile_cache" / ".vllm-cache-tools" / "ledger").iterdir()
    hit = next(json.loads(x) for x in ledger.read_text().splitlines() if '"hit"' in x)
    hit.update(start="feedfacefeedface", time=hit["time"] + 1, pid=hit["pid"] + 1)
    # The kept answer's second counts from when it was computed: let the one the scrapes
    # above kept expire, so that the next scrape computes one no earlier than t0 (under load
    # the scrapes above can take over a second, and the kept answer was then older than the
    # time since t0 told).
    time.sleep(1.1)
    t0 = time.monotonic()
    assert value(samples(ex.get()[2]), "hits_total", tree="aot") == 2
    with ledger.open("a") as f:
        f.write(json.dumps(hit, sort_keys=True) + "\n")
    again = samples(ex.get()[2])
    if time.monotonic() - t0 < 0.8:  # still the kept answer
        assert value(again, "hits_total", tree="aot") == 2
    deadline = time.monotonic() + 15
    while value(again, "hits_total", tree="aot") == 2 and time.monotonic() < deadline:
        time.sleep(0.3)
        again = samples(ex.get()[2])
    assert value(again, "hits_total", tree="aot") == 3

    # A second exporter on the taken port: one line, status 2.
    taken = run_cli("serve-metrics", "--port", str(ex.port), str(root))
    assert taken.returncode == 2 and "already in use" in taken.stderr
    assert taken.stderr.count("\n") == 1

    ex.proc.send_signal(signal.SIGTERM)
    _, err = ex.proc.communicate(timeout=10)
    assert ex.proc.returncode == 0 and err.strip() == "stopped" and "Traceback" not in err


def test_a_source_that_breaks_fails_the_scrape_not_the_exporter(
        exporter: tuple[Exporter, Path]) -> None:
    ex, root = exporter
    assert ex.get()[0] == 200
    moved = root.with_name("gone")
    root.rename(moved)
    time.sleep(1.1)
    status, _, body = ex.get()
    assert status == 503 and "does not exist" in body
    moved.rename(root)
    assert ex.get()[0] == 200
    ex.proc.send_signal(signal.SIGINT)
    ex.proc.communicate(timeout=10)
    assert ex.proc.returncode == 0


# ---- the dashboard ----

def dashboard_exprs() -> list[str]:
    d = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in d["panels"] for t in p["targets"]]
    exprs += [v["definition"] for v in d["templating"]["list"] if "definition" in v]
    return exprs


def test_dashboard_names_only_metrics_we_export() -> None:
    exprs = dashboard_exprs()
    assert len(exprs) >= 10
    names = exported_names()
    for e in exprs:
        used = set(re.findall(r"\bvllm_compile_cache_[a-z_]+\b", e))
        assert used, e
        assert used <= names, (e, used - names)
    text = json.dumps(json.loads(DASHBOARD.read_text()))
    for title in ("Hit ratio", "Net compile time saved", "Load failures", "Bytes per model"):
        assert title in text


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.skipif(PROMETHEUS is None, reason="prometheus is absent (apt-get install "
                    "prometheus): no real scrape")
def test_real_prometheus_scrapes_and_every_dashboard_expression_answers(
        exporter: tuple[Exporter, Path]) -> None:
    """Prometheus asks for OpenMetrics: it must take our exposition, and each dashboard
    expression (Grafana's variables filled in) must give a series."""
    _, root = exporter
    ex = start_exporter(str(root), "--drift")
    assert PROMETHEUS is not None
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="vct-prom-") as d:
        conf = Path(d) / "prometheus.yml"
        conf.write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            "scrape_configs:\n"
            "  - job_name: vllm-cache\n"
            f"    static_configs: [{{targets: ['127.0.0.1:{ex.port}']}}]\n")
        prom = subprocess.Popen(
            [PROMETHEUS, f"--config.file={conf}", f"--storage.tsdb.path={d}/data",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            def query(q: str) -> list[object]:
                url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode(
                    {"query": q})
                with urllib.request.urlopen(url, timeout=10) as resp:
                    doc = json.loads(resp.read())
                assert doc["status"] == "success", doc
                return list(doc["data"]["result"])

            deadline = time.monotonic() + 30
            up: list[object] = []
            while time.monotonic() < deadline:
                try:
                    up = query('count(vllm_compile_cache_hits_total{job="vllm-cache"}) > 0')
                    if up and len(query("count_over_time(vllm_compile_cache_hits_total"
                                        "[1m]) > 2")) == 2:
                        break
                except OSError:
                    pass
                time.sleep(0.5)
            assert up, prom.stderr
            health = query('up{job="vllm-cache"}')
            assert [r["value"][1] for r in health] == ["1"]  # type: ignore[index]
            for e in dashboard_exprs():
                if e.startswith("label_values("):
                    continue
                q = e.replace("$job", ".*").replace("$__range", "1h")
                assert query(q), e
        finally:
            for p in (prom, ex.proc):
                p.send_signal(signal.SIGTERM)
                try:
                    p.communicate(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.communicate()


def test_a_store_gives_its_sizes_only(tmp_path: Path) -> None:
    """A remote store (file://, pushed from the shipped example's real entries) holds no
    ledger: its metrics are entries and bytes per model, said by basis="files"."""
    url = f"file://{tmp_path / 'store'}"
    push = run_cli("push", "--filter", "layout=aot", url, "--root",
                   str(REPO / "examples" / "sample_cache"))
    assert push.returncode == 0, push.stderr
    res = run_cli("stats", url, "--format", "prometheus")
    assert res.returncode == 0, res.stderr
    promtool_check(res.stdout)
    got = samples(res.stdout)
    assert value(got, "source_info", basis="files", by="model", kind="remote") == 1
    assert sum(v for (n, _), v in got.items() if n == PREFIX + "entries") == 4
    assert not any(n.startswith(PREFIX + "starts") for n, _ in got)
