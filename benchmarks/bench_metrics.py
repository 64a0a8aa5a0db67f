"""Benchmark: a Prometheus scrape of ``vllm-cache serve-metrics`` (issue 29: our part of a
``/metrics`` scrape < 5 ms).

    python benchmarks/bench_metrics.py [--events 100000] [--hosts 50] [--scrapes 200]

A fleet's ledgers are synthesized as :mod:`benchmarks.bench_stats` does (the recorder's own
line format, one ledger per host in one shared root beside the shipped example's real
entries). Then, in one run, on loopback:

* ``scrape (kept answer)``: ``serve-metrics --refresh 3600``, ``--scrapes`` GETs of
  ``/metrics`` on one kept-alive connection, as Prometheus scrapes (OpenMetrics asked for):
  what a scrape costs between two counts, HTTP included;
* ``scrape (count again)``: ``--refresh 0``: every scrape counts the ledgers again (stats'
  memo warm: nothing was appended), what a scrape costs when the answer has expired;
* ``encode``: the exposition of the kept report in this process (the render alone);
* reference: ``cat`` of the same ledgers to /dev/null (page cache warm), the same number of
  times, each a fresh process, as reading the ledger is the least a fresh answer costs.

Medians and 95th percentiles in milliseconds. Exit status 1 when the kept-answer scrape's
median misses 5 ms or a scrape's numbers differ from ``stats``'s."""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.bench_stats import synthesize  # noqa: E402

GOAL_MS = 5.0
ACCEPT = "application/openmetrics-text; version=1.0.0,text/plain;version=0.0.4;q=0.5"


def _ms(xs: list[float]) -> str:
    xs = sorted(xs)
    p95 = xs[min(len(xs) - 1, int(0.95 * len(xs)))]
    return f"median {1000 * statistics.median(xs):8.3f} ms   p95 {1000 * p95:8.3f} ms"


def _serve(root: Path, refresh: str, env: dict[str, str]) -> tuple[subprocess.Popen[str], int]:
    exe = Path(sys.executable).with_name("vllm-cache")
    proc = subprocess.Popen([str(exe), "serve-metrics", "--port", "0", "--refresh", refresh,
                             str(root)], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            text=True, env=env)
    assert proc.stderr is not None
    line = proc.stderr.readline()
    m = re.search(r":(\d+)/metrics", line)
    if m is None:
        proc.kill()
        raise SystemExit(f"serve-metrics did not start: {line}{proc.communicate()[1]}")
    return proc, int(m.group(1))


def _scrapes(port: int, n: int) -> tuple[list[float], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    times, body = [], b""
    for _ in range(n):
        t0 = time.perf_counter()
        conn.request("GET", "/metrics", headers={"Accept": ACCEPT})
        resp = conn.getresponse()
        body = resp.read()
        times.append(time.perf_counter() - t0)
        if resp.status != 200:
            raise SystemExit(f"scrape: HTTP {resp.status}: {body[:200]!r}")
    conn.close()
    return times, body


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    proc.communicate(timeout=30)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--hosts", type=int, default=50)
    ap.add_argument("--scrapes", type=int, default=200)
    ap.add_argument("--recounts", type=int, default=10,
                    help="scrapes with --refresh 0 (each counts the ledgers again)")
    a = ap.parse_args()
    bench = REPO / ".bench"
    root = bench / f"stats-{a.events}-{a.hosts}"
    meta_path = root / "synth.json"
    if not meta_path.exists():
        shutil.rmtree(root, ignore_errors=True)
        meta = synthesize(root, a.events, a.hosts)
        meta_path.write_text(json.dumps(meta))
    meta = json.loads(meta_path.read_text())
    env = {**os.environ, "XDG_CACHE_HOME": str(bench / "metrics-memo-home")}
    ledgers = sorted(str(p) for p in (root / "torch_compile_cache" / ".vllm-cache-tools" /
                                      "ledger").glob("*.jsonl"))
    print(f"ledgers: {meta['events']:,} events, {meta['starts']:,} starts, "
          f"{meta['hosts']} hosts, {meta['ledger_bytes'] / 1e6:.1f} MB; "
          f"load {os.getloadavg()[0]:.2f}", flush=True)

    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    from vllm_cache_tools.analyze.stats import stats
    from vllm_cache_tools.views.metrics import exposition

    os.environ["XDG_CACHE_HOME"] = env["XDG_CACHE_HOME"]
    report = stats(root)
    enc = []
    for _ in range(a.scrapes):
        t0 = time.perf_counter()
        text = exposition(report, "openmetrics")
        enc.append(time.perf_counter() - t0)

    proc, port = _serve(root, "3600", env)
    try:
        _scrapes(port, 5)  # warm: the first connection, the first encoding
        kept, body = _scrapes(port, a.scrapes)
    finally:
        _stop(proc)
    proc, port = _serve(root, "0", env)
    try:
        recount, _ = _scrapes(port, a.recounts)
    finally:
        _stop(proc)
    cat = []
    for _ in range(a.recounts):
        t0 = time.perf_counter()
        subprocess.run(["cat", *ledgers], stdout=subprocess.DEVNULL, check=True)
        cat.append(time.perf_counter() - t0)

    ok = True
    got = {s.name + str(sorted(s.labels.items())): s.value
           for f in text_string_to_metric_families(body.decode()) for s in f.samples}
    want = {s.name + str(sorted(s.labels.items())): s.value
            for f in text_string_to_metric_families(text.decode()) for s in f.samples}
    if got != want or body != text:
        print("WRONG: the scrape differs from the exposition of stats' report")
        ok = False
    print(f"exposition: {len(body):,} bytes, {len(want)} samples")
    print(f"scrape (kept answer)   {_ms(kept)}   ({a.scrapes} scrapes, HTTP on loopback)")
    print(f"scrape (count again)   {_ms(recount)}   ({a.recounts} scrapes, --refresh 0)")
    print(f"encode (in process)    {_ms(enc)}")
    print(f"reference: cat ledgers {_ms(cat)}   ({a.recounts} runs)")
    ratio = statistics.median(kept) / statistics.median(cat)
    print(f"kept-answer scrape / cat of the ledgers: {ratio:.3f}; "
          f"count-again scrape / cat: {statistics.median(recount) / statistics.median(cat):.1f}")
    if 1000 * statistics.median(kept) >= GOAL_MS:
        print(f"GOAL MISSED: kept-answer scrape median >= {GOAL_MS} ms")
        ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
