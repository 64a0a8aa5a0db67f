"""Hostile figures (issue 23, item 5): ``stats``, ``stats --by host`` and ``drift`` over one
large ledger of valid events from very many hosts, with peak memory and throughput.

    python benchmarks/hostile_ledgers.py [--mib 1024] [--hosts 1000000] [--keep]

One ledger file of ``--mib`` MiB is written in the recorder's own line format (every field
its hooks write, as benchmarks/bench_stats.py does) into a copy of examples/sample_cache (real
entries and manifests), from ``--hosts`` distinct host names, each start (1-8 workers, 80% warm
hits, 15% cold misses, 5% load failures) on a host drawn at random, so the hosts are
interleaved through the file. It goes to a temporary folder under ``$TMPDIR`` and is removed
at the end (``--keep`` keeps it for a second run; ``--root`` reads an existing one).

Each command runs in a fresh child process (stats' memo off, as a first look at a fleet costs)
and is measured there: wall seconds, MB/s over the ledger's bytes, and peak RSS (``VmHWM`` of
the child since its exec, workers included by taking the largest of the process tree's
peaks, as :mod:`tests.fuzz.isolated` measures). Beside them, in the same run, two references
over the same file: ``wc -l`` (reading the bytes) and a Python loop decoding every line with
``json.loads`` (what any reader of JSON lines pays); each command's time is also given as a
ratio to that loop's (``x json``: the machine's load, shared by both, mostly cancels). Exit
status 1 when a command needs 300 MB
or more, fails, or does not say where a cap was reached."""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "examples" / "sample_cache"
GOAL_MB = 300.0


def _keys(root: Path) -> tuple[list[str], list[str]]:
    cc = root / "torch_compile_cache"
    aot = sorted(p.name for p in (cc / "torch_aot_compile").iterdir())
    backend = sorted(p.name for p in cc.iterdir() if len(p.name) == 10)
    return aot, backend


def write_ledger(root: Path, mib: int, hosts: int, seed: int = 0) -> dict[str, int]:
    """A copy of the sample root whose ledger folder holds one file of about ``mib`` MiB
    from ``hosts`` hosts; returns what was written."""
    shutil.copytree(SAMPLE, root, symlinks=True)
    ledger = root / "torch_compile_cache" / ".vllm-cache-tools" / "ledger"
    for old in ledger.glob("*.jsonl"):
        old.unlink()
    ledger.mkdir(parents=True, exist_ok=True)
    real_aot, real_backend = _keys(root)
    rng = random.Random(seed)
    models = []
    for m in range(30):
        n = rng.choice((1, 2, 3))
        models.append(([real_aot[m % len(real_aot)]] if m == 0 else
                       [f"{rng.getrandbits(256):064x}" for _ in range(n)],
                       [real_backend[m % len(real_backend)]] if m == 0 else
                       [f"{rng.getrandbits(40):010x}" for _ in range(n)], f"org/model-{m}"))
    target = mib << 20
    written = events = starts = 0
    t = 1_790_000_000.0
    host_order = list(range(hosts))
    rng.shuffle(host_order)
    with open(ledger / "fleet.jsonl", "w") as f:
        while written < target:
            # Every host at least once (in a shuffled order), then at random.
            h = host_order[starts] if starts < hosts else rng.randrange(hosts)
            aot, backend, name = models[rng.randrange(len(models))]
            i = rng.randrange(len(aot))
            tp = rng.choice((1, 1, 1, 1, 2, 2, 4))
            kind = rng.random()
            argv = ["/usr/local/bin/vllm", "serve", name, "--tensor-parallel-size", str(tp)]
            start = f"{rng.getrandbits(64):016x}"
            t += rng.uniform(0.01, 0.2)
            lines = []
            for rank in range(tp):
                base = {"argv": argv, "host": f"node-{h:07d}.pool-a.example.internal",
                        "pid": rng.randrange(1000, 4_000_000), "rank": f"rank_{rank}_0",
                        "start": start, "v": 1}
                if kind < 0.80:
                    evs: list[dict[str, Any]] = [
                        {"event": "hit", "tree": "aot", "key": aot[i], "prefix": "",
                         "seconds": round(rng.uniform(1, 6), 4), "reason": None}]
                elif kind < 0.95:
                    evs = [{"event": "miss", "tree": "aot", "key": aot[i], "prefix": "",
                            "seconds": 0.0001, "reason": None},
                           {"event": "miss", "tree": "backend", "key": backend[i],
                            "prefix": "backbone", "seconds": round(rng.uniform(10, 90), 4),
                            "dynamo_s": round(rng.uniform(0.5, 3), 4)}]
                else:
                    evs = [{"event": "load-failure", "tree": "aot", "key": aot[i],
                            "prefix": "", "seconds": 0.8, "reason": "'function' object has "
                            "no attribute 'finalize_loading'"},
                           {"event": "hit", "tree": "backend", "key": backend[i],
                            "prefix": "backbone", "seconds": round(rng.uniform(1, 5), 4),
                            "dynamo_s": round(rng.uniform(0.5, 3), 4)}]
                for n, e in enumerate(evs):
                    event = {**base, **e, "time": round(t + rank * 0.01 + n * 5.0, 6),
                             "manifest": f"{rng.getrandbits(64):016x}",
                             "recorder_s": round(rng.uniform(0.005, 0.03), 6)}
                    lines.append(json.dumps(event, sort_keys=True))
            text = "\n".join(lines) + "\n"
            f.write(text)
            written += len(text)
            events += len(lines)
            starts += 1
    return {"bytes": written, "events": events, "starts": starts,
            "hosts": min(hosts, starts)}


def _peak_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _tree(pid: int) -> list[int]:
    out = [pid]
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return out
    for k in kids:
        out += _tree(int(k))
    return out


def measure(cmd: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Wall seconds and the peak RSS (MB) of the largest process of the child's tree, each
    process's ``VmHWM`` (its own peak since its exec) sampled every 20 ms until it ends."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    peaks: dict[int, int] = {}
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            for p in _tree(proc.pid):
                peaks[p] = max(peaks.get(p, 0), _peak_kib(p))
            done.wait(0.02)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    out, err = proc.communicate()
    done.set()
    th.join()
    wall = time.perf_counter() - t0
    return {"wall_s": round(wall, 2), "peak_mb": round(max(peaks.values(), default=0) / 1024, 1),
            "rc": proc.returncode, "stdout": out.decode(errors="replace"),
            "stderr": err.decode(errors="replace")}


JSON_DECODE = """
import json, sys
n = 0
with open(sys.argv[1], "rb") as f:
    for line in f:
        json.loads(line)
        n += 1
print(n)
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--hosts", type=int, default=1_000_000)
    ap.add_argument("--root", type=Path, default=None, help="a root written before (--keep)")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--quick", action="store_true", help="64 MiB, 60,000 hosts")
    ap.add_argument("--only", default=None, help="comma-separated: wc,json,stats,host,drift")
    ap.add_argument("--before", type=Path, default=None, help="another checkout of this "
                    "project (e.g. the main branch): its stats, stats --by host and drift "
                    "are measured too, in the same run, for a before/after table")
    a = ap.parse_args()
    if a.quick:
        a.mib, a.hosts = 64, 60_000
    tmp = None
    if a.root is None:
        tmp = Path(tempfile.mkdtemp(prefix="vct-hostile-ledgers-"))
        root = tmp / "root"
        t0 = time.perf_counter()
        meta = write_ledger(root, a.mib, a.hosts)
        (root / "synth.json").write_text(json.dumps(meta))
        print(f"wrote {meta} to {root} in {time.perf_counter() - t0:.0f} s", flush=True)
    else:
        root = a.root
        meta = json.loads((root / "synth.json").read_text())
    try:
        return _run(a, root, meta)
    finally:
        if tmp is not None and not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp is not None:
            print(f"kept {root} (remove it when done)")


def _run(a: argparse.Namespace, root: Path, meta: dict[str, Any]) -> int:
    ledger = root / "torch_compile_cache" / ".vllm-cache-tools" / "ledger" / "fleet.jsonl"
    size_mb = ledger.stat().st_size / 1e6
    env = {**os.environ, "VLLM_CACHE_TOOLS_STATS_MEMO": "0"}
    exe = str(Path(sys.executable).parent / "vllm-cache")
    runs = {
        "wc": ("reference: wc -l", ["wc", "-l", str(ledger)]),
        "json": ("reference: json.loads per line", [sys.executable, "-c", JSON_DECODE,
                                                     str(ledger)]),
        "stats": ("stats", [exe, "stats", "--root", str(root), "--json"]),
        "host": ("stats --by host", [exe, "stats", "--root", str(root), "--by", "host",
                                     "--json"]),
        "drift": ("drift", [exe, "drift", "--root", str(root), "--json"]),
    }
    if a.before is not None:
        old = [sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv.pop(1)); "
               "from vllm_cache_tools.cli import main; main()", str(a.before.resolve())]
        for name in ("stats", "host", "drift"):
            label, cmd = runs[name]
            runs[f"before-{name}"] = (f"{label} (before)", [*old, *cmd[1:]])
    only = a.only.split(",") if a.only else list(runs)
    ok = True
    results: dict[str, Any] = {"ledger": meta, "cpus": os.cpu_count(),
                               "load_avg_start": os.getloadavg()[0]}
    print(f"{meta['bytes'] / 2**20:.0f} MiB ledger, {meta['events']:,} events, "
          f"{meta['starts']:,} starts, {meta['hosts']:,} hosts; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs", flush=True)
    for name in only:
        label, cmd = runs[name]
        r = measure(cmd, env)
        good = r["rc"] == 0 and r["peak_mb"] < GOAL_MB
        note = ""
        base = name.removeprefix("before-")
        if base in ("stats", "host", "drift") and r["rc"] == 0:
            doc = json.loads(r["stdout"])
            if base in ("stats", "host"):
                counted = sum(n for tree in doc["events"].values() for n in tree.values())
                good = good and counted == meta["events"] and \
                    doc["totals"]["starts"] == meta["starts"]
                note = f"{counted:,} events, {doc['totals']['starts']:,} starts, " \
                    f"{doc['hosts']:,} hosts, {len(doc['groups'])} groups"
            caps = doc.get("caps", [])
            if name == "host" and meta["hosts"] > 10_000:  # (before: no caps)
                good = good and any("host" in c for c in caps)
            if caps:
                note += f"; caps: {' | '.join(caps)}"
        elif r["rc"] != 0:
            note = r["stderr"].strip().splitlines()[-1] if r["stderr"].strip() else ""
        ok = ok and (good or name in ("wc", "json") or name.startswith("before-"))
        results[name] = {k: v for k, v in r.items() if k not in ("stdout", "stderr")}
        results[name]["mb_s"] = round(size_mb / r["wall_s"], 1)
        ref = results.get("json", {}).get("wall_s")
        if ref and name != "json":
            results[name]["x_json"] = round(r["wall_s"] / ref, 2)
        ratio = f"{r['wall_s'] / ref:5.2f}x json" if ref and name != "json" else " " * 11
        print(f"{label:<35} {r['wall_s']:7.2f} s  {size_mb / r['wall_s']:7.1f} MB/s  {ratio}  "
              f"peak RSS "
              f"{r['peak_mb']:7.1f} MB  {'ok' if good else 'OVER/WRONG'}  {note}", flush=True)
    results["load_avg_end"] = os.getloadavg()[0]
    bench = REPO / ".bench"
    bench.mkdir(exist_ok=True)
    (bench / "hostile_ledgers.json").write_text(json.dumps(results, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
