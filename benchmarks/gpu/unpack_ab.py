"""Unpack by two trees of this package, interleaved, on one machine (the device): ``python
benchmarks/gpu/unpack_ab.py OLD_TREE NEW_TREE --source ROOT --copies 100 --repeat 6``. Each
unpack runs in a fresh process of its tree (``sys.path``), into a folder of its own kept to
the end, after a ``sync``; ``tar -x`` and ``tar -x; sync -f`` of the same bundle each round."""
from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.bench_fleet import entry_dirs, synth_starts, tar_zstd

ONE = """import os, sys, time, resource
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from vllm_cache_tools.fleet import api
def cpu():
    a = resource.getrusage(resource.RUSAGE_SELF); b = resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime
c, t = cpu(), time.perf_counter()
api.unpack(Path(sys.argv[2]), root=Path(sys.argv[3]), force=True)
print(f"{time.perf_counter() - t:.3f} {cpu() - c:.2f}")
"""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--source", type=Path, required=True)
    ap.add_argument("--copies", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=6)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="unpack-ab-"))
    try:
        from vllm_cache_tools.fleet import api
        many = synth_starts(args.source, work / "many", args.copies)
        bundle = work / "b.tar.zst"
        api.pack([p.name for p in entry_dirs(many)], bundle, root=many)
        runs: dict[str, list[float]] = {}
        for i in range(args.repeat):
            order = [("old", args.old), ("new", args.new)]
            for name, tree in order if i % 2 == 0 else order[::-1]:
                dst = work / f"{name}{i}"
                dst.mkdir()
                subprocess.run(["sync"], check=True)
                out = subprocess.run([sys.executable, "-c", ONE, str(tree.resolve()),
                                      str(bundle), str(dst)], check=True, capture_output=True,
                                     text=True).stdout.split()
                runs.setdefault(name, []).append(float(out[0]))
                print(f"round {i} {name} {out[0]} s (CPU {out[1]})", flush=True)
            for sync in (False, True):
                dst = work / f"t{i}{sync}"
                dst.mkdir()
                subprocess.run(["sync"], check=True)
                t = time.perf_counter()
                tar_zstd(["-xf", str(bundle), "-C", str(dst)])
                if sync:
                    subprocess.run(["sync", "-f", str(dst)], check=True)
                name = "tar -x; sync -f" if sync else "tar -x"
                runs.setdefault(name, []).append(time.perf_counter() - t)
                print(f"round {i} {name} {runs[name][-1]:.3f} s", flush=True)
        for name, xs in runs.items():
            print(f"median {name}: {statistics.median(xs):.3f} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
