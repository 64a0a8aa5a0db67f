"""Run the live probe (:mod:`vllm_cache_tools.live.probe`) in the user's vLLM environment:
from the memo (:mod:`vllm_cache_tools.probememo`) when nothing it read changed, else from a
standby probe that already imported vLLM (:mod:`vllm_cache_tools.standby`), else a fresh
one; and read the traced sources it points at.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vllm_cache_tools import probememo, standby
from vllm_cache_tools.locate import user_cache_dir

PROBE = Path(__file__).resolve().parent / "live" / "probe.py"


def memo_dir() -> Path:
    return user_cache_dir() / "probe-memo"


class PredictError(RuntimeError):
    """vLLM is not available, or rejected the arguments."""


@dataclass(frozen=True)
class ProbeRun:
    """The probe's answer and how it was obtained: ``memo`` is "hit", "off", "fresh"
    (asked to run anyway) or why no memoized answer was used; ``kept`` whether this run's
    answer was memoized (and why not); ``served_by`` "memo", "standby" or "probe" (a fresh
    process); ``standby`` what happened about the standby."""

    data: dict[str, Any] = field(repr=False)
    memo: str
    kept: str
    seconds: float
    served_by: str = "probe"
    standby: str = "off"


def _checked(data: dict[str, Any], exe: str) -> dict[str, Any]:
    if "error" in data:
        msg = str(data["error"])
        if "No module named 'vllm'" in msg:
            raise PredictError(f"vLLM is not installed for {exe}")
        if data.get("error_kind", "arguments") == "arguments":
            raise PredictError(f"vLLM rejected the arguments: {msg}")
        raise PredictError(f"the vLLM probe failed: {msg}")
    return data


def _invoke(req: Mapping[str, Any], env: Mapping[str, str], exe: str) -> dict[str, Any]:
    try:
        proc = subprocess.run([exe, str(PROBE)], input=json.dumps(req), capture_output=True,
                              text=True, env=dict(env), timeout=900)
    except FileNotFoundError:
        raise PredictError(f"python interpreter not found: {exe}") from None
    except PermissionError:
        raise PredictError(f"python interpreter not executable: {exe}") from None
    except OSError as exc:
        raise PredictError(f"cannot run {exe}: {exc.strerror or exc}") from None
    except subprocess.TimeoutExpired:
        raise PredictError(f"the vLLM probe did not answer within 900 s ({exe})") from None
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("VCT_PROBE ")), None)
    if line is None:
        if "No module named 'vllm'" in proc.stderr or "No module named 'torch'" in proc.stderr:
            raise PredictError(f"vLLM is not installed for {exe} (use --python to point at "
                               "the interpreter that runs vLLM)")
        tail = proc.stderr.strip().splitlines()[-1:] or ["no output"]
        raise PredictError(f"the vLLM probe failed: {tail[0][:300]}")
    return _checked(json.loads(line.split(" ", 1)[1]), exe)


def _from_standby(path: Path | None, req: Mapping[str, Any], exe: str
                  ) -> tuple[dict[str, Any] | None, str]:
    if path is None:
        return None, "no private runtime folder"
    data = standby.ask(path, req)
    if data is None:
        return None, "none waiting"
    if "error" in data:  # maybe an older vLLM than is installed now: let a fresh probe say
        return None, "answered with an error: asked a fresh probe"
    deps = data.get("deps")
    changed = (probememo.stale_dependency(deps) if isinstance(deps, dict)
               else "its answer (no dependency list)")
    if changed is None and deps and deps.get("unstable"):
        changed = deps["unstable"][0]
    if changed is not None:
        return None, f"discarded: {changed} changed since it imported it"
    return data, "answered"


def run_probe(vllm_args: Sequence[str], env: Mapping[str, str], python: str | None,
              usage: str, rank: int = 0, *, memo: bool = True,
              fresh: bool = False) -> ProbeRun:
    """The probe's answer for ``vllm serve <vllm_args>`` (``usage="llm"``: ``LLM(...)``) in
    ``env``: from the memo when every input and file it depended on is unchanged, else from a
    standby probe when one waits for this environment, else from a fresh probe; then a
    standby is started for the next call. ``memo=False`` neither reads nor writes the memo;
    ``fresh=True`` runs a fresh probe and replaces the memoized answer."""
    t0 = time.perf_counter()
    use = memo and probememo.enabled(os.environ)
    # This tool's own switches mean nothing to vLLM: not part of any key, not passed on.
    env = {k: v for k, v in env.items()
           if k not in (probememo.DISABLE_VAR, standby.STANDBY_VAR)}
    req: dict[str, Any] = {"args": list(vllm_args), "usage": usage, "rank": rank}
    exe = python or sys.executable
    source = PROBE.read_bytes()
    machine = probememo.hardware()
    key = probememo.memo_key(req, env, exe, source, machine=machine) if use else ""
    why = "off" if not use else "fresh"
    if use and not fresh:
        answer, why = probememo.load(key, memo_dir())
        if answer is not None:
            return ProbeRun(answer, "hit", "already kept", time.perf_counter() - t0, "memo",
                            "not needed")
    if use:  # the Inductor child's answer is memoized apart: it outlives argument changes
        req["child_memo"] = {"dir": str(memo_dir() / "inductor"), "fresh": fresh}
    idle = standby.idle_seconds(os.environ)
    path = (standby.socket_path(probememo.memo_key({"standby": 1}, env, exe, source,
                                                   machine=machine))
            if idle is not None else None)
    data, sb = (None, "off") if idle is None else (
        (None, "skipped (--fresh)") if fresh else _from_standby(path, req, exe))
    served = "standby" if data is not None else "probe"
    if data is None:
        data = _invoke(req, env, exe)
    if idle is not None and path is not None:
        sb += "; next one started" if standby.start(path, exe, PROBE, env, idle) else ""
    deps = data.pop("deps", {})
    kept = probememo.save(key, data, deps, memo_dir()) if use else "memo off"
    return ProbeRun(data, why, kept, time.perf_counter() - t0, served, sb)


def module_files(modules: Sequence[str], origins: Mapping[str, Any]
                 ) -> dict[str, dict[str, str | None]]:
    """``{module: {"path", "content"}}`` for traced modules, located as the probe's
    interpreter imports them (``origins``: see ``module_origins`` in the probe) and read now;
    ``path`` None for a module that is not importable there, ``content`` None for a file that
    is not UTF-8 text."""
    packages: Mapping[str, str] = origins.get("packages") or {}
    other: Mapping[str, str] = origins.get("other") or {}
    out: dict[str, dict[str, str | None]] = {}
    for m in modules:
        path = other.get(m)
        top, _, rest = m.partition(".")
        if path is None and top in packages:
            stem = os.path.join(packages[top], *rest.split(".")) if rest else packages[top]
            for cand in (stem + ".py", os.path.join(stem, "__init__.py")):
                if os.path.isfile(cand):
                    path = cand
                    break
        content: str | None = None
        if path is not None:
            try:
                with open(path, encoding="utf-8") as f:
                    content = f.read()
            except (OSError, UnicodeDecodeError):
                content = None
        out[m] = {"path": path, "content": content}
    return out


__all__ = ["PROBE", "PredictError", "ProbeRun", "module_files", "run_probe"]
