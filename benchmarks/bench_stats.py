"""Benchmark: ``vllm-cache stats`` over 1,000,000 ledger events.

    python benchmarks/bench_stats.py [--events 1000000] [--hosts 200] [--repeat 3]

A fleet's ledgers are synthesized in the recorder's own line format (the ``json.dumps(event,
sort_keys=True, default=repr)`` of ``recorder/write.py``, with every field the recorder's
hooks write: argv, manifest digest, recorder_s, dynamo_s, reason, start id) into one shared
root, one ledger per host, beside the real entries of the shipped example cache
(examples/sample_cache: real manifests, so models are named). The mix: tensor-parallel sizes
1/2/4/8, 80% warm starts (an AOT hit per worker), 15% cold starts (AOT miss + backend miss
per worker, two prefixes for some models), 5% load failures (AOT load failure + backend hit).

Reported: wall time (median of ``--repeat`` runs, page cache warm), the peak RSS of the real
``vllm-cache stats --json`` process and of it with its worker processes (ledgers over 64 MB
are read by up to 8 workers; ``--jobs 1`` for one process), for ``--by model`` and ``--by
entry``. Goals (issue 15): < 2 s and < 200 MB (workers included). Exit status 1 when a goal is
missed. Results also go to .bench/stats.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "examples" / "sample_cache"
GOAL_S = 2.0
GOAL_MB = 200.0


def synthesize(root: Path, events: int, hosts: int, seed: int = 0) -> dict[str, int]:
    """A shared root with ``events`` ledger events from ``hosts`` hosts; returns counts."""
    rng = random.Random(seed)
    shutil.copytree(SAMPLE, root, symlinks=True)
    ledger = root / "torch_compile_cache" / ".vllm-cache-tools" / "ledger"
    for f in ledger.glob("*.jsonl"):
        f.unlink()
    ledger.mkdir(parents=True, exist_ok=True)
    # 30 models x a few entries each; the sample's real keys are the first model's.
    real_aot = sorted(p.name for p in (root / "torch_compile_cache" / "torch_aot_compile")
                      .iterdir())
    real_backend = sorted(p.name for p in (root / "torch_compile_cache").iterdir()
                          if len(p.name) == 10)
    models = []
    for m in range(30):
        n = rng.choice((1, 2, 3))
        aot = real_aot[:n] if m == 0 else [f"{rng.getrandbits(256):064x}" for _ in range(n)]
        backend = real_backend[:n] if m == 0 else [f"{rng.getrandbits(40):010x}"
                                                   for _ in range(n)]
        models.append((f"org/model-{m}", aot, backend, rng.choice((1, 1, 2))))
    files = {h: open(ledger / f"pod-{h:03d}.jsonl", "w") for h in range(hosts)}  # noqa: SIM115
    clock = {h: 1_790_000_000.0 + rng.random() * 3600 for h in range(hosts)}
    written = starts = 0
    try:
        while written < events:
            h = rng.randrange(hosts)
            name, aot, backend, prefixes = models[rng.randrange(len(models))]
            i = rng.randrange(len(aot))
            tp = rng.choice((1, 1, 1, 2, 2, 4, 8))
            kind = rng.random()
            argv = ["/usr/local/bin/vllm", "serve", name, "--tensor-parallel-size", str(tp),
                    "--port", "8000", "--api-key", "<redacted:3f9c0a1b2c4d>"]
            start = f"{rng.getrandbits(64):016x}"
            t = clock[h] = clock[h] + rng.uniform(60, 900)
            for rank in range(tp):
                pid = rng.randrange(1000, 4_000_000)
                base = {"argv": argv, "host": f"pod-{h:03d}", "pid": pid,
                        "rank": f"rank_{rank}_0", "start": start, "v": 1}
                evs = []
                if kind < 0.80:
                    evs.append({"event": "hit", "tree": "aot", "key": aot[i], "prefix": "",
                                "seconds": round(rng.uniform(1, 6), 4), "reason": None})
                elif kind < 0.95:
                    evs.append({"event": "miss", "tree": "aot", "key": aot[i], "prefix": "",
                                "seconds": 0.0001, "reason": None})
                    for p in ("backbone", "eagle_head")[:prefixes]:
                        evs.append({"event": "miss", "tree": "backend", "key": backend[i],
                                    "prefix": p, "seconds": round(rng.uniform(10, 90), 4),
                                    "dynamo_s": round(rng.uniform(0.5, 3), 4)})
                else:
                    evs.append({"event": "load-failure", "tree": "aot", "key": aot[i],
                                "prefix": "", "seconds": 0.8, "reason":
                                "Compiling model again due to a load failure from "
                                f"/cache/{aot[i]}/rank_{rank}_0/model, reason: 'function' "
                                "object has no attribute 'finalize_loading'"})
                    for p in ("backbone", "eagle_head")[:prefixes]:
                        evs.append({"event": "hit", "tree": "backend", "key": backend[i],
                                    "prefix": p, "seconds": round(rng.uniform(1, 5), 4),
                                    "dynamo_s": round(rng.uniform(0.5, 3), 4)})
                for n, e in enumerate(evs):
                    event = {**base, **e, "time": t + rank * 0.01 + n * 5.0,
                             "manifest": f"{rng.getrandbits(64):016x}",
                             "recorder_s": round(rng.uniform(0.005, 0.03), 6)}
                    files[h].write(json.dumps(event, sort_keys=True, default=repr) + "\n")
                    written += 1
            starts += 1
    finally:
        for f in files.values():
            f.close()
    size = sum(f.stat().st_size for f in ledger.glob("*.jsonl"))
    return {"events": written, "starts": starts, "hosts": hosts, "ledger_bytes": size}


API_RUN = """
import json, sys
from vllm_cache_tools.analyze.stats import stats
from vllm_cache_tools.views.insight import stats_document
a = sys.argv
def opt(name):
    return a[a.index(name) + 1] if name in a else None
r = stats(opt("--root"), by=opt("--by"), jobs=int(opt("--jobs") or 0) or None)
sys.stdout.write(json.dumps(stats_document(r)) + chr(10))
"""


def _rss_kib(pid: int) -> int:
    """Proportional set size (pages shared by the forked workers counted once in all),
    else the resident set size."""
    for path, field in ((f"/proc/{pid}/smaps_rollup", "Pss:"), (f"/proc/{pid}/status",
                                                                  "VmRSS:")):
        try:
            with open(path) as f:
                for line in f:
                    if line.startswith(field):
                        return int(line.split()[1])
        except OSError:
            continue
    return 0


def _children(pid: int) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(d))
            except (OSError, ValueError, IndexError):
                continue
    return out


class TreeRss(threading.Thread):
    """Peak memory of a process and its worker processes together (their PSS summed), sampled
    every 20 ms (the kernel's ru_maxrss covers one process; stats' workers are its
    children)."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak, self.done = pid, 0, threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            total = _rss_kib(self.pid) + sum(_rss_kib(c) for c in _children(self.pid))
            self.peak = max(self.peak, total)
            self.done.wait(0.02)


def timed(cmd: list[str]) -> tuple[float, int, int, str]:
    """Wall seconds, peak RSS of the process (KiB), peak RSS of it and its workers together
    (KiB, sampled) and stdout of one child process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    tree = TreeRss(proc.pid)
    tree.start()
    out = proc.stdout.read() if proc.stdout else b""
    tree.done.set()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        err = proc.stderr.read().decode() if proc.stderr else ""
        raise SystemExit(f"{cmd} failed: {err}")
    return wall, usage.ru_maxrss, max(tree.peak, usage.ru_maxrss), out.decode()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--hosts", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=None, help="stats --jobs (default: its own)")
    ap.add_argument("--api", action="store_true", help="time the library call in a child "
                    "process instead of the vllm-cache command")
    a = ap.parse_args()
    bench = REPO / ".bench"
    root = bench / f"stats-{a.events}-{a.hosts}"
    meta_path = root / "synth.json"
    if not meta_path.exists():
        shutil.rmtree(root, ignore_errors=True)
        t0 = time.perf_counter()
        meta = synthesize(root, a.events, a.hosts)
        meta_path.write_text(json.dumps(meta))
        print(f"synthesized {meta} in {time.perf_counter() - t0:.0f}s", flush=True)
    meta = json.loads(meta_path.read_text())
    exe = str(Path(sys.executable).parent / "vllm-cache")
    if a.api:
        # The library call and the JSON document in a fresh process (no typer/rich parsing):
        # for machines without the CLI's dependencies.
        exe_cmd = [sys.executable, "-c", API_RUN]
    elif not os.path.exists(exe):
        exe_cmd = [sys.executable, "-c", "from vllm_cache_tools.cli import main; main()"]
    else:
        exe_cmd = [exe]
    results = {"synth": meta, "cpus": os.cpu_count(), "load_avg": os.getloadavg(),
               "jobs": a.jobs, "api": a.api}
    ok = True
    for by in ("model", "entry"):
        jobs = ["--jobs", str(a.jobs)] if a.jobs else []
        runs = [timed([*exe_cmd, "stats", "--root", str(root), "--by", by, "--json", *jobs])
                for _ in range(a.repeat)]
        wall = statistics.median(r[0] for r in runs)
        rss_mb = max(r[1] for r in runs) / 1024
        tree_mb = max(r[2] for r in runs) / 1024
        doc = json.loads(runs[-1][3])
        counted = sum(n for tree in doc["events"].values() for n in tree.values())
        if counted != meta["events"] or doc["totals"]["starts"] != meta["starts"]:
            print(f"WRONG COUNTS: {counted} events / {doc['totals']['starts']} starts, "
                  f"expected {meta['events']} / {meta['starts']}")
            ok = False
        good = wall < GOAL_S and tree_mb < GOAL_MB
        ok = ok and good
        results[f"by_{by}"] = {"wall_s": round(wall, 3), "peak_rss_mb": round(rss_mb, 1),
                               "peak_rss_with_workers_mb": round(tree_mb, 1),
                               "runs_s": [round(r[0], 3) for r in runs]}
        print(f"stats --by {by:<6} -j {a.jobs or 'auto'}: {meta['events']:,} events, "
              f"{meta['starts']:,} starts, {meta['hosts']} host ledgers "
              f"({meta['ledger_bytes'] / 1e6:.0f} MB): {wall:.2f} s (goal < {GOAL_S:.0f} s), "
              f"peak RSS {rss_mb:.0f} MB, with its workers {tree_mb:.0f} MB (goal < "
              f"{GOAL_MB:.0f} MB) {'ok' if good else 'MISSED'}", flush=True)
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end")
    bench.mkdir(exist_ok=True)
    (bench / "stats.json").write_text(json.dumps(results, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
