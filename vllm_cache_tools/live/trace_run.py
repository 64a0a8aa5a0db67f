"""Run :mod:`vllm_cache_tools.live.trace` in the user's vLLM interpreter and keep its answer
in the memo (as the probe's: keyed by request, environment, interpreter, machine and both
scripts' sources; re-checked against every file it read).

Only predict's cold-root path asks for it (VLLM_COMPILE mode and no AOT entry, manifest or
log evidence of the traced files): a predict answered by the memo or by evidence in the
root never starts it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from vllm_cache_tools.layout import AOT_DIRNAME
from vllm_cache_tools.live import answer as answers
from vllm_cache_tools.live import memo as probememo
from vllm_cache_tools.live.runner import PROBE, memo_dir

TRACE = Path(__file__).with_name("trace.py")
TRACE_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class TraceRun:
    """Traced files of the model's compiled ``forward`` (as the compiling worker's
    ``compilation_config.traced_files``), or ``error`` when tracing failed. ``exact`` is
    False when ``caveats`` name a way the list may differ from the worker's."""

    files: tuple[str, ...] = ()
    forward: str = ""
    exact: bool = False
    caveats: tuple[str, ...] = ()
    device: str = ""
    timings: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    memo: str = "off"
    kept: str = "memo off"
    error: str | None = None
    config_hash_unbuilt: str | None = None
    """``VllmConfig.compute_hash()`` after the build with the MoE layer names it registered
    taken out (must equal the probe's, else the built one is not used)."""
    config_hash_built: str | None = None
    """The same with them: what a worker that built this model hashes (vLLM 0.32 hashes
    ``compilation_config.static_all_moe_layers``)."""
    moe_layers: int = 0
    config_hash_module: str | None = None
    """``compute_hash()`` of the config the compiled module was built under (a multimodal
    model's language model: a sub-config with the text config)."""
    forward_firstlineno: int | None = None
    """The compiled module's ``forward`` first line (the AOT key hashes it)."""
    forward_file: str | None = None
    served_by: str = "tracer"
    """"memo", "probe" (the probe's own process traced it: ``run_probe(..., trace=True)``) or
    "tracer" (a process of its own)."""


def _invoke(req: Mapping[str, object], env: Mapping[str, str], exe: str,
            cancel: threading.Event | None = None) -> dict[str, object]:
    try:
        proc, answer = answers.spawn([exe, str(TRACE)], stdin=subprocess.PIPE,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     env=dict(env), encoding="utf-8", errors="replace")
    except OSError as exc:
        return {"error": f"cannot run the tracer with {exe}: {exc}"}
    done = threading.Event()

    def stop_when_cancelled() -> None:
        if cancel is not None and cancel.wait() and not done.is_set():
            proc.kill()  # nobody wants this answer (a speculative trace): no orphan

    if cancel is not None:
        threading.Thread(target=stop_when_cancelled, daemon=True).start()
    try:
        _, stderr = proc.communicate(json.dumps(req), timeout=TRACE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return {"error": f"the tracer did not answer within {TRACE_TIMEOUT_S:.0f} s ({exe})"}
    finally:
        done.set()
    if cancel is not None and cancel.is_set():
        return {"error": "cancelled"}
    line = answer.get(timeout=5)
    if line is None:
        tail = stderr.strip().splitlines()[-1:] or ["no output"]
        return {"error": f"the tracer gave no answer: {tail[0][:300]}"}
    try:
        data = json.loads(line)
    except ValueError:
        return {"error": "the tracer's answer is not JSON"}
    return data if isinstance(data, dict) else {"error": "the tracer's answer is not a dict"}


def _outside(deps: Mapping[str, object], root: str | None) -> dict[str, object]:
    """``deps`` without what lies in the cache root: vLLM writes ``modelinfos/`` there while
    it builds the config (in a new root: a file that appeared while the tracer ran, which
    would keep the answer out of the memo), and it is vLLM's own record of the model code
    whose files are dependencies anyway."""
    if not root:
        return dict(deps)
    inside = os.path.normpath(root) + os.sep

    def keep(path: str) -> bool:
        return not (path + os.sep).startswith(inside)

    out: dict[str, object] = dict(deps)
    for kind in ("files", "dirs"):
        rows = deps.get(kind)
        if isinstance(rows, dict):
            out[kind] = {d: r for d, r in rows.items() if keep(d)}
    unstable = deps.get("unstable")
    if isinstance(unstable, list):
        out["unstable"] = [p for p in unstable if isinstance(p, str) and keep(p)]
    return out


def _memo_key(vllm_args: Sequence[str], env: Mapping[str, str], python: str | None,
              usage: str, rank: int) -> tuple[dict[str, object], str]:
    """The tracer's request and memo key. The root is left out of the key: the list does not
    depend on it (what the tracer read there, if anything, is in its dependencies), and a new
    root is the case it is for."""
    req: dict[str, object] = {"args": list(vllm_args), "usage": usage, "rank": rank}
    exe = python or sys.executable
    keyed = {k: v for k, v in env.items()
             if k not in ("VLLM_CACHE_ROOT", probememo.DISABLE_VAR)}
    return req, probememo.memo_key({"trace": req}, keyed, exe,
                                   TRACE.read_bytes() + PROBE.read_bytes())


def _keep(key: str, data: dict[str, object], env: Mapping[str, str]) -> str:
    """Memoize a fresh answer (its ``deps`` taken out of ``data``)."""
    deps = data.pop("deps", None)
    if not isinstance(deps, dict) or "error" in data:
        return "not kept: no answer"
    return probememo.save(key, data, _outside(deps, env.get("VLLM_CACHE_ROOT")),
                          memo_dir() / "traced")


def run_trace(vllm_args: Sequence[str], env: Mapping[str, str], python: str | None,
              usage: str, rank: int = 0, *, memo: bool = True, fresh: bool = False,
              cancel: threading.Event | None = None) -> TraceRun:
    """The traced files for ``vllm serve <vllm_args>`` in ``env``, from the memo when nothing
    it depended on changed, else from a fresh tracer process (killed when ``cancel`` is
    set: its answer is then an error, not kept)."""
    t0 = time.perf_counter()
    use = memo and probememo.enabled(os.environ)
    env = {k: v for k, v in env.items() if k != probememo.DISABLE_VAR}
    req, key = _memo_key(vllm_args, env, python, usage, rank)
    key = key if use else ""
    data: dict[str, object] | None = None
    how = "off" if not use else "fresh"
    if use and not fresh:
        data, how = probememo.load(key, memo_dir() / "traced", env)
        how = "hit" if data is not None else how
    kept = "memo off" if not use else "already kept"
    if data is None:
        data = _invoke(req, env, python or sys.executable, cancel)
        kept = _keep(key, data, env) if use else (
            "not kept: no answer" if "error" in data else "memo off")
        data.pop("deps", None)
    return _trace_run(data, time.perf_counter() - t0, how, kept,
                      "memo" if how == "hit" else "tracer")


def from_probe(answer: dict[str, object], vllm_args: Sequence[str], env: Mapping[str, str],
               python: str | None, usage: str, rank: int = 0, *, memo: bool = True,
               why: str = "fresh") -> TraceRun:
    """The traced files the probe found in its own process (``run_probe(..., trace=True)``:
    one import of vLLM for both answers), memoized as :func:`run_trace` memoizes a tracer's
    (the same key: a later predict's :func:`run_trace` finds it). ``why``: why no memoized
    answer was used (the probe's)."""
    use = memo and probememo.enabled(os.environ)
    env = {k: v for k, v in env.items() if k != probememo.DISABLE_VAR}
    data = dict(answer)
    if use:
        kept = _keep(_memo_key(vllm_args, env, python, usage, rank)[1], data, env)
    else:
        kept = "not kept: no answer" if "error" in data else "memo off"
    data.pop("deps", None)
    timings = data.get("timings")
    total = timings.get("total_s") if isinstance(timings, dict) else None
    return _trace_run(data, float(total) if isinstance(total, (int, float)) else 0.0,
                      why if use else "off", kept, "probe")


def _trace_run(data: dict[str, object], seconds: float, how: str, kept: str,
               served_by: str) -> TraceRun:
    if "error" in data:
        return TraceRun(seconds=seconds, memo=how, kept=kept, error=str(data["error"]),
                        served_by=served_by)
    timings = data.get("timings")
    return TraceRun(files=tuple(str(f) for f in data.get("files") or []),  # type: ignore[attr-defined]
                    forward=str(data.get("forward") or ""), exact=bool(data.get("exact")),
                    caveats=tuple(str(c) for c in data.get("caveats") or []),  # type: ignore[attr-defined]
                    device=str(data.get("device") or ""),
                    timings=dict(timings) if isinstance(timings, dict) else {},
                    seconds=seconds, memo=how, kept=kept,
                    config_hash_unbuilt=_str_or_none(data.get("config_hash_unbuilt")),
                    config_hash_built=_str_or_none(data.get("config_hash_built")),
                    moe_layers=int(data.get("moe_layers") or 0),  # type: ignore[call-overload]
                    config_hash_module=_str_or_none(data.get("config_hash_module")),
                    forward_firstlineno=(int(data["forward_firstlineno"])  # type: ignore[call-overload]
                                         if data.get("forward_firstlineno") else None),
                    forward_file=_str_or_none(data.get("forward_file")),
                    served_by=served_by)


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def trace_evidence(run: TraceRun) -> str:
    """The backend key's evidence line for a traced file list."""
    how = (f"{len(run.files)} files Dynamo traced now in {run.forward or 'forward'} without "
           f"compiling (model on {run.device}, no weights loaded, no Inductor), contents "
           "read now")
    if run.exact:
        return how
    return "approximate: " + how + "; may differ from vLLM's list: " + "; ".join(run.caveats)


def cold_root(compile_cache: Path) -> bool:
    """No entry of either tree (nothing but our own dot-folders): the root holds no evidence
    of the traced files, so the backend key will need a trace if vLLM compiles in
    VLLM_COMPILE mode."""
    try:
        names = [n for n in os.listdir(compile_cache) if not n.startswith(".")]
    except OSError:
        return True
    if any(n != AOT_DIRNAME for n in names):
        return False
    try:
        return not any(not n.startswith(".") for n in os.listdir(compile_cache / AOT_DIRNAME))
    except OSError:
        return True


__all__ = ["TRACE", "TraceRun", "cold_root", "from_probe", "run_trace", "trace_evidence"]
