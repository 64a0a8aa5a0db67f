"""A streamed prune's removal in its reading pool's forked processes (maintain/trash.py
``remove_in_worker``, maintain/execute.py ``Mover(pool=)``): the worker opens the trash itself
and uses only the very folder the moving process holds, removes only the item that process
moved, and a worker killed mid-removal leaves its item in the trash for the next prune, with an
error instead of a wait. Entries cloned from the shipped example's real vLLM start."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


def _dies(vllm_root: str, trash_ident: tuple[int, int], name: str,
          expect: tuple[int, ...] | None, listing: object) -> RemoveResult:
    """``remove_in_worker`` where the worker dies on one removal: the first it is given,
    once (``died`` holds its name), or every time it is given that one (``always``)."""
    marker = Path(vllm_root) / "died"
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        if (Path(vllm_root) / "always").exists() and marker.read_text() == name:
            os._exit(9)
        return remove_in_worker(vllm_root, trash_ident, name, expect, None)
    os.write(fd, name.encode())
    os.close(fd)
    os._exit(9)  # a worker killed mid-removal (out of memory)


@pytest.mark.parametrize("always", [False, True], ids=["once", "every-time"])
def test_removal_by_the_reading_workers_and_a_worker_killed_mid_removal(
        always: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        request: pytest.FixtureRequest) -> None:
    """The streamed prune forks its pool (once) and the same processes remove what was moved.
    A worker that dies in a removal: the removal is handed to the pool again, so the entry is
    removed all the same (``once``); where every worker given it dies (``every-time``), it
    counts as lost after the retries: an error for it (not a hang), its item left in the
    trash, every other entry removed, and the next prune finishes the item."""
    if ran_in_fresh_process(request):
        return
    root = tmp_path / "root"
    generate(root, [REPO / "examples" / "sample_cache"], 1500)
    age(root, 2)
    if always:
        (root / "always").touch()
    n = len(classify(root / "torch_compile_cache", []))
    assert n >= 48  # parallel_read.PARALLEL_MIN_ENTRIES: the pool is forked
    monkeypatch.setenv("VLLM_CACHE_TOOLS_SCAN_WORKERS", "2")
    monkeypatch.setattr(execute, "remove_in_worker", _dies)
    monkeypatch.setattr(execute, "LOST_AFTER_S", 0.5)
    forks = record_forks(monkeypatch)
    res = stream_prune(resolve_root(root), Policies(older_than_s=3600),
                       Protections(grace_s=0, leases_when_planning=False))
    assert forks == ["fork"]
    assert (root / "died").exists()
    assert len(res.deleted) == n and classify(root / "torch_compile_cache", []) == []
    if not always:
        assert res.errors == () and trash_items(root) == []
        return
    victim = (root / "died").read_text()
    assert list(res.errors) == [f"{victim.split('.')[0]}: moved to the trash but not fully "
                                f"removed: {WORKER_ENDED}"]
    assert trash_items(root) == [victim]
    monkeypatch.undo()
    again = stream_prune(resolve_root(root), Policies(older_than_s=3600),
                         Protections(grace_s=0, leases_when_planning=False))
    assert again.errors == () and again.finished_trash == (victim,)
    assert trash_items(root) == []


def test_a_worker_lost_mid_read_says_what_was_already_moved(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker ending while reads are unanswered stops the prune; its message says how many
    entries are already in the trash (not the read's "nothing was changed"), and the next
    prune finishes them."""
    from vllm_cache_tools.maintain import stream
    from vllm_cache_tools.store.parallel_read import WorkerLost

    root = tmp_path / "root"
    generate(root, [REPO / "examples" / "sample_cache"], 300)
    age(root, 2)
    real = stream.read_light

    def lost_after_five(*a: Any, **k: Any) -> Iterator[Any]:
        for i, got in enumerate(real(*a, **k)):
            if i == 5:
                raise WorkerLost("a worker process ended without answering")
            yield got

    monkeypatch.setattr(stream, "read_light", lost_after_five)
    with pytest.raises(WorkerLost, match="5 entries were already moved into the trash"):
        stream_prune(resolve_root(root), Policies(older_than_s=3600),
                     Protections(grace_s=0, leases_when_planning=False))
    monkeypatch.undo()
    again = stream_prune(resolve_root(root), Policies(older_than_s=3600),
                         Protections(grace_s=0, leases_when_planning=False))
    assert again.errors == () and classify(root / "torch_compile_cache", []) == []
    assert trash_items(root) == []
