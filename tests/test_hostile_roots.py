"""Deletes outside the root through the snapshot sweep (issue 12 item 1), reproduced on a copy
of a real cache root (examples/sample_cache, made by vLLM with the recorder on): symlinks
planted in ``.vllm-cache-tools/sources`` or in place of the state folders, and names swapped
for links mid-sweep, must never move or delete anything outside the root."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.victims import changed, make_victim, tree_state
from vllm_cache_tools import safeio
from vllm_cache_tools.layout import SOURCES_DIRNAME, STATE_DIRNAME
from vllm_cache_tools.maintain import snapshot_sweep as snapshots

pytestmark = pytest.mark.hostile

SAMPLE = Path(__file__).resolve().parent.parent / "examples" / "sample_cache"
DAY = 86400.0


def _aged_root(dst: Path) -> Path:
    """A copy of the sample root whose snapshots are a day old, plus one orphan snapshot
    (named by no manifest), so the sweep has something to remove."""
    shutil.copytree(SAMPLE, dst, symlinks=True)
    src = dst / "torch_compile_cache" / STATE_DIRNAME / SOURCES_DIRNAME
    (src / ("0" * 64)).write_text("# an orphan snapshot\n")
    old = time.time() - DAY
    for p in src.iterdir():
        os.utime(p, (old, old))
    return dst


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    return _aged_root(tmp_path / "root")


def _sources(root: Path) -> Path:
    return root / "torch_compile_cache" / STATE_DIRNAME / SOURCES_DIRNAME


def _victim(tmp_path: Path, root: Path) -> Path:
    # Files named like real snapshots too: the old recovery dropped a quarantined file when
    # sources/ already had its name.
    names = tuple(sorted(p.name for p in _sources(root).iterdir())[:3])
    return make_victim(tmp_path / "victim", names)


def test_sweep_removes_the_orphan_and_keeps_referenced(root: Path) -> None:
    sw = snapshots.sweep_snapshots(root / "torch_compile_cache")
    assert sw.removed == ("0" * 64,) and sw.kept_referenced > 0 and not sw.errors


def test_planted_quarantine_link_is_not_recovered(root: Path, tmp_path: Path) -> None:
    victim = _victim(tmp_path, root)
    (_sources(root) / ".sweep-evil-1-0").symlink_to(victim)
    (_sources(root) / ".sweep-evil-2-0").symlink_to(victim / "sources")
    before = tree_state(victim)
    snapshots.sweep_snapshots(root / "torch_compile_cache")
    assert changed(before, tree_state(victim)) == []
    assert (_sources(root) / ".sweep-evil-1-0").is_symlink()  # left alone, not followed


def test_quarantine_holding_links_and_folders_moves_only_files(root: Path,
                                                               tmp_path: Path) -> None:
    victim = _victim(tmp_path, root)
    q = _sources(root) / f".sweep-{__import__('socket').gethostname()}-999999999-0"
    q.mkdir()
    (q / ("e" * 64)).symlink_to(victim / "notes")
    (q / "dir").symlink_to(victim)
    (q / ("f" * 64)).write_text("a snapshot left by a killed sweep\n")
    before = tree_state(victim)
    snapshots.sweep_snapshots(root / "torch_compile_cache")
    assert changed(before, tree_state(victim)) == []
    assert (_sources(root) / ("f" * 64)).is_file()
    assert not (_sources(root) / ("e" * 64)).exists()


@pytest.mark.parametrize("which", ["state", "sources"])
def test_symlinked_state_folder_is_not_swept(root: Path, tmp_path: Path, which: str) -> None:
    victim = _victim(tmp_path, root)
    cc = root / "torch_compile_cache"
    if which == "state":
        shutil.rmtree(cc / STATE_DIRNAME)
        (cc / STATE_DIRNAME).symlink_to(victim)
    else:
        shutil.rmtree(_sources(root))
        _sources(root).symlink_to(victim / "sources")
    before = tree_state(victim)
    sw = snapshots.sweep_snapshots(cc)
    assert sw.removed == ()
    assert changed(before, tree_state(victim)) == []


def test_candidate_swapped_for_a_link_mid_sweep(root: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    victim = _victim(tmp_path, root)
    cc = root / "torch_compile_cache"
    real = snapshots.referenced
    orphan = _sources(root) / ("0" * 64)

    def swap_after_listing(cc_: Path, newer_than: float | None = None
                           ) -> tuple[set[str], str | None]:
        if newer_than is None:  # listed: now swap the candidate for a link out
            orphan.unlink()
            orphan.symlink_to(victim / "notes")
        return real(cc_, newer_than)

    monkeypatch.setattr(snapshots, "referenced", swap_after_listing)
    before = tree_state(victim)
    sw = snapshots.sweep_snapshots(cc)
    assert sw.removed == ()
    assert changed(before, tree_state(victim)) == []
    assert orphan.is_symlink()  # put back as it was found: not ours to judge


def test_quarantine_swapped_for_a_link_mid_sweep(root: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Another user of a shared sources/ renames our quarantine and puts a link to a victim
    folder in its place: the moves go on through our folder fd, not the name."""
    victim = _victim(tmp_path, root)
    cc = root / "torch_compile_cache"
    real = snapshots.referenced

    def swap_quarantine(cc_: Path, newer_than: float | None = None
                        ) -> tuple[set[str], str | None]:
        if newer_than is not None:
            for q in _sources(root).glob(".sweep-*"):
                q.rename(tmp_path / "stolen")
                q.symlink_to(victim)
        return real(cc_, newer_than)

    monkeypatch.setattr(snapshots, "referenced", swap_quarantine)
    before = tree_state(victim)
    snapshots.sweep_snapshots(cc)
    assert changed(before, tree_state(victim)) == []


def test_rm_with_planted_links_changes_nothing_outside(root: Path, tmp_path: Path) -> None:
    victim = _victim(tmp_path, root)
    cc = root / "torch_compile_cache"
    (_sources(root) / ".sweep-evil-1-0").symlink_to(victim)
    (cc / STATE_DIRNAME / "ledger" / "evil.jsonl").symlink_to(victim / "notes")
    key = sorted(p.name for p in (cc / "torch_aot_compile").iterdir())[0]
    before = tree_state(victim)
    r = run_cli("rm", "--root", str(root), "--yes", "--grace", "0s", key[:12])
    assert r.returncode == 0, r.stderr
    assert changed(before, tree_state(victim)) == []
    assert not (cc / "torch_aot_compile" / key).exists()


def test_remove_tree_checks_identity_and_device(tmp_path: Path) -> None:
    d = tmp_path / "d"
    (d / "a").mkdir(parents=True)
    (d / "a" / "f").write_text("x")
    expect = safeio.ident(os.stat(d))
    other = tmp_path / "other"
    other.mkdir()
    (other / "keep").write_text("keep")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        d.rename(tmp_path / "moved")
        other.rename(d)  # the name now holds another folder
        res = safeio.remove_tree_at(fd, "d", expect=expect)
        assert res.error and (d / "keep").exists()
        res = safeio.remove_tree_at(fd, "moved", expect=expect)
        assert res.error is None and not (tmp_path / "moved").exists()
    finally:
        os.close(fd)
