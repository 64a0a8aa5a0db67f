"""What the starts read from vLLM logs mean: hit or miss and why, time compiling vs loading,
time a warm cache saved or would save, traced-file classes, and factor-level comparison of
two starts. Pure functions over :mod:`vllm_cache_tools.read.logs` records; no I/O.

The comparison is factor-level only (which of env/config/compiler/code hash changed, which
raw env variables differ, which traced files came or went); naming the config field or
source line behind a change is the explainer's job (``vllm-cache explain --logs``).

This module keeps the streaming :class:`Summarizer`, the savings a warm cache brought
(:class:`SavingsIndex`) and the JSON views; the records and outcome rules live in
:mod:`.log_outcome`, traced files and the comparison of two starts in :mod:`.log_compare`.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from vllm_cache_tools.analyze.log_compare import (
    COMPONENTS,
    FACTORS_NOTE,
    EnvChange,
    HashChange,
    SlotComparison,
    StartComparison,
    TracedFile,
    TracedKind,
    aot_path,
    classify_traced,
    compare_starts,
    entry_ids,
    env_diff,
    traced_groups,
)
from vllm_cache_tools.analyze.log_outcome import (
    FunctionSummary,
    FunctionTimes,
    StartOutcome,
    StartSummary,
    TimeBasis,
    _Memo,
    _per_process_max,
    _r,
    _start_summary,
    _why,
    function_times,
    span_seconds,
    ts_seconds,
)
from vllm_cache_tools.read.logs import (
    CompiledFunction,
    ProcessLog,
    StartLog,
)

# The public names of the module before the split, for importers (cli/log, explain, tests).
__all__ = [
    "COMPONENTS",
    "FACTORS_NOTE",
    "EnvChange",
    "FunctionSummary",
    "FunctionTimes",
    "HashChange",
    "SavingsIndex",
    "SlotComparison",
    "StartComparison",
    "StartOutcome",
    "StartSummary",
    "Summarizer",
    "TimeBasis",
    "TracedFile",
    "TracedKind",
    "aot_path",
    "classify_traced",
    "compare_starts",
    "entry_ids",
    "env_diff",
    "fill_savings",
    "function_times",
    "span_seconds",
    "summarize",
    "traced_groups",
    "ts_seconds",
]


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
# JSON views


