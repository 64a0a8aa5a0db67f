"""What one start did and why: per-function times (compiling vs loading), the per-function
and per-start summary records, and the outcome rules (hit, miss, partial, load-failed,
incomplete, none) with the sentence saying why, comparing with the last start of the same
model/rank/function. Pure functions; no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Literal

from vllm_cache_tools.analyze.log_compare import (
    COMPONENTS,
    FACTORS_NOTE,
    _dirname,
    _root,
    _traced_diff,
    _val,
    aot_path,
    env_diff,
)
from vllm_cache_tools.read.logs import (
    CompiledFunction,
    Outcome,
    StartLog,
)

StartOutcome = Literal["hit", "miss", "partial", "load-failed", "disabled", "unknown", "none",
                       "incomplete"]
TimeBasis = Literal["logged", "timestamps"]

# --------------------------------------------------------------------------------------------
# Times


def ts_seconds(ts: str | None) -> float | None:
    """Seconds since Jan 1 of a leap year for vLLM's ``MM-DD HH:MM:SS`` (no year logged)."""
    if not ts:
        return None
    try:
        t = datetime.strptime("2000-" + ts, "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return None
    return (t - datetime(2000, 1, 1)).total_seconds()


def span_seconds(first: str | None, last: str | None) -> float | None:
    a, b = ts_seconds(first), ts_seconds(last)
    if a is None or b is None:
        return None
    d = b - a
    if d < 0:  # the log crossed New Year
        d += 366 * 86400
    return d


@dataclass(frozen=True)
class FunctionTimes:
    compile_s: float | None
    load_s: float | None
    basis: TimeBasis | None
    """``logged``: vLLM's own figures; ``timestamps``: from line times (1 s resolution)."""
    dynamo_s: float | None
    inductor_s: float | None
    """Sum of "Compiling a graph for ... takes N s"."""


def function_times(f: CompiledFunction) -> FunctionTimes:
    out = f.outcome
    compiled = sum(r.seconds or 0.0 for r in f.ranges if r.action == "compile")
    has_compiled = any(r.action == "compile" and r.seconds is not None for r in f.ranges)
    loaded = sum(r.seconds or 0.0 for r in f.ranges if r.action == "load")
    has_loaded = any(r.action == "load" and r.seconds is not None for r in f.ranges)
    dyn = f.dynamo_s or 0.0
    span = span_seconds(f.first_time, f.last_time)
    compile_s = load_s = None
    basis: TimeBasis | None = None
    if out == "hit":
        if f.total_s is not None:
            load_s, basis = f.total_s, "logged"
        elif has_loaded or f.dynamo_s is not None:
            load_s, basis = dyn + loaded, "logged"
        elif span is not None:
            load_s, basis = span, "timestamps"
    elif out == "partial":
        compile_s, load_s, basis = dyn + compiled, loaded, "logged"
    elif out in ("miss", "load-failed", "disabled"):
        if f.total_s is not None:
            compile_s, basis = f.total_s, "logged"
        elif has_compiled or f.dynamo_s is not None:
            compile_s, basis = dyn + compiled, "logged"
        elif span is not None:
            compile_s, basis = span, "timestamps"
    return FunctionTimes(_r(compile_s), _r(load_s), basis, f.dynamo_s,
                         _r(compiled) if has_compiled else None)


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 3)

# --------------------------------------------------------------------------------------------
# Summaries


@dataclass(frozen=True)
class FunctionSummary:
    process: str
    pid: int | None
    rank: str | None
    tag: str | None
    outcome: Outcome
    why: str
    times: FunctionTimes
    cache_dir: str | None
    aot_path: str | None
    aot_action: str | None
    factors: dict[str, str | None] | None
    entries: tuple[str, ...]
    traced_files: int
    env_factors: int | None
    saved_s: float | None = None
    would_save_s: float | None = None
    saving_basis: str | None = None

    @property
    def label(self) -> str:
        parts = [self.process]
        if self.tag:
            parts.append(f"[{self.tag}]")
        return " ".join(parts)


@dataclass(frozen=True)
class StartSummary:
    index: int
    where: str
    first_time: str | None
    last_time: str | None
    vllm_version: str | None
    model: str | None
    processes: tuple[str, ...]
    outcome: StartOutcome
    why: tuple[str, ...]
    functions: tuple[FunctionSummary, ...]
    compile_s: float | None
    load_s: float | None
    time_basis: TimeBasis | None
    engine_init_s: float | None
    engine_compile_s: float | None
    backend_dirs: tuple[str, ...]
    aot_paths: tuple[str, ...]
    warnings: tuple[str, ...]
    saved_s: float | None = None
    """Compile time of this entry's cold start minus this start's load time; negative when
    loading was slower than compiling (a regression, not a saving)."""
    would_save_s: float | None = None
    """This start's compile time minus a warm start's load time; negative likewise."""
    saving_note: str | None = None

    @property
    def regression(self) -> bool:
        """The warm cache cost time instead of saving it."""
        return (self.saved_s is not None and self.saved_s < 0) or (
            self.saved_s is None and self.would_save_s is not None and self.would_save_s < 0)


@dataclass
class _Memo:
    index: int
    factors: dict[str, str | None] | None
    env: dict[str, str] | None
    traced: tuple[str, ...]
    cache_dir: str | None
    aot: str | None

def _outcome(fs: Sequence[FunctionSummary]) -> StartOutcome:
    outs = {f.outcome for f in fs}
    if not outs:
        return "none"
    if len(outs) == 1:
        return outs.pop()
    if outs <= {"hit", "unknown"}:
        return "hit"
    if outs <= {"miss", "unknown"}:
        return "miss"
    if "load-failed" in outs and outs <= {"load-failed", "miss", "unknown"}:
        return "load-failed"
    return "partial"


def _per_process_max(fs: Sequence[FunctionSummary], attr: str) -> float | None:
    per: dict[object, float] = {}
    for f in fs:
        v = getattr(f.times, attr) if attr in ("compile_s", "load_s") else getattr(f, attr)
        if v is not None:
            per[f.pid] = per.get(f.pid, 0.0) + v
    return _r(max(per.values())) if per else None


_MODES = {0: "none", 1: "STOCK_TORCH_COMPILE", 2: "DYNAMO_TRACE_ONCE", 3: "VLLM_COMPILE"}


def _mode(start: StartLog) -> str:
    m = start.compile_mode
    return "" if m is None else f" (mode {m}, {_MODES.get(m, '?')})"


def _unfinished(f: FunctionSummary) -> bool:
    return f.outcome == "unknown"


def _no_compile_why(start: StartLog) -> tuple[StartOutcome, str]:
    """A start without any compile line: eager, still starting, or a filtered log."""
    wants = start.compiles
    if start.incomplete and wants is not False:
        asks = (f"the config asks for torch.compile{_mode(start)}" if wants else
                "the log does not say whether it compiles")
        return "incomplete", (f"in progress or incomplete log: {asks}, and the log ends before "
                              "the engine was ready, with no compile line yet (vLLM still "
                              "starting, or the log was cut short)")
    if wants is False:
        why = ("no compilation: the config says eager mode ("
               + ("enforce_eager=True" if start.enforce_eager else "compilation mode 0") + ")")
        if start.incomplete:
            why += "; the log ends before the engine was ready"
        return "none", why
    if wants:
        return "unknown", (f"the config asks for torch.compile{_mode(start)} but no compile "
                           "line is in the log (an INFO-level log with vLLM's compile messages "
                           "filtered out?)")
    return "none", ("no torch.compile lines: eager mode (enforce_eager / compilation mode 0), "
                    "or a log without vLLM's compile messages")


def _start_summary(start: StartLog, fs: tuple[FunctionSummary, ...]) -> StartSummary:
    outcome = _outcome(fs)
    if start.incomplete and any(_unfinished(f) for f in fs):
        # The log ends while a function is compiling: the start is still going (or cut).
        outcome = "incomplete"
        fs = tuple(replace(f, why="in progress or incomplete log: compilation started and "
                           "the log ends before it finished (vLLM still compiling, or the "
                           "log was cut short)") if _unfinished(f) else f for f in fs)
    why: list[str] = []
    seen: set[str] = set()
    for f in fs:
        if f.why not in seen:
            seen.add(f.why)
            why.append(f.why)
    if not fs:
        outcome, reason = _no_compile_why(start)
        why.append(reason)
    bases = {f.times.basis for f in fs if f.times.basis}
    eng = start.engine_inits
    return StartSummary(
        index=start.index, where=str(start.where), first_time=start.first_time,
        last_time=start.last_time, vllm_version=start.vllm_version, model=start.model,
        processes=tuple(p.label for p in start.processes), outcome=outcome, why=tuple(why),
        functions=fs, compile_s=_per_process_max(fs, "compile_s"),
        load_s=_per_process_max(fs, "load_s"),
        time_basis="timestamps" if "timestamps" in bases else ("logged" if bases else None),
        engine_init_s=max((e.seconds for e in eng), default=None),
        engine_compile_s=max((e.compilation_s for e in eng if e.compilation_s is not None),
                             default=None),
        backend_dirs=tuple(dict.fromkeys(f.cache_dir for f in fs if f.cache_dir)),
        aot_paths=tuple(dict.fromkeys(f.aot_path for f in fs if f.aot_path)),
        warnings=start.warnings)

def _why(f: CompiledFunction, prev: _Memo | None) -> str:
    out = f.outcome
    if out == "disabled":
        return "the compile cache is disabled (VLLM_DISABLE_COMPILE_CACHE=1): compiled, " \
               "nothing read or written"
    if out == "hit":
        if f.aot_loaded:
            return f"hit: loaded the AOT artifact {f.aot_loaded}"
        return "hit: loaded the compiled graphs from " + (f.cache_dir or "the cache")
    if out == "load-failed":
        lf = f.load_failure
        assert lf is not None
        return (f"miss: the AOT artifact {lf.path} failed to load ({lf.reason}); vLLM "
                "compiled again and rewrote it")
    if out == "partial":
        return "partly hit: some graphs loaded from the cache, others compiled (new compile " \
               "sizes or ranges?)"
    if out == "unknown":
        if f.started_compiling:
            return "unknown: compilation started but its end is not in the log"
        return "unknown: no hit or miss line for it (INFO-level log of an older vLLM?)"
    # A miss: compare with the last start of the same model/rank/function in these logs.
    if prev is None:
        return "miss: no earlier start of this model in these logs (a cold cache, or the " \
               "entry was not there)"
    cur = f.factors.as_dict() if f.factors else None
    if cur is not None and prev.factors is not None:
        changed = [c for c in COMPONENTS if cur.get(c) != prev.factors.get(c)]
        if changed:
            parts = []
            for c in changed:
                if c == "env" and f.env_raw is not None and prev.env is not None:
                    diffs = env_diff(prev.env, f.env_raw)
                    names = ", ".join(f"{d.name} {_val(d.old)} -> {_val(d.new)}"
                                      for d in diffs[:3])
                    more = f" (+{len(diffs) - 3} more)" if len(diffs) > 3 else ""
                    parts.append(f"env hash ({names}{more})" if diffs else "env hash")
                elif c == "code":
                    added, removed = _traced_diff(prev.traced, f.traced_files)
                    detail = []
                    if added:
                        detail.append(f"+{len(added)} traced files")
                    if removed:
                        detail.append(f"-{len(removed)} traced files")
                    parts.append("code hash" + (f" ({', '.join(detail)})" if detail
                                                else " (a traced file's content changed)"))
                else:
                    parts.append(f"{c} hash")
            return f"miss: key factors changed since start {prev.index}: " + "; ".join(parts)
        if prev.cache_dir and f.cache_dir and _root(prev.cache_dir) != _root(f.cache_dir):
            return (f"miss: same factors as start {prev.index} but another cache root "
                    f"({_root(f.cache_dir)} vs {_root(prev.cache_dir)}): VLLM_CACHE_ROOT "
                    "differs")
        return (f"miss: same factors as start {prev.index}, yet compiled again: the entry was "
                "gone or unreadable (deleted, pruned, or a fresh container/volume)")
    path, _ = aot_path(f)
    for a, b in ((prev.aot, path), (prev.cache_dir, f.cache_dir)):
        if not (a and b):
            continue
        if _root(a) != _root(b):
            return (f"miss: start {prev.index} used another cache root ({_root(a)}; now "
                    f"{_root(b)}): VLLM_CACHE_ROOT differs"
                    + ("" if _dirname(a) != _dirname(b) else ", same key"))
        if a != b:
            return (f"miss: another cache entry than start {prev.index} "
                    f"({_dirname(a)} -> {_dirname(b)}); {FACTORS_NOTE}")
        return (f"miss: start {prev.index} used this same entry, yet it compiled again (the "
                "entry was gone or unreadable?)")
    return f"miss: not comparable with start {prev.index} ({FACTORS_NOTE})"
