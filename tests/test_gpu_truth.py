"""What real vLLM did on an NVIDIA H200, checked on CPU against our recipes and readers.

Fixtures: tests/fixtures/gpu/vllm-0.22.1-h200 (README.md there says how they were made): vLLM
0.22.1 (CUDA wheel) on torch 2.11.0+cu130, a tiny bf16 Llama in vLLM's default CUDA mode
(VLLM_COMPILE, AOT on), three starts on one root: cold, warm, then
VLLM_ALLOW_LONG_MAX_MODEL_LEN=1; the recorder on; DEBUG logs; predict (this package, run there)
before and after; the worker's config at the moment it hashed it.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli
from vllm_cache_tools.keys import (
    aot_key,
    backend_code_hash,
    backend_key,
    env_hash_from_factors,
    model_hash_key,
)
from vllm_cache_tools.read.aot_model import read_aot_model
from vllm_cache_tools.read.factors import parse_factors

FIX = Path(__file__).parent / "fixtures" / "gpu" / "vllm-0.22.1-h200"
CC = FIX / "root" / "torch_compile_cache"
VLLM = "0.22.1"
CHANGED_ENV = "VLLM_ALLOW_LONG_MAX_MODEL_LEN"


def _log(i: int) -> str:
    return (FIX / "logs" / f"start-{i}.log").read_text()


def _backend_dir(i: int) -> str:
    """The backend folder start ``i``'s worker said it used."""
    m = re.search(r"Using cache directory: \S*/torch_compile_cache/([0-9a-f]{10})/rank_0_0/",
                  _log(i))
    assert m, f"start {i}: no 'Using cache directory' line"
    return m[1]


def _aot_dir(i: int) -> tuple[str, str]:
    """(AOT folder, 'saved'|'loaded') as start ``i``'s worker logged it."""
    m = re.search(r"(saved AOT compiled function to|Directly load AOT compilation from path) "
                  r"\S*/torch_aot_compile/([0-9a-f]{64})/", _log(i))
    assert m, f"start {i}: no AOT save/load line"
    return m[2], "saved" if m[1].startswith("saved") else "loaded"


def _logged_factors(i: int) -> dict[str, str]:
    m = re.search(r"torch\.compile cache factors: env=(\w+) cfg=(\w+) comp=(\w+) code=(\w+)",
                  _log(i))
    assert m
    return {"env": m[1], "config": m[2], "compiler": m[3], "code": m[4]}


def _dump(i: int, kind: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIX / "dump" / f"start-{i}-{kind}.json").read_text())
    return data


def _prediction(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIX / "predict" / f"{name}.json").read_text())
    return data


def test_what_vllm_did() -> None:
    """The ground truth the other tests lean on: cold start compiled and saved, warm start
    loaded both trees, the changed env var gave new folders in both."""
    assert _aot_dir(0)[1] == "saved" and _aot_dir(1) == (_aot_dir(0)[0], "loaded")
    assert "Directly load the compiled graph(s)" in _log(1)
    assert _backend_dir(1) == _backend_dir(0)
    assert _aot_dir(2)[1] == "saved"
    assert _aot_dir(2)[0] != _aot_dir(0)[0] and _backend_dir(2) != _backend_dir(0)
    assert {p.name for p in CC.iterdir() if len(p.name) == 10} == {_backend_dir(0),
                                                                   _backend_dir(2)}
    versions = (FIX / "versions.txt").read_text()
    assert "vllm 0.22.1 torch 2.11.0+cu130" in versions and "NVIDIA H200" in versions


@pytest.mark.parametrize("start", [0, 2])
def test_backend_key_from_recorded_factors_is_vllms_folder(start: int) -> None:
    key = _backend_dir(start)
    f = parse_factors((CC / key / "rank_0_0" / "backbone" / "cache_key_factors.json")
                      .read_text())
    assert f.env is not None and f.config_hash and f.code_hash and f.compiler_hash
    env_hash = env_hash_from_factors(f.env)
    assert env_hash == _logged_factors(start)["env"]
    assert backend_key([env_hash, f.config_hash, f.code_hash, f.compiler_hash]) == key


@pytest.mark.parametrize("start", [0, 1, 2])
def test_aot_key_from_worker_factors_is_vllms_folder(start: int) -> None:
    """AOT key = sha256(str([env_hash, config_hash, model key])): no Inductor factors on
    torch 2.11 (VLLM_USE_MEGA_AOT_ARTIFACT defaults on from torch 2.12)."""
    key, _ = _aot_dir(start)
    factors = ast.literal_eval(_dump(start, "aot")["factors_repr"])
    assert len(factors) == 2 and factors[0] == _logged_factors(start)["env"]
    info = read_aot_model(CC / "torch_aot_compile" / key / "rank_0_0" / "model", full=True)
    assert info.qualname == "LlamaModel.forward" and info.firstlineno is not None
    mk = model_hash_key(VLLM, info.qualname, info.firstlineno)
    assert aot_key(factors[0], factors[1], mk) == key


def test_config_hash_recipe_of_0_22() -> None:
    """VllmConfig.compute_hash of 0.22.1 (no engram/aux-output configs yet; a missing
    structured-outputs config adds nothing; a missing kernel config adds None, not "None"),
    recomputed from the sub-config hashes the worker had when it hashed."""
    d = _dump(0, "aot")
    parts = d["config_parts"]
    order = ["model_config", "cache_config", "parallel_config", "scheduler_config",
             "device_config", "load_config", "offload_config", "attention_config",
             "lora_config", "speculative_config", "structured_outputs_config",
             "profiler_config", "observability_config", "compilation_config",
             "kernel_config", "kv_transfer_config", "ec_transfer_config"]
    factors: list[Any] = [VLLM]
    for name in order:
        p = parts[name]
        if p is None:
            if name != "structured_outputs_config":
                factors.append(None if name == "kernel_config" else "None")
            continue
        factors.append(p["hash"])
    add = parts["additional_config"]
    factors.append("None" if add is None else add["hash"])
    digest = hashlib.md5(str([factors]).encode(), usedforsecurity=False).hexdigest()[:10]
    assert digest == d["config_hash"] == _logged_factors(0)["config"]


def test_worker_hashed_custom_op_counts() -> None:
    """Why a fresh ``create_engine_config()`` is not enough on 0.22: the worker's
    compilation config carries the CustomOp counters its model build filled in, and 0.22's
    CompilationConfig.compute_hash covers them (0.32 leaves them out). predict's probe builds
    the model on the meta device to count them (live/probe.py ``count_custom_ops``)."""
    for kind in ("aot", "backend"):
        d = _dump(0, kind)
        assert d["enabled_custom_ops"] == {}
        assert d["disabled_custom_ops"] == {"rms_norm": 5, "silu_and_mul": 2,
                                            "rotary_embedding": 1, "apply_rotary_emb": 1}
        assert d["config_hash"] == _logged_factors(0)["config"]
    assert "disabled custom ops: Counter({'rms_norm': 5, 'silu_and_mul': 2" in _log(0)


def test_code_hash_from_recorder_source_snapshots() -> None:
    """The backend code hash recomputed from the traced files the recorder listed (GPU-side
    paths) and the source snapshots it kept."""
    entry = CC / _backend_dir(0) / "rank_0_0" / "backbone"
    manifest = json.loads(next(entry.glob("vct-manifest.*.json")).read_text())
    sources = CC / ".vllm-cache-tools" / "sources"
    files: dict[str, str | None] = {}
    for t in manifest["traced_files"]:
        assert t["snapshot"], t["path"]
        files[t["path"]] = (sources / t["sha256"]).read_text()
    f = parse_factors((entry / "cache_key_factors.json").read_text())
    assert backend_code_hash(files) == f.code_hash == manifest["key_parts"]["code_hash"]


@pytest.mark.parametrize(("name", "start", "hit", "backend_known"), [
    ("before-0", 0, False, False),  # cold root: no evidence of the traced files yet
    ("after-0", 0, True, True),
    ("after-1", 0, True, True),
    ("before-2", 2, False, True),
    ("after-2", 2, True, True),
])
def test_predict_on_the_gpu_named_vllms_folders(name: str, start: int, hit: bool,
                                                backend_known: bool) -> None:
    p = _prediction(name)
    assert p["hit"] is hit
    assert p["aot"]["key"] == _aot_dir(start)[0]
    assert p["aot"]["hit"] is hit
    assert p["parts"]["config_hash"] == _dump(start, "aot")["config_hash"]
    assert p["parts"]["env_hash"] == _logged_factors(start)["env"]
    assert p["parts"]["compiler_hash"] == _logged_factors(start)["compiler"]
    if backend_known:
        assert p["backend"]["key"] == _backend_dir(start)
    else:
        assert p["backend"]["key"] is None and "code hash unknown" in p["backend"]["detail"]


def test_log_reads_the_gpu_starts_as_vllm_told_them() -> None:
    r = run_cli("log", "--json", *(str(FIX / "logs" / f"start-{i}.log") for i in range(3)))
    assert r.returncode == 0, r.stderr
    starts = json.loads(r.stdout)["starts"]
    assert len(starts) == 3
    fns = [s["processes"][0]["functions"][0] for s in starts]
    assert [f["outcome"] for f in fns] == ["miss", "hit", "miss"]
    assert [f["cache_dir"].split("/")[-3] for f in fns] == [_backend_dir(i) for i in range(3)]
    assert fns[0]["aot"]["saved"].split("/")[-3] == _aot_dir(0)[0]
    assert fns[1]["aot"]["loaded"].split("/")[-3] == _aot_dir(0)[0]
    assert all(s["vllm_version"] == VLLM and s["compile_mode"] == 3 for s in starts)


def _copy_root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    shutil.copytree(FIX / "root", root)
    return root


def test_explain_names_the_changed_env_var(tmp_path: Path) -> None:
    root = _copy_root(tmp_path)
    for a, b in ((_backend_dir(0), _backend_dir(2)), (_aot_dir(0)[0], _aot_dir(2)[0])):
        r = run_cli("explain", a, b, "--root", str(root), "--json")
        assert r.returncode in (0, 1), r.stderr
        causes = json.loads(r.stdout)["causes"]
        assert [(c["component"], c["item"], c["old"], c["new"]) for c in causes] == [
            ("env", CHANGED_ENV, False, True)], causes
    logs = [str(FIX / "logs" / f"start-{i}.log") for i in (0, 2)]
    r = run_cli("explain", "--logs", *logs, "--json")
    causes = json.loads(r.stdout)["causes"]
    assert [(c["component"], c["item"]) for c in causes] == [("env", CHANGED_ENV)], causes


def test_ls_and_show_read_the_gpu_layout_and_manifests(tmp_path: Path) -> None:
    root = _copy_root(tmp_path)
    r = run_cli("ls", "--json", "--root", str(root))
    assert r.returncode == 0, r.stderr
    local = {e["key"]: e["layout"] for e in json.loads(r.stdout)["entries"]}
    there = json.loads((FIX / "cli" / "ls.json").read_text())
    assert local == {e["key"]: e["layout"] for e in there["entries"]}
    assert {e["state"] for e in there["entries"]} == {"complete"}  # the full root, there
    for key in local:
        shown = json.loads(run_cli("show", key, "--root", str(root), "--json").stdout)
        assert [m["vllm"] for m in shown["manifests"]] == [VLLM]
        if shown["layout"] == "backend":
            assert shown["key_check"]["matches"] is True
        else:
            assert shown["system"]["gpu"] == "NVIDIA H200"
            assert shown["system"]["torch"] == "2.11.0+cu130"
