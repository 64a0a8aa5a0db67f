"""Prune's one fd-relative pass per entry (maintain/execute.py): the entry folder is opened
once under its parent's fd, and every check before the move goes through that fd. These
swap the entry folder itself between planning and execution, on a copy of a real root."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tests.realvllm.harness import ScenarioRun, copy_root
from tests.trees import files_of, trash_items
from vllm_cache_tools import scan
from vllm_cache_tools.maintain.execute import execute_plan
from vllm_cache_tools.maintain.plan import Protections, plan_prune
from vllm_cache_tools.maintain.policies import Policies


def test_entry_folder_swapped_after_planning(real_compile: ScenarioRun, tmp_path: Path) -> None:
    root = copy_root(real_compile.vllm_root, tmp_path / "root")
    outside = tmp_path / "outside"
    (outside / "sub").mkdir(parents=True)
    for i in range(3):
        (outside / f"precious{i}").write_text("keep")
        (outside / "sub" / f"deep{i}").write_text("keep")
    before_outside = files_of(outside)
    cc = root / "torch_compile_cache"
    aots = sorted((cc / "torch_aot_compile").iterdir())
    backends = sorted(cc.glob("??????????"))
    info = scan(root, check_in_use=False, use_index=False)
    plan = plan_prune(info, Policies(older_than_s=0), Protections(grace_s=0))
    assert len(plan.entries) == len(info.entries) == 4
    # 1. An AOT entry moved away and a link to a folder outside put at its name.
    away = tmp_path / "away"
    shutil.move(str(aots[0]), str(away))
    kept_away = files_of(away)
    aots[0].symlink_to(outside)
    # 2. A backend entry replaced by another folder with the same files (a new inode).
    shutil.copytree(backends[0], tmp_path / "twin", symlinks=True)
    shutil.rmtree(backends[0])
    shutil.move(str(tmp_path / "twin"), str(backends[0]))
    twin = files_of(backends[0])
    # 3. Another backend entry replaced by a plain file.
    shutil.rmtree(backends[1])
    backends[1].write_text("not a folder")

    res = execute_plan(plan)

    why = {s.key: s.reason for s in res.skipped}
    assert why == {aots[0].name: "no longer a folder",
                   backends[0].name: "replaced since the plan was made",
                   backends[1].name: "no longer a folder"}
    assert res.failed == () and res.errors == ()
    assert res.deleted == (aots[1].name,)
    assert not aots[1].exists()
    assert files_of(outside) == before_outside
    assert files_of(away) == kept_away
    assert aots[0].is_symlink() and files_of(backends[0]) == twin
    assert backends[1].read_text() == "not a folder"
    assert trash_items(root) == []


def test_entry_gone_and_unreadable(real_compile: ScenarioRun, tmp_path: Path) -> None:
    root = copy_root(real_compile.vllm_root, tmp_path / "root")
    cc = root / "torch_compile_cache"
    aots = sorted((cc / "torch_aot_compile").iterdir())
    info = scan(root, check_in_use=False, use_index=False)
    plan = plan_prune(info, Policies(older_than_s=0), Protections(grace_s=0))
    shutil.rmtree(aots[0])  # removed by someone else meanwhile
    # A file added to a planned folder (its mtime moves): changed since the plan.
    rank = next(aots[1].glob("rank_*"))
    (rank / "new-file").write_bytes(b"x")
    res = execute_plan(plan)
    why = {s.key: s.reason for s in res.skipped}
    assert why == {aots[0].name: "already gone",
                   aots[1].name: "changed since the plan was made (being written?)"}
    assert res.failed == ()
    assert (rank / "new-file").exists()
    assert len(res.deleted) == 2
    left = {p.name for p in cc.iterdir()} | {p.name for p in (cc / "torch_aot_compile").iterdir()}
    assert not set(res.deleted) & left
    assert os.listdir(rank)  # the changed entry is whole
