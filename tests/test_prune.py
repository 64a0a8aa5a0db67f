"""``prune`` and ``rm`` on copies of real vLLM caches, through the real console script."""

from __future__ import annotations

import json
import os
import pty
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli
from tests.realvllm.harness import SCENARIOS, ScenarioRun, copy_root, run_scenario, venv_python
from tests.trees import age, files_of, trash_items
from vllm_cache_tools import scan
from vllm_cache_tools.layout import TRASH_DIRNAME

pytestmark = pytest.mark.realvllm

PLAN_ENTRY_KEYS = {"key", "layout", "path", "size_bytes", "reasons"}


@pytest.fixture()
def root(real_compile: ScenarioRun, tmp_path: Path) -> Path:
    return copy_root(real_compile.vllm_root, tmp_path / "root")


@pytest.fixture(scope="module")
def tp2_run() -> ScenarioRun:
    return run_scenario(SCENARIOS["compile-tp2"])








def entries(root: Path) -> dict[str, str]:
    return {e.key: e.layout for e in scan(root, check_in_use=False, use_index=False).entries}


def prune_json(*args: str) -> tuple[int, dict[str, Any]]:
    r = run_cli("prune", *args, "--json")
    assert "Traceback" not in r.stderr, r.stderr
    return r.returncode, json.loads(r.stdout) if r.stdout.strip() else {}


def test_dry_run_prints_plan_and_touches_nothing(root: Path) -> None:
    before = files_of(root)
    rc, data = prune_json("--root", str(root), "--older-than", "0s", "--grace", "0",
                          "--dry-run")
    assert rc == 0
    assert set(data) >= {"root", "plan", "deleted", "skipped", "freed_bytes"}
    plan = data["plan"]
    assert isinstance(plan, dict)
    assert len(plan["entries"]) == 4
    for row in plan["entries"]:
        assert set(row) >= PLAN_ENTRY_KEYS and row["reasons"]
        assert row["reasons"][0].startswith("older than 0s: last used")
    assert plan["bytes"] == sum(r["size_bytes"] for r in plan["entries"])
    # Backend entries carry the AOT entries proven to share their traced sources.
    aot_keys = {r["key"] for r in plan["entries"] if r["layout"] == "aot"}
    for row in plan["entries"]:
        if row["layout"] == "backend":
            assert row["same_sources_aot"] and set(row["same_sources_aot"]) <= aot_keys
    assert data["deleted"] == [] and data["freed_bytes"] == 0
    assert files_of(root) == before
    assert not (root / "torch_compile_cache" / TRASH_DIRNAME).exists()
    r = run_cli("prune", "--root", str(root), "--older-than", "0s", "--grace", "0", "-n")
    assert r.returncode == 0 and "Dry run: would remove 4 of 4 entries" in r.stdout
    assert "last use from atime" in r.stdout
    assert "no hit ledger (the recorder plugin has not run" in r.stdout
    # Backend and AOT entries of one model are shown together, without claiming a pairing.
    assert "model vllm/model_executor/models/llama.py (backend and AOT entries" in r.stdout
    assert "= same traced sources as aot" in r.stdout


def test_keep_per_model_removes_whole_entries_and_ls_stays_clean(root: Path) -> None:
    before = entries(root)
    rc, data = prune_json("--root", str(root), "--keep", "1", "--grace", "0", "--yes")
    assert rc == 0, data
    deleted = data["deleted"]
    assert isinstance(deleted, list) and len(deleted) == 2
    assert {before[k] for k in deleted} == {"aot", "backend"}  # per model *and* layout
    assert data["freed_bytes"] == data["plan"]["bytes"] > 0
    left = entries(root)
    assert set(left) == set(before) - set(deleted)
    for k in deleted:
        assert not any(k in p for p in files_of(root))
    assert trash_items(root) == []
    r = run_cli("ls", "--root", str(root), "--json")
    ls = json.loads(r.stdout)
    assert r.returncode == 0 and ls["problems"] == [] and r.stderr == ""  # trash not foreign
    # Graph-only backend folders (mega AOT artifact) are whole but never loaded by vLLM.
    assert {(e["layout"], e["state"]) for e in ls["entries"]} <= {
        ("aot", "complete"), ("backend", "complete"), ("backend", "unloadable")}


def test_grace_period_protects_recent_writes(root: Path) -> None:
    aot = next((root / "torch_compile_cache" / "torch_aot_compile").iterdir())
    (aot / "inductor_cache" / "new.tmp2").write_bytes(b"x")  # a write happening now
    rc, data = prune_json("--root", str(root), "--older-than", "0s", "--yes")
    assert rc == 0
    kept = {s["key"]: s["reason"] for s in data["skipped"]}
    assert aot.name in kept and "within --grace 10m" in kept[aot.name]
    assert aot.name not in data["deleted"]
    assert aot.is_dir()
    rc, data = prune_json("--root", str(root), "--older-than", "0s", "--grace", "0", "--yes")
    assert rc == 0 and aot.name in data["deleted"]


def test_in_use_rank_keeps_the_whole_aot_entry(tp2_run: ScenarioRun, tmp_path: Path) -> None:
    root = copy_root(tp2_run.vllm_root, tmp_path / "root")
    aot = next((root / "torch_compile_cache" / "torch_aot_compile").iterdir())
    assert {p.name for p in aot.iterdir()} >= {"rank_0_0", "rank_1_0", "inductor_cache"}
    before = {k: v for k, v in files_of(root).items() if aot.name in k}
    holder = subprocess.Popen(
        [sys.executable, "-c", "import mmap,sys,time;f=open(sys.argv[1],'rb');"
         "m=mmap.mmap(f.fileno(),0,prot=mmap.PROT_READ);print('ok',flush=True);time.sleep(60)",
         str(aot / "rank_1_0" / "model")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ok"
        rc, data = prune_json("--root", str(root), "--older-than", "0s", "--grace", "0",
                              "--yes")
    finally:
        holder.kill()
        holder.wait()
    assert rc == 0
    kept = {s["key"]: s["reason"] for s in data["skipped"]}
    assert f"open by pid {holder.pid}" in kept[aot.name]
    # Rank 0 was not in use, but the entry (both ranks and the shared inductor_cache) stays.
    assert {k: v for k, v in files_of(root).items() if aot.name in k} == before
    assert len(data["deleted"]) == 1  # the backend entry


def test_max_size_evicts_least_recently_used_first(root: Path) -> None:
    cc = root / "torch_compile_cache"
    ents = scan(root, check_in_use=False).entries
    by_age = sorted(ents, key=lambda e: e.key)
    for i, e in enumerate(by_age):  # distinct last use: 40, 30, 20, 10 days ago
        age(e.path, 40 - 10 * i)
    total = sum(e.size_bytes for e in ents)
    newest = by_age[-1]
    limit = total - by_age[0].size_bytes  # evicting the oldest alone is enough
    rc, data = prune_json("--root", str(root), "--max-size", str(limit), "--yes")
    assert rc == 0
    assert data["deleted"] == [by_age[0].key]
    assert "least recently used" in data["plan"]["entries"][0]["reasons"][0]
    rc, data = prune_json("--root", str(root), "--max-size", "0", "--yes")
    assert rc == 0
    assert data["deleted"] == [e.key for e in by_age[1:]]  # oldest first
    assert not any(p for p in files_of(root) if newest.key in p)
    assert cc.is_dir() and trash_items(root) == []


def _patch_torch_version(model: Path, old: bytes, new: bytes) -> None:
    data = model.read_bytes()
    assert old in data and len(old) == len(new)
    model.write_bytes(data.replace(old, new))


def test_unhittable_uses_recorded_system_info(root: Path) -> None:
    aots = sorted((root / "torch_compile_cache" / "torch_aot_compile").iterdir())
    _patch_torch_version(aots[0] / "rank_0_0" / "model", b"2.13.0+cpu", b"2.12.0+cpu")
    age(root / "torch_compile_cache", 1)
    # This interpreter has no torch: nothing can be judged, nothing is deleted.
    rc, data = prune_json("--root", str(root), "--unhittable", "--grace", "0", "--yes")
    assert rc == 0 and data["deleted"] == []
    assert all("unknown" in s["reason"] or "graph-only" in s["reason"]
               for s in data["skipped"])
    assert data["environment"]["torch"] is None
    # vLLM's own environment (torch 2.13.0+cpu, read without importing torch).
    rc, data = prune_json("--root", str(root), "--unhittable", "--grace", "0", "--yes",
                          "--python", str(venv_python()))
    assert rc == 0, data
    assert data["deleted"] == [aots[0].name]
    reason = data["plan"]["entries"][0]["reasons"][0]
    assert reason == ("unhittable: built with torch 2.12.0+cpu, this environment has "
                      "2.13.0+cpu")
    assert aots[1].is_dir()
    skipped = {s["key"] for s in data["skipped"]}
    assert aots[1].name not in skipped  # hittable: not even considered
    assert all(len(k) == 10 for k in skipped)  # backend entries: unknown or graph-only, kept


def test_corrupt_and_partial_policies(root: Path) -> None:
    aot = sorted((root / "torch_compile_cache" / "torch_aot_compile").iterdir())[0]
    m = aot / "rank_0_0" / "model"
    m.write_bytes(m.read_bytes()[:1000])
    backend = sorted((root / "torch_compile_cache").glob("??????????"))[0]
    (backend / "rank_0_0" / "backbone" / "computation_graph.py").unlink()
    age(root / "torch_compile_cache", 1)
    rc, data = prune_json("--root", str(root), "--corrupt", "--yes")
    assert rc == 0 and data["deleted"] == [aot.name]
    assert data["plan"]["entries"][0]["reasons"][0].startswith("corrupt:")
    rc, data = prune_json("--root", str(root), "--partial", "--yes")
    assert rc == 0 and data["deleted"] == [backend.name]
    assert set(entries(root).values()) == {"aot", "backend"}


def test_rm_named_entries(root: Path, tmp_path: Path) -> None:
    keys = entries(root)
    backend = next(k for k, v in keys.items() if v == "backend")
    aot = next(k for k, v in keys.items() if v == "aot")
    r = run_cli("rm", backend[:6], aot[:8], "--root", str(root), "--grace", "0", "--yes",
                "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert sorted(data["deleted"]) == sorted([backend, aot])
    assert all(e["reasons"] == ["named on the command line"] for e in data["plan"]["entries"])
    assert set(entries(root)) == set(keys) - {backend, aot}
    # A path into another root is never mapped onto this one.
    other = copy_root(root, tmp_path / "other")
    victim = next(iter(entries(other)))
    path = next(p for p in (other / "torch_compile_cache").rglob(victim) if p.is_dir())
    r = run_cli("rm", str(path), "--root", str(root), "--grace", "0", "--yes")
    assert r.returncode == 2 and "not an entry of" in r.stderr
    assert victim in entries(root) and victim in entries(other)
    r = run_cli("rm", "ffffffffff", "--root", str(root), "--yes")
    assert r.returncode == 2 and "no entry matches" in r.stderr
    # Protected by the grace period: exit 1, entry kept.
    rest = next(iter(entries(root)))
    r = run_cli("rm", rest, "--root", str(root), "--yes", "--grace", "100000d")
    assert r.returncode == 1 and "within --grace" in r.stdout and rest in entries(root)


def test_refuses_unsafe_roots(tmp_path: Path) -> None:
    r = run_cli("prune", "--root", "/", "--older-than", "1d", "--dry-run")
    assert r.returncode == 2 and "refusing to prune /" in r.stderr
    home = tmp_path / "home"
    (home / "torch_compile_cache").mkdir(parents=True)
    r = run_cli("prune", "--root", str(home), "--older-than", "1d", "--dry-run",
                env={"HOME": str(home)})
    assert r.returncode == 2 and "home folder" in r.stderr
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "precious.txt").write_text("keep me")
    r = run_cli("prune", "--root", str(plain), "--older-than", "0s", "--yes")
    assert r.returncode == 2 and "does not look like a vLLM cache root" in r.stderr
    r = run_cli("prune", "--root", str(plain), "--older-than", "0s", "--yes", "--force")
    assert r.returncode == 0 and (plain / "precious.txt").read_text() == "keep me"
    r = run_cli("prune", "--root", str(plain))
    assert r.returncode == 2 and "choose at least one policy" in r.stderr
    r = run_cli("prune", "--root", str(plain), "--older-than", "soon")
    assert r.returncode == 2 and "not an age" in r.stderr


def test_confirmation(root: Path) -> None:
    n = len(entries(root))
    r = run_cli("prune", "--root", str(root), "--older-than", "0s", "--grace", "0")
    assert r.returncode == 2 and "pass --yes" in r.stderr and len(entries(root)) == n
    for answer, expect_left in ((b"n\n", n), (b"y\n", 0)):
        master, slave = pty.openpty()
        proc = subprocess.Popen(
            [str(Path(sys.executable).parent / "vllm-cache"), "prune", "--root", str(root),
             "--older-than", "0s", "--grace", "0"], stdin=slave, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE)
        os.close(slave)
        os.write(master, answer)
        out, err = proc.communicate(timeout=120)
        os.close(master)
        assert b"Delete 4 entries" in err
        assert len(entries(root)) == expect_left, (out, err)


def test_other_users_entries_need_all_users(root: Path) -> None:
    keys = entries(root)
    theirs = next(k for k, v in keys.items() if v == "aot")
    path = root / "torch_compile_cache" / "torch_aot_compile" / theirs
    subprocess.run(["chown", "-R", "65534:65534", str(path)], check=True)
    r = run_cli("ls", "--root", str(root), "--by-owner", "--json")
    owners = {o["owner"]: o["entries"] for o in json.loads(r.stdout)["owners"]}
    assert owners == {"root": 3, "nobody": 1}
    rc, data = prune_json("--root", str(root), "--older-than", "0s", "--grace", "0", "--yes")
    assert rc == 0 and theirs not in data["deleted"]
    kept = {s["key"]: s["reason"] for s in data["skipped"]}
    assert "owned by nobody" in kept[theirs] and path.is_dir()
    rc, data = prune_json("--root", str(root), "--older-than", "0s", "--grace", "0", "--yes",
                          "--all-users")
    assert rc == 0 and data["deleted"] == [theirs]


def test_next_run_finishes_an_interrupted_one(root: Path) -> None:
    from vllm_cache_tools.maintain.trash import RootHandle

    victim = sorted((root / "torch_compile_cache" / "torch_aot_compile").iterdir())[0]
    with RootHandle(root) as h:  # what a prune killed right after its rename leaves
        trash = h.trash(create=True)
        assert trash is not None and trash.fd is not None
        name = trash.new_name(victim.name)
        os.rename(victim.name, name, src_dir_fd=h.parent_fd("aot"), dst_dir_fd=trash.fd)
        shutil.rmtree(root / "torch_compile_cache" / TRASH_DIRNAME / name / "inductor_cache")
        trash.close()
    assert trash_items(root) == [name]
    r = run_cli("prune", "--root", str(root), "--older-than", "1000d", "--dry-run")
    assert "the trash holds 1 item(s) from an interrupted run" in r.stdout
    rc, data = prune_json("--root", str(root), "--older-than", "1000d", "--yes")
    assert rc == 0 and data["finished_trash"] == [name] and trash_items(root) == []
