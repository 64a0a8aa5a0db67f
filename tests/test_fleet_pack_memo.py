"""The pack memo (fleet/pack_memo.py) on a real cache (tests/realvllm harness root): a pack of
unchanged entries reads no pickle and hashes no file, and gives the same bytes; a changed file
is read and hashed again."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.realvllm.harness import ScenarioRun
from vllm_cache_tools.fleet import api, link_proof, selection
from vllm_cache_tools.fleet.bundle import read_manifest
from vllm_cache_tools.fleet.pack_memo import memo_path

BACKEND_KEY_LEN = 10


def _backend_keys(root: Path) -> list[str]:
    cc = root / "torch_compile_cache"
    return sorted(p.name for p in cc.iterdir() if len(p.name) == BACKEND_KEY_LEN)


@pytest.fixture()
def root(real_compile: ScenarioRun, tmp_path: Path) -> Path:
    out = tmp_path / "root"
    shutil.copytree(real_compile.vllm_root, out, symlinks=True)
    return out


def _no_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*a: object, **k: object) -> None:
        raise AssertionError("read although the memo knows the entry")

    monkeypatch.setattr(link_proof, "read_entry", boom)
    monkeypatch.setattr(selection, "_hash_files", boom)


def test_unchanged_entries_come_from_the_memo_with_the_same_bytes(
        root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = _backend_keys(root)[0]
    cold = api.pack([key], tmp_path / "cold.tar.zst", root=root)
    assert memo_path(root / "torch_compile_cache").is_file()
    m = read_manifest(cold.path)
    assert {e.layout for e in m.entries} == {"backend", "aot"}  # linked by the proof
    with monkeypatch.context() as mp:
        _no_reads(mp)
        warm = api.pack([key], tmp_path / "warm.tar.zst", root=root)
    assert warm.path.read_bytes() == cold.path.read_bytes()
    assert warm.entries == cold.entries  # linked keys included


def test_a_changed_file_is_hashed_again(root: Path, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    key = _backend_keys(root)[0]
    api.pack([key], tmp_path / "one.tar.zst", root=root)
    entry = root / "torch_compile_cache" / key
    victim = next(p for p in sorted(entry.rglob("*")) if p.is_file() and p.suffix == ".py")
    tmp = victim.with_name(victim.name + ".new")  # replaced by rename, as Inductor does
    tmp.write_bytes(victim.read_bytes() + b"\n# changed\n")
    os.replace(tmp, victim)
    again = api.pack([key], tmp_path / "two.tar.zst", root=root)
    rel = victim.relative_to(entry).as_posix()
    rec = next(e for e in again.entries if e.key == key)
    assert next(f for f in rec.files if f.path == rel).size == victim.stat().st_size
    # The same bundle as a pack without any memo.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "fresh"))
    fresh = api.pack([key], tmp_path / "three.tar.zst", root=root)
    assert fresh.path.read_bytes() == again.path.read_bytes()


def test_an_unreadable_memo_is_ignored(root: Path, tmp_path: Path) -> None:
    key = _backend_keys(root)[0]
    first = api.pack([key], tmp_path / "a.tar.zst", root=root)
    memo_path(root / "torch_compile_cache").write_bytes(b"\x93not a memo")
    second = api.pack([key], tmp_path / "b.tar.zst", root=root)
    assert second.path.read_bytes() == first.path.read_bytes()


def test_a_root_path_that_is_not_utf8_packs_without_a_memo(tmp_path: Path) -> None:
    """msgpack holds no undecodable path: the memo is not written and pack works (was:
    'internal error: UnicodeEncodeError', exit 3)."""
    from tests.conftest import run_cli

    sample = Path(__file__).resolve().parent.parent / "examples" / "sample_cache"
    root = Path(os.fsdecode(bytes(tmp_path) + b"/r\xffoot"))
    shutil.copytree(sample, root, symlinks=True)
    out = tmp_path / "b.tar.zst"
    for again in ((), ("--force",)):  # the second run replaces the first bundle
        r = run_cli("pack", "28fd", "--root", os.fsdecode(root), "-o", str(out), *again)
        assert r.returncode == 0, r.stderr
        assert out.stat().st_size > 0
