"""Benchmark: ``vllm-cache stats`` over 1,000,000 ledger events.

    python benchmarks/bench_stats.py [--events 1000000] [--hosts 200] [--repeat 3]

A fleet's ledgers are synthesized in the recorder's own line format (the ``json.dumps(event,
sort_keys=True, default=repr)`` of ``recorder/write.py``, with every field the recorder's
hooks write: argv, manifest digest, recorder_s, dynamo_s, reason, start id) into one shared
root, one ledger per host, beside the real entries of the shipped example cache
(examples/sample_cache: real manifests, so models are named). The mix: tensor-parallel sizes
1/2/4/8, 80% warm starts (an AOT hit per worker), 15% cold starts (AOT miss + backend miss
per worker, two prefixes for some models), 5% load failures (AOT load failure + backend hit).

Reported for ``--by model`` and ``--by entry``, each in a fresh ``vllm-cache stats --json``
process (page cache warm), with stats' memo (analyze/stats_memo.py) in a private folder:

* ``full read``: the memo off (``VLLM_CACHE_TOOLS_STATS_MEMO=0``): every line decoded and
  counted, what a first look at a fleet's ledgers costs (median of ``--repeat``);
* ``first run``: the memo on and empty: the full read plus writing the memos;
* ``later run``: nothing appended since: each host's kept sums taken as they are (median);
* ``N appended``: ``--append`` events appended to the ledgers since (then cut off again).

Each: wall time, CPU time (the process and its workers), the peak RSS of the process and of it
with its worker processes (PSS sampled; ledgers over 64 MB are read by up to 8 workers,
``--jobs 1`` for one process). Goals (issue 15): < 2 s and < 200 MB (workers included). Exit
status 1 when a count is wrong, a run needs 200 MB or more, or a later run misses 2 s. Results
also go to .bench/stats.json, with the 1-minute load average before each mode's runs
(``load``) and ``quiet_s``: the CPU time over min(CPUs, workers), what the run would take on
this machine with nothing else running (the load here comes from other work sharing it).
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
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "examples" / "sample_cache"
GOAL_S = 2.0
GOAL_MB = 200.0


def _models(root: Path, rng: random.Random) -> list[tuple[str, list[str], list[str], int]]:
    """30 models x a few entries each; the sample's real keys are the first model's."""
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
    return models


def _ledger_dir(root: Path) -> Path:
    return root / "torch_compile_cache" / ".vllm-cache-tools" / "ledger"


def _write_events(root: Path, events: int, hosts: int, seed: int, t0: float
                  ) -> tuple[int, int]:
    """Append ``events`` (or a few more: a start's lines stay together) to the hosts'
    ledgers, starts after ``t0``; returns (events, starts)."""
    models = _models(root, random.Random(0))
    rng = random.Random(seed)
    ledger = _ledger_dir(root)
    files = {h: open(ledger / f"pod-{h:03d}.jsonl", "a") for h in range(hosts)}  # noqa: SIM115
    clock = {h: t0 + rng.random() * 3600 for h in range(hosts)}
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
    return written, starts


def synthesize(root: Path, events: int, hosts: int, seed: int = 0) -> dict[str, int]:
    """A shared root with ``events`` ledger events from ``hosts`` hosts; returns counts."""
    shutil.copytree(SAMPLE, root, symlinks=True)
    ledger = _ledger_dir(root)
    for f in ledger.glob("*.jsonl"):
        f.unlink()
    ledger.mkdir(parents=True, exist_ok=True)
    written, starts = _write_events(root, events, hosts, seed, 1_790_000_000.0)
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


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, int, int, float, str]:
    """Wall seconds, peak RSS of the process (KiB), peak RSS of it and its workers together
    (KiB, sampled), CPU seconds (the process and the workers it waited for) and stdout of one
    child process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    tree = TreeRss(proc.pid)
    tree.start()
    out = proc.stdout.read() if proc.stdout else b""
    tree.done.set()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        err = proc.stderr.read().decode() if proc.stderr else ""
        raise SystemExit(f"{cmd} failed: {err}")
    return (wall, usage.ru_maxrss, max(tree.peak, usage.ru_maxrss),
            usage.ru_utime + usage.ru_stime, out.decode())


def _check(doc: dict[str, Any], events: int, starts: int) -> bool:
    counted = sum(n for tree in doc["events"].values() for n in tree.values())
    if counted != events or doc["totals"]["starts"] != starts:
        print(f"WRONG COUNTS: {counted} events / {doc['totals']['starts']} starts, "
              f"expected {events} / {starts}")
        return False
    return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--hosts", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--append", type=int, default=10_000,
                    help="events appended before the 'appended' run (then cut off again)")
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
    memo_home = bench / "stats-memo-home"
    env = {**os.environ, "XDG_CACHE_HOME": str(memo_home)}
    off = {**env, "VLLM_CACHE_TOOLS_STATS_MEMO": "0"}
    results: dict[str, Any] = {"synth": meta, "cpus": os.cpu_count(),
                               "load_avg_start": os.getloadavg(), "jobs": a.jobs,
                               "api": a.api}
    ok = True
    sizes = {f: f.stat().st_size for f in _ledger_dir(root).glob("*.jsonl")}
    for by in ("model", "entry"):
        jobs = ["--jobs", str(a.jobs)] if a.jobs else []
        cmd = [*exe_cmd, "stats", "--root", str(root), "--by", by, "--json", *jobs]
        shutil.rmtree(memo_home, ignore_errors=True)
        loads: dict[str, float] = {}

        def mode(name: str, n: int, e: dict[str, str], cmd: list[str] = cmd,
                 loads: dict[str, float] = loads) -> list[Any]:
            loads[name] = round(os.getloadavg()[0], 2)
            return [timed(cmd, e) for _ in range(n)]

        modes = {
            # Every line read (no memo): what any first look at a fleet's ledgers costs.
            "full read": mode("full read", a.repeat, off),
            # The first run with the memo: the full read and the memos written.
            "first run": mode("first run", 1, env),
            # Later runs, nothing appended: the hosts' kept sums.
            "later run": mode("later run", a.repeat, env),
        }
        for runs in modes.values():
            ok = _check(json.loads(runs[-1][4]), meta["events"], meta["starts"]) and ok
        if a.append:
            added, new_starts = _write_events(root, a.append, a.hosts, 1, 1_800_000_000.0)
            try:
                modes[f"{added:,} appended"] = runs = mode(f"{added:,} appended", 1, env)
            finally:
                for f, n in sizes.items():
                    os.truncate(f, n)
            ok = _check(json.loads(runs[-1][4]), meta["events"] + added,
                        meta["starts"] + new_starts) and ok
        out = results[f"by_{by}"] = {}
        for mode, runs in modes.items():
            wall = statistics.median(r[0] for r in runs)
            cpu = statistics.median(r[3] for r in runs)
            rss_mb = max(r[1] for r in runs) / 1024
            tree_mb = max(r[2] for r in runs) / 1024
            good = wall < GOAL_S and tree_mb < GOAL_MB
            if mode in ("later run",) or tree_mb >= GOAL_MB:
                ok = ok and good
            # Worker processes: none when every host's sums were kept (a later run).
            workers = 1 if mode == "later run" else min(a.jobs or 8, os.cpu_count() or 1)
            quiet = cpu / max(1, min(os.cpu_count() or 1, workers))
            out[mode] = {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
                         "quiet_s": round(quiet, 3), "load": loads[mode],
                         "peak_rss_mb": round(rss_mb, 1),
                         "peak_rss_with_workers_mb": round(tree_mb, 1),
                         "runs_s": [round(r[0], 3) for r in runs]}
            print(f"stats --by {by:<6} -j {a.jobs or 'auto'} {mode:>16}: {wall:6.2f} s wall "
                  f"(CPU {cpu:5.2f} s, quiet ~{quiet:4.2f} s, load {loads[mode]:.1f}), peak RSS "
                  f"{rss_mb:4.0f} MB, with its workers "
                  f"{tree_mb:4.0f} MB  {'ok' if good else 'over the goal'}", flush=True)
    shutil.rmtree(memo_home, ignore_errors=True)
    print(f"{meta['events']:,} events, {meta['starts']:,} starts, {meta['hosts']} host ledgers "
          f"({meta['ledger_bytes'] / 1e6:.0f} MB); goals < {GOAL_S:.0f} s, < {GOAL_MB:.0f} MB")
    results["load_avg_end"] = os.getloadavg()
    print(f"machine: {os.cpu_count()} CPUs, load average {results['load_avg_start'][0]:.1f} "
          f"at the start, {results['load_avg_end'][0]:.1f} at the end")
    bench.mkdir(exist_ok=True)
    (bench / "stats.json").write_text(json.dumps(results, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
