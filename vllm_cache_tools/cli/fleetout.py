"""What the fleet verbs print and how they fail, free of typer (``pull``'s plain command lines
run without it: :mod:`vllm_cache_tools.cli.pull_run`): one place that turns fleet errors into
one-line messages with their exit status, byte progress bars on a terminal's stderr, the
check's rendering, and the vLLM arguments after ``--``."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NoReturn, TypeVar

from vllm_cache_tools.cli.common import fail, write_out
from vllm_cache_tools.cli.stageline import wanted
from vllm_cache_tools.fleet.records import Footprint, footprint
from vllm_cache_tools.units import human_size

T = TypeVar("T")


def run(fn: Callable[[], T]) -> T:
    """Call ``fn``; a fleet error becomes its one-line message and exit status."""
    from vllm_cache_tools.fleet.errors import FleetError

    try:
        return fn()
    except FleetError as exc:
        fail(str(exc), exc.exit_code)


def passthrough(ctx_args: Sequence[str]) -> tuple[list[str], list[str]]:
    """(positionals before ``--``, vLLM arguments after it) of a verb whose extra arguments
    arrive in ``ctx.args`` (click drops the ``--`` itself; the real argv still has it)."""
    args = list(ctx_args)
    if "--" not in sys.argv:
        return args, []
    n = len(sys.argv) - sys.argv.index("--") - 1
    return (args[:len(args) - n], args[len(args) - n:]) if n else (args, [])


def check_usage(usage: str) -> None:
    if usage not in ("serve", "llm"):
        fail("--usage must be serve or llm")


@contextmanager
def byte_bar(label: str, enabled: bool) -> Iterator[Callable[[int, int], None] | None]:
    """A transient bytes progress bar on stderr (a terminal, not CI, not --json)."""
    if not (enabled and wanted(sys.stderr, __import__("os").environ)):
        yield None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    # Refreshed by the updates, not by a thread of its own: a thread running stops unpack and
    # the readers from forking their workers (fleet/frame_read.py).
    bar = Progress(TextColumn(label), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                   TimeRemainingColumn(), console=Console(stderr=True), transient=True,
                   auto_refresh=False)
    task = bar.add_task(label, total=None)
    shown = [0.0]

    def update(done: int, total: int) -> None:
        bar.update(task, completed=done, total=total or None)
        now = time.monotonic()
        if now - shown[0] >= 0.1 or (total and done >= total):
            shown[0] = now
            bar.refresh()

    with bar:
        yield update


def render_check(check: Any) -> str:
    from vllm_cache_tools.analyze.explain import show_value
    from vllm_cache_tools.cli.render import key_column

    lines = [f"checks ({check.environment}):"] if check.environment else ["checks:"]
    keys, w = key_column(f.key for f in check.findings)
    for f in check.findings:
        lines.append(f"  {f.verdict:<7} {f.check:<10} {keys.get(f.key or '', '-'):<{w}}  "
                     f"{f.detail}")
    if check.causes:
        lines.append("causes")
        for c in check.causes:
            lines.append(f"  {c.component}: {c.item}: {show_value(c.old)} -> "
                         f"{show_value(c.new)} ({c.evidence})"
                         + (f" {c.detail}" if c.detail else ""))
    verdict = {"hit": "HIT: vLLM's next start here loads these entries",
               "miss": "MISS: vLLM's next start here would not load these entries",
               "compatible": "COMPATIBLE with this host (give the vLLM arguments after -- to "
                             "know whether the next start hits)",
               "unknown": "UNKNOWN"}.get(check.verdict, check.verdict)
    lines.append(verdict)
    return "\n".join(lines) + "\n"


def render_placements(placements: Sequence[Any]) -> str:
    from vllm_cache_tools.cli.render import key_column

    keys, w = key_column(p.key for p in placements)
    return "".join(f"{p.action:<9} {p.layout:<7} {keys.get(p.key or '', '-'):<{w}}  {p.path}"
                   + (f"  ({p.detail})" if p.detail else "") + "\n"
                   for p in placements)


def render_signature(sig: Any, provenance: Any = None) -> str:
    """The signature line (and the provenance line when the signed part has one)."""
    lines = []
    if sig is not None:
        if sig.status == "trusted":
            lines.append(f"signature: trusted, signed by {sig.signer} (key {sig.fingerprint})")
        elif sig.status == "unchecked":
            lines.append(f"signature: by key {sig.fingerprint}, not checked (no trust policy: "
                         "--trust ALLOWED_SIGNERS)")
        elif sig.status == "unsigned":
            lines.append("signature: none")
        else:
            lines.append(f"signature: {sig.reason}")
    if provenance:
        from vllm_cache_tools.fleet.provenance import provenance_line

        lines.append(f"provenance: {provenance_line(provenance)}")
    return "".join(x + "\n" for x in lines)


def footprint_line(fp: Footprint) -> str:
    """What a set of entries holds, in the words and order ``ls`` uses for entries (file
    sizes, not disk use), with the recorder snapshots that go along apart: the same numbers
    for one bundle in pack, unpack, push, pull and ls."""
    line = f"{fp.entries} entries, {human_size(fp.size_bytes)} total, {fp.files} files"
    if fp.snapshot_files:
        line += (f" (+ {fp.snapshot_files} recorder snapshot files, "
                 f"{human_size(fp.snapshot_bytes)})")
    return line


def entries_line(records: Sequence[Any], extras: Sequence[Any] = ()) -> str:
    """:func:`footprint_line` of entry records (and snapshot records)."""
    return footprint_line(footprint(records, extras))


def out(text: str) -> None:
    write_out(text)


def refuse(message: str) -> NoReturn:
    fail(message, 1)


__all__ = ["byte_bar", "check_usage", "entries_line", "footprint_line", "out", "passthrough",
           "refuse", "render_check", "render_placements", "render_signature", "run"]
