"""``vllm-cache log FILE...``: what vLLM's own log says about its compile cache, per start."""

from __future__ import annotations

import json
import pickle
import shlex
import tempfile
from collections.abc import Callable, Iterator
from typing import Annotated

import typer

from vllm_cache_tools.analyze.log_summary import (
    SavingsIndex,
    StartSummary,
    Summarizer,
    compare_starts,
)
from vllm_cache_tools.cli.common import fail, refuse_terminal_stdin, warn, write_out
from vllm_cache_tools.cli.log_render import render_compare, render_summary, render_traced, say
from vllm_cache_tools.read.logs import LogInputError, LogStream, StartLog, check_inputs
from vllm_cache_tools.read.logs.refs import parse_ref, read_pair
from vllm_cache_tools.views.logs import comparison_json, start_json, summary_json, traced_json
from vllm_cache_tools.views.payloads import SCHEMAS, log_json, with_schema

SCHEMA = SCHEMAS["log"]
def log(
    files: Annotated[list[str] | None, typer.Argument(
        metavar="FILE", help="vLLM log files (plain, rotated .1/.2, gzip, zstd); - or none for "
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
        refuse_terminal_stdin("one or more vLLM log files")
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


def _summary_text(stream: LogStream, names: list[str]) -> None:
    shown = 0
    for s in _summaries(stream):
        if shown:
            say("")
        else:
            for n in stream.notes:  # known once the first start is out
                say(f"note: {n}\n")
        render_summary(s)
        shown += 1
    if not shown:
        say(f"No vLLM start found in {', '.join(names)}. vLLM logs most compile-cache lines at "
            "DEBUG level: start it with VLLM_LOGGING_LEVEL=DEBUG.")


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
    render_traced(stream)


# --------------------------------------------------------------------------------------------
# Compare


def _compare(old_ref: str, new_ref: str, json_out: bool, accelerate: bool) -> None:
    op, np_ = parse_ref(old_ref)[0], parse_ref(new_ref)[0]
    try:
        old, new, warnings = read_pair(old_ref, new_ref, accelerate)
    except LogInputError as exc:
        fail(str(exc))
    except BrokenPipeError:
        raise
    except OSError as exc:
        fail(f"reading the log failed: {exc.strerror or exc}")
    cmp = compare_starts(old, new, f"start {old.index} of {op}", f"start {new.index} of {np_}")
    for w in warnings:
        warn(w)
    # One file is one stream here, so a start's index is its position in that file.
    cmd = ("vllm-cache explain --logs " + shlex.quote(f"{op}@{old.index}") + " "
           + shlex.quote(f"{np_}@{new.index}"))
    if json_out:
        payload = with_schema("log-compare", comparison_json(cmp, cmd))
        write_out(json.dumps(payload, indent=2) + "\n")
        return
    render_compare(cmp, old, new)
    say("factor-level comparison; the config field or source line behind each change: "
        f"{cmd}")
