"""Fuzz every parser with mutations of real files (``nox -s fuzz``).

    python -m tests.fuzz.run --inputs 1000000 --seed 0          # the full session
    python -m tests.fuzz.run --replay pickle:12345 --seed 0     # one input again, traceback

Input ``i`` of target ``t`` is ``mutate(corpus[...], Random(sha256(seed:t:i)))``: the same
seed gives the same inputs whatever the number of workers, so a finding is named by
``target:index`` and replayed exactly. Findings: any exception other than ``ReadError``
(grouped by type and the innermost frame in vllm_cache_tools: one group per root cause), an
input that takes over :data:`SLOW_S` of CPU time, an input that raises the process's peak RSS past
:data:`RSS_LIMIT_MB`, and a hang (:data:`HANG_S`, by SIGALRM). Failing inputs are written to
``--out`` for keeping under tests/fuzz/regressions/ once fixed. Exit status 1 on any finding."""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import shutil
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.fuzz.mutate import DICTIONARIES, mutate, rng_for
from tests.fuzz.targets import Target, build_targets, corpus_summary

SLOW_S = 1.0
HANG_S = 20
RSS_LIMIT_MB = 600
ADDRESS_SPACE_LIMIT = 4 << 30
"""Per worker: a memory bomb becomes MemoryError instead of taking the machine down."""
CHUNK = 250

_TARGETS: dict[str, Target] = {}


def make_input(target: Target, seed: int, index: int) -> tuple[bytes, bytes]:
    """(mutated input, the real file it came from) for input ``index`` of ``target``."""
    r = rng_for(seed, target.name, index)
    i = r.randrange(len(target.corpus))
    base = target.corpus[i]
    others = target.corpus
    return mutate(base, r, DICTIONARIES[target.dictionary], others, target.hot[i]), base


class _Hang(BaseException):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _Hang()


def signature(exc: BaseException) -> str:
    """Exception type and the innermost frame in this package: one root cause."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if "vllm_cache_tools" in f.filename] or frames[-1:]
    where = (f"{ours[-1].filename.split('vllm_cache_tools/')[-1]}:{ours[-1].lineno} "
             f"({ours[-1].name})" if ours else "?")
    return f"{type(exc).__name__} at {where}"


@dataclass
class Stats:
    inputs: int = 0
    read_error: int = 0
    seconds: float = 0.0
    max_s: float = 0.0
    max_s_index: int = -1
    findings: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    """signature -> [(index, message)] (first few), with counts in ``counts``."""
    counts: dict[str, int] = field(default_factory=dict)

    def add(self, sig: str, index: int, msg: str) -> None:
        self.counts[sig] = self.counts.get(sig, 0) + 1
        ex = self.findings.setdefault(sig, [])
        if len(ex) < 5:
            ex.append((index, msg))

    def merge(self, o: Stats) -> None:
        self.inputs += o.inputs
        self.read_error += o.read_error
        self.seconds += o.seconds
        if o.max_s > self.max_s:
            self.max_s, self.max_s_index = o.max_s, o.max_s_index
        for sig, n in o.counts.items():
            self.counts[sig] = self.counts.get(sig, 0) + n
            ex = self.findings.setdefault(sig, [])
            ex += o.findings.get(sig, [])[: 5 - len(ex)]


def run_one(target: Target, seed: int, index: int, scratch: Path, stats: Stats,
            out: Path | None) -> None:
    from vllm_cache_tools.read.errors import ReadError
    data, base = make_input(target, seed, index)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # CPU time, not wall time: other work on the machine must not make an input "slow".
    t0 = time.process_time()
    sig = None
    signal.alarm(HANG_S)
    try:
        target.run(data, scratch, base)
    except ReadError:
        stats.read_error += 1
    except _Hang:
        sig, msg = f"hang over {HANG_S} s in {target.name}", ""
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        sig, msg = signature(exc), " ".join(str(exc).split())[:200]
    finally:
        signal.alarm(0)
    dt = time.process_time() - t0
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    stats.inputs += 1
    stats.seconds += dt
    if dt > stats.max_s:
        stats.max_s, stats.max_s_index = dt, index
    if sig is None and dt > SLOW_S:
        sig, msg = f"slow (> {SLOW_S:.0f} s CPU) in {target.name}", f"{dt:.2f} s"
    if sig is None and after > before and after > RSS_LIMIT_MB * 1024:
        sig, msg = (f"peak RSS past {RSS_LIMIT_MB} MB in {target.name}",
                    f"{after / 1024:.0f} MB")
    if sig is not None:
        stats.add(sig, index, msg)
        if out is not None and len(data) <= 16 << 20:
            out.mkdir(parents=True, exist_ok=True)
            (out / f"{target.name}-{seed}-{index}.bin").write_bytes(data)
    for p in scratch.iterdir():  # readers see a fresh folder each time
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()


def _init(harness: bool) -> None:
    global _TARGETS
    _TARGETS = build_targets(harness)
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_LIMIT, ADDRESS_SPACE_LIMIT))
    signal.signal(signal.SIGALRM, _alarm)


def _work(job: tuple[str, int, int, int, str | None]) -> tuple[str, Stats]:
    name, seed, start, count, out = job
    stats = Stats()
    with tempfile.TemporaryDirectory(prefix="vct-fuzz-") as d:
        for i in range(start, start + count):
            run_one(_TARGETS[name], seed, i, Path(d), stats, Path(out) if out else None)
    return name, stats


def plan(targets: dict[str, Target], total: int) -> dict[str, int]:
    """Inputs per target, proportional to the weights, summing to ``total``."""
    w = sum(t.weight for t in targets.values())
    counts = {n: int(total * t.weight / w) for n, t in targets.items()}
    first = next(iter(counts))
    counts[first] += total - sum(counts.values())
    return counts


def fuzz(total: int, seed: int = 0, workers: int = 0, harness: bool = False,
         out: Path | None = None, progress: bool = False,
         only: set[str] | None = None) -> tuple[dict[str, Stats], float]:
    """Run ``total`` inputs; ``workers=0`` runs in this process. (stats per target, wall s)."""
    targets = build_targets(harness)
    if only:
        targets = {n: t for n, t in targets.items() if n in only}
    counts = plan(targets, total)
    jobs = [(n, seed, s, min(CHUNK, c - s), str(out) if out else None)
            for n, c in counts.items() for s in range(0, c, CHUNK)]
    # interleave targets so progress (and a partial run) covers all of them
    jobs.sort(key=lambda j: (j[2], j[0]))
    results: dict[str, Stats] = {n: Stats() for n in targets}
    t0 = time.perf_counter()
    done = 0
    if workers == 0:
        global _TARGETS
        _TARGETS = targets
        old = signal.signal(signal.SIGALRM, _alarm)
        try:
            for job in jobs:
                name, st = _work(job)
                results[name].merge(st)
        finally:
            signal.signal(signal.SIGALRM, old)
    else:
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(workers, initializer=_init, initargs=(harness,)) as pool:
            for name, st in pool.imap_unordered(_work, jobs):
                results[name].merge(st)
                done += st.inputs
                if progress and done % 20000 < CHUNK:
                    el = time.perf_counter() - t0
                    print(f"  {done:>9,} inputs  {el:7.0f} s  "
                          f"{sum(len(s.counts) for s in results.values())} finding groups",
                          file=sys.stderr, flush=True)
    return results, time.perf_counter() - t0


def report(results: dict[str, Stats], wall: float, seed: int) -> str:
    lines = [f"{'target':14s} {'inputs':>9s} {'ReadError':>9s} {'findings':>8s} "
             f"{'mean ms':>8s} {'max ms':>8s}   (CPU time per input)"]
    tot = Stats()
    for name, s in results.items():
        tot.merge(s)
        nf = sum(s.counts.values())
        mean = 1000 * s.seconds / s.inputs if s.inputs else 0.0
        lines.append(f"{name:14s} {s.inputs:9,d} {s.read_error:9,d} {nf:8d} {mean:8.2f} "
                     f"{1000 * s.max_s:8.1f}")
    nf = sum(tot.counts.values())
    lines.append(f"{'total':14s} {tot.inputs:9,d} {tot.read_error:9,d} {nf:8d} "
                 f"{1000 * tot.seconds / max(1, tot.inputs):8.2f} {1000 * tot.max_s:8.1f}")
    lines.append(f"wall {wall:.0f} s, CPU in readers {tot.seconds:.0f} s, seed {seed}")
    groups = [(sig, n, name, results[name].findings[sig])
              for name, s in results.items() for sig, n in s.counts.items()]
    lines.append(f"{nf} uncaught / slow / memory findings in {len(groups)} groups")
    for sig, n, name, ex in sorted(groups, key=lambda g: -g[1]):
        lines.append(f"  [{n}] {sig}")
        for idx, msg in ex[:3]:
            lines.append(f"      replay {name}:{idx}  {msg}")
    return "\n".join(lines)


def replay(spec: str, seed: int, harness: bool) -> None:
    name, _, idx = spec.partition(":")
    target = build_targets(harness)[name]
    data, base = make_input(target, seed, int(idx))
    print(f"{name}:{idx} seed {seed}: {len(data)} bytes; first 200: {data[:200]!r}")
    with tempfile.TemporaryDirectory() as d:
        target.run(data, Path(d), base)
    print("no exception")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--inputs", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--harness", action="store_true",
                    help="also mutate the real-vLLM test caches (~/.cache/vllm-cache-tools-"
                         "tests), when present")
    ap.add_argument("--only", default="", help="comma-separated targets")
    ap.add_argument("--out", type=Path, default=Path(".nox") / "fuzz-findings",
                    help="where failing inputs are written (default: .nox/fuzz-findings)")
    ap.add_argument("--replay", help="TARGET:INDEX: run one input again, with its traceback")
    a = ap.parse_args(argv)
    if a.replay:
        replay(a.replay, a.seed, a.harness)
        return 0
    targets = build_targets(a.harness)
    print(f"corpus ({'with' if a.harness else 'without'} harness caches):\n"
          f"{corpus_summary(targets)}{a.inputs:,} inputs, seed {a.seed}, {a.workers} workers",
          flush=True)
    only = set(filter(None, a.only.split(",")))
    results, wall = fuzz(a.inputs, a.seed, a.workers, a.harness, a.out, progress=True,
                         only=only or None)
    print(report(results, wall, a.seed))
    return 1 if any(s.counts for s in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
