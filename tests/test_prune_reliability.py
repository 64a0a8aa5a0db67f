"""Prune against real processes and hostile trees: concurrent writers with vLLM's write
pattern, prunes killed at random points, symlink escapes, permission-denied trees, a planted
malicious pickle, and a real vLLM start running while prune removes other entries."""

from __future__ import annotations

import fcntl
import hashlib
import json
import mmap
import multiprocessing
import os
import pickle
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from benchmarks.synth import generate
from tests.conftest import run_cli
from tests.realvllm.harness import (
    SCENARIOS,
    ScenarioRun,
    Start,
    copy_root,
    ensure_venv,
    run_scenario,
    run_start,
    venv_python,
)
from tests.trees import age, files_of, trash_items
from vllm_cache_tools import scan
from vllm_cache_tools.layout import TRASH_DIRNAME
from vllm_cache_tools.maintain.execute import execute_plan
from vllm_cache_tools.maintain.plan import Protections, plan_prune
from vllm_cache_tools.maintain.policies import Policies
from vllm_cache_tools.maintain.trash import remove_tree_at

pytestmark = pytest.mark.realvllm









# --------------------------------------------------------------------------------------------
# Writers reproducing vLLM's write pattern vs. pruners with tight policies


@dataclass(frozen=True)
class Template:
    """Files of one real AOT entry and one real backend prefix folder (from real vLLM)."""

    inductor: tuple[tuple[str, bytes], ...]
    model: bytes
    backend: tuple[tuple[str, bytes], ...]
    so_rel: str


def load_template(run: ScenarioRun) -> Template:
    cc = run.compile_cache
    aot = sorted((cc / "torch_aot_compile").iterdir())[0]
    ind = aot / "inductor_cache"
    files = tuple((str(p.relative_to(ind)), p.read_bytes()) for p in sorted(ind.rglob("*"))
                  if p.is_file() and not p.is_symlink() and p.parent.name != "locks")
    so_rel = next(rel for rel, _ in files if rel.endswith(".so"))
    pre = sorted(cc.glob("??????????/rank_0_0/backbone"))[0]
    backend = tuple((p.name, p.read_bytes()) for p in sorted(pre.iterdir()) if p.is_file())
    return Template(files, (aot / "rank_0_0" / "model").read_bytes(), backend, so_rel)


def _write_atomic(path: Path, data: bytes) -> None:
    # torch._inductor's write_atomic and vllm/compilation/decorators.py: tmp, then replace.
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _compile(cc: Path, key: str, rank: int, tpl: Template) -> None:
    """One rank compiling: backend files (written only when missing, plainly, as
    vllm/compilation/backends.py does), Inductor kernels under a FileLock into the entry's
    shared inductor_cache, then the AOT model via tmp + os.replace."""
    bdir = cc / hashlib.sha256(key.encode()).hexdigest()[:10] / f"rank_{rank}_0" / "backbone"
    os.makedirs(bdir, exist_ok=True)
    for name, data in tpl.backend:
        p = bdir / name
        if not p.exists():
            with open(p, "wb") as f:
                f.write(data)
    base = cc / "torch_aot_compile" / key
    ind = base / "inductor_cache"
    os.makedirs(ind / "locks", exist_ok=True)
    for rel, data in tpl.inductor:
        p = ind / rel
        os.makedirs(p.parent, exist_ok=True)
        with open(ind / "locks" / (p.name.split(".")[0] + ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            _write_atomic(p, data)
    rdir = base / f"rank_{rank}_0"
    os.makedirs(rdir, exist_ok=True)
    _write_atomic(rdir / "model", tpl.model)


def _load(cc: Path, key: str, rank: int, tpl: Template, hold: float) -> bool:
    """One rank loading (a hit): map the model and a kernel and check every byte. A file that
    vanished between the existence check and the open is a load failure (a miss), which vLLM
    handles by compiling again; a torn or short file is a failure."""
    base = cc / "torch_aot_compile" / key
    m = base / f"rank_{rank}_0" / "model"
    if not m.exists():
        return False
    maps = []
    try:
        for p in (m, base / "inductor_cache" / tpl.so_rel):
            with open(p, "rb") as f:
                maps.append(mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ))
    except FileNotFoundError:
        for x in maps:
            x.close()
        return False
    try:
        if maps[0][:] != tpl.model or maps[1][:] != dict(tpl.inductor)[tpl.so_rel]:
            raise AssertionError(f"torn read of {key[:12]} rank {rank}")
        time.sleep(hold)
    finally:
        for x in maps:
            x.close()
    return True


def _writer(cc: str, pair: int, rank: int, cycles: int, tpl: Template,
            barrier: Any, out: str) -> None:
    """A rank process. Both ranks of a pair make the same choices (same seed) and meet at a
    barrier around each step, as tensor-parallel ranks of one engine do."""
    stats: dict[str, Any] = {"cycles": 0, "compiles": 0, "hits": 0, "misses": 0,
                             "failures": []}
    rng = random.Random(pair)
    history: list[str] = []
    root = Path(cc)
    for _ in range(cycles):
        load = bool(history) and rng.random() < 0.4
        key = rng.choice(history) if load else f"{rng.getrandbits(256):064x}"
        hold = rng.random() * 0.02
        barrier.wait(timeout=120)
        try:
            if load:
                if _load(root, key, rank, tpl, hold):
                    stats["hits"] += 1
                else:
                    stats["misses"] += 1
                    _compile(root, key, rank, tpl)  # vLLM compiles again after a failed load
            else:
                _compile(root, key, rank, tpl)
                history.append(key)
                stats["compiles"] += 1
        except Exception:
            stats["failures"].append(traceback.format_exc())
        stats["cycles"] += 1
        barrier.wait(timeout=120)
        time.sleep(hold)  # serving between compiles and loads
    with open(out, "w") as f:
        json.dump(stats, f)


def _sample_half_deleted(cc: Path, tpl: Template) -> list[str]:
    """Entries in place that hold a rank's model but miss a kernel of their shared
    inductor_cache or hold a short model (writers write kernels first, the model last, all
    atomically; only a deletion inside the entry's place could produce this). Checked through
    the entry's fd, and counted only if the entry is still in place afterwards."""
    bad: list[str] = []
    aot = cc / "torch_aot_compile"
    try:
        keys = os.listdir(aot)
    except FileNotFoundError:
        return bad
    for key in keys:
        try:
            fd = os.open(aot / key, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            problem = None
            models = [r for r in os.listdir(fd) if r.startswith("rank_")
                      and os.path.exists(f"/proc/self/fd/{fd}/{r}/model")]
            for r in models:
                if os.stat(f"{r}/model", dir_fd=fd).st_size != len(tpl.model):
                    problem = f"{key[:12]}: short {r}/model"
            if models:
                for rel, _ in tpl.inductor:
                    if not os.path.exists(f"/proc/self/fd/{fd}/inductor_cache/{rel}"):
                        problem = f"{key[:12]}: model present but kernel {rel} missing"
                        break
            if problem and os.stat(aot / key).st_ino == os.fstat(fd).st_ino:
                bad.append(problem)
        except OSError:
            pass
        finally:
            os.close(fd)
    return bad


def test_writers_and_pruners(real_compile: ScenarioRun, tmp_path: Path) -> None:
    tpl = load_template(real_compile)
    root = tmp_path / "root"
    cc = root / "torch_compile_cache"
    (cc / "torch_aot_compile").mkdir(parents=True)
    ctx = multiprocessing.get_context("fork")
    pairs, cycles = 2, 260
    barriers = [ctx.Barrier(2) for _ in range(pairs)]
    writers = []
    for pair in range(pairs):
        for rank in range(2):
            out = tmp_path / f"writer-{pair}-{rank}.json"
            p = ctx.Process(target=_writer, args=(str(cc), pair, rank, cycles, tpl,
                                                  barriers[pair], str(out)))
            p.start()
            writers.append((p, out))
    stop = threading.Event()
    runs: list[dict[str, Any]] = []
    lock = threading.Lock()

    def pruner() -> None:
        while not stop.is_set():
            r = run_cli("prune", "--root", str(root), "--max-size", "1M", "--older-than", "1s",
                        "--grace", "2s", "--yes", "--json")
            with lock:
                runs.append({"rc": r.returncode, "stderr": r.stderr,
                             "data": json.loads(r.stdout) if r.stdout.strip() else None})

    pruners = [threading.Thread(target=pruner) for _ in range(2)]
    for t in pruners:
        t.start()
    violations: list[str] = []
    while any(p.is_alive() for p, _ in writers):
        violations += _sample_half_deleted(cc, tpl)
        time.sleep(0.05)
    stop.set()
    for t in pruners:
        t.join()
    for p, _ in writers:
        p.join()
        assert p.exitcode == 0
    stats = [json.loads(out.read_text()) for _, out in writers]
    failures = [f for s in stats for f in s["failures"]]
    total_cycles = sum(s["cycles"] for s in stats)
    deleted = [k for r in runs if r["data"] for k in r["data"]["deleted"]]
    reasons = Counter(s["reason"].split(" [")[0].split(":")[0] for r in runs if r["data"]
                      for s in r["data"]["skipped"])
    summary = {"writer_cycles": total_cycles, "compiles": sum(s["compiles"] for s in stats),
               "hits": sum(s["hits"] for s in stats),
               "misses_after_prune": sum(s["misses"] for s in stats),
               "writer_failures": len(failures), "half_deleted_seen": len(violations),
               "prune_runs": len(runs), "entries_deleted": len(deleted),
               "kept_because": dict(reasons.most_common(6))}
    print("reliability:", json.dumps(summary))
    assert total_cycles >= 1000
    assert failures == [], failures[:3]
    assert violations == [], violations[:5]
    assert all(r["rc"] == 0 and not r["data"]["errors"] for r in runs), \
        [r["stderr"] for r in runs if r["rc"]][:3]
    assert len(deleted) >= 100 and summary["misses_after_prune"] > 0
    # Writers are done: nothing is partial or corrupt (the synthetic backend keys do not
    # re-hash to their names, so key mismatches are expected and nothing else).
    r = run_cli("verify", "--root", str(root), "--json")
    kinds = {p["kind"] for p in json.loads(r.stdout)["problems"] if not p["note"]}
    assert kinds <= {"key-mismatch"}, r.stdout[:2000]
    r = run_cli("prune", "--root", str(root), "--older-than", "0s", "--grace", "0", "--yes")
    assert r.returncode == 0 and trash_items(root) == []
    assert not [k for k in os.listdir(cc / "torch_aot_compile")]


# --------------------------------------------------------------------------------------------
# Killed at random points


def _snapshot(root: Path) -> dict[str, frozenset[str]]:
    """Entry folder -> its files, for every entry in place."""
    out = {}
    info = scan(root, check_in_use=False, use_index=False)
    for e in info.entries:
        out[str(e.path)] = frozenset(files_of(e.path))
    return out


def _prune_child(root: Path) -> None:
    info = scan(root, check_in_use=False, use_index=False)
    plan = plan_prune(info, Policies(older_than_s=0), Protections(grace_s=0))
    execute_plan(plan)


def test_prune_killed_at_random_points(real_compile: ScenarioRun, real_nomega: ScenarioRun,
                                       tmp_path: Path) -> None:
    roots = [real_compile.vllm_root, real_nomega.vllm_root]
    root = tmp_path / "root"
    rng = random.Random(6)
    landed = late = partial_seen = finished = in_trash_at_kill = cli_kills = 0
    seed = 0
    exe = str(Path(sys.executable).parent / "vllm-cache")
    for i in range(150):
        if landed >= 55:
            break
        if len(_snapshot(root) if root.exists() else {}) < 10:
            seed += 1
            generate(root, roots, 3000, seed=seed)
        before = _snapshot(root)
        cli = i % 8 == 7
        if cli:  # the real console script
            proc: subprocess.Popen[bytes] | None = subprocess.Popen(
                [exe, "prune", "--root", str(root), "--older-than", "0s", "--grace", "0",
                 "--yes"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            assert proc is not None
            pid = proc.pid
        else:
            pid = os.fork()
            if pid == 0:  # pragma: no cover - child
                try:
                    _prune_child(root)
                finally:
                    os._exit(0)
            proc = None
        t0 = time.monotonic()
        if rng.random() < 0.6:  # during the moves/removals, at a random moment after one
            while not trash_items(root) and time.monotonic() - t0 < 10:
                time.sleep(0.0005)
            time.sleep(rng.random() * 0.03)
        else:  # anywhere: start-up, scan, plan, moves or removals
            time.sleep(rng.random() * (0.5 if cli else 0.08))
        # Still working? (A child that already finished is reaped here, never killed.)
        alive = (proc.poll() is None) if proc is not None else \
            os.waitpid(pid, os.WNOHANG) == (0, 0)
        if alive:
            os.kill(pid, signal.SIGKILL)
            if proc is not None:
                proc.wait()
            else:
                os.waitpid(pid, 0)
        else:
            late += 1
            continue
        landed += 1
        cli_kills += cli
        in_trash_at_kill += bool(trash_items(root))
        after = _snapshot(root)
        assert set(after) <= set(before)
        partial_seen += sum(1 for path, files in after.items() if files != before[path])
        if landed % 4 == 0:  # the next (unkilled) run finishes what the killed ones left
            left = trash_items(root)
            r = run_cli("prune", "--root", str(root), "--older-than", "0s", "--grace", "0",
                        "--yes", "--json")
            assert r.returncode == 0, r.stderr
            data = json.loads(r.stdout)
            assert sorted(data["finished_trash"]) == left and data["errors"] == []
            assert trash_items(root) == [] and _snapshot(root) == {}
            finished += len(left)
    print("kills:", json.dumps({"kills_during_work": landed, "of_them_cli": cli_kills,
                                "kills_after_exit_ignored": late,
                                "partial_entries_in_place": partial_seen,
                                "kills_with_items_in_trash": in_trash_at_kill,
                                "trash_items_finished_by_next_run": finished}))
    assert landed >= 50 and partial_seen == 0
    assert in_trash_at_kill >= 10 and finished >= 10


# --------------------------------------------------------------------------------------------
# Symlinks, permissions, malicious pickle


def test_symlink_escapes_are_never_followed(real_compile: ScenarioRun, tmp_path: Path) -> None:
    root = copy_root(real_compile.vllm_root, tmp_path / "root")
    outside = tmp_path / "outside"
    (outside / "sub").mkdir(parents=True)
    for i in range(5):
        (outside / f"precious{i}").write_text("keep")
        (outside / "sub" / f"deep{i}").write_text("keep")
    before = files_of(outside)
    cc = root / "torch_compile_cache"
    aots = sorted((cc / "torch_aot_compile").iterdir())
    backends = sorted(cc.glob("??????????"))
    (aots[0] / "inductor_cache" / "escape").symlink_to(outside)
    (backends[0] / "rank_0_0" / "link_to_file").symlink_to(outside / "precious0")
    (cc / "abcdef0123").symlink_to(outside)  # looks like a backend key
    # A rank folder swapped for a link after planning, the entry folder's mtime put back:
    # the re-check (lstat of every planned folder) sees it and keeps the entry.
    info = scan(root, check_in_use=False, use_index=False)
    plan = plan_prune(info, Policies(older_than_s=0), Protections(grace_s=0))
    rank = aots[1] / "rank_0_0"
    st = aots[1].stat()
    shutil.move(str(rank), str(tmp_path / "moved-rank"))
    rank.symlink_to(outside)
    os.utime(aots[1], ns=(st.st_atime_ns, st.st_mtime_ns))
    res = execute_plan(plan)
    assert sorted(res.deleted) == sorted(e.key for e in info.entries if e.key != aots[1].name)
    assert [s.reason for s in res.skipped] == ["changed since the plan was made (being written?)"]
    assert res.errors == ()
    assert files_of(outside) == before
    assert (cc / "abcdef0123").is_symlink()
    assert trash_items(root) == []
    # The whole torch_compile_cache a symlink: refused, nothing touched.
    other = tmp_path / "other"
    other.mkdir()
    (other / "torch_compile_cache").symlink_to(outside)
    r = run_cli("prune", "--root", str(other), "--older-than", "0s", "--grace", "0", "--yes")
    assert r.returncode == 2 and "torch_compile_cache is a symlink (not followed" in r.stderr
    r = run_cli("prune", "--root", str(other), "--older-than", "0s", "--grace", "0", "--yes",
                "--force")
    assert r.returncode == 0 and files_of(outside) == before
    r = run_cli("rm", "abcdef0123", "--root", str(root), "--yes", "--grace", "0")
    assert r.returncode == 2 and files_of(outside) == before
    # A trash folder planted as a link: refused (one line, exit 1), nothing moved or removed.
    third = copy_root(real_compile.vllm_root, tmp_path / "third")
    (third / "torch_compile_cache" / TRASH_DIRNAME).symlink_to(outside)
    r = run_cli("prune", "--root", str(third), "--older-than", "0s", "--grace", "0", "--yes")
    assert r.returncode == 1 and "is a symlink or not a folder" in r.stderr, r.stderr
    assert files_of(outside) == before and len(scan(third).entries) == 4
    # remove_tree_at on a tree of links removes the links only.
    tree = tmp_path / "links"
    (tree / "d").mkdir(parents=True)
    (tree / "d" / "to_dir").symlink_to(outside)
    (tree / "to_file").symlink_to(outside / "precious1")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert remove_tree_at(fd, "links").error is None
    finally:
        os.close(fd)
    assert not tree.exists() and files_of(outside) == before


def test_permission_denied_trees(real_compile: ScenarioRun, world_tmp: Path) -> None:
    root = copy_root(real_compile.vllm_root, world_tmp / "root")
    cc = root / "torch_compile_cache"
    aots = sorted((cc / "torch_aot_compile").iterdir())
    backends = sorted(cc.glob("??????????"))
    # A kernel bucket (its name comes from the kernels this machine compiled): cannot be emptied
    bucket = next(p for p in sorted((aots[0] / "inductor_cache").iterdir()) if p.is_dir())
    bucket.chmod(0o555)
    (backends[0] / "rank_0_0").chmod(0o000)  # cannot even be read
    keep = {p.name: files_of(p) for p in (aots[0],)}
    r = run_cli("prune", "--root", str(root), "--max-size", "0", "--grace", "0", "--yes",
                "--json", unprivileged=True)
    # A planned entry that could not be removed is a partial failure: exit 1, listed as failed.
    assert r.returncode == 1, r.stderr
    data = json.loads(r.stdout)
    assert [f["key"] for f in data["failed"]] == [aots[0].name], data["failed"]
    kept = {s["key"]: s["reason"] for s in data["skipped"]}
    assert "permission denied: cannot empty" in kept[aots[0].name]
    assert "could not be read" in kept[backends[0].name]
    assert sorted(data["deleted"]) == sorted([aots[1].name, backends[1].name])
    assert {p.name: files_of(p) for p in (aots[0],)} == keep  # whole, in place
    assert trash_items(root) == []
    # A folder the entries cannot be moved out of: every entry there stays whole.
    bucket.chmod(0o755)
    (cc / "torch_aot_compile").chmod(0o555)
    before = files_of(cc / "torch_aot_compile")
    r = run_cli("prune", "--root", str(root), "--older-than", "0s", "--grace", "0", "--yes",
                "--json", unprivileged=True)
    assert r.returncode == 1, r.stderr
    assert aots[0].name in [f["key"] for f in json.loads(r.stdout)["failed"]]
    kept = {s["key"]: s["reason"] for s in json.loads(r.stdout)["skipped"]}
    assert "cannot move it to the trash: Permission denied" in kept[aots[0].name]
    assert files_of(cc / "torch_aot_compile") == before


class _Evil:
    def __init__(self, target: str) -> None:
        self.target = target

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.target}",))


def test_malicious_model_pickle_is_never_executed(real_compile: ScenarioRun,
                                                  tmp_path: Path) -> None:
    root = copy_root(real_compile.vllm_root, tmp_path / "root")
    canary = tmp_path / "pwned"
    aot = sorted((root / "torch_compile_cache" / "torch_aot_compile").iterdir())[0]
    (aot / "rank_0_0" / "model").write_bytes(pickle.dumps(
        {"original_code": _Evil(str(canary)), "system_info": _Evil(str(canary)),
         "compiled_fn": (_Evil(str(canary)), pickle.dumps(_Evil(str(canary))))}, protocol=4))
    age(root / "torch_compile_cache", 1)
    for args in (["prune", "--unhittable", "--corrupt", "--partial", "--keep", "0",
                  "--python", str(venv_python()), "--dry-run"],
                 ["verify"], ["verify", "--fix", "--yes"],
                 ["prune", "--unhittable", "--python", str(venv_python()), "--yes"]):
        r = run_cli(*args, "--root", str(root), "--json")
        assert "Traceback" not in r.stderr and r.returncode in (0, 1), (args, r.stderr)
        assert not canary.exists(), args
    assert not aot.exists()  # removed by verify --fix as not-aot-model


# --------------------------------------------------------------------------------------------
# A real vLLM start while prune removes other entries


def test_real_vllm_start_while_pruning(real_cpu_default: ScenarioRun, real_compile: ScenarioRun,
                                       tmp_path: Path) -> None:
    python = ensure_venv()
    root = copy_root(real_cpu_default.vllm_root, tmp_path / "root")
    aot_dir = root / "torch_compile_cache" / "torch_aot_compile"
    own = {p.name for p in aot_dir.iterdir()}
    # Other entries: real entries of another run, cloned under new keys.
    others = []
    src = sorted((real_compile.compile_cache / "torch_aot_compile").iterdir())
    for i in range(8):
        key = hashlib.sha256(f"other-{i}".encode()).hexdigest()
        shutil.copytree(src[i % len(src)], aot_dir / key, symlinks=True)
        others.append(key)
    record: dict[str, Any] = {}

    def start() -> None:
        record["rec"] = run_start(python, root, Start.make(), tmp_path / "start-0.log")

    t = threading.Thread(target=start)
    t0 = time.monotonic()
    t.start()
    deleted: list[str] = []
    runs = 0
    while t.is_alive():
        waiting = [k for k in others if k not in deleted and (aot_dir / k).exists()]
        if waiting:
            age(aot_dir / waiting[0], 40)  # one more entry becomes old
        r = run_cli("prune", "--root", str(root), "--older-than", "30d", "--yes", "--json")
        assert r.returncode == 0, r.stderr
        deleted += json.loads(r.stdout)["deleted"]
        runs += 1
        time.sleep(2)
    t.join()
    wall = time.monotonic() - t0
    rec = record["rec"]
    log = rec.log.read_text(errors="replace")
    print("vllm+prune:", json.dumps({"start_s": round(wall, 1), "prune_runs": runs,
                                     "deleted_during_start": len(deleted)}))
    assert rec.returncode == 0 and rec.result is not None, log[-3000:]
    # vLLM logs a benign traceback at DEBUG level (no chat template in the tiny tokenizer);
    # anything at a higher level, or any sign of a cache file missing, is a failure.
    loud = [ln for ln in log.splitlines() if not re.search(r"\bDEBUG \d\d-\d\d ", ln)]
    assert not [ln for ln in loud if "Traceback" in ln or re.search(r"\bERROR \d\d-\d\d ", ln)]
    assert "No such file or directory" not in log and "unable to save AOT" not in log
    assert len(deleted) >= 3 and set(deleted) <= set(others)
    assert own <= {p.name for p in aot_dir.iterdir()}
    states = {e.key: e.state for e in scan(root, check_in_use=False, use_index=False).entries}
    # Default CPU mode on vLLM 0.32 rewrites an artifact its own loader cannot load.
    assert all(states[k] == "unloadable" for k in own)


@pytest.fixture(scope="module", autouse=True)
def _scenarios() -> None:
    """Make sure the scenarios exist before the timed tests start (no-op when cached)."""
    for name in ("compile", "compile-nomega", "cpu-default"):
        run_scenario(SCENARIOS[name])
