"""Unpack variants against ``tar -x`` and ``tar -x; sync -f`` of the same entries,
interleaved: ``python benchmarks/unpack_workers.py --source ROOT [--copies 360] [--repeat 3]
[--workers 16 8 4] [--not-durable]``. Synthesizes COPIES starts from the one in ROOT (as
bench_fleet does) and packs them, then times in turn, each run into a folder of its own (none
removed before the end: see bench_fleet's unpack rows):

- ``unpack``: as shipped (each staged file's writeback started as it is closed, one
  ``syncfs`` before the entries are renamed into place: on disk before they are visible);
- ``N workers`` for each ``--workers N``: the same by N forked frame workers (the cap of
  ``frame_read.FRAME_READ_WORKERS`` lifted);
- ``unpack, not durable`` (``--not-durable``): the shipped unpack with its writeback and
  ``syncfs`` left out (measured here only; no option of the tool does this): done when the
  data is in the page cache, as ``tar -x`` is. Where it reaches ``tar -x`` and ``unpack`` does
  not, what stands between them is the disk;
- ``tar -x`` and ``tar -x; sync -f``.

Wall and CPU seconds (this process and its children), medians, each against both tars."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_fleet import entry_dirs
from benchmarks.pack_after_warm import cpu
from benchmarks.unpack_phases import packed, phase_args, phase_tree, report_vs_tar, untar
from vllm_cache_tools.fleet import api, frame_read, place
from vllm_cache_tools.store.folders import WORKERS_ENV


def _unpack(bundle: Path, target: Path, variant: str) -> None:
    """``variant``: ``unpack``, ``unpack, not durable`` or ``N workers``."""
    flush, behind, cap = place.flush_filesystem, frame_read.WRITE_BEHIND, \
        frame_read.FRAME_READ_WORKERS
    try:
        if variant.endswith("not durable"):
            place.flush_filesystem = lambda fd: None
            frame_read.WRITE_BEHIND = False
        elif variant.endswith("workers"):
            n = variant.split()[0]
            os.environ[WORKERS_ENV] = n
            frame_read.FRAME_READ_WORKERS = int(n)  # the shipped cap lifted
        api.unpack(bundle, root=target, force=True)
    finally:
        os.environ.pop(WORKERS_ENV, None)
        place.flush_filesystem, frame_read.WRITE_BEHIND = flush, behind
        frame_read.FRAME_READ_WORKERS = cap


def main() -> int:
    ap = phase_args(__doc__, "--workers", "frame workers")
    ap.add_argument("--not-durable", action="store_true",
                    help="also unpack without the writeback and the syncfs (measured only)")
    args = ap.parse_args()
    work, many = phase_tree(args, "unpack-workers")
    try:
        keys, bundle = packed(work, many)
        order = ["unpack", *(f"{n} workers" for n in args.workers),
                 *(["unpack, not durable"] if args.not_durable else []),
                 "tar -x", "tar -x; sync -f"]
        runs: dict[str, list[tuple[float, float]]] = {v: [] for v in order}
        for r in range(args.repeat):
            for v in order if r % 2 == 0 else order[::-1]:
                target = work / f"out-{r}-{order.index(v)}"
                target.mkdir()
                subprocess.run(["sync"], check=True)
                t, c = time.perf_counter(), cpu()
                if v.startswith("tar"):
                    untar(work, target, v.endswith("sync -f"))
                else:
                    _unpack(bundle, target, v)
                runs[v].append((time.perf_counter() - t, cpu() - c))
                if not v.startswith("tar") and len(entry_dirs(target)) != len(keys):
                    raise SystemExit(f"{v} placed {len(entry_dirs(target))} of {len(keys)} "
                                     "entries: not an unpack")
        print(f"{len(keys)} entries, {args.copies} starts, {args.repeat} rounds (medians)")
        report_vs_tar(runs, 20)
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
