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
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

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


def run_trace(vllm_args: Sequence[str], env: Mapping[str, str], python: str | None,
              usage: str, rank: int = 0, *, memo: bool = True, fresh: bool = False,
              cancel: threading.Event | None = None) -> TraceRun:
    """The traced files for ``vllm serve <vllm_args>`` in ``env``, from the memo when nothing
    it depended on changed, else from a fresh tracer process (killed when ``cancel`` is
    set: its answer is then an error, not kept)."""
    t0 = time.perf_counter()
    use = memo and probememo.enabled(os.environ)
    env = {k: v for k, v in env.items() if k != probememo.DISABLE_VAR}
    req = {"args": list(vllm_args), "usage": usage, "rank": rank}
    exe = python or sys.executable
    # The root is left out of the key: the list does not depend on it (what the tracer read
    # there, if anything, is in its dependencies), and a new root is the case it is for.
    keyed = {k: v for k, v in env.items() if k != "VLLM_CACHE_ROOT"}
    key = probememo.memo_key({"trace": req}, keyed, exe,
                             TRACE.read_bytes() + PROBE.read_bytes()) if use else ""
    data: dict[str, object] | None = None
    how = "off" if not use else "fresh"
    if use and not fresh:
        data, how = probememo.load(key, memo_dir() / "traced", env)
        how = "hit" if data is not None else how
    kept = "memo off" if not use else "already kept"
    if data is None:
        data = _invoke(req, env, exe, cancel)
        deps = data.pop("deps", None)
        if not isinstance(deps, dict) or "error" in data:
            kept = "not kept: no answer"
        elif use:
            kept = probememo.save(key, data, _outside(deps, env.get("VLLM_CACHE_ROOT")),
                                  memo_dir() / "traced")
    seconds = time.perf_counter() - t0
    if "error" in data:
        return TraceRun(seconds=seconds, memo=how, kept=kept, error=str(data["error"]))
    timings = data.get("timings")
    return TraceRun(files=tuple(str(f) for f in data.get("files") or []),  # type: ignore[attr-defined]
                    forward=str(data.get("forward") or ""), exact=bool(data.get("exact")),
                    caveats=tuple(str(c) for c in data.get("caveats") or []),  # type: ignore[attr-defined]
                    device=str(data.get("device") or ""),
                    timings=dict(timings) if isinstance(timings, dict) else {},
                    seconds=seconds, memo=how, kept=kept,
                    config_hash_unbuilt=_str_or_none(data.get("config_hash_unbuilt")),
                    config_hash_built=_str_or_none(data.get("config_hash_built")),
                    moe_layers=int(data.get("moe_layers") or 0))  # type: ignore[call-overload]


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


def speculate(vllm_args: Sequence[str], env: Mapping[str, str], python: str | None,
              usage: str, rank: int = 0, *, memo: bool = True, fresh: bool = False
              ) -> tuple[Future[TraceRun], threading.Event]:
    """:func:`run_trace` started now in a thread, beside the probe, before anyone knows
    whether its answer is needed (a cold root: the probe alone says whether vLLM compiles in
    VLLM_COMPILE mode). Set the event when it is not: the tracer is killed."""
    future: Future[TraceRun] = Future()
    cancel = threading.Event()

    def work() -> None:
        try:
            future.set_result(run_trace(vllm_args, env, python, usage, rank, memo=memo,
                                        fresh=fresh, cancel=cancel))
        except BaseException as exc:  # handed to whoever takes the answer
            future.set_exception(exc)

    threading.Thread(target=work, name="vct-trace-early", daemon=True).start()
    return future, cancel


def parallel_cpus() -> int:
    """CPUs this process may run on (its affinity, as a container's CPU set limits it)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


__all__ = ["TRACE", "TraceRun", "parallel_cpus", "run_trace", "speculate", "trace_evidence"]
