"""Benchmark: how fast a root is scanned, against ``du -sb`` on the same tree (issue 17 item 5).

    python benchmarks/bench_scan.py [--files 200000] [--repeat 3] [--templates DIR ...]
                                    [--skip-options] [--rss-only] [--baseline DIR]

The tree is benchmarks/synth.py's (clones of real entries made by real vLLM: the harness's
``compile``, ``compile-nomega`` and ``compile-tp2`` roots, or ``--templates`` roots copied from
them, e.g. onto a machine without the harness). Every figure is a ratio to ``du -sb`` timed in
the same run, interleaved, median of ``--repeat`` (page and dentry caches warm for all), with
wall and CPU (user + sys) seconds beside it and the 1-minute load average before and after:
- walk options, in one process each: a minimal single-threaded ``os.scandir`` + ``lstat``
  walk, ``os.fwalk``, a thread pool and a process pool over the entries (sizes only); GNU
  ``find -printf`` printing what a listing needs of each name (``walk:find``), and the same
  read by Python split into fields (``walk:find-parse``: a C walker's floor as a scanner);
- ``vllm-cache ls --rescan --json`` with 1 worker and with the default workers (every core);
- ``python-start`` (``python -c pass``: the interpreter alone) and ``walk:index-stats-c``:
  the ``lstat``s of ``walk:index-stats`` from C (compiled here with ``cc`` when there is one):
  the system calls' own cost, without Python's ~2.5 us per ``os.lstat``;
- ``vllm-cache ls --json`` with the listing index warm (nothing changed), and with none at
  all (``cold``: a first listing); ``walk:index-stats``, the floor of an indexed listing (load
  the index, ``lstat`` what it watches, no CLI and no output);
and the peak RSS of each ``ls`` (``--rss-only``: one cold, one rescan, one indexed run).
``--baseline DIR`` (a source tree of an earlier commit, e.g. ``git archive REV vllm_cache_tools
| tar -x -C DIR``) adds its rescan and indexed rows (``base:rescan``, ``base:indexed``, with its
own index), interleaved with the rest: a before/after under the same load.
Goals: rescan <= 1.0x du, indexed <= 0.1x du, RSS < 200 MB
on 1M files. Results go to .bench/scan-<files>.json.
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
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.synth import generate  # noqa: E402


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds (user + sys) and peak RSS (KiB) of one child process."""
    t0 = time.perf_counter()
    with open(os.devnull, "wb") as null:
        proc = subprocess.Popen(cmd, stdout=null, stderr=subprocess.PIPE, env=env)
        _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        err = proc.stderr.read().decode() if proc.stderr else ""
        raise SystemExit(f"{cmd[0]} failed: {err}")
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss


# -- walk options (sizes only), each run in a child: python bench_scan.py --walk NAME TREE ----

def _walk_one(top: str) -> int:
    total = 0
    stack = [top]
    while stack:
        with os.scandir(stack.pop()) as it:
            for e in it:
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
                else:
                    total += e.stat(follow_symlinks=False).st_size
    return total


def _fwalk(top: str) -> int:
    total = 0
    for _, _, files, dfd in os.fwalk(top):
        for f in files:
            total += os.lstat(f, dir_fd=dfd).st_size
    return total


def _entries(tree: str) -> list[str]:
    cc = os.path.join(tree, "torch_compile_cache")
    aot = os.path.join(cc, "torch_aot_compile")
    return ([os.path.join(aot, n) for n in os.listdir(aot)]
            + [os.path.join(cc, n) for n in os.listdir(cc) if len(n) == 10])


def _index_stats(tree: str) -> int:
    """The floor of an indexed listing: load the listing index and ``lstat`` what it watches
    (every watched folder and key file of every entry), nothing else: no CLI, no output."""
    import msgspec

    from vllm_cache_tools.store.listing_index import Record, index_path

    doc = msgspec.msgpack.decode(index_path(Path(tree) / "torch_compile_cache").read_bytes(),
                                 type=tuple[int, str, dict[str, msgspec.Raw]])
    dec = msgspec.msgpack.Decoder(Record).decode
    n = 0
    for path, raw in doc[2].items():
        rec = dec(raw)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for rel in (*rec.dir_names, *(k[0] for k in rec.key_files)):
                n += os.lstat(rel, dir_fd=fd).st_size > 0
        finally:
            os.close(fd)
    return n


LSTAT_C = r"""
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
int main(int argc, char **argv) {
    FILE *f = fopen(argv[1], "r"); char line[8192]; struct stat st; long long n = 0;
    if (!f) return 2;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        if (lstat(line, &st) == 0) n += st.st_size > 0;
    }
    printf("%lld\n", n);
    return 0;
}
"""
"""``walk:index-stats-c``: the ``lstat``s of ``walk:index-stats`` (every watched folder and key
file of every entry, by full path) from C, with no interpreter: what those system calls cost
on this machine, against what the same calls cost through Python's ``os.lstat``."""


def _watched_paths(tree: Path, out: Path) -> int:
    """Write the full path of every folder and key file the listing index watches to ``out``
    (one per line), for ``walk:index-stats-c``; how many."""
    import msgspec

    from vllm_cache_tools.store.listing_index import Record, index_path

    doc = msgspec.msgpack.decode(index_path(tree / "torch_compile_cache").read_bytes(),
                                 type=tuple[int, str, dict[str, msgspec.Raw]])
    dec = msgspec.msgpack.Decoder(Record).decode
    paths = [os.path.normpath(os.path.join(p, rel)) for p, raw in doc[2].items()
             for rec in (dec(raw),) for rel in (*rec.dir_names, *(k[0] for k in rec.key_files))]
    out.write_text("".join(p + "\n" for p in paths))
    return len(paths)


FIND_FORMAT = "%y %s %b %U %T@ %A@ %P\\0"
"""What a listing needs of each name, from GNU find (a C walker, as du is): type, size, blocks,
owner, mtime, atime and the path below the tree."""


def _find_parse(tree: str) -> int:
    """Option (b) of issue 17's scan paragraph at its cheapest: GNU ``find -printf`` does the
    walk and the ``lstat``s, Python only splits its output into fields and sums sizes (no
    grouping by entry, no times turned into numbers: less than a listing would need)."""
    out = subprocess.run(["find", tree, "-printf", FIND_FORMAT], check=True,
                         stdout=subprocess.PIPE).stdout
    total = 0
    for rec in out.split(b"\0"):
        if rec:
            kind, size, _blocks, _uid, _mtime, _atime, _path = rec.split(b" ", 6)
            if kind != b"d":
                total += int(size)
    return total


def walk_option(name: str, tree: str) -> int:
    if name == "find-parse":
        return _find_parse(tree)
    if name == "scandir-1":
        return _walk_one(tree)
    if name == "index-stats":
        return _index_stats(tree)
    if name == "fwalk-1":
        return _fwalk(tree)
    n = len(os.sched_getaffinity(0))
    pool = ThreadPoolExecutor(n) if name == "threads" else ProcessPoolExecutor(n)
    with pool:
        return sum(pool.map(_walk_one, _entries(tree), chunksize=64 if name == "procs" else 1))


WALKS = ("scandir-1", "fwalk-1", "threads", "procs", "index-stats", "find-parse")


def ensure_tree(files: int, templates: list[Path]) -> Path:
    tree = REPO / ".bench" / f"synth-{files}"
    if not (tree / "synth.json").exists():
        shutil.rmtree(tree, ignore_errors=True)
        if not templates:
            from tests.realvllm.harness import SCENARIOS, run_scenario

            templates = [run_scenario(SCENARIOS[n]).vllm_root
                         for n in ("compile", "compile-nomega", "compile-tp2")]
        print("generating", tree, generate(tree, templates, files), flush=True)
    return tree


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--files", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--templates", type=Path, nargs="*", default=[])
    ap.add_argument("--skip-options", action="store_true", help="only du and ls")
    ap.add_argument("--rss-only", action="store_true", help="one rescan, peak RSS only")
    ap.add_argument("--baseline", type=Path, help="an earlier commit's source tree: its rows too")
    ap.add_argument("--walk", nargs=2, metavar=("NAME", "TREE"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.walk:
        print(walk_option(*a.walk))
        return 0
    tree = ensure_tree(a.files, a.templates)
    meta = json.loads((tree / "synth.json").read_text())
    script = Path(sys.executable).parent / "vllm-cache"
    # Without the console script (a --target install on another machine): the same entry point.
    exe_cmd = ([str(script)] if script.exists() else
               [sys.executable, "-c", "from vllm_cache_tools.cli import main; main()"])
    state = Path(tempfile.mkdtemp(prefix="vct-bench-"))
    env = {**os.environ, "XDG_CACHE_HOME": str(state)}
    env1 = {**env, "VLLM_CACHE_TOOLS_SCAN_WORKERS": "1"}
    # "cold": a first listing, no index at all (a fresh state dir each time, made in the loop).
    cmds: dict[str, tuple[list[str], dict[str, str]]] = {
        "du": (["du", "-sb", str(tree)], env),
        "rescan": ([*exe_cmd, "ls", "--json", "--rescan", "--root", str(tree)], env),
        "indexed": ([*exe_cmd, "ls", "--json", "--root", str(tree)], env),
        "cold": ([*exe_cmd, "ls", "--json", "--root", str(tree)], env),
    }
    if a.rss_only:
        cmds = {k: cmds[k] for k in ("cold", "rescan", "indexed")}
    else:
        cmds["rescan-1worker"] = ([*exe_cmd, "ls", "--json", "--rescan", "--root", str(tree)], env1)
    if a.baseline:
        base_cmd = [sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv.pop(1)); "
                    "from vllm_cache_tools.cli import main; main()", str(a.baseline.resolve())]
        base_env = {**env, "XDG_CACHE_HOME": str(state / "baseline")}
        cmds["base:rescan"] = ([*base_cmd, "ls", "--json", "--rescan", "--root", str(tree)],
                               base_env)
        cmds["base:indexed"] = ([*base_cmd, "ls", "--json", "--root", str(tree)], base_env)
    if not (a.skip_options or a.rss_only):
        for w in WALKS:
            # Each walk with the environment of the ls runs (index-stats reads their index).
            cmds[f"walk:{w}"] = ([sys.executable, __file__, "--walk", w, str(tree)], env)
        # The C walker alone, its output thrown away: the floor of option (b) before parsing.
        cmds["walk:find"] = (["find", str(tree), "-printf", FIND_FORMAT], env)
    load0 = os.getloadavg()[0]
    timed(["du", "-sb", str(tree)], env)  # warm the dentry/inode caches for everyone
    timed(cmds["indexed"][0], env)  # the index
    if not (a.skip_options or a.rss_only):
        # The interpreter's own start (`python -c pass`), and the index's lstats from C: the
        # parts of an indexed listing no Python code of ours can make cheaper.
        cmds["python-start"] = ([sys.executable, "-c", "pass"], env)
        cc = shutil.which("cc") or shutil.which("gcc")
        if cc:
            with tempfile.TemporaryDirectory(dir=state) as d:
                Path(d, "lstat.c").write_text(LSTAT_C)
                subprocess.run([cc, "-O2", "-o", str(state / "lstat-paths"),
                                str(Path(d, "lstat.c"))], check=True)
            # The index the ls runs use (XDG_CACHE_HOME=state): loaded as index-stats does.
            os.environ["XDG_CACHE_HOME"] = str(state)
            n = _watched_paths(tree, state / "watched.txt")
            print(f"walk:index-stats-c: {n} watched paths", flush=True)
            cmds["walk:index-stats-c"] = ([str(state / "lstat-paths"),
                                           str(state / "watched.txt")], env)
    if "base:indexed" in cmds:
        timed(*cmds["base:indexed"])
    rows: dict[str, list[tuple[float, float, int]]] = {k: [] for k in cmds}
    for _ in range(1 if a.rss_only else a.repeat):  # interleaved: drift hits all alike
        for k, (cmd, e) in cmds.items():
            if k == "cold":
                e = {**e, "XDG_CACHE_HOME": tempfile.mkdtemp(prefix="cold-", dir=state)}
            rows[k].append(timed(cmd, e))
    shutil.rmtree(state, ignore_errors=True)
    med = {k: (statistics.median(w for w, _, _ in v), statistics.median(c for _, c, _ in v),
               max(r for _, _, r in v) / 1024) for k, v in rows.items()}
    du_wall = med["du"][0] if "du" in med else 0.0
    result: dict[str, object] = {
        "tree": {"files": meta["files"], "entries": meta["entries"]},
        "cores": len(os.sched_getaffinity(0)),
        "load_1min": [round(load0, 2), round(os.getloadavg()[0], 2)],
        "rows": {k: {"wall_s": round(w, 3), "cpu_s": round(c, 3), "peak_rss_mb": round(r, 1),
                     **({"ratio_wall": round(w / du_wall, 2)} if du_wall else {})}
                 for k, (w, c, r) in med.items()},
        "goals": {"rescan_ratio_max": 1.0, "indexed_ratio_max": 0.1, "rss_mb_max": 200},
    }
    out = REPO / ".bench" / f"scan-{a.files}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
