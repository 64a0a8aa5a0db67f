"""What the fleet checks learn about this host before they see a record: the environment
that will run vLLM (a child process in that interpreter: versions without importing torch,
where vLLM is installed) and, given the ``vllm serve`` arguments, predict's answer. ``pull``
looks these up while the store's client is imported and its index objects listed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from vllm_cache_tools.fleet.errors import FleetError
from vllm_cache_tools.keys.compat import Environment, detect_environment

if TYPE_CHECKING:
    from vllm_cache_tools.analyze.predict import Prediction


@dataclass(frozen=True)
class Target:
    """The environment that will run vLLM here."""

    env: Environment
    vllm_origin: str | None
    """``vllm/__init__.py`` as this interpreter finds it (nothing imported)."""


# hittable's environment probe (no torch import), then where vLLM is: one child process.
_FIND = ("\nimport importlib.util as _u\n"
         "_s = _u.find_spec('vllm')\n"
         "print(json.dumps(_s.origin if _s is not None else None))\n")


def target(python: str | None = None) -> Target:
    """This host's target environment: from the memo while nothing it read changed
    (:mod:`.target_memo`), else from a child process in that interpreter."""
    from vllm_cache_tools.fleet import target_memo
    from vllm_cache_tools.keys.compat import _gpu_names, probe_source

    exe = python or sys.executable
    script = target_memo.DEPS_BEFORE + probe_source() + _FIND + target_memo.DEPS_AFTER
    lines = target_memo.load(exe, script)
    if lines is None:
        try:
            r = subprocess.run([exe, "-I", "-c", script], capture_output=True, text=True,
                               timeout=60)
            out = r.stdout.splitlines() if r.returncode == 0 else []
            parsed = [json.loads(x) for x in out] if len(out) == 3 else []
        except (OSError, subprocess.SubprocessError, ValueError):
            parsed = []
        if len(parsed) == 3 and isinstance(parsed[0], dict) and isinstance(parsed[2], dict):
            lines = parsed[:2]
            target_memo.save(exe, script, lines, parsed[2])
    data, origin = lines if lines is not None else (None, None)
    if not isinstance(data, dict):
        return Target(detect_environment(exe), None)  # says why, in its own words
    env = Environment(data["python"], data["torch"], data["cuda"] or data["xpu"],
                      data["triton"], _gpu_names(), exe, data["torch_source"])
    return Target(env, origin if isinstance(origin, str) else None)


@dataclass(frozen=True)
class Here:
    """What the checks learn about this host before they see a record: the environment that
    will run vLLM and, given vLLM arguments, predict's answer. Looked up while the records
    are still being fetched (``pull``: the store's import and listing take as long)."""

    target: Target
    prediction: Prediction | None = None
    """``None`` without vLLM arguments."""


def look_here(vllm_args: Sequence[str] | None, root: str | os.PathLike[str] | None, *,
              python: str | None = None, usage: str = "serve", rank: int = 0,
              progress: Callable[[str], None] | None = None) -> Here:
    """The environment probe (a child process) beside predict (memoized: its answer is
    reused while nothing it read changed)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        t = pool.submit(target, python)
        p = _predict(vllm_args, root, python, usage, rank, progress) if vllm_args else None
        return Here(t.result(), p)


def _predict(vllm_args: Sequence[str], root: str | os.PathLike[str] | None,
             python: str | None, usage: str, rank: int,
             progress: Callable[[str], None] | None) -> Prediction:
    from vllm_cache_tools.analyze.predict import PredictError, predict

    try:
        # trace=False: with no evidence of the traced files in the target root, the carried
        # AOT entry is the evidence (hit_check); tracing the model here would start vLLM's
        # tracer (~15 s on this machine) for what the bundle already says.
        return predict(vllm_args, root=root, python=python, usage=usage, rank=rank,
                       progress=progress, trace=False)
    except PredictError as exc:
        raise FleetError(str(exc)) from None


__all__ = ["Here", "Target", "look_here", "target"]
