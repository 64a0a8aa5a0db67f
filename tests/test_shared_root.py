"""A group-shared root used by several uids (issue 11 items 1-3, issue 12 items 7 and 9).

Made as a real operator's would be: a copy of real vLLM caches, folders group-owned and
setgid, files keeping the modes torch gave them (AOT ``model`` files are 0600), and the tool
run as a second uid of the group. Needs root (to create that uid); skipped otherwise."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli
from tests.multiuser import (
    make_shared_root,
    other_user,
    require_root,
    run_as,
    shared_group,
    vllm_cache_argv,
)
from tests.realvllm.harness import ScenarioRun, copy_root

pytestmark = pytest.mark.realvllm


def _age(root: Path, seconds: float) -> None:
    """Every file and folder written ``seconds`` ago and never read since (atime = mtime)."""
    t = time.time() - seconds
    for d, dirs, files in os.walk(root, topdown=False):
        for n in [*files, *dirs]:
            os.utime(os.path.join(d, n), (t, t), follow_symlinks=False)
    os.utime(root, (t, t))


def _times(root: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            s = os.lstat(os.path.join(d, f))
            out[os.path.join(d, f)] = (s.st_atime_ns, s.st_mtime_ns)
    return out


def _json(r: Any) -> Any:
    assert "Traceback" not in r.stderr, r.stderr
    return json.loads(r.stdout)


@pytest.fixture()
def shared(real_compile: ScenarioRun, real_cpu_default: ScenarioRun,
           tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Both trees (backend + AOT from VLLM_COMPILE mode) and the default CPU mode's AOT entry
    in one group-shared root, all written a day ago."""
    require_root()
    base = tmp_path_factory.mktemp("shared")
    src = copy_root(real_compile.vllm_root, base / "src")
    cpu = real_cpu_default.compile_cache / "torch_aot_compile"
    for p in cpu.iterdir():
        shutil.copytree(p, src / "torch_compile_cache" / "torch_aot_compile" / p.name,
                        symlinks=True, dirs_exist_ok=True)
    root = make_shared_root(src, base / "root", shared_group())
    for model in root.glob("torch_compile_cache/torch_aot_compile/*/rank_*/model"):
        model.chmod(0o600)  # as torch writes them
    _age(root, 86400)
    return root


def test_unreadable_is_unknown_never_corrupt_and_prune_corrupt_keeps_it(shared: Path) -> None:
    other = other_user()
    cc = shared / "torch_compile_cache"
    aots = sorted((cc / "torch_aot_compile").iterdir())
    before = {p.name for p in [*aots, *cc.iterdir()]}
    r = run_as(other, vllm_cache_argv("ls", "--root", str(shared), "--json", "--rescan"))
    assert r.returncode == 0, r.stderr
    states = {e["key"]: e for e in _json(r)["entries"]}
    for a in aots:
        e = states[a.name]
        assert e["state"] == "unknown", e
        assert "corrupt" not in e["state_detail"]
    # The data-loss bug: prune --corrupt --all-users as the other uid deleted them.
    r = run_as(other, vllm_cache_argv("prune", "--root", str(shared), "--corrupt",
                                       "--all-users", "--yes", "--json"))
    assert "Traceback" not in r.stderr, r.stderr
    data = json.loads(r.stdout)
    assert data["deleted"] == []
    reasons = {s["key"]: s["reason"] for s in data["skipped"]}
    for a in aots:
        assert a.name in reasons and "not judged" in reasons[a.name], reasons
        assert (a / "rank_0_0" / "model").is_file()
    assert before <= {p.name for p in [*cc.iterdir(), *(cc / "torch_aot_compile").iterdir()]}
    # verify --fix --all-users as the other uid: unreadable, reported, never removed.
    r = run_as(other, vllm_cache_argv("verify", "--root", str(shared), "--fix", "--yes",
                                       "--all-users", "--json"))
    data = _json(r)
    kinds = {(p["key"], p["kind"]) for p in data["problems"]}
    for a in aots:
        assert (a.name, "unreadable") in kinds and (a.name, "corrupt-model") not in kinds
        assert (a / "rank_0_0" / "model").is_file()
    assert data.get("fixed", []) == []


def test_reading_as_another_user_leaves_every_atime(shared: Path) -> None:
    other = other_user()
    for model in shared.glob("torch_compile_cache/torch_aot_compile/*/rank_*/model"):
        model.chmod(0o640)  # readable by the group: the other uid could read the bytes
    before = _times(shared)
    for argv in (("ls", "--rescan", "--json"), ("verify", "--json"),
                 ("show", "--json", sorted(p.name for p in (shared / "torch_compile_cache")
                                           .iterdir() if len(p.name) == 10)[0])):
        r = run_as(other, vllm_cache_argv(argv[0], "--root", str(shared), *argv[1:]))
        assert "Traceback" not in r.stderr, r.stderr
    after = _times(shared)
    changed = [p for p in before if before[p][0] != after[p][0]]
    assert changed == [], changed[:5]
    # Root's own listing still sees a day-old last use, not "just now".
    r = run_cli("ls", "--root", str(shared), "--json", "--rescan")
    for e in _json(r)["entries"]:
        assert e["last_used"] is None or \
            time.time() - _epoch(e["last_used"]) > 3600, e


def _epoch(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso).timestamp()


def test_never_loadable_entries_have_a_state(real_cpu_default: ScenarioRun,
                                             real_compile: ScenarioRun, tmp_path: Path) -> None:
    """Default CPU mode on vLLM 0.32 writes an AOT artifact its own loader cannot load (its
    second start logged the load failure and compiled again)."""
    logs = "".join(s.log.read_text(errors="replace") for s in real_cpu_default.records)
    assert "finalize_loading" in logs  # vLLM's own evidence, in this very scenario
    root = copy_root(real_cpu_default.vllm_root, tmp_path / "cpu")
    r = run_cli("ls", "--root", str(root), "--json")
    (e,) = _json(r)["entries"]
    assert e["state"] == "unloadable" and "finalize_loading" in e["state_detail"]
    r = run_cli("show", "--root", str(root), e["key"][:16])
    assert r.returncode == 0 and "unloadable" in r.stdout
    r = run_cli("verify", "--root", str(root), "--json")
    data = _json(r)
    # Notes aside (the AOT entry, without a recorder manifest, is key-unproven: a note).
    assert r.returncode == 1 and [p["kind"] for p in data["problems"]
                                  if not p.get("note")] == ["unloadable"]
    _age(root, 86400)
    r = run_cli("prune", "--root", str(root), "--unhittable", "--dry-run", "--json")
    (p,) = _json(r)["plan"]["entries"]
    assert p["key"] == e["key"] and p["reasons"][0].startswith("unloadable:")
    # VLLM_COMPILE mode's AOT entries load (a hit was logged): complete, never chosen.
    r = run_cli("ls", "--root", str(real_compile.vllm_root), "--json")
    assert {x["state"] for x in _json(r)["entries"] if x["layout"] == "aot"} == {"complete"}


def test_owner_of_any_folder_protects_the_entry(real_compile: ScenarioRun,
                                                tmp_path: Path) -> None:
    """Root's prune removed an entry whose inductor_cache/ belonged to another uid."""
    require_root()
    other = other_user()
    root = copy_root(real_compile.vllm_root, tmp_path / "root")
    aot = sorted((root / "torch_compile_cache" / "torch_aot_compile").iterdir())[0]
    ind = aot / "inductor_cache"
    os.chown(ind, other.uid, other.gid)
    for d, dirs, _ in os.walk(ind):
        for n in dirs:
            os.lchown(os.path.join(d, n), other.uid, other.gid)
    _age(root, 86400)
    r = run_cli("prune", "--root", str(root), "--older-than", "1h", "--dry-run", "--json")
    data = _json(r)
    assert aot.name not in {p["key"] for p in data["plan"]["entries"]}
    reason = {s["key"]: s["reason"] for s in data["skipped"]}[aot.name]
    assert "owned by" in reason and other.name in reason


def test_ledger_never_moves_last_use_back(real_compile: ScenarioRun, tmp_path: Path) -> None:
    """prune took the ledger's older time over a newer atime: the later evidence wins."""
    from vllm_cache_tools.maintain.evidence import last_use
    from vllm_cache_tools.store.types import Entry, TreeStats

    e = Entry(key="k", layout="aot", path=tmp_path, stats=TreeStats(), ranks=(), prefixes=(),
              state="complete", state_detail="", created=None, created_source="",
              modified=None, last_used=2000.0, last_used_source="atime", vllm_version=None,
              torch_version=None, model=None, hardware=None)
    assert last_use(e, {"k": 1000.0}) == (2000.0, "atime")
    assert last_use(e, {"k": 3000.0}) == (3000.0, "ledger")
    assert last_use(e, {}) == (2000.0, "atime")
