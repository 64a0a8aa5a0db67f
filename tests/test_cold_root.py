"""predict in an EMPTY root (a model that never compiled here) names the backend key vLLM
then uses: the traced files come from Dynamo tracing the model now, without compiling
(vllm_cache_tools/live/trace.py). Judged against the folder vLLM created in each scenario's
own root (its log's "Using cache directory" line), for a cold start, a changed env var, a
changed config value, a changed TORCHINDUCTOR_* variable, an edited traced file, the
non-mega AOT mode, and both ranks of a tensor-parallel start."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.realvllm.harness import (
    SCENARIOS,
    ScenarioRun,
    applied_edit,
    model_lock,
    run_scenario,
    start_env,
    venv_python,
)
from vllm_cache_tools.analyze.predict import Prediction, predict
from vllm_cache_tools.live.runner import run_probe
from vllm_cache_tools.live.trace_run import run_trace

pytestmark = pytest.mark.realvllm

USING = re.compile(r"Using cache directory: (\S+)/rank_0_0/\w+ for vLLM's torch\.compile")


@pytest.fixture(scope="module")
def variants() -> ScenarioRun:
    return run_scenario(SCENARIOS["variants"])


def _vllm_backend_key(run: ScenarioRun, i: int) -> str:
    keys = {Path(p).name for p in USING.findall(run.log(i))}
    assert len(keys) == 1, keys
    return keys.pop()


def _cold(run: ScenarioRun, i: int, root: Path, **kw: bool) -> Prediction:
    start = run.scenario.starts[i]
    root.mkdir()
    with model_lock(), applied_edit(start.edit):
        p = predict(start.serve_args(), env=start_env(root, start), root=root,
                    python=str(venv_python()), usage="llm", **kw)
    # Neither the probe nor the tracer compiled anything into the root.
    assert not (root / "torch_compile_cache").exists()
    return p


def _exact(run: ScenarioRun, i: int, root: Path) -> Prediction:
    p = _cold(run, i, root)
    assert p.trace_run is not None and p.trace_run.exact, p.trace_run
    assert p.backend.key == _vllm_backend_key(run, i), (run.scenario.name, i, p.backend)
    assert p.backend.hit is False and p.backend.detail == "no entry at this key"
    assert p.backend.evidence.startswith("23 files Dynamo traced now in LlamaModel.forward")
    return p


def test_cold_start_and_env_change(real_compile: ScenarioRun, tmp_path: Path) -> None:
    p0 = _exact(real_compile, 0, tmp_path / "a")
    assert p0.trace_run is not None and p0.trace_run.memo == "no memo for these inputs"
    assert p0.trace_run.served_by == "probe"  # one process imported vLLM for both answers
    # Again in another empty root: the tracer's answer comes from the memo.
    again = _cold(real_compile, 0, tmp_path / "b")
    assert p0.trace_run.kept == "kept", p0.trace_run.kept
    assert again.trace_run is not None and again.trace_run.memo == "hit"
    assert again.trace_run.served_by == "memo"
    assert again.backend.key == p0.backend.key
    # --no-trace: no tracer, the backend key unknown (and said why); the AOT key unchanged.
    start = real_compile.scenario.starts[0]
    root = tmp_path / "d"
    root.mkdir()
    with model_lock():
        r = run_cli("predict", "--root", str(root), "--python", str(venv_python()), "--usage",
                    "llm", "--json", "--no-trace", "--", *start.serve_args(),
                    env=start_env(root, start), inherit=False)
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert doc["backend"]["key"] is None and doc["aot"]["key"] == p0.aot.key
    p2 = _exact(real_compile, 2, tmp_path / "c")  # VLLM_ALLOW_LONG_MAX_MODEL_LEN=1
    assert p2.parts["code_hash"] == p0.parts["code_hash"] and p2.backend.key != p0.backend.key


def test_the_probe_traces_the_files_vllm_traced(real_compile: ScenarioRun,
                                               tmp_path: Path) -> None:
    """The probe's own trace (one process, after its answer) lists the files vLLM's worker
    logged for start 0, whatever folder this test home's vLLM venv is in (the log's paths
    moved to it), and the tracer process alone lists the same."""
    start = real_compile.scenario.starts[0]
    venv = str(Path(venv_python()).parent.parent)
    log = real_compile.log(0).splitlines()
    at = next(i for i, ln in enumerate(log) if "Traced files (to be considered" in ln)
    logged = []
    for ln in log[at + 1:]:
        m = re.search(r"backends\.py:\d+\] (/\S+)$", ln)
        if m is None:
            break
        logged.append(re.sub(r"^.*?/venv-vllm-cpu-[^/]+", venv, m.group(1)))
    root = tmp_path / "root"
    root.mkdir()
    env = start_env(root, start)
    with model_lock():
        run = run_probe(start.serve_args(), env, str(venv_python()), "llm", memo=False,
                        standby=False, trace=True)
        alone = run_trace(start.serve_args(), env, str(venv_python()), "llm", memo=False)
    assert run.trace is not None and "error" not in run.trace, run.trace
    assert len(logged) == 23 and sorted(run.trace["files"]) == sorted(logged)
    assert alone.files == tuple(run.trace["files"]) and run.trace["exact"]
    assert run.trace["config_hash_unbuilt"] == run.data["config_hash"]
    # The trace's dependencies hold the probe's: its memo is never the less careful one.
    deps, probe_deps = run.trace["deps"]["files"], run.data.get("deps")
    assert probe_deps is None and sum(len(v) for v in deps.values()) > 7000
    assert "trace" not in run.data  # never in the probe's memoized answer


def test_no_trace_when_the_root_has_evidence(real_compile: ScenarioRun) -> None:
    start = real_compile.scenario.starts[1]
    p = predict(start.serve_args(), env=start_env(real_compile.before(1), start),
                root=real_compile.before(1), python=str(venv_python()), usage="llm")
    assert p.trace_run is None and p.backend.key == _vllm_backend_key(real_compile, 0)


def test_trace_off_keeps_the_old_answer(real_compile: ScenarioRun, tmp_path: Path) -> None:
    p = _cold(real_compile, 0, tmp_path / "r", trace=False)
    assert p.trace_run is None and p.backend.key is None and p.backend.evidence == "unknown"


def test_config_inductor_env_and_edited_file(variants: ScenarioRun, tmp_path: Path) -> None:
    p0 = _exact(variants, 0, tmp_path / "0")
    p1 = _exact(variants, 1, tmp_path / "1")  # max_model_len=64: the config hash
    assert p1.parts["config_hash"] != p0.parts["config_hash"]
    p2 = _exact(variants, 2, tmp_path / "2")  # TORCHINDUCTOR_BENCHMARK_KERNEL=1
    assert p2.parts["compiler_hash"] != p0.parts["compiler_hash"]
    p3 = _exact(variants, 3, tmp_path / "3")  # a comment appended to llama.py
    assert p3.parts["code_hash"] != p0.parts["code_hash"]


def test_without_the_mega_artifact(real_nomega: ScenarioRun, tmp_path: Path) -> None:
    _exact(real_nomega, 0, tmp_path / "r")


def test_default_cpu_mode_does_not_trace(real_cpu_default: ScenarioRun,
                                         tmp_path: Path) -> None:
    p = _cold(real_cpu_default, 0, tmp_path / "r")
    assert p.trace_run is None and "not VLLM_COMPILE" in p.backend.detail


def _has_shm_all_reduce() -> bool:
    """Whether the vLLM venv's ``_C`` build, as loaded on this CPU, has the shared-memory
    all-reduce (vLLM's own test in ``CpuCommunicator.__init__``)."""
    code = ("import torch, vllm._custom_ops\n"
            "print(hasattr(torch.ops._C, 'init_shm_manager'))")
    r = subprocess.run([str(venv_python()), "-c", code], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout.strip().splitlines()[-1] == "True"


def test_two_ranks_exact(real_tp2: ScenarioRun, tmp_path: Path) -> None:
    """TP=2: the tracer builds the model as each rank does (sharded, the all-reduce through
    the CPU platform's shared-memory communicator where vLLM's build has one, 26 files; through
    torch.distributed on an AVX2-only CPU, as vLLM's ranks do there, 28 files): vLLM's key and
    each rank's own folder, with nothing called approximate."""
    start = real_tp2.scenario.starts[0]
    files = 26 if _has_shm_all_reduce() else 28
    folders = set(re.findall(r"Using cache directory: \S+/(\w+/rank_\d_0)/\w+ for vLLM",
                             real_tp2.log(0)))
    assert len(folders) == 2, folders
    for rank in (0, 1):
        root = tmp_path / f"r{rank}"
        root.mkdir()
        with model_lock():
            p = predict(start.serve_args(), env=start_env(root, start), root=root,
                        python=str(venv_python()), usage="llm", rank=rank)
        assert not (root / "torch_compile_cache").exists()
        assert p.trace_run is not None and p.trace_run.exact, p.trace_run
        assert p.backend.evidence.startswith(f"{files} files Dynamo traced now"), \
            p.backend.evidence
        where = Path(p.backend.path).parent
        assert f"{where.parent.name}/{where.name}" in folders, (rank, p.backend.path, folders)
        assert where.name == f"rank_{rank}_0"


def test_enforce_eager_names_nothing(variants: ScenarioRun, tmp_path: Path) -> None:
    """--enforce-eager: vLLM compiles nothing and writes neither tree (truth case llama-eager:
    its root held only modelinfos/); predict names no folder, says why, and never traces."""
    start = variants.scenario.starts[0]
    root = tmp_path / "r"
    root.mkdir()
    p = predict([*start.serve_args(), "--enforce-eager"], env=start_env(root, start),
                root=root, python=str(venv_python()), usage="llm")
    assert p.compiled is False and p.hit is False and p.trace_run is None
    assert p.aot.key is None and p.backend.key is None
    assert p.aot.detail.startswith("nothing is compiled (compilation mode 0")
    assert [c.item for c in p.reasons] == ["compilation_config.mode"]
    assert not (root / "torch_compile_cache").exists()
