"""Pieces the fleet verbs share (pack, unpack, push, pull, warm, ls URL, prune-remote): their
typer options, and (re-exported from :mod:`.fleetout`, which needs no typer) one place that
turns fleet errors into one-line messages with their exit status, byte progress bars, the
check's rendering, and the vLLM arguments after ``--``. The options themselves are in
:mod:`.options` (re-exported here), which imports nothing of the fleet."""

from __future__ import annotations

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
    render_signature,
    run,
)
from vllm_cache_tools.cli.options import (
    JobsOpt,
    JsonOpt,
    PythonOpt,
    RequireSigOpt,
    RootOpt,
    SignOpt,
    StorageOpt,
    TrustOpt,
    UsageOpt,
)

__all__ = ["JobsOpt", "JsonOpt", "PythonOpt", "RequireSigOpt", "RootOpt", "SignOpt",
           "StorageOpt", "TrustOpt", "UsageOpt", "byte_bar",
           "check_usage", "entries_line", "footprint_line", "out", "passthrough", "refuse",
           "render_check", "render_placements", "render_signature", "run"]
