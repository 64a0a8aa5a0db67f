"""Where a first pack's time goes, by phase: ``python benchmarks/pack_phases.py --source ROOT
[--copies 100] [--repeat 3] [--profile]``. Synthesizes COPIES starts from the one in ROOT (as
bench_fleet does), then packs them REPEAT times without a pack memo (the first pack, what CI
does after ``warm``), timing the selection's steps (the entries compressed meanwhile, as
``pack`` does) and the bundle's write (put together from the spool), with the process's CPU
seconds (all threads; forked readers apart) and ``tar -I 'zstd -3 -T1'`` of
the same root beside. ``--profile``: one more cold selection under cProfile (its top
functions by own time)."""

from __future__ import annotations

import cProfile
import pstats
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_fleet import entry_dirs, tar_zstd
from benchmarks.unpack_phases import phase_args, phase_tree, timed
from vllm_cache_tools.fleet import bundle, link_proof, selection
from vllm_cache_tools.fleet.frames import FrameSpool
from vllm_cache_tools.fleet.pack_memo import PackMemo, memo_path
from vllm_cache_tools.fleet.records import DEFAULT_LEVEL

STEPS = ((selection, "scan"), (selection, "link_entries"), (selection, "prepare"),
         (selection, "_redacted"), (selection, "_snapshots"), (PackMemo, "save"),
         (PackMemo, "put_record"))


def _marking(marks: list[tuple[str, float]], fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, its start and end marked in ``marks``."""
    def run(*a: Any, **k: Any) -> Any:
        marks.append((f"{fn.__name__}>", time.perf_counter()))
        try:
            return fn(*a, **k)
        finally:
            marks.append((f"{fn.__name__}<", time.perf_counter()))
    return run


def main() -> int:
    ap = phase_args(__doc__, "--workers", "frame threads (where they are threads)")
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    work, many = phase_tree(args, "pack-phases")
    try:
        keys = [p.name for p in entry_dirs(many)]
        memo = memo_path(many / "torch_compile_cache")
        spent: dict[str, float] = {}
        for mod, name in STEPS:
            setattr(mod, name, timed(spent, getattr(mod, name)))
        marks: list[tuple[str, float]] = []
        read_ahead = link_proof.EntryFacts.read_ahead

        def marked_read_ahead(self: link_proof.EntryFacts, *a: Any, **k: Any) -> Any:
            yield from read_ahead(self, *a, **k)
            marks.append(("read-ahead done", time.perf_counter()))

        link_proof.EntryFacts.read_ahead = marked_read_ahead  # type: ignore[method-assign]
        for mod, name in STEPS[:4]:
            setattr(mod, name, _marking(marks, getattr(mod, name)))
        out = work / "b.tar.zst"
        rounds = [(i, w) for i in range(args.repeat) for w in [None, *args.workers]]
        for _, workers in rounds:
            t = time.perf_counter()
            tar_zstd(["-cf", str(work / "t.tar.zst"), "-C", str(many), "."])
            ref = time.perf_counter() - t
            memo.unlink(missing_ok=True)
            spent.clear()
            t, c = time.perf_counter(), time.process_time()
            with FrameSpool(str(work), DEFAULT_LEVEL, workers) as spool:  # as api.pack does
                sel = selection.select(many, keys, frames=spool)
                ts, cs = time.perf_counter() - t, time.process_time() - c
                first: dict[str, float] = {}
                for k, v in marks:  # a step's first start, its last end
                    first[k] = first.get(k, v) if k.endswith(">") else v
                timeline = ", ".join(f"{k} {v - t:.2f}" for k, v in first.items())
                marks.clear()
                bundle.write_bundle(sel, out, force=True, frames=spool)
            wall, cpu = time.perf_counter() - t, time.process_time() - c
            how = "forked workers" if spool._procs else f"{spool.workers} threads"
            print(f"[{how}] first pack {wall:.2f} s (CPU {cpu:.2f} s) vs tar+zstd {ref:.2f} s "
                  f"({ref / wall:.2f}x): select and compress {ts:.2f} s (CPU {cs:.2f}), write "
                  f"{wall - ts:.2f} s (CPU {cpu - cs:.2f}); "
                  + ", ".join(f"{k} {v:.3f}" for k, v in spent.items())
                  + f"; at: {timeline}", flush=True)
        if args.profile:
            memo.unlink(missing_ok=True)
            prof = cProfile.Profile()
            prof.enable()
            selection.select(many, keys)
            prof.disable()
            st = pstats.Stats(prof, stream=sys.stdout)
            st.sort_stats("tottime").print_stats(25)
            st.sort_stats("cumulative").print_stats(40)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
