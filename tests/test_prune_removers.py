"""A streamed prune's removal in its reading pool's forked processes (maintain/trash.py
``remove_in_worker``, maintain/execute.py ``Mover(pool=)``): the worker opens the trash itself
and uses only the very folder the moving process holds, removes only the item that process
moved, and a worker killed mid-removal leaves its item in the trash for the next prune, with an
error instead of a wait. Entries cloned from the shipped example's real vLLM start."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from benchmarks.synth import generate
from tests.fresh_process import ran_in_fresh_process, record_forks
from tests.trees import age, files_of, trash_items
from vllm_cache_tools.layout import TRASH_DIRNAME
from vllm_cache_tools.maintain import execute
from vllm_cache_tools.maintain.execute import WORKER_ENDED
from vllm_cache_tools.maintain.plan import Protections
from vllm_cache_tools.maintain.policies import Policies
from vllm_cache_tools.maintain.stream import stream_prune
from vllm_cache_tools.maintain.trash import RemoveResult, remove_in_worker
from vllm_cache_tools.store.locate import resolve_root
from vllm_cache_tools.store.scan import classify

REPO = Path(__file__).resolve().parent.parent


def _trash_with_item(tmp_path: Path) -> tuple[Path, Path, tuple[int, int]]:
    root = tmp_path / "root"
    trash = root / "torch_compile_cache" / TRASH_DIRNAME
    (trash / "item" / "sub").mkdir(parents=True)
    (trash / "item" / "sub" / "f").write_text("x")
    s = trash.stat()
    return root, trash, (s.st_dev, s.st_ino)


def test_a_removal_worker_uses_only_the_trash_it_was_given_and_the_item_moved(
        tmp_path: Path) -> None:
    root, trash, ident = _trash_with_item(tmp_path)
    item = (trash / "item").stat()
    # Another trash at that place (renamed, recreated): refused, nothing removed.
    got = remove_in_worker(str(root), (ident[0], ident[1] + 1), "item", None, None)
    assert got.error is not None and "replaced" in got.error
    assert (trash / "item" / "sub" / "f").exists()
    # The item swapped for another folder since the move: left where it is.
    got = remove_in_worker(str(root), ident, "item", (item.st_dev, item.st_ino + 1), None)
    assert got.error is not None and "replaced" in got.error
    assert (trash / "item" / "sub" / "f").exists()
    # A link planted as the trash's item: removed as a link, its target untouched.
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep")
    (trash / "link").symlink_to(outside)
    assert remove_in_worker(str(root), ident, "link", None, None).error is None
    assert files_of(outside) == {"precious": 4} and not (trash / "link").exists()
    assert remove_in_worker(str(root), ident, "item", (item.st_dev, item.st_ino),
                            None) == RemoveResult(1, 2)
    assert sorted(os.listdir(trash)) == []
    # No trash at all (the root gone): an error, not an exception.
    got = remove_in_worker(str(tmp_path / "nowhere"), ident, "item", None, None)
    assert got.error is not None and "cannot open the trash" in got.error


def _dies_on_first(vllm_root: str, trash_ident: tuple[int, int], name: str,
                   expect: tuple[int, ...] | None, listing: object) -> RemoveResult:
    marker = Path(vllm_root) / "died"
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return remove_in_worker(vllm_root, trash_ident, name, expect, None)
    os.close(fd)
    os._exit(9)  # a worker killed mid-removal (out of memory)


def test_removal_by_the_reading_workers_and_a_worker_killed_mid_removal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    """The streamed prune forks its pool (once) and the same processes remove what was moved;
    a worker that dies in a removal gives that entry an error (not a hang), its item stays in
    the trash, every other entry is removed, and the next prune finishes the item."""
    if ran_in_fresh_process(request):
        return
    root = tmp_path / "root"
    generate(root, [REPO / "examples" / "sample_cache"], 1500)
    age(root, 2)
    n = len(classify(root / "torch_compile_cache", []))
    assert n >= 48  # parallel_read.PARALLEL_MIN_ENTRIES: the pool is forked
    monkeypatch.setenv("VLLM_CACHE_TOOLS_SCAN_WORKERS", "2")
    monkeypatch.setattr(execute, "remove_in_worker", _dies_on_first)
    forks = record_forks(monkeypatch)
    res = stream_prune(resolve_root(root), Policies(older_than_s=3600),
                       Protections(grace_s=0, leases_when_planning=False))
    assert forks == ["fork"]
    assert (root / "died").exists()
    assert len(res.deleted) == n and classify(root / "torch_compile_cache", []) == []
    assert [e for e in res.errors if WORKER_ENDED in e] == list(res.errors)
    assert len(res.errors) >= 1 and len(trash_items(root)) == len(res.errors)
    monkeypatch.undo()
    again = stream_prune(resolve_root(root), Policies(older_than_s=3600),
                         Protections(grace_s=0, leases_when_planning=False))
    assert again.errors == () and len(again.finished_trash) == len(res.errors)
    assert trash_items(root) == []
