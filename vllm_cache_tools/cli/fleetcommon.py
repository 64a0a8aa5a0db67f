"""Pieces the fleet verbs share (pack, unpack, push, pull, warm, ls URL, prune-remote): their
typer options, and (re-exported from :mod:`.fleetout`, which needs no typer) one place that
turns fleet errors into one-line messages with their exit status, byte progress bars, the
check's rendering, and the vLLM arguments after ``--``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from vllm_cache_tools.cli.fleetout import (
    byte_bar,
    check_usage,
    entries_line,
    footprint_line,
    out,
    passthrough,
    refuse,
    render_check,
    render_placements,
    run,
)

# ls's --root, word for word: importing cli.ls (its scan, index and render modules) would
# cost pull --if-hit and unpack --check, a pod's init step, a tenth of a second.
RootOpt = Annotated[Path | None, typer.Option(
    "--root", help="vLLM cache root (default: $VLLM_CACHE_ROOT, else $XDG_CACHE_HOME/vllm, "
    "else ~/.cache/vllm); its torch_compile_cache folder is accepted too.",
    show_default=False, readable=False, resolve_path=False)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]
PythonOpt = Annotated[str | None, typer.Option(
    "--python", help="Interpreter of the environment that runs vLLM here (default: this "
    "one): the checks and the hit prediction run there.")]
UsageOpt = Annotated[str, typer.Option(
    "--usage", help="serve (vllm serve defaults) or llm (offline LLM class defaults).")]
JobsOpt = Annotated[int, typer.Option("--jobs", "-j", help="Parallel transfers.", min=1,
                                      max=256)]
StorageOpt = Annotated[list[str] | None, typer.Option(
    "--storage-option", "-o", help="fsspec storage option KEY=VALUE (repeatable), e.g. "
    "-o anon=true; credentials are better left to AWS_* variables or ~/.aws. oci://: "
    "-o plain_http=true reaches a registry that is not on loopback over plain HTTP "
    "(credentials then travel in clear).")]


__all__ = ["JobsOpt", "JsonOpt", "PythonOpt", "RootOpt", "StorageOpt", "UsageOpt", "byte_bar",
           "check_usage", "entries_line", "footprint_line", "out", "passthrough", "refuse",
           "render_check", "render_placements", "run"]
