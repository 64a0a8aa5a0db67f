"""File-count budgets (``prune --max-files``) and file counts in listings and plans, on copies
of real vLLM caches, through the real console script (issue 17 item 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.realvllm.harness import ScenarioRun, copy_root
from tests.trees import age, files_of
from vllm_cache_tools import scan

pytestmark = pytest.mark.realvllm


@pytest.fixture()
def root(real_compile: ScenarioRun, tmp_path: Path) -> Path:
    root = copy_root(real_compile.vllm_root, tmp_path / "root")
    ents = sorted(scan(root, check_in_use=False).entries, key=lambda e: e.key)
    for i, e in enumerate(ents):  # distinct last use: 40, 30, 20, 10 days ago
        age(e.path, 40 - 10 * i)
    return root


def _prune(*args: str) -> dict[str, object]:
    r = run_cli("prune", *args, "--json")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    data: dict[str, object] = json.loads(r.stdout)
    return data


def test_max_files_evicts_least_recently_used_until_the_count_fits(root: Path) -> None:
    ents = sorted(scan(root, check_in_use=False).entries, key=lambda e: e.key)
    total = sum(e.stats.files for e in ents)
    oldest, second = ents[0], ents[1]
    # One file too many for the oldest alone: the two least recently used go, oldest first.
    data = _prune("--root", str(root), "--max-files", str(total - oldest.stats.files - 1),
                  "--dry-run")
    plan = data["plan"]
    assert isinstance(plan, dict)
    assert [p["key"] for p in plan["entries"]] == [oldest.key, second.key]
    assert plan["entries"][0]["reasons"][0].startswith(
        f"max-files {total - oldest.stats.files - 1} files: least recently used")
    assert [p["files"] for p in plan["entries"]] == [oldest.stats.files, second.stats.files]
    assert plan["files"] == oldest.stats.files + second.stats.files
    assert plan["total_files_before"] == total
    assert plan["policies"] == [f"max-files {total - oldest.stats.files - 1}"]

    # A budget that already fits removes nothing; the text plan says files of files.
    r = run_cli("prune", "--root", str(root), "--max-files", str(total), "--dry-run")
    assert r.returncode == 0
    assert f"0 of {len(ents)} entries" in r.stdout and f"0 of {total} files" in r.stdout

    before = files_of(root)
    data = _prune("--root", str(root), "--max-files", str(total - oldest.stats.files), "--yes")
    assert data["deleted"] == [oldest.key]
    assert len(before) - len(files_of(root)) >= oldest.stats.files


def test_size_and_file_budgets_together_plan_each_entry_once(root: Path) -> None:
    ents = sorted(scan(root, check_in_use=False).entries, key=lambda e: e.key)
    data = _prune("--root", str(root), "--max-size", "0", "--max-files", "0", "--dry-run",
                  "--grace", "0")
    plan = data["plan"]
    assert isinstance(plan, dict)
    keys = [p["key"] for p in plan["entries"]]
    assert sorted(keys) == sorted(e.key for e in ents) and len(keys) == len(set(keys))


def test_file_counts_in_the_listing(root: Path) -> None:
    info = scan(root, check_in_use=False, use_index=False)
    total = sum(e.stats.files for e in info.entries)
    r = run_cli("ls", "--root", str(root))
    assert r.returncode == 0
    assert "FILES" in r.stdout.splitlines()[2]
    assert r.stdout.rstrip().endswith(f"{total} files")
    data = json.loads(run_cli("ls", "--root", str(root), "--json").stdout)
    assert sum(e["files"] for e in data["entries"]) == total
    # The index keeps counts (files and folders) as a fresh walk reads them.
    again = scan(root, check_in_use=False)
    assert [(e.stats.files, e.stats.dirs) for e in again.entries] == \
        [(e.stats.files, e.stats.dirs) for e in info.entries]


def test_file_counts_by_owner(root: Path) -> None:
    total = sum(e.stats.files for e in scan(root, check_in_use=False).entries)
    data = json.loads(run_cli("ls", "--root", str(root), "--by-owner", "--json").stdout)
    assert sum(o["files"] for o in data["owners"]) == total
    r = run_cli("ls", "--root", str(root), "--by-owner")
    assert "FILES" in r.stdout and r.stdout.rstrip().endswith(str(total))


def test_a_plan_from_a_listing_scan_still_checks_every_folder(root: Path) -> None:
    """A listing scan (the index) keeps only some folder mtimes, or none; the plan gets them
    all again, so the grace check and the check before a move see every folder."""
    from vllm_cache_tools.maintain.plan import Protections, plan_prune
    from vllm_cache_tools.maintain.policies import Policies
    from vllm_cache_tools.store.tree_stats import tree_stats

    scan(root, check_in_use=False)  # the index, warm
    listing = scan(root, check_in_use=False)
    assert any(len(e.stats.dir_mtimes) < e.stats.dirs + 1 for e in listing.entries)
    plan = plan_prune(listing, Policies(max_files=0), Protections(grace_s=0))
    assert plan.entries
    for p in plan.entries:
        assert p.dir_mtimes == tree_stats(str(p.path)).dir_mtimes
