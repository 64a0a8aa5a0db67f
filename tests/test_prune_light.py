"""The light read ``prune --older-than`` streams over (store/light.py): every fact the policy
and the protections use is the full read's, on a real vLLM root, and an entry with a key file
the pruning user may not read stays, as the full read keeps it."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.fresh_process import ran_in_fresh_process, record_forks
from tests.multiuser import chown_tree, other_user, run_as, vllm_cache_argv
from tests.realvllm.harness import ScenarioRun
from tests.trees import age
from vllm_cache_tools.maintain.stream import LIGHT_NOTE
from vllm_cache_tools.safeio import remove_tree_at
from vllm_cache_tools.store.entries import read_aot_entry, read_backend_entry
from vllm_cache_tools.store.light import LIGHT_DETAIL, light_entry
from vllm_cache_tools.store.scan import classify
from vllm_cache_tools.store.tree_stats import Listing, tree_stats

REPO = Path(__file__).resolve().parent.parent
PARALLEL_MIN = 48  # store.parallel_read.PARALLEL_MIN_ENTRIES: fewer are read in process


def test_light_read_holds_the_facts_older_than_and_the_protections_use(
        real_compile: ScenarioRun) -> None:
    items = classify(real_compile.vllm_root / "torch_compile_cache", [])
    assert {layout for layout, _ in items} == {"aot", "backend"}
    for layout, path in items:
        full = (read_aot_entry if layout == "aot" else read_backend_entry)(path)
        light = light_entry(path, layout)
        assert (light.key, light.layout, light.path) == (full.key, full.layout, full.path)
        assert light.stats == full.stats  # sizes, owners, times, folder mtimes, key files
        assert (light.last_used, light.last_used_source, light.created, light.modified) == (
            full.last_used, full.last_used_source, full.created, full.modified)
        assert full.state != "unknown"
        assert (light.state, light.state_detail, light.model) == ("complete", LIGHT_DETAIL, None)


def test_streamed_older_than_keeps_an_entry_whose_key_file_it_cannot_read(
        real_compile: ScenarioRun, world_tmp: Path) -> None:
    owner = other_user()
    root = world_tmp / "root"
    shutil.copytree(real_compile.vllm_root, root, symlinks=True)
    chown_tree(root, owner.uid)
    age(root, 2)
    cc = root / "torch_compile_cache"
    aot = sorted((cc / "torch_aot_compile").iterdir())[0]
    model = next(aot.glob("rank_*/model"))
    model.chmod(0o000)  # listed and stat'ed by the walk; not readable by its owner
    r = run_as(owner, vllm_cache_argv("prune", "--root", str(root), "--older-than", "1h",
                                      "--grace", "0", "--yes", "--json"),
               env={"PYTHONPATH": str(REPO)})
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    got = json.loads(r.stdout)
    assert LIGHT_NOTE in got["plan"]["notes"]
    assert [s["key"] for s in got["skipped"]] == [aot.name]
    assert "parts could not be read" in got["skipped"][0]["reason"]
    assert model.is_file() and got["deleted"] and got["failed"] == []
    left = {p.name for p in cc.iterdir() if not p.name.startswith(".")}
    assert left == {"torch_aot_compile"}
    assert [p.name for p in (cc / "torch_aot_compile").iterdir()] == [aot.name]
    # Contents-reading policies keep the full read (and its notes say nothing of a light one).
    again = run_cli("prune", "--root", str(root), "--corrupt", "--yes", "--json")
    assert again.returncode == 0, again.stderr
    assert LIGHT_NOTE not in json.loads(again.stdout)["plan"]["notes"]


def test_removal_over_a_stale_listing_removes_what_is_there_and_follows_no_link(
        tmp_path: Path) -> None:
    """The removal reuses the walk's names (safeio.remove_tree_at ``listing``): names added,
    gone, or swapped (a file for a folder, a folder for a link out) since the walk are each
    handled as a fresh listing would."""
    top = tmp_path / "entry"
    (top / "a" / "b").mkdir(parents=True)
    for rel in ("f0", "a/f1", "a/b/f2", "a/gone", "was_file", "a/b/will_be_link/x"):
        (top / rel).parent.mkdir(parents=True, exist_ok=True)
        (top / rel).write_text(rel)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep")
    listing: Listing = {}
    tree_stats(str(top), listing=listing)
    assert sorted(listing["."][0]) == ["f0", "was_file"] and listing["."][1] == ["a"]
    assert sorted(listing["a/b"][1]) == ["will_be_link"]
    (top / "a" / "gone").unlink()
    (top / "a" / "new").write_text("new")
    (top / "was_file").unlink()
    (top / "was_file").mkdir()
    (top / "was_file" / "inner").write_text("inner")
    shutil.rmtree(top / "a" / "b" / "will_be_link")
    (top / "a" / "b" / "will_be_link").symlink_to(outside)
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        res = remove_tree_at(fd, "entry", listing=listing)
    finally:
        os.close(fd)
    assert res.error is None and not top.exists()
    assert (outside / "precious").read_text() == "keep"


def test_streamed_light_reads_by_forked_workers_prune_the_same(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    """From LIGHT_FORK_CORES cores (here forced) the light reads of a streamed prune run in
    forked processes: the same entries removed, the same bytes freed, the same plan, as read
    in this process; nothing left behind."""
    if ran_in_fresh_process(request):
        return
    from benchmarks.synth import generate
    from vllm_cache_tools.maintain.plan import Protections
    from vllm_cache_tools.maintain.policies import Policies
    from vllm_cache_tools.maintain.stream import stream_prune
    from vllm_cache_tools.store import parallel_read
    from vllm_cache_tools.store.locate import resolve_root

    forks = record_forks(monkeypatch)
    got = {}
    for workers in (1, parallel_read.LIGHT_FORK_CORES):
        root = tmp_path / f"root{workers}"
        generate(root, [REPO / "examples" / "sample_cache"], 1500)  # same seed: same trees
        age(root, 2)
        monkeypatch.setenv("VLLM_CACHE_TOOLS_SCAN_WORKERS", str(workers))
        forks.clear()
        res = stream_prune(resolve_root(root), Policies(older_than_s=3600),
                           Protections(grace_s=0, leases_when_planning=False))
        assert forks == ([] if workers == 1 else ["fork"])
        assert classify(root / "torch_compile_cache", []) == []  # every entry gone
        got[workers] = (sorted(res.deleted), res.freed_bytes, res.errors, res.failed,
                        [(p.key, p.size_bytes, p.files, p.state) for p in
                         sorted(res.plan.entries, key=lambda p: p.key)])
    one, forked = got.values()
    assert forked == one and len(one[0]) >= PARALLEL_MIN
