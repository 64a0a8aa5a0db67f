"""What unpack's durability costs against ``tar -x``: ``python benchmarks/unpack_durability.py
--source ROOT [--copies 100] [--repeat 3]``. Synthesizes COPIES starts from the one in ROOT
(as bench_fleet does), packs them, then times in turn, each into a folder of its own (none
removed before the end: see bench_fleet's unpack rows):

- ``unpack``: as shipped (each staged file's writeback started as it is closed, one
  ``syncfs`` before the entries are renamed into place: on disk before they are visible);
- ``unpack, not durable``: the same with the writeback and the ``syncfs`` left out (measured
  here only; no option of the tool does this): done when the data is in the page cache, as
  ``tar -x`` is;
- ``tar -x`` and ``tar -x; sync -f`` of the same entries.

Wall and CPU seconds (this process and its children), medians, and each row's ratio to both
tars. Where ``unpack, not durable`` reaches ``tar -x`` and ``unpack`` does not, what stands
between them is the disk: the time it takes to write the bytes."""

from __future__ import annotations

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
from vllm_cache_tools.fleet import api, frame_read, place


def main() -> int:
    ap = phase_args(__doc__, "--unused", "-")
    args = ap.parse_args()
    work, many = phase_tree(args, "unpack-durability")
    try:
        keys = [p.name for p in entry_dirs(many)]
        bundle = work / "b.tar.zst"
        api.pack(keys, bundle, root=many)
        tar_zstd(["-C", str(many), "-cf", str(work / "t.tar.zst"), "torch_compile_cache"])
        api.unpack(bundle, root=work / "warmup", force=True)  # the target's facts memoized
        flush, behind = place.flush_filesystem, frame_read.WRITE_BEHIND
        runs: dict[str, list[tuple[float, float]]] = {}
        variants = ["unpack", "unpack, not durable", "tar -x", "tar -x; sync -f"]
        for r in range(args.repeat):
            for i, v in enumerate(variants if r % 2 == 0 else variants[::-1]):
                target = work / f"out-{r}-{i}"
                target.mkdir()
                subprocess.run(["sync"], check=True)
                t, c = time.perf_counter(), cpu()
                if v.startswith("unpack"):
                    if v != "unpack":
                        place.flush_filesystem = lambda fd: None
                        frame_read.WRITE_BEHIND = False
                    try:
                        api.unpack(bundle, root=target, force=True)
                    finally:
                        place.flush_filesystem, frame_read.WRITE_BEHIND = flush, behind
                else:
                    tar_zstd(["-xf", str(work / "t.tar.zst"), "-C", str(target)])
                    if v.endswith("sync -f"):
                        subprocess.run(["sync", "-f", str(target)], check=True)
                runs.setdefault(v, []).append((time.perf_counter() - t, cpu() - c))
                if v.startswith("unpack") and len(entry_dirs(target)) != len(keys):
                    raise SystemExit(f"{v} placed {len(entry_dirs(target))} of {len(keys)} "
                                     "entries: not an unpack")
        tar = statistics.median(w for w, _ in runs["tar -x"])
        tsync = statistics.median(w for w, _ in runs["tar -x; sync -f"])
        print(f"{len(keys)} entries, {args.copies} starts, {args.repeat} rounds (medians)")
        for v in variants:
            xs = runs[v]
            w = statistics.median(x for x, _ in xs)
            print(f"{v:>20}: {' '.join(f'{x:.2f}' for x, _ in xs)} s; median {w:.2f} s (CPU "
                  f"{statistics.median(c for _, c in xs):.1f}); vs tar -x {tar / w:.2f}x, "
                  f"vs tar -x; sync -f {tsync / w:.2f}x")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
