"""Hostile and damaged trees: copies of a real vLLM cache, then broken on purpose.

Every case must give a clear state or one-line message, never a traceback, never execute
anything from the cache, and never follow a symlink out of the root."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.realvllm.harness import ScenarioRun, copy_root
from vllm_cache_tools import scan

pytestmark = pytest.mark.realvllm



@pytest.fixture()
def copied_root(real_compile: ScenarioRun, world_tmp: Path) -> Path:
    dst = world_tmp / "root"
    copy_root(real_compile.vllm_root, dst)
    return dst


def _entries(root: Path) -> dict[str, object]:
    return {e.key: e for e in scan(root, check_in_use=False).entries}


def _aot_model(root: Path) -> Path:
    return sorted((root / "torch_compile_cache" / "torch_aot_compile").glob("*/rank_0_0/model"))[0]


def _backend_prefix(root: Path) -> Path:
    return sorted((root / "torch_compile_cache").glob("??????????/rank_0_0/backbone"))[0]


def test_truncated_and_empty_model_are_corrupt(copied_root: Path) -> None:
    m = _aot_model(copied_root)
    data = m.read_bytes()
    m.write_bytes(data[: len(data) // 2])
    e = _entries(copied_root)[m.parent.parent.name]
    assert e.state == "corrupt" and "truncated" in e.state_detail  # type: ignore[attr-defined]
    m.write_bytes(b"")
    e = _entries(copied_root)[m.parent.parent.name]
    assert e.state == "corrupt" and "0 bytes" in e.state_detail  # type: ignore[attr-defined]
    r = run_cli("ls", "--root", str(copied_root))
    assert r.returncode == 0 and "corrupt" in r.stdout and "Traceback" not in r.stderr


class _Evil:
    def __init__(self, target: str) -> None:
        self.target = target

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.target}",))


def test_malicious_model_pickle_is_never_executed(copied_root: Path, world_tmp: Path) -> None:
    canary = world_tmp / "pwned"
    m = _aot_model(copied_root)
    payload = {"original_code": _Evil(str(canary)), "system_info": _Evil(str(canary)),
               "compiled_fn": (_Evil(str(canary)), pickle.dumps(_Evil(str(canary))))}
    m.write_bytes(pickle.dumps(payload, protocol=4))
    info = scan(copied_root, deep=True, check_in_use=False)
    r1 = run_cli("ls", "--root", str(copied_root), "--json")
    r2 = run_cli("show", m.parent.parent.name, "--root", str(copied_root), "--json")
    assert r1.returncode == 0 and r2.returncode == 0, (r1.stderr, r2.stderr)
    assert not canary.exists()
    e = next(e for e in info.entries if e.key == m.parent.parent.name)
    assert e.torch_version is None and e.state == "complete"


def test_code_in_vllm_compile_cache_is_never_executed(real_nomega: ScenarioRun,
                                                      world_tmp: Path) -> None:
    root = world_tmp / "root"
    copy_root(real_nomega.vllm_root, root)
    canary = world_tmp / "pwned2"
    p = _backend_prefix(root) / "vllm_compile_cache.py"
    p.write_text(f"__import__('os').system('touch {canary}')\n")
    e = _entries(root)[p.parent.parent.parent.name]
    assert e.state == "corrupt" and "not a Python literal" in e.state_detail  # type: ignore
    assert not canary.exists()


def test_partial_states(copied_root: Path) -> None:
    prefix = _backend_prefix(copied_root)
    (prefix / "computation_graph.py").unlink()
    key = prefix.parent.parent.name
    e = _entries(copied_root)[key]
    assert e.state == "partial" and "interrupted compile" in e.state_detail  # type: ignore
    m = _aot_model(copied_root)
    (m.parent / f"model.{os.getpid()}.tmp").write_bytes(b"\x80\x04")
    e = _entries(copied_root)[m.parent.parent.name]
    assert e.state == "partial" and "temporary" in e.state_detail  # type: ignore[attr-defined]
    shutil.rmtree(m.parent)
    e = _entries(copied_root)[m.parent.parent.name]
    assert e.state == "partial" and "no rank" in e.state_detail  # type: ignore[attr-defined]


def test_corrupt_factors_json(copied_root: Path) -> None:
    prefix = _backend_prefix(copied_root)
    (prefix / "cache_key_factors.json").write_text("{not json")
    e = _entries(copied_root)[prefix.parent.parent.name]
    assert e.state == "corrupt" and "invalid JSON" in e.state_detail  # type: ignore[attr-defined]


def test_missing_backend_artifact_is_partial(real_nomega: ScenarioRun, world_tmp: Path) -> None:
    root = world_tmp / "root"
    copy_root(real_nomega.vllm_root, root)
    prefix = _backend_prefix(root)
    art = sorted(prefix.glob("artifact_compile_range_*"))[0]
    art.unlink()
    e = _entries(root)[prefix.parent.parent.name]
    assert e.state == "partial" and art.name in e.state_detail  # type: ignore[attr-defined]


def test_symlinks_are_never_followed(copied_root: Path, world_tmp: Path) -> None:
    outside = world_tmp / "outside"
    outside.mkdir()
    (outside / "big").write_bytes(b"x" * 1_000_000)
    cc = copied_root / "torch_compile_cache"
    prefix = _backend_prefix(copied_root)
    before = _entries(copied_root)[prefix.parent.parent.name].size_bytes  # type: ignore
    (prefix / "escape").symlink_to(outside)
    (prefix / "loop").symlink_to(prefix)
    (cc / "abcdef0123").symlink_to(outside)  # looks like a backend key, is a link out
    info = scan(copied_root, check_in_use=False)
    e = next(e for e in info.entries if e.key == prefix.parent.parent.name)
    assert e.size_bytes < before + 1000  # the 1 MB outside was not counted
    assert {p.kind for p in e.problems} >= {"symlink"}
    assert "abcdef0123" not in {x.key for x in info.entries}
    assert any(p.kind == "symlink" and p.path.endswith("abcdef0123") for p in info.problems)
    r = run_cli("ls", "--root", str(copied_root))
    assert r.returncode == 0 and "symlink" in r.stderr and "Traceback" not in r.stderr


def test_non_utf8_names_and_foreign_items(copied_root: Path) -> None:
    cc = copied_root / "torch_compile_cache"
    os.mkdir(os.fsencode(cc) + b"/\xff\xfeweird")
    prefix = _backend_prefix(copied_root)
    with open(os.fsencode(prefix) + b"/caf\xe9.bin", "wb") as f:
        f.write(b"1234")
    (cc / "notes.txt").write_text("hello")
    r = run_cli("ls", "--root", str(copied_root), "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert len(data["entries"]) == 4
    kinds = {(p["kind"], p["path"].rsplit("/", 1)[-1]) for p in data["problems"]}
    assert ("foreign", "\\xff\\xfeweird") in kinds and ("foreign", "notes.txt") in kinds
    r = run_cli("ls", "--root", str(copied_root))
    assert r.returncode == 0 and "Traceback" not in r.stderr
    r = run_cli("show", prefix.parent.parent.name, "--root", str(copied_root))
    assert r.returncode == 0 and "caf\\xe9.bin" in r.stdout


def test_unreadable_subdir(copied_root: Path) -> None:
    prefix = _backend_prefix(copied_root)
    prefix.chmod(0o000)
    r = run_cli("ls", "--root", str(copied_root), "--json", unprivileged=True)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    row = next(e for e in data["entries"] if e["key"] == prefix.parent.parent.name)
    assert row["state"] == "unknown" or row["state"] == "partial"
    assert "unreadable" in r.stderr and "Traceback" not in r.stderr


def test_bad_roots_exit_2_with_one_line(tmp_path: Path) -> None:
    r = run_cli("ls", "--root", str(tmp_path / "nope"))
    assert r.returncode == 2 and "does not exist" in r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    f = tmp_path / "file"
    f.write_text("x")
    r = run_cli("ls", "--root", str(f))
    assert r.returncode == 2 and "not a directory" in r.stderr
    r = run_cli("ls", env={"VLLM_CACHE_ROOT": str(tmp_path / "nope2")})
    assert r.returncode == 2 and "VLLM_CACHE_ROOT" in r.stderr
    (tmp_path / "empty").mkdir()  # no cache root: refused as prune refuses it (issue 25)
    r = run_cli("ls", "--root", str(tmp_path / "empty"))
    assert r.returncode == 2 and "does not look like a vLLM cache root" in r.stderr
    (tmp_path / "empty" / "torch_compile_cache").mkdir()
    r = run_cli("ls", "--root", str(tmp_path / "empty"))
    assert r.returncode == 0 and "No compile-cache entries" in r.stdout


def test_entry_open_by_running_process_is_in_use(copied_root: Path) -> None:
    m = _aot_model(copied_root)
    holder = subprocess.Popen([sys.executable, "-c",
                               f"import mmap,time;f=open({str(m)!r},'rb');"
                               "mm=mmap.mmap(f.fileno(),0,prot=mmap.PROT_READ);f.close();"
                               "print('ok',flush=True);time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ok"
        info = scan(copied_root)
        e = next(e for e in info.entries if e.key == m.parent.parent.name)
        assert e.state == "in-use" and str(holder.pid) in e.state_detail
        others = [x for x in info.entries if x.key != e.key]
        assert all(x.state == "complete" or (x.layout, x.state) == ("backend", "unloadable")
                   for x in others)
    finally:
        holder.kill()
        holder.wait()
    time.sleep(0.1)
    e = next(e for e in scan(copied_root).entries if e.key == m.parent.parent.name)
    assert e.state == "complete"


def test_a_root_whose_path_is_not_utf8(tmp_path: Path) -> None:
    """The cache root's own path has a byte that is not UTF-8 (names in the tree already
    worked): every reading verb answers, paths shown with \\xNN (was: "internal error:
    UnicodeEncodeError", exit 3, from the in-use check's /proc/<pid>/maps search; then
    verify, prune, rm and dedup printed the raw byte, which is not UTF-8)."""
    sample = Path(__file__).resolve().parent.parent / "examples" / "sample_cache"
    root = Path(os.fsdecode(os.fsencode(tmp_path) + b"/r\xffoot"))
    shutil.copytree(sample, root)
    for args, ok in ((["ls"], 0), (["ls", "--json"], 0), (["show", "28fd"], 0),
                     (["verify"], 0), (["audit"], 0), (["explain"], 0), (["stats"], 0),
                     (["drift"], 0), (["dedup"], 0), (["rm", "28fd", "--dry-run"], 0),
                     (["prune", "--older-than", "1s", "--grace", "0s", "--dry-run"], 0)):
        r = run_cli(*args, "--root", str(root))
        assert r.returncode == ok and "internal error" not in r.stderr, (args, r.stderr)
    r = run_cli("ls", "--root", str(root), "--json")
    assert json.loads(r.stdout)["root"].endswith("r\\xffoot")
