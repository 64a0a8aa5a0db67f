"""What the starts read from vLLM logs mean: hit or miss and why, time compiling vs loading,
time a warm cache saved or would save, traced-file classes, and factor-level comparison of
two starts. Pure functions over :mod:`vllm_cache_tools.read.logs` records; no I/O.

The comparison is factor-level only (which of env/config/compiler/code hash changed, which
raw env variables differ, which traced files came or went); naming the config field or
source line behind a change is the explainer's job (``vllm-cache explain --logs``).
"""

from __future__ import annotations

import bisect
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal

from vllm_cache_tools.read.logs import (
    CompiledFunction,
    Outcome,
    ProcessLog,
    StartLog,
    env_value,
)

StartOutcome = Literal["hit", "miss", "partial", "load-failed", "disabled", "unknown", "none",
                       "incomplete"]
TimeBasis = Literal["logged", "timestamps"]
TracedKind = Literal["vllm", "torch", "third-party", "other", "dynamic"]

COMPONENTS = ("env", "config", "compiler", "code")
FACTORS_NOTE = ("factor hashes are logged only at DEBUG level (VLLM_LOGGING_LEVEL=DEBUG) by "
                "vLLM >= 0.14")


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
# Entries: which on-disk cache entry a function used (links cold and warm starts)


def entry_ids(f: CompiledFunction) -> tuple[str, ...]:
    ids = []
    for p in (f.aot_saved, f.aot_loaded, f.load_failure.path if f.load_failure else None,
              f.cache_dir):
        if p:
            p = os.path.normpath(p)
            if p not in ids:
                ids.append(p)
    return tuple(ids)


def aot_path(f: CompiledFunction) -> tuple[str | None, str | None]:
    """(path, what happened to it): saved / loaded / load failed / save failed."""
    if f.aot_loaded:
        return f.aot_loaded, "loaded"
    if f.load_failure is not None:
        return f.load_failure.path, "load failed" + (", then saved" if f.aot_saved else "")
    if f.aot_saved:
        return f.aot_saved, "saved"
    if f.aot_save_error:
        return f.aot_save_error.split(": ", 1)[0], "save failed"
    return None, None


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


def _slot_key(start: StartLog, p: ProcessLog, f: CompiledFunction) -> tuple[str, str, str]:
    return (start.model or "", p.rank or "", f.tag or f.code_name or "")


class Summarizer:
    """Summarise starts one by one (streaming), remembering per model/rank/function only
    the last start's factors, to say why a miss happened; :meth:`finish` then fills in the
    time a warm cache saved or would save, which needs later starts too."""

    def __init__(self, max_slots: int = 10_000) -> None:
        # slot -> (last start seen, last start that logged factor hashes)
        self._slots: dict[tuple[str, str, str], tuple[_Memo, _Memo | None]] = {}
        self._max = max_slots

    def add(self, start: StartLog) -> StartSummary:
        fsums: list[FunctionSummary] = []
        for p, f in start.functions:
            key = _slot_key(start, p, f)
            last, factored = self._slots.get(key, (None, None))
            why = _why(f, factored if f.factors is not None and factored else last)
            times = function_times(f)
            path, action = aot_path(f)
            fsums.append(FunctionSummary(
                process=p.label, pid=p.pid, rank=p.rank, tag=f.tag, outcome=f.outcome,
                why=why, times=times, cache_dir=f.cache_dir, aot_path=path, aot_action=action,
                factors=f.factors.as_dict() if f.factors else None, entries=entry_ids(f),
                traced_files=len(f.traced_files),
                env_factors=len(f.env_raw) if f.env_raw is not None else None))
            if key in self._slots or len(self._slots) < self._max:
                memo = _Memo(start.index, f.factors.as_dict() if f.factors else None,
                             f.env_raw, f.traced_files, f.cache_dir, path)
                self._slots[key] = (memo, memo if f.factors is not None else factored)
        return _start_summary(start, tuple(fsums))

    @staticmethod
    def finish(summaries: Sequence[StartSummary]) -> list[StartSummary]:
        return fill_savings(summaries)


def summarize(starts: Iterable[StartLog]) -> list[StartSummary]:
    s = Summarizer()
    return s.finish([s.add(st) for st in starts])


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


def _short(h: str | None, n: int = 12) -> str:
    return "-" if h is None else h[:n]


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


def _root(path: str) -> str:
    """The vLLM cache root of a backend or AOT path (the part before torch_compile_cache)."""
    i = path.find("/torch_compile_cache/")
    return path[:i] if i >= 0 else os.path.dirname(path)


def _dirname(p: str | None) -> str:
    if not p:
        return "-"
    m = re.search(r"torch_compile_cache/(?:torch_aot_compile/)?([0-9a-f]+)", p)
    return m.group(1)[:12] if m else p


def _val(raw: str | None) -> str:
    return "(absent)" if raw is None else raw


class SavingsIndex:
    """Cold compile and warm load times per cache entry, to say what a warm cache saved
    (hits) or would save (misses) where the same entry was both compiled and loaded somewhere
    in the logs. Holds two numbers per function, not the starts: :meth:`add` every summary
    first, then :meth:`fill` each (the CLI spills the summaries to disk in between)."""

    def __init__(self) -> None:
        self._cold: dict[str, tuple[list[int], list[float]]] = {}
        self._warm: dict[str, tuple[list[int], list[float]]] = {}
        self._warm_model: dict[tuple[str, str, str], tuple[list[int], list[float]]] = {}

    @staticmethod
    def _put(d: dict[Any, tuple[list[int], list[float]]], key: Any, i: int, v: float) -> None:
        idx, vals = d.setdefault(key, ([], []))
        if idx and idx[-1] > i:  # keep sorted even if fed out of order
            pos = bisect.bisect_right(idx, i)
            idx.insert(pos, i)
            vals.insert(pos, v)
        else:
            idx.append(i)
            vals.append(v)

    @staticmethod
    def _nearest(lists: Sequence[tuple[list[int], list[float]]],
                 index: int) -> tuple[int, float] | None:
        best: tuple[int, int, float] | None = None
        for idx, vals in lists:
            pos = bisect.bisect_left(idx, index)
            for j in (pos - 1, pos):
                if 0 <= j < len(idx):
                    cand = (abs(idx[j] - index), idx[j], vals[j])
                    if best is None or cand[:2] < best[:2]:
                        best = cand
        return None if best is None else (best[1], best[2])

    def add(self, s: StartSummary) -> None:
        for f in s.functions:
            if f.outcome in ("miss", "load-failed") and f.times.compile_s is not None:
                for e in f.entries:
                    self._put(self._cold, e, s.index, f.times.compile_s)
            if f.outcome == "hit" and f.times.load_s is not None:
                for e in f.entries:
                    self._put(self._warm, e, s.index, f.times.load_s)
                self._put(self._warm_model, (s.model or "", f.rank or "", f.tag or ""),
                          s.index, f.times.load_s)

    def fill(self, s: StartSummary) -> StartSummary:
        fs = []
        for f in s.functions:
            saved = would = None
            basis = None
            if f.outcome == "hit" and f.times.load_s is not None:
                c = self._nearest([self._cold[e] for e in f.entries if e in self._cold], s.index)
                if c is not None:
                    i, secs = c
                    # Negative when this warm start was slower than compiling: a regression,
                    # reported as such rather than as "saved 0".
                    saved = _r(secs - f.times.load_s)
                    basis = f"start {i} compiled this entry in {secs:.2f} s"
                else:
                    basis = "no cold start of this entry in these logs to compare with"
            elif f.outcome in ("miss", "load-failed") and f.times.compile_s is not None:
                w = self._nearest([self._warm[e] for e in f.entries if e in self._warm],
                                  s.index)
                est = False
                if w is None:
                    key = (s.model or "", f.rank or "", f.tag or "")
                    w = self._nearest([self._warm_model[key]] if key in self._warm_model
                                      else [], s.index)
                    est = True
                if w is not None:
                    i, secs = w
                    would = _r(f.times.compile_s - secs)
                    basis = (f"estimate: start {i} loaded another entry of this model in "
                             f"{secs:.2f} s" if est else
                             f"start {i} loaded this entry in {secs:.2f} s")
            fs.append(replace(f, saved_s=saved, would_save_s=would, saving_basis=basis))
        sv = _per_process_max(fs, "saved_s")
        wv = _per_process_max(fs, "would_save_s")
        note = None
        if sv is not None:
            note = max((f for f in fs if f.saved_s is not None),
                       key=lambda f: f.saved_s or 0.0).saving_basis
        elif wv is not None:
            note = max((f for f in fs if f.would_save_s is not None),
                       key=lambda f: f.would_save_s or 0.0).saving_basis
        elif s.compile_s is not None and any(f.outcome in ("miss", "load-failed") for f in fs):
            note = (f"up to {s.compile_s:.2f} s (no warm start of this model in these logs "
                    "to measure the load time)")
        elif any(f.saving_basis for f in fs):
            note = next(f.saving_basis for f in fs if f.saving_basis)
        return replace(s, functions=tuple(fs), saved_s=sv, would_save_s=wv, saving_note=note)


def fill_savings(summaries: Sequence[StartSummary]) -> list[StartSummary]:
    """Time a warm cache saved (hits) or would save (misses), measured where the same cache
    entry was both compiled and loaded somewhere in these logs."""
    index = SavingsIndex()
    for s in summaries:
        index.add(s)
    return [index.fill(s) for s in summaries]


# --------------------------------------------------------------------------------------------
# Traced files (the seed article's `grep "Traced files"` workflow)


@dataclass(frozen=True)
class TracedFile:
    path: str
    kind: TracedKind
    module: str
    """Path inside its package root (``model_executor/models/llama.py``), or the path."""

    @property
    def unexpected(self) -> bool:
        """Outside vllm/ and torch/: a third-party package or user code whose edits now
        change vLLM's code hash (and so the cache key)."""
        return self.kind in ("third-party", "other")


_SITE = re.compile(r"/(?:site|dist)-packages/")


def classify_traced(path: str) -> TracedFile:
    if path.startswith("<") or not path:
        return TracedFile(path, "dynamic", path)
    norm = path.replace("\\", "/")
    found = list(_SITE.finditer(norm))
    if found:
        m = found[-1]
        rel = norm[m.end():]
        top, _, rest = rel.partition("/")
        if top == "vllm":
            return TracedFile(path, "vllm", rest)
        if top == "torch":
            return TracedFile(path, "torch", rest)
        return TracedFile(path, "third-party", rel)
    for pkg in ("vllm", "torch"):
        i = norm.rfind(f"/{pkg}/")
        if i >= 0 or norm.startswith(f"{pkg}/"):
            rest = norm[i + len(pkg) + 2:] if i >= 0 else norm[len(pkg) + 1:]
            return TracedFile(path, "vllm" if pkg == "vllm" else "torch", rest)
    return TracedFile(path, "other", path)


def traced_groups(start: StartLog) -> list[tuple[list[str], CompiledFunction]]:
    """Functions of a start with their traced files, identical lists across ranks merged:
    [(process labels, function)]."""
    groups: dict[tuple[str | None, tuple[str, ...]], tuple[list[str], CompiledFunction]] = {}
    for p, f in start.functions:
        if not f.traced_files:
            continue
        key = (f.tag, tuple(sorted(f.traced_files)))
        if key in groups:
            groups[key][0].append(p.label)
        else:
            groups[key] = ([p.label], f)
    return list(groups.values())


def _traced_diff(old: Sequence[str], new: Sequence[str]) -> tuple[list[str], list[str]]:
    o, n = set(old), set(new)
    return sorted(n - o), sorted(o - n)


# --------------------------------------------------------------------------------------------
# Factor-level comparison of two starts


@dataclass(frozen=True)
class EnvChange:
    name: str
    old: str | None
    """Python repr text as vLLM printed it; None when the variable is not in that dict."""
    new: str | None


def env_diff(old: dict[str, str], new: dict[str, str]) -> list[EnvChange]:
    out = []
    for k in sorted(set(old) | set(new)):
        a, b = old.get(k), new.get(k)
        if a != b and (a is None or b is None or env_value(a) != env_value(b)):
            out.append(EnvChange(k, a, b))
    return out


@dataclass(frozen=True)
class HashChange:
    component: str
    old: str | None
    new: str | None

    @property
    def changed(self) -> bool:
        return self.old != self.new


@dataclass(frozen=True)
class SlotComparison:
    slot: str
    old_process: str
    new_process: str
    old_outcome: Outcome
    new_outcome: Outcome
    hashes: tuple[HashChange, ...]
    """Empty when either start did not log factor hashes."""
    env_changes: tuple[EnvChange, ...]
    traced_added: tuple[str, ...]
    traced_removed: tuple[str, ...]
    old_cache_dir: str | None
    new_cache_dir: str | None
    old_aot: str | None
    new_aot: str | None
    notes: tuple[str, ...]

    @property
    def changed_components(self) -> tuple[str, ...]:
        return tuple(h.component for h in self.hashes if h.changed)


@dataclass(frozen=True)
class StartComparison:
    old_ref: str
    new_ref: str
    old_model: str | None
    new_model: str | None
    old_version: str | None
    new_version: str | None
    slots: tuple[SlotComparison, ...]
    unmatched_old: tuple[str, ...]
    unmatched_new: tuple[str, ...]
    notes: tuple[str, ...]


def _slots(start: StartLog) -> dict[tuple[str, str], tuple[ProcessLog, CompiledFunction]]:
    out: dict[tuple[str, str], tuple[ProcessLog, CompiledFunction]] = {}
    for pi, p in enumerate(start.processes):
        counts: dict[str, int] = {}
        for f in p.functions:
            name = f.tag or f.code_name or "function"
            counts[name] = counts.get(name, 0) + 1
            label = name if counts[name] == 1 else f"{name}#{counts[name]}"
            out[(p.rank or f"process {pi}", label)] = (p, f)
    return out


def compare_starts(old: StartLog, new: StartLog, old_ref: str = "old",
                   new_ref: str = "new") -> StartComparison:
    a, b = _slots(old), _slots(new)
    pairs: list[tuple[tuple[str, str], tuple[str, str]]] = [(k, k) for k in a if k in b]
    rest_a = [k for k in a if k not in b]
    rest_b = [k for k in b if k not in a]
    if len(rest_a) == 1 and len(rest_b) == 1:
        pairs.append((rest_a[0], rest_b[0]))
        rest_a, rest_b = [], []
    slots = []
    for ka, kb in pairs:
        (pa, fa), (pb, fb) = a[ka], b[kb]
        notes: list[str] = []
        hashes: tuple[HashChange, ...] = ()
        if fa.factors and fb.factors:
            da, db = fa.factors.as_dict(), fb.factors.as_dict()
            hashes = tuple(HashChange(c, da.get(c), db.get(c)) for c in COMPONENTS)
        else:
            notes.append(FACTORS_NOTE + "; compared cache directories and traced files only")
        env_changes: list[EnvChange] = []
        env_changed = any(h.component == "env" and h.changed for h in hashes)
        if fa.env_raw is not None and fb.env_raw is not None:
            env_changes = env_diff(fa.env_raw, fb.env_raw)
            if env_changed and not env_changes:
                notes.append("the env hash changed but the printed raw values are equal: the "
                             "difference is in how vLLM normalises them (explain will say)")
        elif env_changed:
            notes.append("the env hash changed; the raw env factor dicts (DEBUG, vLLM >= 0.14) "
                         "are not in both logs, so which variable is unknown here")
        added, removed = _traced_diff(fa.traced_files, fb.traced_files)
        if bool(fa.traced_files) != bool(fb.traced_files):
            notes.append("traced files are listed in only one of the logs")
            added, removed = [], []
        if any(h.component == "code" and h.changed for h in hashes) and not added \
                and not removed:
            notes.append("the code hash changed with the same traced files: a traced file's "
                         "content changed (explain will say which)")
        if pa.rank != pb.rank and ka != kb:
            notes.append(f"matched {ka[0]} {ka[1]} with {kb[0]} {kb[1]}")
        slots.append(SlotComparison(
            slot=f"{kb[0]} {kb[1]}", old_process=pa.label, new_process=pb.label,
            old_outcome=fa.outcome, new_outcome=fb.outcome, hashes=hashes,
            env_changes=tuple(env_changes), traced_added=tuple(added),
            traced_removed=tuple(removed), old_cache_dir=fa.cache_dir,
            new_cache_dir=fb.cache_dir, old_aot=aot_path(fa)[0], new_aot=aot_path(fb)[0],
            notes=tuple(notes)))
    notes = []
    if not a or not b:
        notes.append("no compiled functions in " + ("either start" if not a and not b else
                                                     (old_ref if not a else new_ref)))
    return StartComparison(old_ref, new_ref, old.model, new.model, old.vllm_version,
                           new.vllm_version, tuple(slots),
                           tuple(f"{k[0]} {k[1]}" for k in rest_a),
                           tuple(f"{k[0]} {k[1]}" for k in rest_b), tuple(notes))


# --------------------------------------------------------------------------------------------
# JSON views


def function_json(p: ProcessLog, f: CompiledFunction) -> dict[str, Any]:
    return {
        "tag": f.tag,
        "code": ({"name": f.code_name, "file": f.code_file, "line": f.code_line}
                 if f.code_name else None),
        "where": str(f.where),
        "first_time": f.first_time,
        "last_time": f.last_time,
        "outcome": f.outcome,
        "started_compiling": f.started_compiling,
        "cache_dir": f.cache_dir,
        "cache_disabled": f.cache_disabled,
        "aot": {"loaded": f.aot_loaded, "saved": f.aot_saved, "save_error": f.aot_save_error},
        "load_failure": ({"path": f.load_failure.path, "reason": f.load_failure.reason,
                          "where": str(f.load_failure.where)} if f.load_failure else None),
        "factors": ({**f.factors.as_dict(), "dir": f.factors.dir} if f.factors else None),
        "config_hash_logged": f.config_hash_logged,
        "env_factors_raw": f.env_raw,
        "env_factors_truncated": f.env_truncated,
        "traced_files": list(f.traced_files),
        "graph_saved": list(f.graph_saved),
        "timings": {
            "dynamo_s": f.dynamo_s,
            "total_s": f.total_s,
            "ranges": [{"label": r.label, "action": r.action, "seconds": r.seconds,
                        "where": str(r.where)} for r in f.ranges],
        },
        "graphs_loaded": f.graphs_loaded,
        "graphs_stored": f.graphs_stored,
    }


def start_json(st: StartLog) -> dict[str, Any]:
    return {
        "index": st.index,
        "where": str(st.where),
        "last_line": st.last_line,
        "first_time": st.first_time,
        "last_time": st.last_time,
        "vllm_version": st.vllm_version,
        "model": st.model,
        "compile_mode": st.compile_mode,
        "enforce_eager": st.enforce_eager,
        "args_given": None if st.args is None else sorted(str(k) for k in st.args),
        "ends_log": st.ends_log,
        "incomplete": st.incomplete,
        "processes": [{
            "pid": p.pid, "name": p.name, "names": list(p.names), "ip": p.ip, "rank": p.rank,
            "engine_init": ({"seconds": p.engine_init.seconds,
                             "compilation_s": p.engine_init.compilation_s,
                             "where": str(p.engine_init.where)} if p.engine_init else None),
            "functions": [function_json(p, f) for f in p.functions],
        } for p in st.processes],
        "warnings": list(st.warnings),
    }


def summary_json(s: StartSummary) -> dict[str, Any]:
    return {
        "index": s.index,
        "where": s.where,
        "first_time": s.first_time,
        "last_time": s.last_time,
        "vllm_version": s.vllm_version,
        "model": s.model,
        "outcome": s.outcome,
        "why": list(s.why),
        "compile_s": s.compile_s,
        "load_s": s.load_s,
        "time_basis": s.time_basis,
        "engine_init_s": s.engine_init_s,
        "engine_compile_s": s.engine_compile_s,
        "saved_s": s.saved_s,
        "would_save_s": s.would_save_s,
        "saving_regression": s.regression,
        "saving_note": s.saving_note,
        "backend_dirs": list(s.backend_dirs),
        "aot_paths": list(s.aot_paths),
        "functions": [{
            "process": f.process, "pid": f.pid, "rank": f.rank, "tag": f.tag,
            "outcome": f.outcome, "why": f.why, "compile_s": f.times.compile_s,
            "load_s": f.times.load_s, "time_basis": f.times.basis,
            "dynamo_s": f.times.dynamo_s, "inductor_s": f.times.inductor_s,
            "cache_dir": f.cache_dir, "aot_path": f.aot_path, "aot_action": f.aot_action,
            "factors": f.factors, "traced_files": f.traced_files,
            "env_factors": f.env_factors, "saved_s": f.saved_s,
            "would_save_s": f.would_save_s, "saving_basis": f.saving_basis,
        } for f in s.functions],
        "warnings": list(s.warnings),
    }


def traced_json(st: StartLog) -> dict[str, Any]:
    groups = []
    for procs, f in traced_groups(st):
        files = [classify_traced(t) for t in f.traced_files]
        groups.append({
            "processes": procs, "tag": f.tag, "where": str(f.where),
            "files": [{"path": t.path, "kind": t.kind, "module": t.module,
                       "unexpected": t.unexpected} for t in files],
            "counts": {k: sum(1 for t in files if t.kind == k)
                       for k in ("vllm", "torch", "third-party", "other", "dynamic")},
        })
    return {"index": st.index, "where": str(st.where), "model": st.model, "groups": groups}


def comparison_json(c: StartComparison, explain_command: str | None = None) -> dict[str, Any]:
    """``explain_command``: the ``vllm-cache explain --logs`` line that names the config field
    or source line behind each change of this comparison."""
    return {
        "old": c.old_ref, "new": c.new_ref,
        "model": {"old": c.old_model, "new": c.new_model},
        "vllm_version": {"old": c.old_version, "new": c.new_version},
        "slots": [{
            "slot": s.slot, "old_process": s.old_process, "new_process": s.new_process,
            "outcome": {"old": s.old_outcome, "new": s.new_outcome},
            "hashes": [{"component": h.component, "old": h.old, "new": h.new,
                        "changed": h.changed} for h in s.hashes],
            "changed": list(s.changed_components),
            "env_changes": [{"name": e.name, "old": e.old, "new": e.new}
                            for e in s.env_changes],
            "traced_added": list(s.traced_added), "traced_removed": list(s.traced_removed),
            "cache_dir": {"old": s.old_cache_dir, "new": s.new_cache_dir},
            "aot": {"old": s.old_aot, "new": s.new_aot},
            "notes": list(s.notes),
        } for s in c.slots],
        "unmatched_old": list(c.unmatched_old), "unmatched_new": list(c.unmatched_new),
        "notes": list(c.notes),
        "explainer": explain_command or "vllm-cache explain --logs OLD NEW",
    }
