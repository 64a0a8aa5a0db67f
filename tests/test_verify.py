"""``verify [--fix]`` on copies of real vLLM caches, damaged on purpose."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli
from tests.realvllm.harness import ScenarioRun, copy_root

pytestmark = pytest.mark.realvllm



def _old(path: Path) -> None:
    t = time.time() - 86400
    for d, _, files in os.walk(path, topdown=False):
        for f in files:
            os.utime(Path(d) / f, (t, t), follow_symlinks=False)
        os.utime(d, (t, t))


def verify_json(root: Path, *args: str, unprivileged: bool = False
                ) -> tuple[int, dict[str, Any]]:
    r = run_cli("verify", "--root", str(root), "--json", *args, unprivileged=unprivileged)
    assert "Traceback" not in r.stderr, r.stderr
    return r.returncode, json.loads(r.stdout)


def test_clean_real_cache(real_compile: ScenarioRun, real_nomega: ScenarioRun) -> None:
    for run in (real_compile, real_nomega):
        rc, data = verify_json(run.vllm_root)
        assert rc == 0, data
        assert data["root"] == str(run.vllm_root)
        assert data["checked"] == len(os.listdir(run.compile_cache / "torch_aot_compile")) + \
            sum(1 for p in run.compile_cache.iterdir() if len(p.name) == 10)
        assert [p for p in data["problems"] if not p["note"]] == []
        # With the mega AOT artifact the backend folders hold no compiled graph: a note (vLLM
        # loads the model from the AOT entry), never a failure; without it they hold one.
        notes = {p["key"] for p in data["problems"] if p["kind"] == "graph-only"}
        backends = {p.name for p in run.compile_cache.iterdir() if len(p.name) == 10}
        assert notes == (backends if run is real_compile else set())
    r = run_cli("verify", "--root", str(real_compile.vllm_root))
    assert r.returncode == 0 and "no problems" in r.stdout and "note(s)" in r.stdout


class _Evil:
    def __init__(self, target: str) -> None:
        self.target = target

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.target}",))


def _damage(root: Path, canary: Path) -> dict[str, tuple[str, str]]:
    """Break one thing in each entry; return kind -> (key, file)."""
    cc = root / "torch_compile_cache"
    aots = sorted((cc / "torch_aot_compile").iterdir())
    backends = sorted(p for p in cc.iterdir() if len(p.name) == 10)
    out = {}
    m = aots[0] / "rank_0_0" / "model"
    m.write_bytes(m.read_bytes()[: m.stat().st_size // 2])
    out["truncated-model"] = (aots[0].name, "model")
    m = aots[1] / "rank_0_0" / "model"
    m.write_bytes(pickle.dumps({"original_code": _Evil(str(canary)),
                                "system_info": _Evil(str(canary)),
                                "compiled_fn": (_Evil(str(canary)),
                                                pickle.dumps(_Evil(str(canary))))}, protocol=4))
    out["not-aot-model"] = (aots[1].name, "model")
    (aots[2] / "rank_0_0" / "model.4242.tmp").write_bytes(b"\x80\x04")
    out["orphan-tmp"] = (aots[2].name, "model.4242.tmp")
    pre = backends[0] / "rank_0_0" / "backbone"
    art = sorted(pre.glob("artifact_compile_range_*"))[0]
    art.unlink()
    out["missing-artifact"] = (backends[0].name, art.name)
    pre = backends[1] / "rank_0_0" / "backbone"
    f = json.loads((pre / "cache_key_factors.json").read_text())
    f["env"]["VLLM_SOMETHING_EDITED"] = "1"  # valid JSON whose factors name another key
    (pre / "cache_key_factors.json").write_text(json.dumps(f))
    out["key-mismatch"] = (backends[1].name, "cache_key_factors.json")
    pre = backends[2] / "rank_0_0" / "backbone"
    (pre / "computation_graph.py").unlink()
    (pre / "vllm_compile_cache.py").unlink(missing_ok=True)
    for a in pre.glob("artifact_compile_range_*"):
        a.unlink()
    out["no-artifacts"] = (backends[2].name, "backbone")
    return out


def test_every_kind_is_found_and_fix_removes_only_broken_entries(
        real_compile: ScenarioRun, real_nomega: ScenarioRun, world_tmp: Path) -> None:
    root = copy_root(real_compile.vllm_root, world_tmp / "root")
    # One more AOT entry and the per-range backend artifacts from the no-mega run.
    extra = copy_root(real_nomega.vllm_root, world_tmp / "extra")
    for p in (extra / "torch_compile_cache" / "torch_aot_compile").iterdir():
        shutil.copytree(p, root / "torch_compile_cache" / "torch_aot_compile" / p.name,
                        symlinks=True)
    nomega_backend = next(p for p in (extra / "torch_compile_cache").iterdir()
                          if len(p.name) == 10)
    # Sorted first among the backend keys, so _damage removes one of its artifacts.
    shutil.copytree(nomega_backend, root / "torch_compile_cache" / "0000000000", symlinks=True)
    canary = world_tmp / "pwned"
    expected = _damage(root, canary)
    _old(root / "torch_compile_cache")
    rc, data = verify_json(root)
    assert rc == 1
    problems = data["problems"]
    assert isinstance(problems, list)
    found = {(p["kind"], p["key"]) for p in problems}
    for kind, (key, _) in expected.items():
        assert (kind, key) in found, (kind, problems)
    for p in problems:
        assert set(p) >= {"key", "path", "kind", "detail"}
    assert not canary.exists()
    # Unreadable files are found when permissions apply.
    secret = root / "torch_compile_cache" / "torch_aot_compile" / expected["orphan-tmp"][0] / \
        "inductor_cache" / "locks"
    secret.chmod(0o000)
    rc, data = verify_json(root, unprivileged=True)
    assert rc == 1 and any(p["kind"] == "unreadable" for p in data["problems"])
    secret.chmod(0o755)
    # --fix removes the entries with fixable problems through prune's safe deletion, and a
    # leftover *.tmp of an otherwise whole entry alone (the entry stays).
    rc, data = verify_json(root, "--fix", "--yes")
    assert rc == 1  # the key mismatch is reported, never "fixed"
    fixed = set(data["fixed"])
    assert fixed == {key for kind, (key, _) in expected.items()
                     if kind not in ("key-mismatch", "orphan-tmp")}
    tmp_key, tmp_name = expected["orphan-tmp"]
    tmp_entry = root / "torch_compile_cache" / "torch_aot_compile" / tmp_key
    assert [t["removed"] for t in data["tmp_removed"]] == [True]
    assert tmp_entry.is_dir() and not (tmp_entry / "rank_0_0" / tmp_name).exists()
    assert (tmp_entry / "rank_0_0" / "model").is_file()
    assert not canary.exists()
    rc, data = verify_json(root)
    assert rc == 1
    assert {p["kind"] for p in data["problems"] if not p["note"]} == {"key-mismatch"}
    r = run_cli("verify", "--root", str(root))
    assert r.returncode == 1 and "key-mismatch" in r.stdout and "re-hash to" in r.stdout


def test_fix_keeps_recent_and_in_progress_entries(real_compile: ScenarioRun,
                                                  tmp_path: Path) -> None:
    root = copy_root(real_compile.vllm_root, tmp_path / "root")
    aot = sorted((root / "torch_compile_cache" / "torch_aot_compile").iterdir())[0]
    (aot / "rank_0_0" / "model.999.tmp").write_bytes(b"\x80")  # a writer busy right now
    rc, data = verify_json(root, "--fix", "--yes")
    assert rc == 1
    (p,) = [p for p in data["problems"] if not p["note"]]
    assert p["kind"] == "orphan-tmp" and "may still be being written" in p["detail"]
    assert "fixed" not in data and aot.is_dir()
    (t,) = data["tmp_removed"]
    assert not t["removed"] and "a writer may be on it" in t["why"]
    assert (aot / "rank_0_0" / "model.999.tmp").exists()


def test_usage_errors(tmp_path: Path) -> None:
    r = run_cli("verify", "--root", str(tmp_path / "missing"))
    assert r.returncode == 2 and "does not exist" in r.stderr
    r = run_cli("verify", "--root", str(tmp_path), "--grace", "soon")
    assert r.returncode == 2 and "--grace" in r.stderr


def test_fix_asks_before_removing_leftover_tmp_files(tmp_path: Path) -> None:
    """A leftover *.tmp is removed only once confirmed, as broken entries are: with stdin not a
    terminal and no --yes nothing is removed, one line, exit 2 (was: the *.tmp files removed
    before the question, then the refusal)."""
    import sys

    root = tmp_path / "root"
    shutil.copytree(Path(__file__).resolve().parent.parent / "examples" / "sample_cache", root)
    leftover = root / "torch_compile_cache" / "28fd362d4e" / "rank_0_0" / "backbone" / "x.tmp"
    leftover.write_bytes(b"\x80")
    _old(root)
    exe = Path(sys.executable).parent / "vllm-cache"
    for args in ([], ["--json"]):
        r = subprocess.run([str(exe), "verify", "--root", str(root), "--fix", *args],
                           capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300)
        assert r.returncode == 2, (r.stdout, r.stderr)
        assert r.stderr.startswith("vllm-cache: error: not deleting without confirmation")
        assert r.stderr.count("\n") == 1 and leftover.exists()
    rc, data = verify_json(root, "--fix", "--yes")
    assert rc == 0 and [t["removed"] for t in data["tmp_removed"]] == [True], data
    assert not leftover.exists() and leftover.parent.is_dir()


def _symlinked_root(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the sample (``big``) and a root whose torch_compile_cache links to it."""
    big = tmp_path / "big"
    shutil.copytree(Path(__file__).resolve().parent.parent / "examples" / "sample_cache", big)
    root = tmp_path / "root"
    root.mkdir()
    (root / "torch_compile_cache").symlink_to(big / "torch_compile_cache")
    return big, root


def test_a_symlinked_compile_cache_is_a_problem_not_a_clean_root(tmp_path: Path) -> None:
    """torch_compile_cache a symlink (not followed, as ls warns): verify checked nothing, so
    it says so, exit 1 (was: "checked 0 entries: no problems", exit 0); an entry folder
    swapped for a symlink in the root is reported the same way."""
    big, root = _symlinked_root(tmp_path)
    r = run_cli("verify", "--root", str(root))
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "torch_compile_cache is a symlink" in r.stdout and "no problems" not in r.stdout
    rc, data = verify_json(root)
    assert rc == 1 and [(p["kind"], p["layout"]) for p in data["problems"]] == [
        ("symlink", "root")]
    (big / "torch_compile_cache" / "aaaaaaaaaa").symlink_to(tmp_path)
    rc, data = verify_json(big)
    assert rc == 1 and [p["path"] for p in data["problems"] if p["kind"] == "symlink"] == [
        str(big / "torch_compile_cache" / "aaaaaaaaaa")]


def test_every_verb_says_a_symlinked_compile_cache_is_not_followed(tmp_path: Path) -> None:
    """audit, explain and drift warn as ls does (were silent: "audited 0 entries", "nothing to
    compare", exit 0); show / pack name it where no entry matches, rm / prune / dedup refuse
    with it (was: "no torch_compile_cache folder"), stats too (it counted the ledger through
    the link). One wording, from store/locate.py."""
    from vllm_cache_tools.store.locate import SYMLINKED_COMPILE_CACHE

    root = _symlinked_root(tmp_path)[1]
    said = SYMLINKED_COMPILE_CACHE
    assert said == "torch_compile_cache is a symlink (not followed; pass its target as --root)"
    for args in (["audit"], ["audit", "--json"], ["drift"]):
        r = run_cli(*args, "--root", str(root))
        assert r.returncode == 0, (args, r.stderr)
        assert r.stderr.count("\n") == 1 and said in r.stderr, (args, r.stderr)
        if "--json" in args:
            assert json.loads(r.stdout)["entries"] == 0  # stdout stays parseable
    # explain finds nothing to compare there: the symlink said, then that usage error (exit 2).
    r = run_cli("explain", "--root", str(root))
    assert r.returncode == 2 and said in r.stderr and "nothing to compare" in r.stderr, r.stderr
    # ls refuses a folder that is no cache root in prune's words (issue 25): the link is that.
    for args in (["ls"], ["show", "28fd"], ["pack", "28fd", "-o", str(tmp_path / "b.tar.zst")],
                 ["rm", "-n", "28fd"], ["prune", "--older-than", "1d", "-n"], ["dedup", "-n"],
                 ["stats"]):  # stats read the ledger through the link (3 starts, 0 entries)
        r = run_cli(*args, "--root", str(root))
        assert r.returncode == 2 and r.stderr.count("\n") == 1, (args, r.stderr)
        assert said in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
