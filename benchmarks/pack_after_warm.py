"""A pack after ``warm``: ``python benchmarks/pack_after_warm.py --source ROOT [--copies 100]
[--repeat 3]``. Synthesizes COPIES starts from the one in ROOT (as bench_fleet does); each
round, from a fresh pack memo, times what warm does after vLLM exits for the entries it wrote
(:func:`vllm_cache_tools.fleet.warm.prepare_pack`: a selection without compression) and the
pack that follows, then from another fresh memo a first pack and the pack after it, and
``tar -I 'zstd -3 -T1'`` of the same root. Wall and CPU seconds (this process's threads and
children; the forked readers included), medians. Checks that both ways leave the same memo
(every entry's record, digests, link facts and clean mark) and the same bundle bytes."""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_fleet import entry_dirs, tar_zstd
from benchmarks.unpack_phases import phase_args, phase_tree
from vllm_cache_tools.fleet import api
from vllm_cache_tools.fleet.pack_memo import PackMemo
from vllm_cache_tools.fleet.warm import WarmedEntry, prepare_pack
from vllm_cache_tools.store.locate import resolve_root
from vllm_cache_tools.store.scan import scan


def cpu() -> float:
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime


def timed(out: dict[str, list[tuple[float, float]]], name: str, fn: Callable[[], Any]) -> Any:
    t, c = time.perf_counter(), cpu()
    got = fn()
    out.setdefault(name, []).append((time.perf_counter() - t, cpu() - c))
    return got


def memo_doc(many: Path) -> tuple[Any, ...]:
    d = PackMemo(many / "torch_compile_cache").doc
    return ({k: bytes(v) for k, v in d.entries.items()}, d.links, d.clean, d.values)


def main() -> int:
    args = phase_args(__doc__, "--unused", "-").parse_args()
    work, many = phase_tree(args, "pack-after-warm")
    try:
        dirs = entry_dirs(many)
        keys = [p.name for p in dirs]
        written = [WarmedEntry(e.key, e.layout, e.state, str(e.path), True)
                   for e in scan(many, check_in_use=False).entries]
        croot = resolve_root(many)
        t: dict[str, list[tuple[float, float]]] = {}
        memos = {}
        for r in range(args.repeat):
            for how in ("warm", "pack") if r % 2 == 0 else ("pack", "warm"):
                os.environ["XDG_CACHE_HOME"] = str(work / f"xdg-{r}-{how}")
                if how == "warm":
                    ready = timed(t, "prepare (warm's tail)", lambda: prepare_pack(croot,
                                                                                   written))
                    assert len(ready) == len(keys), (len(ready), len(keys))
                else:
                    timed(t, "first pack (no memo)", lambda: api.pack(
                        keys, work / "first.tar.zst", root=many, force=True))
                memos[how] = memo_doc(many)
                timed(t, f"pack after {'warm' if how == 'warm' else 'a pack'}",
                      partial(api.pack, keys, work / f"{how}.tar.zst", root=many, force=True))
            timed(t, "tar -I 'zstd -3 -T1' -c", lambda: tar_zstd(
                ["-C", str(many), "-cf", str(work / "t.tar.zst"), "torch_compile_cache"]))
        same_memo = memos["warm"] == memos["pack"]
        same_bytes = (work / "warm.tar.zst").read_bytes() == (work / "pack.tar.zst").read_bytes()
        tar = statistics.median(w for w, _ in t["tar -I 'zstd -3 -T1' -c"])
        size = sum(f.stat().st_size for d in dirs for f in d.rglob("*") if f.is_file())
        print(f"{len(keys)} entries, {size / 1e6:.0f} MB, {os.cpu_count()} cores, "
              f"{args.repeat} rounds")
        for name, v in t.items():
            w = statistics.median(x for x, _ in v)
            print(f"{name:<26} {' '.join(f'{x:.2f}' for x, _ in v)} s; median {w:.3f} s "
                  f"(CPU {statistics.median(c for _, c in v):.2f}); vs tar {tar / w:.2f}x")
        print(f"same memo: {same_memo}; same bundle bytes: {same_bytes}")
        return 0 if same_memo and same_bytes else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
