"""Benchmark: ``vllm-cache prune`` of a 100k-file tree against ``rm -rf`` of an identical copy.

    python benchmarks/bench_prune.py [--files 100000] [--repeat 3] [--entry-files N]

Each round generates two identical trees with benchmarks/synth.py (same seed, so the same keys
and files) from real caches made by real vLLM (the test harness makes them on first use), then
times, in alternating order, ``rm -rf`` of one tree's ``torch_compile_cache`` and
``vllm-cache prune --older-than 0s --grace 0 --yes --json`` of the other (which plans, prints
the plan, re-checks every entry under its lock, renames it into the trash and removes it).
``sync`` runs before each timed command so neither pays for the other's writeback.
Throughput ratio = rm's wall time / prune's wall time (files per second, prune vs rm; the
median over rounds); CPU seconds (user + system, ``os.wait4``) of both beside it, since the
machine is shared and wall time alone moves with other load (``cpu_ratio``: rm's CPU seconds
/ prune's, the median over rounds; the load average before and after the run is recorded).
Peak RSS of prune from ``os.wait4``. ``--entry-files N`` makes every entry hold about N files
(each template file cloned under numbered names in the same folders; ``--files 100000
--entry-files 1000`` gives 100 entries of 1,000 files), where the default keeps the real
entries' sizes (many small entries, as real roots have). Goals (issue #6): ratio >= 0.9,
peak RSS < 200 MB; exit status 1 when missed. Results also go to .bench/prune.json.
``--two-phase`` also prunes a third identical tree through the library's scan-plan-move path
(what the CLI runs without ``--yes``, and for ``--keep``/``--max-size``) in the same round.
``--full-read`` also prunes a fourth identical tree with ``--older-than 0s --corrupt`` (no
entry is corrupt, so the same entries go): a policy that needs the key files streams over the
full read (the scan's worker processes parse every entry), which is what ``--older-than``
alone did before the light read (store/light.py); the same round's reference for it.
Where vLLM is not installed (the device), pass ``--template-root`` for each of the harness's
``compile``, ``compile-nomega`` and ``compile-tp2`` roots (~15 MB together, copied there):
then only this package is needed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.synth import READ_BY_TOOLS, generate, templates  # noqa: E402


def generate_big(dst: Path, roots: list[Path], target_files: int, entry_files: int,
                 seed: int = 0) -> dict[str, int]:
    """Like :func:`benchmarks.synth.generate`, but each entry holds about ``entry_files``
    files: its template's files, each cloned ``entry_files // len(files)`` times under
    ``<name>.<i>`` in the same folder (the files tools read stay hard links, once)."""
    import random

    rng = random.Random(seed)
    tpls = templates(roots)
    cc = dst / "torch_compile_cache"
    (cc / "torch_aot_compile").mkdir(parents=True, exist_ok=True)
    made = entries = 0
    while made < target_files:
        layout, src, files = tpls[entries % len(tpls)]
        key = f"{rng.getrandbits(256):064x}" if layout == "aot" else f"{rng.getrandbits(40):010x}"
        base = cc / "torch_aot_compile" / key if layout == "aot" else cc / key
        copies = max(1, entry_files // max(1, len(files)))
        for rel, size in files:
            f = base / rel
            f.parent.mkdir(parents=True, exist_ok=True)
            if f.name in READ_BY_TOOLS:
                os.link(src / rel, f)
                made += 1
                continue
            for i in range(copies):
                with open(f if i == 0 else f.with_name(f"{f.name}.{i}"), "wb") as fh:
                    fh.truncate(size)
                made += 1
        entries += 1
    return {"files": made, "entries": entries, "templates": len(tpls)}


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, int, bytes, float]:
    """Wall seconds, peak RSS (KiB), stdout and CPU seconds (user + system) of one child."""
    with tempfile.TemporaryFile() as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        cpu = usage.ru_utime + usage.ru_stime
        wall = time.perf_counter() - t0
        err = proc.stderr.read().decode() if proc.stderr else ""
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"{cmd[0]} failed: {err}")
        out.seek(0)
        return wall, usage.ru_maxrss, out.read(), cpu


TWO_PHASE = """
import sys
from vllm_cache_tools.maintain.execute import execute_plan
from vllm_cache_tools.maintain.plan import Protections, plan_prune_root
from vllm_cache_tools.maintain.policies import Policies
plan = plan_prune_root(sys.argv[1], Policies(older_than_s=0.0),
                       Protections(grace_s=0.0, leases_when_planning=False))
res = execute_plan(plan)
sys.exit(1 if res.errors or res.failed or len(res.deleted) != len(plan.entries) else 0)
"""
"""The two-phase prune (``prune --older-than 0s --grace 0 --yes`` before it streamed: a whole
scan and plan, then the moves), through the library: the CLI streams these policies."""


def _loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def count_files(top: Path) -> int:
    """Files left outside prune's trash, plus items left inside it (its lock file aside)."""
    n = 0
    for d, dirs, files in os.walk(top):
        if Path(d) == top:
            dirs[:] = [x for x in dirs if x != ".vllm-cache-trash"]
        n += len(files)
    trash = top / ".vllm-cache-trash"
    if trash.is_dir():
        n += sum(1 for x in trash.iterdir() if x.name != "locks")
    return n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--files", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--entry-files", type=int, default=0,
                    help="files per entry (default: the real entries' own sizes)")
    ap.add_argument("--two-phase", action="store_true",
                    help="also prune a third identical tree the two-phase way (scan, plan, "
                    "then move: what prune does without --yes, and for --keep/--max-size), "
                    "timed in the same round")
    ap.add_argument("--full-read", action="store_true",
                    help="also prune a fourth identical tree with --older-than 0s --corrupt "
                    "(streamed over the full read: key files parsed), in the same round")
    ap.add_argument("--template-root", action="append", type=Path, default=None,
                    help="real vLLM cache roots to clone (default: the test harness's)")
    a = ap.parse_args()
    bench = REPO / ".bench"
    bench.mkdir(exist_ok=True)
    if a.template_root:
        roots = a.template_root
    else:  # the harness makes them with real vLLM on first use (only then is vLLM needed)
        from tests.realvllm.harness import SCENARIOS, run_scenario

        roots = [run_scenario(SCENARIOS[n]).vllm_root
                 for n in ("compile", "compile-nomega", "compile-tp2")]
    exe = str(Path(sys.executable).parent / "vllm-cache")
    state = Path(tempfile.mkdtemp(prefix="vct-bench-"))
    # The trees' key files are hard links to the templates' (synth.py): a private copy, so
    # that another process reading the shared templates meanwhile (atime: last use) cannot
    # make entries look used after `--older-than 0s` started (it kept 293 entries once).
    private = []
    for n, r in enumerate(roots):
        shutil.copytree(r, state / "templates" / str(n), symlinks=True)
        private.append(state / "templates" / str(n))
    roots = private
    env = {**os.environ, "XDG_CACHE_HOME": str(state / "cache"),
           "XDG_STATE_HOME": str(state / "state")}
    rounds = []
    load_before = _loadavg()
    for i in range(a.repeat):
        work = bench / "prune-trees"
        shutil.rmtree(work, ignore_errors=True)
        if a.entry_files:
            meta = generate_big(work / "a", roots, a.files, a.entry_files)
            generate_big(work / "b", roots, a.files, a.entry_files)
            if a.two_phase:
                generate_big(work / "c", roots, a.files, a.entry_files)
            if a.full_read:
                generate_big(work / "d", roots, a.files, a.entry_files)
        else:
            meta = generate(work / "a", roots, a.files)
            generate(work / "b", roots, a.files)
            if a.two_phase:
                generate(work / "c", roots, a.files)
            if a.full_read:
                generate(work / "d", roots, a.files)
        files = count_files(work / "a" / "torch_compile_cache")
        prune_cmd = [exe, "prune", "--root", str(work / "a"), "--older-than", "0s",
                     "--grace", "0", "--yes", "--json"]
        rm_cmd = ["rm", "-rf", str(work / "b" / "torch_compile_cache")]
        two_cmd = [sys.executable, "-c", TWO_PHASE, str(work / "c")]
        full_cmd = [exe, "prune", "--root", str(work / "d"), "--older-than", "0s", "--corrupt",
                    "--grace", "0", "--yes", "--json"]
        order = ["rm", "prune"] if i % 2 == 0 else ["prune", "rm"]
        if a.two_phase:
            order.insert(1, "two-phase")
        if a.full_read:
            order.insert(1, "full-read")
        cmds = {"rm": rm_cmd, "prune": prune_cmd, "two-phase": two_cmd, "full-read": full_cmd}
        got: dict[str, tuple[float, int, bytes, float]] = {}
        for name in order:
            subprocess.run(["sync"], check=True)
            got[name] = timed(cmds[name], env)
        report = json.loads(got["prune"][2])
        left = count_files(work / "a" / "torch_compile_cache")
        rounds.append({
            "files": files, "entries": meta["entries"], "order": order,
            "rm_s": round(got["rm"][0], 3), "prune_s": round(got["prune"][0], 3),
            "ratio": round(got["rm"][0] / got["prune"][0], 3),
            "rm_cpu_s": round(got["rm"][3], 3), "prune_cpu_s": round(got["prune"][3], 3),
            "prune_rss_mb": round(got["prune"][1] / 1024, 1),
            "deleted": len(report["deleted"]), "skipped": len(report["skipped"]),
            "freed_bytes": report["freed_bytes"], "files_left": left,
        })
        if a.two_phase:
            left_c = count_files(work / "c" / "torch_compile_cache")
            rounds[-1].update({
                "two_phase_s": round(got["two-phase"][0], 3),
                "two_phase_cpu_s": round(got["two-phase"][3], 3),
                "two_phase_ratio": round(got["rm"][0] / got["two-phase"][0], 3),
                "two_phase_files_left": left_c})
        if a.full_read:
            full = json.loads(got["full-read"][2])
            rounds[-1].update({
                "full_read_s": round(got["full-read"][0], 3),
                "full_read_cpu_s": round(got["full-read"][3], 3),
                "full_read_ratio": round(got["rm"][0] / got["full-read"][0], 3),
                "full_read_deleted": len(full["deleted"]),
                "full_read_files_left": count_files(work / "d" / "torch_compile_cache")})
        print(json.dumps(rounds[-1]), file=sys.stderr, flush=True)
        shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(state, ignore_errors=True)
    ratio = statistics.median(r["ratio"] for r in rounds)
    rss = max(r["prune_rss_mb"] for r in rounds)
    complete = all(r["files_left"] == 0 and r["skipped"] == 0 for r in rounds)
    result = {
        "tree": {"files": rounds[0]["files"], "entries": rounds[0]["entries"]},
        "rounds": rounds,
        "throughput_ratio": ratio,
        "rm_s_median": statistics.median(r["rm_s"] for r in rounds),
        "prune_s_median": statistics.median(r["prune_s"] for r in rounds),
        "rm_cpu_s_median": statistics.median(r["rm_cpu_s"] for r in rounds),
        "prune_cpu_s_median": statistics.median(r["prune_cpu_s"] for r in rounds),
        "prune_peak_rss_mb": rss,
        **({"two_phase_s_median": statistics.median(r["two_phase_s"] for r in rounds),
            "two_phase_cpu_s_median": statistics.median(r["two_phase_cpu_s"] for r in rounds),
            "two_phase_ratio": statistics.median(r["two_phase_ratio"] for r in rounds)}
           if a.two_phase else {}),
        **({"full_read_s_median": statistics.median(r["full_read_s"] for r in rounds),
            "full_read_cpu_s_median": statistics.median(r["full_read_cpu_s"] for r in rounds),
            "full_read_ratio": statistics.median(r["full_read_ratio"] for r in rounds)}
           if a.full_read else {}),
        "cpu_ratio": round(statistics.median(r["rm_cpu_s"] / r["prune_cpu_s"] for r in rounds),
                           3),
        "loadavg_before": load_before,
        "loadavg": _loadavg(),
        "goals": {"ratio_min": 0.9, "rss_mb_max": 200},
        "met": ratio >= 0.9 and rss < 200 and complete,
    }
    name = f"prune-{a.entry_files}.json" if a.entry_files else "prune.json"
    (bench / name).write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0 if result["met"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
