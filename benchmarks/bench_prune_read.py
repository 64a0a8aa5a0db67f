"""Benchmark: how a streamed ``prune`` should read entries, on one synthetic tree (read only).

    python benchmarks/bench_prune_read.py [--files 100000] [--repeat 3] [--template-root R ...]

Times, interleaved, each way of reading every entry of a tree made by benchmarks/synth.py from
real vLLM caches: the full read (``store.parallel_read.read_entries``: the scan's worker
processes parse each entry's key files; what ``prune --corrupt`` and the other
contents-reading policies stream over), and the light read (``store.light.light_entry``: the
walk only, what ``prune --older-than`` streams over) in this process, in 2 and 4 threads, and
in 2 and N forked processes (N: the cores this process may use). Wall and CPU seconds (this
process and its children: ``getrusage``), medians of ``--repeat`` rounds, the load average
before and after. Prints JSON; also written to .bench/prune-read.json. Needs only this
package where ``--template-root`` is given for each of the harness's ``compile``,
``compile-nomega`` and ``compile-tp2`` roots (as for bench_prune.py).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.synth import generate  # noqa: E402
from vllm_cache_tools.store.light import light_entry  # noqa: E402
from vllm_cache_tools.store.parallel_read import read_entries  # noqa: E402
from vllm_cache_tools.store.scan import classify  # noqa: E402
from vllm_cache_tools.store.types import Entry  # noqa: E402

Item = tuple[str, Path]


def _cpu() -> float:
    a = resource.getrusage(resource.RUSAGE_SELF)
    b = resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime


def _light(item: Item) -> Entry:
    return light_entry(item[1], item[0])


def _threads(items: list[Item], n: int) -> Iterable[Entry]:
    with ThreadPoolExecutor(n) as ex:
        yield from ex.map(_light, items)


def _procs(items: list[Item], n: int) -> Iterable[Entry]:
    with multiprocessing.get_context("fork").Pool(n) as pool:
        yield from pool.imap(_light, items, chunksize=max(1, min(64, len(items) // (n * 16))))


def _loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--files", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--template-root", action="append", type=Path, default=None)
    a = ap.parse_args()
    if a.template_root:
        roots = a.template_root
    else:
        from tests.realvllm.harness import SCENARIOS, run_scenario

        roots = [run_scenario(SCENARIOS[n]).vllm_root
                 for n in ("compile", "compile-nomega", "compile-tp2")]
    cores = len(os.sched_getaffinity(0))
    work = Path(tempfile.mkdtemp(prefix="vct-prune-read-"))
    load_before = _loadavg()
    try:
        meta = generate(work / "root", roots, a.files)
        items = classify(work / "root" / "torch_compile_cache", [])
        ways: dict[str, Callable[[], Iterable[Entry]]] = {
            "full read, processes": lambda: read_entries(items),
            "light, this process": lambda: map(_light, items),
            "light, 2 threads": lambda: _threads(items, 2),
            "light, 4 threads": lambda: _threads(items, 4),
            "light, 2 processes": lambda: _procs(items, 2),
            f"light, {cores} processes": lambda: _procs(items, cores),
        }
        got: dict[str, list[tuple[float, float]]] = {k: [] for k in ways}
        for _ in range(a.repeat):
            for name, way in ways.items():
                c0, t0 = _cpu(), time.perf_counter()
                n = sum(1 for _ in way())
                got[name].append((time.perf_counter() - t0, _cpu() - c0))
                assert n == len(items)
        result = {
            "tree": {"files": meta["files"], "entries": len(items)}, "cores": cores,
            "ways": {k: {"wall_s": round(statistics.median(w for w, _ in v), 3),
                         "cpu_s": round(statistics.median(c for _, c in v), 3),
                         "rounds": [[round(w, 3), round(c, 3)] for w, c in v]}
                     for k, v in got.items()},
            "loadavg_before": load_before, "loadavg": _loadavg(),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    bench = REPO / ".bench"
    bench.mkdir(exist_ok=True)
    (bench / "prune-read.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
