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
from vllm_cache_tools.fleet.bundle import read_manifest, write_bundle
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


def _rewrite(p: Path, data: bytes) -> None:
    tmp = p.with_name(p.name + ".new")  # replaced by rename, as Inductor does
    tmp.write_bytes(data)
    os.replace(tmp, p)


def test_a_first_pack_writes_the_bytes_it_hashed(root: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The first pack keeps what it read to hash each small file and writes the bundle from
    it: a file replaced between the selection and the writing does not reach the bundle,
    which stays what its manifest says (without the kept bytes the same case is refused as
    changed while packed). Past the budget, files are read again, with the same bytes."""
    from vllm_cache_tools.fleet.errors import FleetError

    key = _backend_keys(root)[0]
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "a"))
    sel = selection.select(root, [key])
    files = [lf for fs in sel.files for lf in fs]
    assert files and all(lf.data is not None for lf in files)
    assert all(len(lf.data or b"") == lf.record.size for lf in files)
    whole = write_bundle(sel, tmp_path / "whole.tar.zst")
    victim = next(lf.source for lf in files if lf.record.size)
    before = victim.read_bytes()
    _rewrite(victim, before + b"# changed after the selection\n")
    same = write_bundle(sel, tmp_path / "same.tar.zst")
    assert same.path.read_bytes() == whole.path.read_bytes()
    assert api.unpack(same.path, root=tmp_path / "pod").ok  # every digest checked
    _rewrite(victim, before)
    # Nothing kept: the files are read again at writing, and a change there is refused.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "b"))
    monkeypatch.setattr(selection, "KEEP_TOTAL", 0)
    sel = selection.select(root, [key])
    assert all(not lf.data for fs in sel.files for lf in fs)  # (empty files are b"")
    again = write_bundle(sel, tmp_path / "again.tar.zst")
    assert again.path.read_bytes() == whole.path.read_bytes()
    _rewrite(victim, before + b"# changed after the selection\n")
    with pytest.raises(FleetError, match="changed while it was packed"):
        write_bundle(sel, tmp_path / "refused.tar.zst")


def test_the_kept_bytes_stay_within_the_budget(root: Path, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    key = _backend_keys(root)[0]
    monkeypatch.setattr(selection, "KEEP_TOTAL", 200_000)
    sel = selection.select(root, [key])
    files = [lf for fs in sel.files for lf in fs]
    kept = [lf for lf in files if lf.data]
    assert kept and len(kept) < len(files)
    assert sum(lf.record.size for lf in kept) <= 200_000
    assert all(lf.record.size <= selection.KEEP_FILE for lf in kept)
    out = api.pack([key], tmp_path / "b.tar.zst", root=root)  # from the memo: nothing kept
    assert out.path.read_bytes() == write_bundle(sel, tmp_path / "c.tar.zst").path.read_bytes()
