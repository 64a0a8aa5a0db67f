"""Readers and diffs over what real GPU hardware produced: captured once on an NVIDIA H200
(torch 2.11.0+cu130, no vLLM there) by tests/fixtures/gpu/capture.py through the device tool."""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

import pytest

from tests.realvllm.harness import ScenarioRun, copy_root
from vllm_cache_tools import scan
from vllm_cache_tools.keys.compiler import diff_inductor_factors, inductor_env_var
from vllm_cache_tools.read.triton import read_triton_meta

FIX = Path(__file__).parent / "fixtures" / "gpu"


@pytest.fixture()
def triton_cache(tmp_path: Path) -> Path:
    with tarfile.open(FIX / "h200-triton-cache.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path / "triton_cache"


def test_real_h200_triton_metadata(triton_cache: Path) -> None:
    metas = [p for p in triton_cache.rglob("*.json") if not p.name.startswith("__grp__")]
    assert metas
    for p in metas:
        m = read_triton_meta(p)
        assert (m.backend, m.arch, m.target) == ("cuda", "90", "cuda sm_90")


@pytest.mark.realvllm
def test_backend_entry_with_gpu_triton_cache_reports_hardware(
        real_nomega: ScenarioRun, triton_cache: Path, tmp_path: Path) -> None:
    root = copy_root(real_nomega.vllm_root, tmp_path / "root")
    entry = next(p for p in (root / "torch_compile_cache").iterdir() if len(p.name) == 10)
    shutil.copytree(triton_cache, entry / "rank_0_0" / "triton_cache")
    e = next(x for x in scan(root, check_in_use=False).entries if x.key == entry.name)
    assert e.hardware == "cuda sm_90"


def test_h200_vs_cpu_factors_name_the_device_and_versions() -> None:
    gpu = json.loads((FIX / "h200-torch2.11-fingerprint.json").read_text())
    assert gpu["system"]["device"]["name"] == "NVIDIA H200"
    assert gpu["system"]["version"]["cuda"] == "13.0"
    gpu_f = {"system": gpu["system"], "torch_key": gpu["torch_key"],
             "inductor_config": gpu["inductor_config_portable"],
             "functorch_config": gpu["functorch_config_portable"]}
    cpu_f = json.loads(json.dumps(gpu_f))
    cpu_f["system"] = {"device": {"name": "cpu"}, "version": {"triton": None, "cuda": None},
                       "hash": "x"}
    cpu_f["torch_key"] = "00" * 32
    cpu_f["inductor_config"] = dict(gpu_f["inductor_config"], benchmark_kernel="True")
    causes = {c.item: c for c in diff_inductor_factors(gpu_f, cpu_f, "fixture")}
    assert causes["device.name"].old == "NVIDIA H200" and causes["device.name"].new == "cpu"
    assert causes["version.cuda"].old == "13.0"
    assert str(causes["version.triton"].old).startswith("3.6.0")
    assert "torch_key" in causes
    assert causes["inductor.benchmark_kernel"].detail.endswith("TORCHINDUCTOR_BENCHMARK_KERNEL")
    assert inductor_env_var("cpp.dynamic_threads") == "TORCHINDUCTOR_CPP_DYNAMIC_THREADS"
    assert inductor_env_var("cpp.cxx") == "CXX"
    assert diff_inductor_factors(gpu_f, gpu_f, "same") == []
