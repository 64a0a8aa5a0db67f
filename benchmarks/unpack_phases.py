"""Where an unpack's time goes, by phase: ``python benchmarks/unpack_phases.py --source ROOT
[--copies 100] [--repeat 3]``. Synthesizes COPIES starts from the one in ROOT (as
bench_fleet does), packs them once, then unpacks with ``--force`` into a fresh root REPEAT
times, timing the extraction (with the hit check beside it), the key proof, the placement and
the final flush, with the process's CPU seconds (all threads; forked readers apart)."""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import pickle
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_fleet import entry_dirs, synth_starts, tar_zstd
from vllm_cache_tools.fleet import api, bundle_read, frame_read, key_proof, place

PHASES = ((bundle_read, "extract"), (key_proof, "prove_records"), (place, "place_entries"),
          (place, "flush_filesystem"))


def timed(spent: dict[str, float], fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def run(*a: Any, **k: Any) -> Any:
        t = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            spent[fn.__name__] = spent.get(fn.__name__, 0.0) + time.perf_counter() - t
    return run


def phase_args(doc: str, variant: str, what: str) -> argparse.ArgumentParser:
    """The options a phases bench takes: the source start, how many copies, how many
    repeats, and ``variant`` (``--writers``): other numbers of ``what`` to run with."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--source", type=Path, required=True)
    ap.add_argument("--copies", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(variant, type=int, nargs="*", default=[],
                    help=f"also run with these numbers of {what} (each in turn, interleaved "
                         "with the shipped number)")
    return ap


def phase_tree(args: argparse.Namespace, name: str) -> tuple[Path, Path]:
    """A work folder (the cache home inside, unless one is set) and the synthesized root."""
    work = Path(tempfile.mkdtemp(prefix=f"{name}-"))
    os.environ.setdefault("XDG_CACHE_HOME", str(work / "xdg"))
    try:
        return work, synth_starts(args.source, work / "many", args.copies)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise


def packed(work: Path, many: Path) -> tuple[list[str], Path]:
    """The starts of ``many`` packed (``work/b.tar.zst``) and tarred (``work/t.tar.zst``), and
    unpacked once into ``work/warmup`` (the target's facts memoized; the folder kept: see
    bench_fleet's unpack rows): (their keys, the bundle)."""
    keys = [p.name for p in entry_dirs(many)]
    bundle = work / "b.tar.zst"
    api.pack(keys, bundle, root=many)
    tar_zstd(["-C", str(many), "-cf", str(work / "t.tar.zst"), "torch_compile_cache"])
    api.unpack(bundle, root=work / "warmup", force=True)
    return keys, bundle


def untar(work: Path, target: Path, sync: bool) -> None:
    """``tar -x`` of ``work/t.tar.zst`` into ``target``, then ``sync -f`` where ``sync``."""
    tar_zstd(["-xf", str(work / "t.tar.zst"), "-C", str(target)])
    if sync:
        subprocess.run(["sync", "-f", str(target)], check=True)


def report_vs_tar(runs: dict[str, list[tuple[float, float]]], width: int) -> None:
    """Each variant's (wall, CPU) runs, medians, against the ``tar -x`` and ``tar -x; sync -f``
    rows."""
    tar = statistics.median(w for w, _ in runs["tar -x"])
    tsync = statistics.median(w for w, _ in runs["tar -x; sync -f"])
    for v, xs in runs.items():
        w = statistics.median(x for x, _ in xs)
        print(f"{v:>{width}}: {' '.join(f'{x:.2f}' for x, _ in xs)} s; median {w:.2f} s (CPU "
              f"{statistics.median(c for _, c in xs):.1f}); vs tar -x {tar / w:.2f}x, "
              f"vs tar -x; sync -f {tsync / w:.2f}x")


class Timeline:
    """Marks inside an unpack by frames (``--timeline``): the workers forked, the manifest read
    in full, each chunk's answers asked for and got (the parent waited between the two), and
    the parent's unpickling of them. Installed once, around ``frame_read``'s own names."""

    def __init__(self) -> None:
        self.t0 = 0.0
        self.marks: list[tuple[float, str]] = []
        self.waits: list[tuple[float, float]] = []
        self.loads_s = 0.0
        self.loads_bytes = 0
        tl = self
        # By name (setattr): frame_read's imports, not its API.
        forked, parse, started = (getattr(frame_read, n) for n in (
            "forked_workers", "parse_manifest", "started"))

        @contextlib.contextmanager
        def forked_workers(n: int) -> Iterator[Any]:
            tl.mark(f"fork {n}")
            with forked(n) as pool:
                tl.mark("forked")
                yield pool

        def parse_manifest(*a: Any) -> Any:
            tl.mark("manifest read")
            try:
                return parse(*a)
            finally:
                tl.mark("manifest read: done")

        def watched(*a: Any) -> Iterator[Any]:
            # The tasks handed over now, as frame_read's call does (a generator function
            # would hand them over at the first answer asked for, after the manifest's read).
            return answers(started(*a))

        def answers(it: Iterator[Any]) -> Iterator[Any]:
            while True:
                asked = time.perf_counter()
                try:
                    got = next(it)
                except StopIteration:
                    return
                tl.waits.append((asked - tl.t0, time.perf_counter() - tl.t0))
                yield got

        class Pickle:
            HIGHEST_PROTOCOL = pickle.HIGHEST_PROTOCOL
            dumps = staticmethod(pickle.dumps)

            @staticmethod
            def loads(data: bytes) -> Any:
                t = time.perf_counter()
                try:
                    return pickle.loads(data)
                finally:
                    tl.loads_s += time.perf_counter() - t
                    tl.loads_bytes += len(data)

        # Each chunk's worker, start and end, appended by the worker to a file (it is forked:
        # nothing it holds comes back otherwise). Pickled by name for the pool, so it takes
        # frame_read._frames' name there.
        fd, log = tempfile.mkstemp(prefix="unpack-chunks-")
        os.close(fd)
        self.chunk_log = Path(log)
        frames = frame_read._frames

        def timed_frames(chunk: Any) -> Any:
            t = time.perf_counter()
            try:
                return frames(chunk)
            finally:
                with open(tl.chunk_log, "a") as f:
                    f.write(f"{os.getpid()} {t - tl.t0:.4f} {time.perf_counter() - tl.t0:.4f} "
                            f"{len(chunk)}\n")

        timed_frames.__module__, timed_frames.__qualname__ = frames.__module__, "_frames"
        for name, fn in (("forked_workers", forked_workers), ("parse_manifest", parse_manifest),
                         ("started", watched), ("pickle", Pickle), ("_frames", timed_frames)):
            setattr(frame_read, name, fn)

    def start(self, t0: float) -> None:
        self.t0, self.loads_s, self.loads_bytes = t0, 0.0, 0
        self.marks.clear()
        self.waits.clear()
        self.chunk_log.write_text("")

    def mark(self, what: str) -> None:
        self.marks.append((time.perf_counter() - self.t0, what))

    def report(self) -> str:
        out = [f"    {t:.3f} {what}" for t, what in self.marks]
        if self.waits:
            waited = sum(b - a for a, b in self.waits)
            out.append(f"    {len(self.waits)} chunks: first answer {self.waits[0][1]:.3f}, "
                       f"last {self.waits[-1][1]:.3f}; the parent waited {waited:.3f} s for "
                       f"them; unpickled {self.loads_bytes / 1e6:.1f} MB in "
                       f"{self.loads_s:.3f} s")
        rows = [line.split() for line in self.chunk_log.read_text().splitlines()]
        by: dict[str, list[tuple[float, float]]] = {}
        for pid, a, b, _ in rows:
            by.setdefault(pid, []).append((float(a), float(b)))
        for k, spans in enumerate(sorted(by.values(), key=lambda x: x[0])):
            busy = sum(b - a for a, b in spans)
            out.append(f"    worker {k}: {len(spans)} chunks, {spans[0][0]:.3f}-{spans[-1][1]:.3f}"
                       f", busy {busy:.3f} s; chunks " + " ".join(
                           f"{b - a:.3f}" for a, b in spans))
        return "\n".join(out)


def main() -> int:
    ap = phase_args(__doc__, "--writers", "writer threads")
    ap.add_argument("--one-stream", action="store_true",
                    help="also unpack by the one-stream reader (frame_read off), interleaved")
    ap.add_argument("--no-write-behind", action="store_true",
                    help="also unpack without starting each file's writeback as it is closed "
                         "(frame_read.WRITE_BEHIND off), interleaved")
    ap.add_argument("--write-behind", action="store_true",
                    help="also unpack starting each file's writeback as it is closed, whatever "
                         "the cores (frame_read.WRITE_BEHIND on), interleaved")
    ap.add_argument("--tar", action="store_true",
                    help="also time `tar -x` of the same bundle and `tar -x; sync -f` each "
                         "round (the same-run references of bench_fleet)")
    ap.add_argument("--timeline", action="store_true",
                    help="also print, for each unpack, when the workers were forked, the "
                         "manifest read in full, each chunk's answers asked for and got, and "
                         "the seconds the parent spent unpickling them")
    args = ap.parse_args()
    tl = Timeline() if args.timeline else None
    work, many = phase_tree(args, "unpack-phases")
    try:
        bundle = work / "b.tar.zst"
        api.pack([p.name for p in entry_dirs(many)], bundle, root=many)
        spent: dict[str, float] = {}
        for mod, name in PHASES:
            setattr(mod, name, timed(spent, getattr(mod, name)))
        shipped, cores = bundle_read.WRITERS, frame_read.FRAME_READ_CORES
        # Write-behind None: as shipped (where the workers leave cores idle).
        runs: list[tuple[int, int, bool | None]] = [
            (w, cores, None) for w in dict.fromkeys([shipped, *args.writers])]
        runs += [(shipped, 1 << 30, None)] if args.one_stream else []
        runs += [(shipped, cores, False)] if args.no_write_behind else []
        runs += [(shipped, cores, True)] if args.write_behind else []
        for i in range(args.repeat):
            # Every other round in reverse order: a disk that slows down as the run goes on
            # (the device's does) favours no variant.
            for writers, frame_cores, behind in runs if i % 2 == 0 else runs[::-1]:
                bundle_read.WRITERS = writers
                frame_read.FRAME_READ_CORES = frame_cores
                frame_read.WRITE_BEHIND = behind
                how = "by frames where it can" if frame_cores == cores else "one stream"
                how += {None: "", True: ", write-behind", False: ", no write-behind"}[behind]
                dst = work / f"u{i}-{writers}-{frame_cores}-{behind}"
                dst.mkdir()
                spent.clear()
                t, c = time.perf_counter(), time.process_time()
                if tl is not None:
                    tl.start(t)
                api.unpack(bundle, root=dst, force=True)
                wall, cpu = time.perf_counter() - t, time.process_time() - c
                print(f"unpack {wall:.2f} s (CPU {cpu:.2f} s), {how}, {writers} writers: "
                      + ", ".join(f"{k} {v:.2f}" for k, v in spent.items()), flush=True)
                if tl is not None:
                    print(tl.report(), flush=True)
                os.sync()  # dst kept to the end: see bench_fleet's unpack rows
            for sync in (False, True) if args.tar else ():
                dst = work / f"t{i}-{sync}"
                dst.mkdir()
                t = time.perf_counter()
                tar_zstd(["-xf", str(bundle), "-C", str(dst)])
                if sync:
                    subprocess.run(["sync", "-f", str(dst)], check=True)
                print(f"tar -x{'; sync -f' if sync else ''} {time.perf_counter() - t:.2f} s",
                      flush=True)
                os.sync()
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if tl is not None:
            tl.chunk_log.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
