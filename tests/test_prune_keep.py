"""``prune --keep N`` keeps whole starts (issue 25 item 4), on a real root with the recorder on:
three starts of one model compiled their own entries in both trees, then the first start ran
again and loaded its entries. ``--keep 1`` must remove exactly the entries of the two other
starts, in both trees, and keep the first start's backend entry with its AOT entry (it
removed that backend entry, which was decided before the other two starts', and kept the
backend entry of a start it pruned). vLLM's next start on the pruned root is the check: it
loads, nothing is compiled."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.realvllm.harness import (
    SCENARIOS,
    ScenarioRun,
    copy_root,
    run_scenario,
    run_start,
    venv_python,
)
from vllm_cache_tools import scan

pytestmark = pytest.mark.realvllm


@pytest.fixture(scope="module")
def keep_run() -> ScenarioRun:
    return run_scenario(SCENARIOS["keep"])


def start_keys(run: ScenarioRun, i: int) -> set[str]:
    """The backend and AOT keys start ``i`` compiled (from vLLM's own log lines)."""
    log = run.log(i)
    b = log.split("Using cache directory: ", 1)[1].split("/rank_")[0].rsplit("/", 1)[1]
    a = log.split("saved AOT compiled function to ", 1)[1].split("/rank_")[0].rsplit("/", 1)[1]
    return {b, a}


def test_keep_1_removes_the_other_starts_whole_and_vllm_loads(keep_run: ScenarioRun,
                                                              tmp_path: Path) -> None:
    assert "Directly load AOT compilation" in keep_run.log(3)  # the first start again: a hit
    live, older = start_keys(keep_run, 0), start_keys(keep_run, 1) | start_keys(keep_run, 2)
    assert len(live | older) == 6  # three starts, two trees, no entry shared
    root = copy_root(keep_run.vllm_root, tmp_path / "root")
    before = {e.key for e in scan(root, check_in_use=False, use_index=False).entries}
    assert live | older <= before

    r = run_cli("prune", "--root", str(root), "--keep", "1", "--grace", "0", "--dry-run")
    assert r.returncode == 0, r.stderr
    assert "one start, recorder ledger" in r.stdout and "is not recorded" not in r.stdout
    r = run_cli("prune", "--root", str(root), "--keep", "1", "--grace", "0", "--yes", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert set(d["deleted"]) == older, d["plan"]
    for p in d["plan"]["entries"]:  # each names its partner of the same start
        assert len(p["same_start"]) == 1 and {p["key"], *p["same_start"]} <= older
    after = {e.key for e in scan(root, check_in_use=False, use_index=False).entries}
    assert after == before - older and live <= after

    rec = run_start(venv_python(), root, SCENARIOS["keep"].starts[0], tmp_path / "start-9.log")
    log = rec.log.read_text(errors="replace")
    assert rec.returncode == 0, log[-3000:]
    assert "Directly load AOT compilation" in log
    assert "saved AOT compiled function" not in log and "Compiling model again" not in log
    assert {e.key for e in scan(root, check_in_use=False, use_index=False).entries} == after
