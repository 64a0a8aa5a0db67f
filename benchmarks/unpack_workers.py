"""Unpack by frames with different numbers of forked workers, against ``tar -x`` and ``tar -x;
sync -f`` of the same entries, interleaved: ``python benchmarks/unpack_workers.py --source
ROOT [--copies 360] [--repeat 3] [--workers 16 8 4]`` (the cap of
``frame_read.FRAME_READ_WORKERS`` lifted for each). Wall and CPU seconds (this process and its
children), medians."""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_fleet import entry_dirs, tar_zstd
from benchmarks.pack_after_warm import cpu
from benchmarks.unpack_phases import phase_args, phase_tree
from vllm_cache_tools.fleet import api, frame_read
from vllm_cache_tools.store.folders import WORKERS_ENV


def main() -> int:
    ap = phase_args(__doc__, "--workers", "frame workers")
    args = ap.parse_args()
    work, many = phase_tree(args, "unpack-workers")
    try:
        keys = [p.name for p in entry_dirs(many)]
        bundle = work / "b.tar.zst"
        api.pack(keys, bundle, root=many)
        tar_zstd(["-C", str(many), "-cf", str(work / "t.tar.zst"), "torch_compile_cache"])
        api.unpack(bundle, root=work / "warmup", force=True)  # the target's facts memoized
        shutil.rmtree(work / "warmup")
        runs: dict[str, list[tuple[float, float]]] = {}
        shipped = frame_read.FRAME_READ_WORKERS
        variants = [str(w) for w in (args.workers or [os.cpu_count() or 1])]
        for r in range(args.repeat):
            order = [*variants, "tar", "tar+sync"]
            for v in order if r % 2 == 0 else order[::-1]:
                # A folder of its own, kept to the end: see bench_fleet's unpack rows (no-journal
                # ext4 scans past the inodes freed in the last minute on each create).
                target = work / f"out-{r}-{v}"
                target.mkdir()
                subprocess.run(["sync"], check=True)
                t, c = time.perf_counter(), cpu()
                if v.isdigit():
                    os.environ[WORKERS_ENV] = v
                    frame_read.FRAME_READ_WORKERS = int(v)  # the shipped cap lifted
                    api.unpack(bundle, root=target, force=True)
                    del os.environ[WORKERS_ENV]
                    frame_read.FRAME_READ_WORKERS = shipped
                else:
                    tar_zstd(["-xf", str(work / "t.tar.zst"), "-C", str(target)])
                    if v == "tar+sync":
                        subprocess.run(["sync", "-f", str(target)], check=True)
                runs.setdefault(v, []).append((time.perf_counter() - t, cpu() - c))
        tar = statistics.median(w for w, _ in runs["tar"])
        tsync = statistics.median(w for w, _ in runs["tar+sync"])
        for v, xs in runs.items():
            w = statistics.median(x for x, _ in xs)
            print(f"{v:>9}: {' '.join(f'{x:.2f}' for x, _ in xs)} s; median {w:.2f} s (CPU "
                  f"{statistics.median(c for _, c in xs):.1f}); vs tar -x {tar / w:.2f}x, "
                  f"vs tar -x; sync -f {tsync / w:.2f}x")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
