"""The least time a first pack can take here: ``python benchmarks/pack_floor.py --source ROOT
[--copies 100] [--repeat 3]``. Synthesizes COPIES starts from the one in ROOT (as
bench_fleet does) and times, each part alone in this one process (CPU seconds, so no part
waits for another), the work a first pack cannot skip:

- the walk: every entry's files and folders listed with their identities, as a pack walks
  them (:func:`vllm_cache_tools.fleet.selection.entry_walk`);
- the read: every file's bytes read once;
- zstd: the same bytes compressed as the bundle compresses them (level 3, multi-threaded
  mode with one thread, checksums), less the read;
- sha256 of every byte, less the read;
- the proof reads: each entry read whole (the safe pickle reads, manifests, the state
  check) and reduced to what a pack keeps (:func:`.prepared.prepare_at`), its result
  pickled and unpickled as it crosses from a forked reader.

Their sum over the cores is the least wall time any schedule of that work can take here
(perfect overlap; nothing else counted: no tar headers, manifest, memo or spool). The wall
time of ``tar -I 'zstd -3 -T1' -c`` over the same root divided by it is the best ratio a first
pack could reach; a real first pack (``api.pack`` from an empty memo) is timed beside.

The same for an unpack: ``tar -x`` of that archive (its CPU seconds: decompressing and
writing the files, into a folder of its own, none removed before the end: see bench_fleet's
unpack rows), the sha256 of every byte and the proof reads (the key proof reads each staged
entry whole) give the floor of an unpack, against the wall time of that ``tar -x``; a real
unpack is timed beside. ``--cores N...`` also prints the floors as if the same CPU seconds
spread over N cores."""

from __future__ import annotations

import hashlib
import os
import pickle
import resource
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_fleet import tar_zstd
from benchmarks.pack_after_warm import cpu
from benchmarks.unpack_phases import phase_args, phase_tree, untar
from vllm_cache_tools.fleet import api
from vllm_cache_tools.fleet.frames import compressor
from vllm_cache_tools.fleet.pack_memo import memo_path
from vllm_cache_tools.fleet.prepared import prepare_at
from vllm_cache_tools.fleet.records import DEFAULT_LEVEL
from vllm_cache_tools.fleet.selection import entry_walk
from vllm_cache_tools.store.folders import scan_workers
from vllm_cache_tools.store.scan import scan

_BUF = 1 << 20


class _Null:
    def write(self, b: Any) -> int:
        return len(b)


def _read_all(paths: list[str], each: Callable[[bytes], object] | None) -> int:
    n = 0
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while b := f.read(_BUF):
                n += len(b)
                if each is not None:
                    each(b)
    return n


def cpu_self() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def parts(many: Path) -> dict[str, float]:
    """CPU seconds of each part, this process only (zstd's one worker thread included)."""
    info = scan(many, check_in_use=False)
    entries = [(e.layout, os.fspath(e.path)) for e in info.entries]
    out: dict[str, float] = {}
    c = cpu_self()
    walks = [entry_walk(Path(p))[0] for _, p in entries]
    out["walk"] = cpu_self() - c
    files = [path for w in walks for _, path, _, _ in w]
    c = cpu_self()
    _read_all(files, None)
    out["read"] = cpu_self() - c
    c = cpu_self()
    with compressor(DEFAULT_LEVEL, 1).stream_writer(_Null(), closefd=False, write_size=_BUF) as z:
        _read_all(files, z.write)
    out["zstd"] = cpu_self() - c - out["read"]
    h = hashlib.sha256()
    c = cpu_self()
    _read_all(files, h.update)
    out["sha256"] = cpu_self() - c - out["read"]
    root = os.fspath(info.root)
    c = cpu_self()
    got = [prepare_at(root, item) for item in entries]
    out["proof reads"] = cpu_self() - c
    c = cpu_self()
    pickle.loads(pickle.dumps(got))
    out["results crossing"] = cpu_self() - c
    out["entries"] = len(entries)
    out["bytes"] = sum(os.path.getsize(p) for p in files)
    return out


def main() -> int:
    args = phase_args(__doc__, "--cores", "cores (the floor as if the CPU seconds spread "
                      "over them)").parse_args()
    work, many = phase_tree(args, "pack-floor")
    try:
        keys = [e.key for e in scan(many, check_in_use=False).entries]
        runs: list[dict[str, float]] = []
        tar: list[tuple[float, float]] = []
        first: list[tuple[float, float]] = []
        untarred: list[tuple[float, float]] = []
        unpacked: list[tuple[float, float]] = []
        for _ in range(args.repeat):
            runs.append(parts(many))
            t, c = time.perf_counter(), cpu()
            tar_zstd(["-cf", str(work / "t.tar.zst"), "-C", str(many), "."])
            tar.append((time.perf_counter() - t, cpu() - c))
            memo_path(many / "torch_compile_cache").unlink(missing_ok=True)
            t, c = time.perf_counter(), cpu()
            api.pack(keys, work / "b.tar.zst", root=many, force=True)
            first.append((time.perf_counter() - t, cpu() - c))
            for name, runs_of in (("x", untarred), ("u", unpacked)):
                dst = work / f"{name}{len(runs_of)}"
                dst.mkdir()
                t, c = time.perf_counter(), cpu()
                if name == "x":
                    untar(work, dst, False)
                else:
                    api.unpack(work / "b.tar.zst", root=dst, force=True)
                runs_of.append((time.perf_counter() - t, cpu() - c))
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        cores = scan_workers()
        need = sum(v for k, v in med.items() if k not in ("entries", "bytes"))
        tar_s = statistics.median(t for t, _ in tar)
        tar_cpu = statistics.median(c for _, c in tar)
        first_s = statistics.median(t for t, _ in first)
        first_cpu = statistics.median(c for _, c in first)
        n = int(med["entries"])
        print(f"{n} entries, {med['bytes'] / 1e6:.0f} MB, {cores} cores, {args.repeat} rounds "
              "(medians; CPU seconds)")
        for k, v in med.items():
            if k not in ("entries", "bytes"):
                print(f"  {k:18s} {v:6.2f} s  ({v / n * 1000:.2f} ms an entry)")
        print(f"  {'sum':18s} {need:6.2f} s")
        print(f"tar -I 'zstd -3 -T1' -c: {tar_s:.2f} s (CPU {tar_cpu:.2f})")
        print(f"first pack:              {first_s:.2f} s (CPU {first_cpu:.2f}): "
              f"{tar_s / first_s:.2f}x of tar")
        for k in [cores, *args.cores]:
            floor = need / k
            print(f"floor on {k:2d} cores: {floor:.2f} s: a first pack at best "
                  f"{tar_s / floor:.2f}x of this tar"
                  + ("" if k == cores else " (the same CPU seconds spread, not measured)"))
        print(f"safe reads: {med['proof reads'] / n * 1000:.2f} ms an entry; without them the "
              f"floor on {cores} cores is {(need - med['proof reads']) / cores:.2f} s")
        x_s = statistics.median(t for t, _ in untarred)
        x_cpu = statistics.median(c for _, c in untarred)
        u_s = statistics.median(t for t, _ in unpacked)
        u_cpu = statistics.median(c for _, c in unpacked)
        u_need = x_cpu + med["sha256"] + med["proof reads"] + med["results crossing"]
        print(f"tar -x: {x_s:.2f} s (CPU {x_cpu:.2f}); unpack: {u_s:.2f} s (CPU {u_cpu:.2f}): "
              f"{x_s / u_s:.2f}x of tar -x; tar -x's CPU + sha256 + proof reads + results "
              f"crossing: {u_need:.2f} s")
        for k in [cores, *args.cores]:
            floor = u_need / k
            print(f"unpack floor on {k:2d} cores: {floor:.2f} s: at best {x_s / floor:.2f}x of "
                  "this tar -x (not durable: the disk's writing not counted)"
                  + ("" if k == cores else " (the same CPU seconds spread, not measured)"))
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
