"""Run the live probe (:mod:`vllm_cache_tools.live.probe`) in the user's vLLM environment:
from the memo (:mod:`vllm_cache_tools.live.memo`) when nothing it read changed, else from a
standby probe that already imported vLLM (:mod:`vllm_cache_tools.live.standby`), else a fresh
one; and read the traced sources it points at.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vllm_cache_tools.errors import VctError
from vllm_cache_tools.live import answer as answers
from vllm_cache_tools.live import memo as probememo
from vllm_cache_tools.live import standby as standbys
from vllm_cache_tools.read.noatime import read_source_text
from vllm_cache_tools.store.locate import user_cache_dir

PROBE = Path(__file__).resolve().parent / "probe.py"
PROBE_TIMEOUT_S = 900.0

Progress = Callable[[str], None]
"""Called with a short line saying what predict is doing now (from any thread)."""


def _quiet(stage: str) -> None:
    pass


def memo_dir() -> Path:
    return user_cache_dir() / "probe-memo"


class PredictError(VctError, RuntimeError):
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
    trace: dict[str, Any] | None = field(default=None, repr=False)
    timings: dict[str, float] = field(default_factory=dict)
    """Seconds of each phase of a probe that ran (the probe's ``_TIMINGS``: import, config,
    after the config, Inductor factors, dependencies, trace); empty for a memoized answer."""
    """The traced files the probe found in its own process when asked (``trace=True``: a
    cold root) and in VLLM_COMPILE mode: live/trace.py's answer with its dependencies,
    never part of the probe's memoized answer (:mod:`vllm_cache_tools.live.trace_run`
    keeps it)."""


def _checked(data: dict[str, Any], exe: str) -> dict[str, Any]:
    if "error" in data:
        msg = str(data["error"])
        if "No module named 'vllm'" in msg:
            raise PredictError(f"vLLM is not installed for {exe}")
        if data.get("error_kind", "arguments") == "arguments":
            raise PredictError(f"vLLM rejected the arguments: {msg}")
        raise PredictError(f"the vLLM probe failed: {msg}")
    return data


def _run(cmd: list[str], stdin: str, env: Mapping[str, str], progress: Progress
         ) -> tuple[bytes | None, str]:
    """The answer ``cmd`` wrote on its answer pipe (:mod:`~vllm_cache_tools.live.answer`;
    None: it gave none) and its stderr; its ``VCT_STAGE`` lines on stderr go to ``progress``
    as they come (not into the returned stderr). Its stdout (vLLM's and torch's logs, for
    some releases) is drained and dropped."""
    # Bytes that are not UTF-8 (a library's log line) must not stop a reader: a pipe nobody
    # drains would stall the probe until the timeout.
    proc, answer = answers.spawn(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, encoding="utf-8", errors="replace",
                                 env=dict(env))
    err: list[str] = []

    def pump_err() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            if line.startswith("VCT_STAGE "):
                progress(line[10:].strip())
            else:
                err.append(line)

    def pump_out() -> None:
        assert proc.stdout is not None
        while proc.stdout.read(1 << 16):
            pass

    readers = [threading.Thread(target=f, daemon=True) for f in (pump_err, pump_out)]
    for t in readers:
        t.start()
    try:
        assert proc.stdin is not None
        proc.stdin.write(stdin)
        proc.stdin.close()
    except OSError:
        pass  # it exited early: what it wrote says why
    try:
        proc.wait(timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    finally:
        for t in readers:
            t.join(timeout=5)
    return answer.get(timeout=5), "".join(err)


def _invoke(req: Mapping[str, Any], env: Mapping[str, str], exe: str,
            progress: Progress = _quiet) -> dict[str, Any]:
    try:
        answer, stderr = _run([exe, str(PROBE)], json.dumps(req), env, progress)
    except FileNotFoundError:
        raise PredictError(f"python interpreter not found: {exe}") from None
    except PermissionError:
        raise PredictError(f"python interpreter not executable: {exe}") from None
    except OSError as exc:
        raise PredictError(f"cannot run {exe}: {exc.strerror or exc}") from None
    except subprocess.TimeoutExpired:
        raise PredictError(f"the vLLM probe did not answer within {PROBE_TIMEOUT_S:.0f} s "
                           f"({exe})") from None
    if answer is None:
        if "No module named 'vllm'" in stderr or "No module named 'torch'" in stderr:
            raise PredictError(f"vLLM is not installed for {exe} (use --python to point at "
                               "the interpreter that runs vLLM)")
        tail = stderr.strip().splitlines()[-1:] or ["no output"]
        raise PredictError(f"the vLLM probe failed: {tail[0][:300]}")
    try:
        data = json.loads(answer)
    except ValueError:
        raise PredictError(f"the vLLM probe's answer is not JSON ({exe})") from None
    if not isinstance(data, dict):
        raise PredictError(f"the vLLM probe's answer is not an object ({exe})")
    return _checked(data, exe)


def _from_standby(path: Path | None, req: Mapping[str, Any], env: Mapping[str, str],
                  progress: Progress) -> tuple[dict[str, Any] | None, str]:
    if path is None:
        return None, "no private runtime folder"
    if not standbys.alive(path):
        return None, "none waiting"
    progress("asking the waiting vLLM probe (standby)")
    data = standbys.ask(path, {**req, "env": dict(env), "cwd": os.getcwd()},
                        on_stage=progress)
    if data is None:
        return None, "none waiting"
    # In each case below it left: the next one starts in this environment.
    if "standby_mismatch" in data:
        return None, f"not used: {data['standby_mismatch']}"
    if "standby_stale" in data:  # it re-checked what it imported before answering
        return None, f"discarded: {data['standby_stale']} changed since it imported it"
    if "error" in data:  # maybe an older vLLM than is installed now: let a fresh probe say
        return None, "answered with an error: asked a fresh probe"
    if not isinstance(data.get("deps"), dict):
        return None, "discarded: its answer has no dependency list"
    # What it read while answering is judged as a fresh probe's is: used, and not kept when
    # it changed meanwhile (``deps["unstable"]``, e.g. vLLM writing modelinfos/ in a new root).
    return data, "answered"


def _next_standby(path: Path, exe: str, env: Mapping[str, str], idle: float,
                  warm: Mapping[str, Any] | None = None) -> str:
    if standbys.alive(path):
        return ""
    short = standbys.memory_short()
    if short is not None:
        return f"; none started ({short})"
    standbys.make_room(path)
    return "; next one started" if standbys.start(path, exe, PROBE, env, idle,
                                                  warm) else ""


_EARLY: dict[str, tuple[Future[ProbeRun], StageRelay]] = {}
"""Probe runs started ahead by :func:`prestart`, by the call they answer."""


def _call_key(vllm_args: Sequence[str], env: Mapping[str, str], python: str | None,
              usage: str, rank: int, memo: bool, fresh: bool, standby: bool,
              trace: bool) -> str:
    return json.dumps([list(vllm_args), sorted(env.items()), python, usage, rank, memo, fresh,
                       standby, trace])


class StageRelay:
    """Stages told to whoever listens now, from any thread: :meth:`retarget` hands the
    listener over (it hears the latest stage at once); while :meth:`overlay` shows the
    caller's own stage, the stages told meanwhile are kept and the latest one comes back
    when the overlay ends."""

    def __init__(self, target: Progress | None) -> None:
        self._lock = threading.Lock()
        self._target = target
        self._last: str | None = None
        self._overlay: str | None = None

    def __call__(self, text: str) -> None:
        with self._lock:
            self._last = text
            if self._overlay is None and self._target is not None:
                self._target(text)

    def retarget(self, target: Progress) -> None:
        with self._lock:
            self._target = target
            shown = self._overlay or self._last
            if shown is not None:
                target(shown)

    def overlay(self, text: str | None) -> None:
        with self._lock:
            self._overlay = text
            shown = text or self._last
            if shown is not None and self._target is not None:
                self._target(shown)


def prestart(vllm_args: Sequence[str], env: Mapping[str, str], python: str | None,
             usage: str, rank: int = 0, *, memo: bool = True, fresh: bool = False,
             standby: bool = True, progress: Progress | None = None,
             trace: bool = False) -> None:
    """Start :func:`run_probe` now in a thread (the CLI imports the rest of predict meanwhile);
    the next :func:`run_probe` call with the same arguments takes its answer (or its error).
    A run nobody takes is abandoned with the process."""
    key = _call_key(vllm_args, env, python, usage, rank, memo, fresh, standby, trace)
    if key in _EARLY:
        return
    future: Future[ProbeRun] = Future()
    relay = StageRelay(progress)

    def work() -> None:
        try:
            future.set_result(_run_probe(vllm_args, env, python, usage, rank, memo=memo,
                                         fresh=fresh, standby=standby, progress=relay,
                                         trace=trace))
        except BaseException as exc:  # handed to the caller that takes this run
            future.set_exception(exc)

    _EARLY[key] = (future, relay)
    threading.Thread(target=work, name="vct-probe-early", daemon=True).start()


def run_probe(vllm_args: Sequence[str], env: Mapping[str, str], python: str | None,
              usage: str, rank: int = 0, *, memo: bool = True, fresh: bool = False,
              standby: bool = True, progress: Progress | None = None,
              trace: bool = False) -> ProbeRun:
    """See :func:`_run_probe`; the answer of a run :func:`prestart` started for the same
    arguments when there is one."""
    early = _EARLY.pop(_call_key(vllm_args, env, python, usage, rank, memo, fresh, standby,
                                 trace), None)
    if early is not None:
        future, relay = early
        if progress is not None:
            relay.retarget(progress)
        return future.result()
    return _run_probe(vllm_args, env, python, usage, rank, memo=memo, fresh=fresh,
                      standby=standby, progress=progress, trace=trace)


def _run_probe(vllm_args: Sequence[str], env: Mapping[str, str], python: str | None,
               usage: str, rank: int = 0, *, memo: bool = True, fresh: bool = False,
               standby: bool = True, progress: Progress | None = None,
               trace: bool = False) -> ProbeRun:
    """The probe's answer for ``vllm serve <vllm_args>`` (``usage="llm"``: ``LLM(...)``) in
    ``env``: from the memo when every input and file it depended on is unchanged, else from a
    standby probe when one waits for this interpreter and can serve ``env``, else from a
    fresh probe; then a standby is started for the next call. ``memo=False`` neither reads
    nor writes the memo; ``fresh=True`` runs a fresh probe and replaces the memoized answer;
    ``standby=False`` (or ``VLLM_CACHE_TOOLS_PROBE_STANDBY=0``) neither asks nor starts a
    standby. ``progress`` is told each stage. ``trace``: a probe that runs (not the memo)
    also lists the files Dynamo traces, in its own process, when vLLM compiles in
    VLLM_COMPILE mode (:attr:`ProbeRun.trace`; for a cold root, whose backend key needs
    them)."""
    t0 = time.perf_counter()
    say = progress or _quiet
    use = memo and probememo.enabled(os.environ)
    # This tool's own switches mean nothing to vLLM: not part of any key, not passed on.
    env = {k: v for k, v in env.items()
           if k not in (probememo.DISABLE_VAR, standbys.STANDBY_VAR)}
    req: dict[str, Any] = {"args": list(vllm_args), "usage": usage, "rank": rank}
    exe = python or sys.executable
    source = PROBE.read_bytes()
    machine = probememo.hardware()
    key = probememo.memo_key(req, env, exe, source, machine=machine) if use else ""
    why = "off" if not use else "fresh"
    if use and not fresh:
        say("checking the memo of earlier answers")
        answer, why = probememo.load(key, memo_dir(), env)
        if answer is not None:
            say("answered by the memo")
            # The root is no key input (memo.ROOT_VAR): the answer may come from another.
            answer["cache_root"] = env.get(probememo.ROOT_VAR, answer.get("cache_root"))
            return ProbeRun(answer, "hit", "already kept", time.perf_counter() - t0, "memo",
                            "not needed")
    if use:  # the Inductor child's answer is memoized apart: it outlives argument changes
        req["child_memo"] = {"dir": str(memo_dir() / "inductor"), "fresh": fresh}
    if trace:  # not in the key: the probe's own answer is the same either way
        req["trace"] = True
    idle = standbys.idle_seconds(os.environ) if standby else None
    path = (standbys.socket_path(standbys.standby_key(exe, source, machine))
            if idle is not None else None)
    data, sb = (None, "off") if idle is None else (
        (None, "skipped (--fresh)") if fresh else _from_standby(path, req, env, say))
    served = "standby" if data is not None else "probe"
    if data is None:
        say("starting the vLLM probe")
        data = _invoke(req, env, exe, say)
    else:
        say("answered by the waiting probe (standby)")
    warm = data.pop("warm", None)  # what the next standby imports ahead (not memoized)
    if idle is not None and path is not None:
        sb += _next_standby(path, exe, env, idle, warm if isinstance(warm, dict) else None)
    data.pop("standby", None)
    traced = data.pop("trace", None)
    timings = data.pop("timings", None)
    deps = data.pop("deps", {})
    kept = probememo.save(key, data, deps, memo_dir()) if use else "memo off"
    return ProbeRun(data, why, kept, time.perf_counter() - t0, served, sb,
                    traced if isinstance(traced, dict) else None,
                    dict(timings) if isinstance(timings, dict) else {})


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
        content = read_source_text(path) if path is not None else None
        out[m] = {"path": path, "content": content}
    return out


__all__ = ["PROBE", "PredictError", "ProbeRun", "module_files", "prestart", "run_probe"]
