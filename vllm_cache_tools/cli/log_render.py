"""The text of ``vllm-cache log`` (:mod:`.log` reads, picks and prints JSON): one start's
summary, the traced files of each start and a factor-by-factor comparison of two starts,
each written line by line through :func:`say` (secrets hidden)."""

from __future__ import annotations

import re
from collections.abc import Iterable

from vllm_cache_tools.analyze.log_summary import (
    COMPONENTS,
    StartComparison,
    StartSummary,
    classify_traced,
    traced_groups,
)
from vllm_cache_tools.cli.common import write_out
from vllm_cache_tools.read.logs import StartLog


def _secs(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f} s"


def say(line: str = "") -> None:
    """One line to stdout (secrets hidden)."""
    write_out(line + "\n")


def _kv(key: str, value: object) -> None:
    say(f"  {key:<11} {value if value not in (None, '') else '-'}")


_VERDICT = {"hit": "HIT", "miss": "MISS", "partial": "PARTIAL HIT", "load-failed":
            "MISS (load failed)", "disabled": "CACHE DISABLED", "unknown": "UNKNOWN",
            "none": "NO COMPILATION", "incomplete": "IN PROGRESS / INCOMPLETE LOG"}


def render_summary(s: StartSummary) -> None:
    span = s.first_time or "?"
    if s.last_time and s.last_time != s.first_time:
        span += f" .. {s.last_time[6:] if s.last_time[:5] == span[:5] else s.last_time}"
    say(f"start {s.index}  {s.where}  {span}"
        + (f"  vLLM {s.vllm_version}" if s.vllm_version else ""))
    _kv("model", s.model)
    _kv("result", _VERDICT[s.outcome])
    whys = _whys(s)
    for j, w in enumerate(whys):
        _kv("why" if j == 0 else "", w)
    _kv("processes", ", ".join(s.processes))
    for d in s.backend_dirs:
        _kv("backend", d)
    for f in s.functions:
        if f.aot_path:
            _kv("AOT", f"{f.aot_path} ({f.aot_action})")
    shown: set[tuple[tuple[str, str | None], ...]] = set()
    for f in s.functions:
        if f.factors:
            key = tuple(sorted(f.factors.items()))
            if key not in shown:
                shown.add(key)
                _kv("factors", "  ".join(f"{c} {(f.factors.get(c) or '-')[:12]}"
                                         for c in COMPONENTS))
    if len(s.functions) > 1:
        for f in s.functions:
            t = f.times
            what = (f"compiled {_secs(t.compile_s)}" if t.compile_s is not None else
                    f"loaded {_secs(t.load_s)}" if t.load_s is not None else "")
            _kv("function", f"{f.label} {f.rank or ''}: {_VERDICT[f.outcome]}"
                + (f", {what}" if what else ""))
    _kv("compiling", _time_detail(s, "compile"))
    _kv("loading", _time_detail(s, "load"))
    if s.engine_init_s is not None:
        _kv("engine", f"init took {_secs(s.engine_init_s)}" + (
            f", of which compilation {_secs(s.engine_compile_s)} (vLLM's figure)"
            if s.engine_compile_s is not None else ""))
    if s.saved_s is not None and s.saved_s < 0:
        _kv("warm cache", f"REGRESSION: loading took {_secs(-s.saved_s)} longer than "
            f"compiling did ({s.saving_note}; this start loaded in {_secs(s.load_s)})")
    elif s.saved_s is not None:
        _kv("warm cache", f"saved ~{_secs(s.saved_s)} ({s.saving_note})")
    elif s.would_save_s is not None and s.would_save_s < 0:
        _kv("warm cache", f"would not save time: loading took {_secs(-s.would_save_s)} longer "
            f"than this compile ({s.saving_note})")
    elif s.would_save_s is not None:
        _kv("warm cache", f"would save ~{_secs(s.would_save_s)} ({s.saving_note})")
    elif s.saving_note:
        _kv("warm cache", s.saving_note)
    for w in s.warnings:
        say(f"  ! {w}")


def _whys(s: StartSummary) -> list[str]:
    reasons: dict[str, list[str]] = {}
    for f in s.functions:
        reasons.setdefault(f.why, []).append(f.label)
    if len(reasons) <= 1:
        return list(s.why)
    return [f"{', '.join(labels)}: {why}" for why, labels in reasons.items()]


def _time_detail(s: StartSummary, kind: str) -> str:
    total = s.compile_s if kind == "compile" else s.load_s
    if total is None:
        return "-"
    parts = []
    if kind == "compile":
        dyn = max((f.times.dynamo_s or 0.0 for f in s.functions), default=0.0)
        ind = max((f.times.inductor_s or 0.0 for f in s.functions), default=0.0)
        if dyn or ind:
            parts.append(f"Dynamo {dyn:.2f} s + Inductor {ind:.2f} s")
    basis = ("from line timestamps, +-1 s" if s.time_basis == "timestamps"
             else "vLLM's figure")
    ranks = len({f.pid for f in s.functions
                 if (f.times.compile_s if kind == "compile" else f.times.load_s) is not None})
    if ranks > 1:
        parts.append(f"slowest of {ranks} processes")
    parts.append(basis)
    return f"{_secs(total)} ({'; '.join(parts)})"


def render_traced(stream: Iterable[StartLog]) -> None:
    """The traced files of each start, as text (``--traced-files``)."""
    any_start = False
    for st in stream:
        if any_start:
            say("")
        any_start = True
        say(f"start {st.index}  {st.where}" + (f"  model {st.model}" if st.model else ""))
        groups = traced_groups(st)
        if not groups:
            say("  no traced files logged (they are logged at DEBUG level: "
                "VLLM_LOGGING_LEVEL=DEBUG; a fresh AOT compile may not log them)")
            continue
        for procs, f in groups:
            files = sorted((classify_traced(t) for t in f.traced_files),
                           key=lambda t: (t.kind != "vllm", t.kind != "torch", t.module))
            counts: dict[str, int] = {}
            for t in files:
                counts[t.kind] = counts.get(t.kind, 0) + 1
            who = ", ".join(procs) + (f" [{f.tag}]" if f.tag else "")
            say(f"  {who}: {len(files)} traced files ("
                + ", ".join(f"{n} {k}" for k, n in counts.items()) + ")")
            for t in files:
                mark = "!" if t.unexpected else " "
                say(f"  {mark} {t.kind:<11} {t.module}")
            odd = [t for t in files if t.unexpected]
            if odd:
                say(f"  ! {len(odd)} traced file(s) outside vllm/ and torch/: edits to them "
                    "change vLLM's code hash and force a recompile")
    if not any_start:
        say("No vLLM start found.")



def _cmp_line(label: str, a: object, b: object, indent: int = 4) -> None:
    pad = " " * indent
    if a == b:
        say(f"{pad}{label:<14} {a if a not in (None, '') else '-'}  (same)")
    else:
        say(f"{pad}{label:<14} {a if a not in (None, '') else '-'} -> "
            f"{b if b not in (None, '') else '-'}  CHANGED")


def _key_of(path: str | None) -> str | None:
    if not path:
        return None
    m = re.search(r"torch_compile_cache/(?:torch_aot_compile/)?([0-9a-f]+)", path)
    return m.group(1)[:12] if m else path


def render_compare(c: StartComparison, old: StartLog, new: StartLog) -> None:
    for label, st in (("old", old), ("new", new)):
        say(f"{label}  start {st.index}  {st.where}  {st.first_time or '?'}")
    _cmp_line("model", c.old_model, c.new_model, 2)
    _cmp_line("vLLM", c.old_version, c.new_version, 2)
    for s in c.slots:
        say(f"  {s.slot}  ({s.old_process}: {s.old_outcome} -> {s.new_process}: "
            f"{s.new_outcome})")
        for h in s.hashes:
            _cmp_line(f"{h.component} hash", (h.old or "")[:12] or None,
                      (h.new or "")[:12] or None)
            if h.component == "env" and s.env_changes:
                for e in s.env_changes:
                    say(f"        {e.name}: {e.old if e.old is not None else '(absent)'} -> "
                        f"{e.new if e.new is not None else '(absent)'}")
        _cmp_line("backend dir", _key_of(s.old_cache_dir), _key_of(s.new_cache_dir))
        _cmp_line("AOT dir", _key_of(s.old_aot), _key_of(s.new_aot))
        if s.traced_added or s.traced_removed:
            say(f"    traced files   +{len(s.traced_added)} -{len(s.traced_removed)}")
            for t in s.traced_added:
                say(f"      + {t}")
            for t in s.traced_removed:
                say(f"      - {t}")
        if not s.hashes and s.env_changes:
            say("    env factors that differ:")
            for e in s.env_changes:
                say(f"        {e.name}: {e.old} -> {e.new}")
        for n in s.notes:
            say(f"    note: {n}")
    for k in c.unmatched_old:
        say(f"  only in old: {k}")
    for k in c.unmatched_new:
        say(f"  only in new: {k}")
    for n in c.notes:
        say(f"  note: {n}")
