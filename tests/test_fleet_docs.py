"""The recipes of docs/fleet.md, run as far as this machine allows: the CI commands, the
Dockerfile's vllm-cache RUN lines and the Kubernetes initContainer's script, against moto's S3
server and a real cache (the harness's ``compile`` start). Not run here: ``pip install``
lines, image builds (no Docker) and ``vllm-cache warm`` (a real vLLM start, run in
tests/test_fleet_realvllm.py). vLLM lives in the harness venv, vllm-cache in this one: a
``vllm-cache`` shim on PATH adds ``--python <harness venv> --usage llm`` where a verb runs
vLLM's code."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml  # type: ignore[import-untyped]

from tests.fleet_support import moto as moto
from tests.fleet_support import s3 as s3
from tests.realvllm.harness import (
    ScenarioRun,
    copy_root,
    model_lock,
    restore_pristine_sources,
    start_env,
    venv_python,
)

DOC = Path(__file__).resolve().parent.parent / "docs" / "fleet.md"


def recipe(name: str) -> str:
    text = DOC.read_text()
    m = re.search(rf"<!-- fleet-recipe: {name} -->\n```\w*\n(.*?)\n```", text, re.S)
    assert m, name
    return m.group(1)


SHIM = """#!/bin/sh
verb="$1"; shift
case "$verb" in
  unpack|pull|warm) exec "{exe}" "$verb" --python "{py}" --usage llm "$@" ;;
  *) exec "{exe}" "$verb" "$@" ;;
esac
"""


def _shim(tmp: Path) -> str:
    d = tmp / "bin"
    d.mkdir(parents=True, exist_ok=True)
    exe = Path(sys.executable).parent / "vllm-cache"
    (d / "vllm-cache").write_text(SHIM.format(exe=exe, py=venv_python()))
    (d / "vllm-cache").chmod(0o755)
    return str(d)


def _sh(script: str, env: dict[str, str], tmp: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", "-c", script], env=env, cwd=tmp, capture_output=True,
                          text=True, timeout=600)


def _runnable(lines: str) -> str:
    keep = [ln for ln in lines.splitlines()
            if ln.strip() and not ln.lstrip().startswith(("#", "pip install"))
            and "vllm-cache warm" not in ln]
    return "\n".join(keep)


@pytest.mark.realvllm
def test_recipes_run(real_compile: ScenarioRun, s3: str, tmp_path: Path) -> None:
    start = real_compile.scenario.starts[0]
    args = [a if not a.startswith("{") else json.dumps(json.loads(a), separators=(",", ":"))
            for a in start.serve_args()]
    assert all(" " not in a for a in args)
    warm_root = copy_root(real_compile.before(1), tmp_path / "warm")  # what warm wrote
    url = f"{s3}/vllm-cache"
    aws = {k: v for k, v in os.environ.items() if k.startswith(("AWS_", "XDG_"))}

    def env_for(root: Path, **extra: str) -> dict[str, str]:
        env = {**start_env(root, start), **aws, **extra}
        env["PATH"] = _shim(tmp_path / "shims" / root.name) + ":" + env["PATH"]
        return env

    # CI: push and pack the warm root.
    ci = _runnable(recipe("ci"))
    env = env_for(warm_root, VLLM_ARGS=" ".join(args), CACHE_URL=url)
    res = _sh(ci, env, tmp_path)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "vllm-cache.tar.zst").is_file()

    # Dockerfile: the vllm-cache RUN lines, with the image's paths under tmp_path.
    docker = recipe("dockerfile")
    runs = [ln[4:] for ln in docker.splitlines() if ln.startswith("RUN ") and "vllm-cache" in ln
            and "pip install" not in ln and "vllm-cache warm" not in ln]
    opt = tmp_path / "opt"
    copy_root(warm_root, opt / "vllm-cache")
    image_root = tmp_path / "image-root"
    script = "\n".join(runs).replace("/opt/", f"{opt}/").replace("/root/.cache/vllm",
                                                                   str(image_root))
    with model_lock():
        restore_pristine_sources()
        # The image's ENV VLLM_ARGS: the hit check re-derives the mega AOT key (no recorder in
        # this scenario: without them it is only linked, and refused).
        res = _sh(script, env_for(image_root, VLLM_ARGS=" ".join(args)), tmp_path)
    assert res.returncode == 0, (res.stdout, res.stderr)
    assert "placed" in res.stdout and not (opt / "vllm-cache.tar.zst").exists()
    assert "refused" not in res.stdout, res.stdout
    assert {p.name for p in (image_root / "torch_compile_cache").iterdir()} >= {
        p.name for p in (warm_root / "torch_compile_cache").iterdir() if len(p.name) == 10}

    # Kubernetes: the initContainer's script in the pod's env.
    spec = yaml.safe_load(recipe("k8s"))["spec"]
    init = spec["initContainers"][0]
    pod_env = {e["name"]: e["value"] for e in init["env"]}
    pod_root = tmp_path / "pod-cache"
    pod_env.update(CACHE_URL=url, VLLM_ARGS=" ".join(args), VLLM_CACHE_ROOT=str(pod_root))
    script = _runnable(init["args"][0])
    with model_lock():
        restore_pristine_sources()
        res = _sh(script, env_for(pod_root, **pod_env), tmp_path)
        assert res.returncode == 0, (res.stdout, res.stderr)
        assert "HIT" in res.stdout and "placed" in res.stdout
        # An argument that changes the config hash: exit 1 inside, the script still passes.
        miss = {**pod_env, "VLLM_ARGS": " ".join([*args[:1], "--max-model-len", "64",
                                                   *args[3:]])}
        res = _sh(script, env_for(tmp_path / "pod2", **miss), tmp_path)
    assert res.returncode == 0, (res.stdout, res.stderr)
    assert "MISS" in res.stdout and "nothing fetched" in res.stdout
    shutil.rmtree(tmp_path / "pod2", ignore_errors=True)

    # Kubernetes without a GPU in the init container: static checks only, everything placed.
    nogpu = _runnable(recipe("k8s-no-gpu"))
    with model_lock():
        restore_pristine_sources()
        res = _sh(nogpu, env_for(tmp_path / "pod3", **{**pod_env, "VLLM_CACHE_ROOT": str(
            tmp_path / "pod3")}), tmp_path)
    assert res.returncode == 0, (res.stdout, res.stderr)
    assert "placed" in res.stdout and "--check" not in res.stdout
    assert {p.name for p in (tmp_path / "pod3" / "torch_compile_cache").iterdir()} >= {
        p.name for p in (warm_root / "torch_compile_cache").iterdir() if len(p.name) == 10}
