"""``vllm-cache log FILE...``: what vLLM's own log says about its compile cache, per start."""

from __future__ import annotations

import json
import pickle
import re
import shlex
import sys
import tempfile
from collections.abc import Callable, Iterator
from typing import Annotated

import typer

from vllm_cache_tools.analyze.log_summary import (
    COMPONENTS,
    SavingsIndex,
    StartComparison,
    StartSummary,
    Summarizer,
    classify_traced,
    compare_starts,
    comparison_json,
    start_json,
    summary_json,
    traced_groups,
    traced_json,
)
from vllm_cache_tools.cli.common import fail, warn, write_out
from vllm_cache_tools.read.logs import LogInputError, LogStream, StartLog, check_inputs
from vllm_cache_tools.views.payloads import SCHEMAS, log_json, with_schema

SCHEMA = SCHEMAS["log"]
_REF = re.compile(r"^(?P<path>.*)@(?P<n>-?\d+)$")


def log(
    files: Annotated[list[str] | None, typer.Argument(
        metavar="FILE", help="vLLM log files (plain, rotated .1/.2, gzip); - or none for "
        "stdin. Rotated files of one log are read oldest first as one stream.",
        show_default=False)] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON (streamed).")] = False,
    traced_files: Annotated[bool, typer.Option(
        "--traced-files", help="List the traced files of each start (what vLLM hashes into "
        "the code hash), flagging modules outside vllm/ and torch/.")] = False,
    compare: Annotated[tuple[str, str] | None, typer.Option(
        "--compare", metavar="OLD NEW", help="Compare two starts factor by factor: FILE "
        "(its last start) or FILE@N (its N-th start; @-1 is the last).",
        show_default=False)] = None,
    no_grep: Annotated[bool, typer.Option("--no-grep", hidden=True,
                                          help="Do not use grep as a pre-filter.")] = False,
) -> None:
    """Summarise vLLM compile-cache activity from vLLM logs: per start, the model, cache
    directories, hit or miss and why, time compiling vs loading, and the time a warm cache
    saved or would save. Most of it needs VLLM_LOGGING_LEVEL=DEBUG."""
    if compare is not None:
        if files:
            fail("--compare takes its own two starts (OLD NEW); drop the FILE arguments")
        if traced_files:
            fail("--compare and --traced-files do not combine")
        _compare(compare[0], compare[1], json_out, not no_grep)
        return
    names = list(files or [])
    if not names:
        if sys.stdin.isatty():
            fail("give one or more vLLM log files, or pipe a log in (FILE - reads stdin)")
        names = ["-"]
    if names.count("-") > 1:
        fail("stdin (-) can be read only once")
    check_inputs(names)
    stream = LogStream(names, accelerate=not no_grep)
    try:
        if traced_files:
            _traced(stream, json_out)
        elif json_out:
            _summary_json(stream, names)
        else:
            _summary_text(stream, names)
    except LogInputError as exc:
        fail(str(exc))
    except BrokenPipeError:
        raise
    except OSError as exc:
        fail(f"reading the log failed: {exc.strerror or exc}")
    for w in stream.warnings:
        warn(w)


# --------------------------------------------------------------------------------------------
# Summary


def _summaries(stream: LogStream, on_start: Callable[[StartLog], None] | None = None
               ) -> Iterator[StartSummary]:
    """Summaries of every start, with the time a warm cache saved or would save, which needs
    the later starts too. To keep memory flat on logs with thousands of starts, the summaries
    wait in a temporary file while the rest of the log is read."""
    summarizer = Summarizer()
    savings = SavingsIndex()
    # An anonymous (already unlinked) temporary file that only this process wrote.
    with tempfile.TemporaryFile() as spill:
        n = 0
        for st in stream:
            if on_start is not None:
                on_start(st)
            s = summarizer.add(st)
            savings.add(s)
            pickle.dump(s, spill, protocol=pickle.HIGHEST_PROTOCOL)
            n += 1
        spill.seek(0)
        for _ in range(n):
            yield savings.fill(pickle.load(spill))


def _summary_json(stream: LogStream, names: list[str]) -> None:
    out = write_out  # secrets hidden
    out('{"schema": ' + json.dumps(SCHEMA) + ', "inputs": ' + json.dumps(names)
        + ', "starts": [')
    first = True

    def emit(st: StartLog) -> None:
        nonlocal first
        out(("\n" if first else ",\n") + log_json(start_json(st), names))
        first = False

    summaries = _summaries(stream, emit)
    s = next(summaries, None)
    out('\n], "summary": [')
    i = 0
    while s is not None:
        out(("\n" if i == 0 else ",\n") + log_json(summary_json(s), names))
        i += 1
        s = next(summaries, None)
    out('\n], "warnings": ' + json.dumps(stream.warnings) + ', "notes": '
        + json.dumps(stream.notes) + "}\n")


def _secs(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f} s"


def _summary_text(stream: LogStream, names: list[str]) -> None:
    shown = 0
    for s in _summaries(stream):
        if shown:
            _p("")
        else:
            for n in stream.notes:  # known once the first start is out
                _p(f"note: {n}\n")
        _render_summary(s)
        shown += 1
    if not shown:
        _p(f"No vLLM start found in {', '.join(names)}. vLLM logs most compile-cache lines at "
           "DEBUG level: start it with VLLM_LOGGING_LEVEL=DEBUG.")


def _p(line: str = "") -> None:
    write_out(line + "\n")


def _kv(key: str, value: object) -> None:
    _p(f"  {key:<11} {value if value not in (None, '') else '-'}")


_VERDICT = {"hit": "HIT", "miss": "MISS", "partial": "PARTIAL HIT", "load-failed":
            "MISS (load failed)", "disabled": "CACHE DISABLED", "unknown": "UNKNOWN",
            "none": "NO COMPILATION", "incomplete": "IN PROGRESS / INCOMPLETE LOG"}


def _render_summary(s: StartSummary) -> None:
    span = s.first_time or "?"
    if s.last_time and s.last_time != s.first_time:
        span += f" .. {s.last_time[6:] if s.last_time[:5] == span[:5] else s.last_time}"
    _p(f"start {s.index}  {s.where}  {span}"
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
        _p(f"  ! {w}")


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


# --------------------------------------------------------------------------------------------
# Traced files


def _traced(stream: LogStream, json_out: bool) -> None:
    if json_out:
        out = write_out  # secrets hidden
        out('{"schema": ' + json.dumps(SCHEMA + "/traced") + ', "starts": [')
        for i, st in enumerate(stream):
            out(("\n" if i == 0 else ",\n") + json.dumps(traced_json(st)))
        out('\n], "warnings": ' + json.dumps(stream.warnings) + "}\n")
        return
    any_start = False
    for st in stream:
        if any_start:
            _p("")
        any_start = True
        _p(f"start {st.index}  {st.where}" + (f"  model {st.model}" if st.model else ""))
        groups = traced_groups(st)
        if not groups:
            _p("  no traced files logged (they are logged at DEBUG level: "
               "VLLM_LOGGING_LEVEL=DEBUG; a fresh AOT compile may not log them)")
            continue
        for procs, f in groups:
            files = sorted((classify_traced(t) for t in f.traced_files),
                           key=lambda t: (t.kind != "vllm", t.kind != "torch", t.module))
            counts: dict[str, int] = {}
            for t in files:
                counts[t.kind] = counts.get(t.kind, 0) + 1
            who = ", ".join(procs) + (f" [{f.tag}]" if f.tag else "")
            _p(f"  {who}: {len(files)} traced files ("
               + ", ".join(f"{n} {k}" for k, n in counts.items()) + ")")
            for t in files:
                mark = "!" if t.unexpected else " "
                _p(f"  {mark} {t.kind:<11} {t.module}")
            odd = [t for t in files if t.unexpected]
            if odd:
                _p(f"  ! {len(odd)} traced file(s) outside vllm/ and torch/: edits to them "
                   "change vLLM's code hash and force a recompile")
    if not any_start:
        _p("No vLLM start found.")


# --------------------------------------------------------------------------------------------
# Compare


def _parse_ref(ref: str) -> tuple[str, int | None]:
    m = _REF.match(ref)
    if m is not None and m.group("path") and not _exists(ref):
        return m.group("path"), int(m.group("n"))
    return ref, None


def _exists(path: str) -> bool:
    from pathlib import Path

    return Path(path).exists()


def _starts_of(path: str, accelerate: bool) -> tuple[list[StartLog], list[str]]:
    stream = LogStream([path], accelerate=accelerate)
    return list(stream), stream.warnings


def _pick(starts: list[StartLog], n: int | None, ref: str, default: int) -> StartLog:
    if not starts:
        fail(f"{ref}: no vLLM start with compile lines found (VLLM_LOGGING_LEVEL=DEBUG?)")
    idx = default if n is None else n
    pos = idx - 1 if idx > 0 else len(starts) + idx
    if not 0 <= pos < len(starts) or idx == 0:
        fail(f"{ref}: there is no start {idx} (the file has {len(starts)})")
    return starts[pos]


def _compare(old_ref: str, new_ref: str, json_out: bool, accelerate: bool) -> None:
    (op, on), (np_, nn) = _parse_ref(old_ref), _parse_ref(new_ref)
    for path in {op, np_}:
        if path == "-":
            fail("--compare needs files (stdin cannot be read twice)")
    try:
        check_inputs([op, np_])
        old_starts, w1 = _starts_of(op, accelerate)
        new_starts, w2 = (old_starts, []) if np_ == op else _starts_of(np_, accelerate)
    except LogInputError as exc:
        fail(str(exc))
    except BrokenPipeError:
        raise
    except OSError as exc:
        fail(f"reading the log failed: {exc.strerror or exc}")
    same_file = op == np_ and on is None and nn is None
    if same_file and len(old_starts) < 2:
        fail(f"{op}: has {len(old_starts)} start(s); comparing it with itself needs two "
             "(or say which: FILE@1 FILE@2)")
    old = _pick(old_starts, on, old_ref, -2 if same_file else -1)
    new = _pick(new_starts, nn, new_ref, -1)
    cmp = compare_starts(old, new, f"start {old.index} of {op}", f"start {new.index} of {np_}")
    for w in dict.fromkeys([*w1, *w2]):
        warn(w)
    # One file is one stream here, so a start's index is its position in that file.
    cmd = ("vllm-cache explain --logs " + shlex.quote(f"{op}@{old.index}") + " "
           + shlex.quote(f"{np_}@{new.index}"))
    if json_out:
        payload = with_schema("log-compare", comparison_json(cmp, cmd))
        write_out(json.dumps(payload, indent=2) + "\n")
        return
    _render_compare(cmp, old, new)
    _p("factor-level comparison; the config field or source line behind each change: "
       f"{cmd}")


def _cmp_line(label: str, a: object, b: object, indent: int = 4) -> None:
    pad = " " * indent
    if a == b:
        _p(f"{pad}{label:<14} {a if a not in (None, '') else '-'}  (same)")
    else:
        _p(f"{pad}{label:<14} {a if a not in (None, '') else '-'} -> "
           f"{b if b not in (None, '') else '-'}  CHANGED")


def _key_of(path: str | None) -> str | None:
    if not path:
        return None
    m = re.search(r"torch_compile_cache/(?:torch_aot_compile/)?([0-9a-f]+)", path)
    return m.group(1)[:12] if m else path


def _render_compare(c: StartComparison, old: StartLog, new: StartLog) -> None:
    for label, st in (("old", old), ("new", new)):
        _p(f"{label}  start {st.index}  {st.where}  {st.first_time or '?'}")
    _cmp_line("model", c.old_model, c.new_model, 2)
    _cmp_line("vLLM", c.old_version, c.new_version, 2)
    for s in c.slots:
        _p(f"  {s.slot}  ({s.old_process}: {s.old_outcome} -> {s.new_process}: "
           f"{s.new_outcome})")
        for h in s.hashes:
            _cmp_line(f"{h.component} hash", (h.old or "")[:12] or None,
                      (h.new or "")[:12] or None)
            if h.component == "env" and s.env_changes:
                for e in s.env_changes:
                    _p(f"        {e.name}: {e.old if e.old is not None else '(absent)'} -> "
                       f"{e.new if e.new is not None else '(absent)'}")
        _cmp_line("backend dir", _key_of(s.old_cache_dir), _key_of(s.new_cache_dir))
        _cmp_line("AOT dir", _key_of(s.old_aot), _key_of(s.new_aot))
        if s.traced_added or s.traced_removed:
            _p(f"    traced files   +{len(s.traced_added)} -{len(s.traced_removed)}")
            for t in s.traced_added:
                _p(f"      + {t}")
            for t in s.traced_removed:
                _p(f"      - {t}")
        if not s.hashes and s.env_changes:
            _p("    env factors that differ:")
            for e in s.env_changes:
                _p(f"        {e.name}: {e.old} -> {e.new}")
        for n in s.notes:
            _p(f"    note: {n}")
    for k in c.unmatched_old:
        _p(f"  only in old: {k}")
    for k in c.unmatched_new:
        _p(f"  only in new: {k}")
    for n in c.notes:
        _p(f"  note: {n}")
