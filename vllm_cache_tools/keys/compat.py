"""Could this environment ever load an entry? The ``--unhittable`` policy of ``prune``.

Only what an entry records about the system that built it is used: the AOT ``model``'s
``system_info`` (Python, torch, CUDA toolkit, Triton, GPU name) and ``device_type``, compared
with the same rule torch applies when loading it (torch 2.13
``torch/_dynamo/package.py``, ``SystemInfo.check_compatibility``, called from
``torch/_dynamo/aot_compile.py`` ``CompileArtifacts.check_compatibility``): a mismatch there
makes every load fail, so vLLM recompiles; such an entry can never be hit here.

Whether vLLM's env, config or code hashes still match needs the hashing module's live
recipes (``predict``); nothing here guesses them, and backend entries (which record no torch
version) are always ``unknown``. The environment is read without importing torch: package
metadata, ``torch/version.py`` (a generated file holding ``__version__`` and ``cuda``) and the
NVIDIA driver's GPU list. When torch is not found, everything is ``unknown``, and
``unknown`` never deletes.
"""

from __future__ import annotations

import glob
import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Literal

from vllm_cache_tools.read.aot_model import AotModelInfo

Verdict = Literal["hittable", "unhittable", "unknown"]

# Runs inside the inspected interpreter (this one or --python): never imports torch.
_PROBE = r"""
import importlib.metadata as md, importlib.util, json, os, platform, re
def ver(*names):
    for n in names:
        try:
            return md.version(n)
        except Exception:
            pass
    return None
out = {"python": platform.python_version(), "torch": None, "cuda": None, "xpu": None,
       "triton": ver("triton", "pytorch-triton", "pytorch-triton-rocm", "pytorch-triton-xpu"),
       "torch_source": None}
try:
    spec = importlib.util.find_spec("torch")
except Exception:
    spec = None
if spec is not None and spec.origin:
    vf = os.path.join(os.path.dirname(spec.origin), "version.py")
    try:
        text = open(vf, encoding="utf-8").read()
        for key, name in (("torch", "__version__"), ("cuda", "cuda"), ("xpu", "xpu")):
            m = re.search(r"^" + name + r"\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]", text, re.M)
            if m:
                out[key] = m.group(1)
        out["torch_source"] = vf
    except OSError:
        pass
    if out["torch"] is None:
        out["torch"] = ver("torch")
        out["torch_source"] = "package metadata"
print(json.dumps(out))
"""


@dataclass(frozen=True)
class Environment:
    """What torch would report as ``SystemInfo.current()`` here, read without importing it."""

    python: str | None
    torch: str | None
    cuda: str | None
    """``torch.version.cuda`` (the toolkit torch was built with)."""
    triton: str | None
    gpus: tuple[str, ...]
    """NVIDIA GPU names seen through the driver; empty when none could be seen."""
    interpreter: str
    torch_source: str | None
    error: str | None = None

    def describe(self) -> str:
        if self.torch is None:
            return (f"torch not found for {self.interpreter}"
                    + (f" ({self.error})" if self.error else ""))
        gpu = ", ".join(sorted(set(self.gpus))) or "no GPU seen"
        return (f"python {self.python}, torch {self.torch}, CUDA {self.cuda or '-'}, "
                f"triton {self.triton or '-'}, {gpu} ({self.interpreter})")


def _gpu_names() -> tuple[str, ...]:
    names = []
    for info in sorted(glob.glob("/proc/driver/nvidia/gpus/*/information")):
        try:
            with open(info, encoding="utf-8", errors="replace") as f:
                for line in f:
                    if line.startswith("Model:"):
                        names.append(line.split(":", 1)[1].strip())
        except OSError:
            continue
    if names:
        return tuple(names)
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            r = subprocess.run([smi, "--query-gpu=name", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=10)
            if r.returncode == 0:
                return tuple(n.strip() for n in r.stdout.splitlines() if n.strip())
        except (OSError, subprocess.SubprocessError):
            pass
    return ()


def detect_environment(python: str | None = None) -> Environment:
    """This interpreter's environment, or that of ``python`` (e.g. vLLM's venv when
    vllm-cache is installed elsewhere), probed in a child process that imports no torch."""
    import sys

    exe = python or sys.executable
    try:
        r = subprocess.run([exe, "-I", "-c", _PROBE], capture_output=True, text=True,
                           timeout=60)
        data = json.loads(r.stdout) if r.returncode == 0 else None
        err = None if data is not None else (r.stderr.strip().splitlines() or ["failed"])[-1]
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        data, err = None, str(exc)
    if data is None:
        return Environment(None, None, None, None, (), exe, None, err)
    return Environment(data["python"], data["torch"], data["cuda"] or data["xpu"],
                       data["triton"], _gpu_names(), exe, data["torch_source"])


def _triton_pair(v: str | None) -> tuple[int, int] | None:
    """``3.9.0`` or ``3.9`` -> (3, 9), as ``torch.utils._triton.get_triton_version``."""
    if not v:
        return None
    m = re.match(r"^(\d+)\.(\d+)", v)
    return (int(m.group(1)), int(m.group(2))) if m else None


def aot_verdict(info: AotModelInfo | None, env: Environment) -> tuple[Verdict, str]:
    """Mirror of torch 2.13 ``SystemInfo.check_compatibility(current, cached)``; every
    comparison is made only when both sides are known, else the answer is ``unknown``."""
    if info is None:
        return "unknown", "the entry's system info could not be read"
    if env.torch is None:
        return "unknown", env.describe()
    if info.python_version and env.python and info.python_version != env.python:
        return "unhittable", (f"built with Python {info.python_version}, this environment "
                              f"has {env.python}")
    if not info.torch_version:
        return "unknown", "the entry records no torch version"
    if info.torch_version != env.torch:
        return "unhittable", (f"built with torch {info.torch_version}, this environment has "
                              f"{env.torch}")
    if info.device_type in ("cuda", "xpu"):
        if info.cuda_version != env.cuda:
            return "unhittable", (f"built with {info.device_type} toolkit "
                                  f"{info.cuda_version}, this torch has {env.cuda}")
        cached_triton = _triton_pair(info.triton_version)
        here_triton = _triton_pair(env.triton)
        if cached_triton not in (None, (0, 0)) and here_triton is not None \
                and cached_triton != here_triton:
            return "unhittable", (f"built with Triton {info.triton_version}, this "
                                  f"environment has {env.triton}")
        if info.gpu_name is not None:
            if not env.gpus:
                return "unknown", (f"built for {info.gpu_name}; no GPU could be seen from "
                                   "here without torch")
            if info.gpu_name not in env.gpus:
                return "unhittable", (f"built for {info.gpu_name}, this machine has "
                                      f"{', '.join(sorted(set(env.gpus)))}")
    return "hittable", "system info matches this environment"


def probe_source() -> str:
    """The probe script (for docs and tests)."""
    return _PROBE
