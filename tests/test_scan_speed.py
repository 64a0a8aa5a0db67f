"""What the fast scan relies on (issue 17 item 5), checked on real vLLM caches:

- the listing index compares only folders that are not content-addressed kernel buckets
  (tree_stats.is_bucket); every later start of the harness's real scenarios created files only
  in such watched folders, or in new buckets whose parent (watched) changed;
- entries read by forked workers are the entries read in one process.

Speed itself is measured by benchmarks/bench_scan.py, not here (a shared 2-core machine)."""

from __future__ import annotations

import os
from itertools import pairwise
from pathlib import Path

import pytest

from benchmarks.synth import generate, templates
from tests.realvllm.harness import ScenarioRun, cpu_has
from vllm_cache_tools.store.parallel_read import read_entries
from vllm_cache_tools.store.scan import classify, scan
from vllm_cache_tools.store.tree_stats import is_bucket, tree_stats, watched_dirs

pytestmark = pytest.mark.realvllm


def _entry_dirs(cc: Path) -> dict[str, dict[str, int]]:
    """entry path relative to ``cc`` -> {folder relative to the entry: mtime_ns}."""
    out = {}
    for _, path in classify(cc, []):
        out[os.path.relpath(path, cc)] = dict(tree_stats(str(path)).dir_mtimes)
    return out


def _snapshots(run: ScenarioRun) -> list[Path]:
    befores = sorted(run.dir.glob("before-*"), key=lambda p: int(p.name.split("-")[1]))
    return [*befores, run.vllm_root]


@pytest.mark.parametrize("fixture", ["real_compile", "real_cpu_default"])
def test_later_starts_write_only_where_the_index_looks(fixture: str,
                                                       request: pytest.FixtureRequest) -> None:
    run: ScenarioRun = request.getfixturevalue(fixture)
    snaps = [s / "torch_compile_cache" for s in _snapshots(run)]
    compared = changed_seen = 0
    for before, after in pairwise(snaps):
        if not before.is_dir():
            continue
        a, b = _entry_dirs(before), _entry_dirs(after)
        for entry in a.keys() & b.keys():
            compared += 1
            old, new = a[entry], b[entry]
            changed = {d for d in old.keys() & new.keys() if old[d] != new[d]}
            created = new.keys() - old.keys()
            # A folder that existed and changed is one the index watches.
            assert not any(is_bucket(d) for d in changed if d != "."), (entry, changed)
            # A new folder hangs below a folder that changed (new) or is itself new.
            for d in created:
                parent = os.path.dirname(d) or "."
                assert parent in changed or parent in created, (entry, d)
            changed_seen += len(changed)
            # So the watched folders' mtimes alone tell the entry changed.
            if changed or created:
                assert dict(watched_dirs(tuple(old.items()))) != \
                    dict(watched_dirs(tuple(new.items())))
    assert compared > 0
    # Where the warm start writes into the AOT entry it loaded (CPUs with avx512_bf16: seen on
    # every such CI machine), the checks above saw it; on an AVX2-only CPU it writes nothing
    # there (2026-12-04), so they hold with nothing changed.
    if fixture == "real_compile" and cpu_has("avx512_bf16"):
        assert changed_seen > 0



def test_forked_workers_read_what_one_process_reads(real_compile: ScenarioRun,
                                                    real_tp2: ScenarioRun,
                                                    tmp_path: Path) -> None:
    roots = [real_compile.vllm_root, real_tp2.vllm_root]
    # As many files as 100 entries made from these roots hold (a fixed count made 83 entries
    # once the scenarios' entries grew).
    tpls = templates(roots)
    meta = generate(tmp_path / "tree", roots,
                    sum(len(tpls[i % len(tpls)][2]) for i in range(100)))
    cc = tmp_path / "tree" / "torch_compile_cache"
    items = classify(cc, [])
    assert len(items) == meta["entries"] >= 100
    one = list(read_entries(items, workers=1))
    two = list(read_entries(items, workers=2))
    assert one == two
    os.environ["VLLM_CACHE_TOOLS_SCAN_WORKERS"] = "2"
    try:
        info = scan(tmp_path / "tree", use_index=False, check_in_use=False)
    finally:
        del os.environ["VLLM_CACHE_TOOLS_SCAN_WORKERS"]
    assert [e.key for e in info.entries] == [e.key for e in one]
    assert sum(e.stats.files for e in info.entries) == meta["files"]
