"""Benchmark ``vllm-cache log`` against ``grep -c`` on a ~1 GB log made of real vLLM lines.

    python benchmarks/bench_log.py [--size-mb 1024] [--mix serving|dense] [--runs 3]

The log is generated from the real DEBUG logs the test harness recorded
(``~/.cache/vllm-cache-tools-tests/caches/*/start-*.log``; run ``python -m
tests.realvllm.harness`` first, or pass ``--logs DIR``):

* ``serving`` (default): what a long-running server's log looks like: a real start log, then
  ~16 MB of the real runtime lines those logs hold after engine start-up (batches, engine loop,
  request and shutdown lines), and again, so a 1 GB file holds ~64 complete starts;
* ``dense``: real start logs back to back and nothing else (~13,000 starts per GB): the
  worst case, where most lines are compile lines.

Both tools run in subprocesses on the same file in the same run, after one read to warm the
page cache; the best of ``--runs`` is compared. ``grep -c`` writes to a pipe, not /dev/null
(GNU grep stops at the first match when its output is /dev/null). Peak RSS is that of the
largest process in the parser's process tree (RUSAGE_CHILDREN of a wrapper), i.e. the Python
parser or its grep pre-filter, whichever is larger. Exits 1 when the parser is slower than
half of grep -c or its peak RSS reaches 100 MB.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOAL_RATIO = 0.5
GOAL_RSS_MB = 100.0
FILLER_EVERY = 16 << 20

WRAPPER = (
    "import resource, subprocess, sys, time\n"
    "t = time.perf_counter()\n"
    "p = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE)\n"
    "n = 0\n"
    "while True:\n"
    "    b = p.stdout.read(1 << 20)\n"
    "    if not b: break\n"
    "    n += len(b)\n"
    "rc = p.wait()\n"
    "dt = time.perf_counter() - t\n"
    "r = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "sys.stderr.write(f'BENCH {dt:.6f} {r.ru_maxrss} {n} {rc}\\n')\n"
)


def real_logs(root: str | None) -> list[Path]:
    base = root or os.path.expanduser(
        os.path.join(os.environ.get("VCT_TEST_HOME", "~/.cache/vllm-cache-tools-tests"),
                     "caches"))
    # Only finished scenarios (done.json): a log still being written would be cut short.
    paths = sorted(Path(p) for p in glob.glob(os.path.join(base, "*", "start-*.log"))
                   if (Path(p).parent / "done.json").exists())
    if not paths:
        paths = sorted(Path(p) for p in glob.glob(os.path.join(base, "start-*.log")))
    return [p for p in paths if p.stat().st_size > 0]


def runtime_lines(logs: list[bytes]) -> bytes:
    """The real lines each log has after the engine finished starting."""
    parts = []
    for data in logs:
        i = data.find(b"init engine (profile")
        if i >= 0:
            parts.append(data[data.find(b"\n", i) + 1:])
    return b"".join(parts)


def generate(path: Path, size: int, mix: str, logs: list[bytes]) -> int:
    filler = runtime_lines(logs)
    starts = 0
    with open(path, "wb", buffering=1 << 20) as f:
        n = 0
        while n < size:
            log = logs[starts % len(logs)]
            f.write(log)
            n += len(log)
            starts += 1
            if mix == "serving" and filler:
                m = 0
                while m < FILLER_EVERY and n < size:
                    f.write(filler)
                    m += len(filler)
                    n += len(filler)
    return starts


def run_measured(cmd: list[str]) -> tuple[float, float, int, int]:
    """(seconds, peak RSS MB of the largest process in the tree, stdout bytes, rc)."""
    p = subprocess.run([sys.executable, "-c", WRAPPER, *cmd], stderr=subprocess.PIPE,
                       text=True, check=False)
    line = [ln for ln in p.stderr.splitlines() if ln.startswith("BENCH ")]
    if not line:
        raise SystemExit(f"benchmark wrapper failed: {p.stderr.strip()[-500:]}")
    _, dt, rss, n, rc = line[-1].split()
    return float(dt), int(rss) / 1024.0, int(n), int(rc)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--mix", choices=("serving", "dense"), default="serving")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--logs", help="folder holding real vLLM logs (start-*.log)")
    ap.add_argument("--keep", help="write the generated log here and keep it")
    ap.add_argument("--pure-python", action="store_true",
                    help="also time the parser without its grep pre-filter (slow)")
    args = ap.parse_args()

    paths = real_logs(args.logs)
    if not paths:
        print("no real vLLM logs found: run `python -m tests.realvllm.harness` first, or "
              "pass --logs DIR", file=sys.stderr)
        return 2
    logs = [p.read_bytes() for p in paths]
    exe = shutil.which("vllm-cache", path=os.path.dirname(sys.executable)) or shutil.which(
        "vllm-cache")
    if exe is None:
        print("vllm-cache is not installed in this environment", file=sys.stderr)
        return 2
    grep = shutil.which("grep")
    if grep is None:
        print("grep not found; nothing to compare with", file=sys.stderr)
        return 2

    tmpdir = None
    if args.keep:
        target = Path(args.keep)
    else:
        tmpdir = tempfile.mkdtemp(prefix="bench-log-")
        target = Path(tmpdir) / "vllm.log"
    try:
        t = time.perf_counter()
        starts = generate(target, args.size_mb << 20, args.mix, logs)
        size = target.stat().st_size
        print(f"log: {target} {size / 2**20:.0f} MiB, {args.mix} mix, {starts} real starts "
              f"from {len(paths)} real logs (generated in {time.perf_counter() - t:.1f} s)")
        with open(target, "rb") as f:  # warm the page cache for both tools
            while f.read(1 << 24):
                pass

        grep_runs, ours_runs = [], []
        rss = 0.0
        out_bytes = 0
        for _ in range(args.runs):
            g = run_measured([grep, "-c", "compilation/", str(target)])
            grep_runs.append(g[0])
            o = run_measured([exe, "log", "--json", str(target)])
            if o[3] != 0:
                print(f"vllm-cache log exited {o[3]}", file=sys.stderr)
                return 1
            ours_runs.append(o[0])
            rss = max(rss, o[1])
            out_bytes = o[2]
        g_best, o_best = min(grep_runs), min(ours_runs)
        ratio = g_best / o_best
        print(f"grep -c compilation/  best {g_best:.3f} s  runs "
              + " ".join(f"{x:.3f}" for x in grep_runs))
        print(f"vllm-cache log --json best {o_best:.3f} s  runs "
              + " ".join(f"{x:.3f}" for x in ours_runs)
              + f"  ({out_bytes / 2**20:.1f} MiB of JSON)")
        print(f"speed ratio (grep time / parser time): {ratio:.2f}  (goal >= {GOAL_RATIO})")
        print(f"parser peak RSS: {rss:.1f} MiB  (goal < {GOAL_RSS_MB:.0f} MiB)")
        print(f"parser throughput: {size / 2**20 / o_best:.0f} MiB/s; grep -c: "
              f"{size / 2**20 / g_best:.0f} MiB/s")

        # Sanity: the parser found every start we wrote.
        check = subprocess.run([exe, "log", "--json", str(target)], capture_output=True,
                               check=False) if out_bytes < (256 << 20) else None
        if check is not None:
            found = len(json.loads(check.stdout)["starts"])
            print(f"starts found: {found} (written: {starts})")
            if found != starts:
                print("MISMATCH in the number of starts", file=sys.stderr)
                return 1

        if args.pure_python:
            p = run_measured([exe, "log", "--json", "--no-grep", str(target)])
            print(f"pure-Python path (--no-grep): {p[0]:.3f} s, ratio {g_best / p[0]:.2f}, "
                  f"peak RSS {p[1]:.1f} MiB")

        print(f"machine: {os.cpu_count()} CPUs, load average "
              + " ".join(f"{x:.2f}" for x in os.getloadavg()))
        ok = ratio >= GOAL_RATIO and rss < GOAL_RSS_MB
        print("GOALS MET" if ok else "GOALS MISSED")
        return 0 if ok else 1
    finally:
        if tmpdir is not None:
            shutil.rmtree(tmpdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
