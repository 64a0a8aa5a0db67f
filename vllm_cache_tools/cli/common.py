"""Shared CLI pieces: errors, root option, output helpers, progress.

Every byte the CLI prints passes :mod:`vllm_cache_tools.redaction` here: :func:`print_json`
and :func:`redact_json` hide secrets structurally (by field name, ``name/old/new`` records,
command lines), and :func:`console` / :func:`write_out` / :func:`fail` / :func:`warn` hide them
in the rendered text (``NAME=value``, ``'name': 'v'``, ``--api-key v``, URLs with userinfo).
A secret that vLLM wrote into ``cache_key_factors.json``, a log or an old manifest is
therefore never printed, whatever the command.

The same writers escape control characters (:mod:`vllm_cache_tools.safetext`): a file name, log
line or manifest field holding ``ESC``, ``BEL`` or a bidi override is printed as ``\\x1b``,
``\\x07``, ``\\u202e``, never obeyed by the terminal. Every human output of ``cli/`` is written
here (:func:`write_out`, :func:`write_err`, :func:`write_bold`, :func:`console`, :func:`fail`,
:func:`warn`); ``tests/test_output_safety.py`` fails on a ``sys.stdout.write`` or
``sys.stderr.write`` anywhere else in ``cli/``. A table cell or a single field is passed through
:func:`shown_cell` before it is laid out (redaction must see a URL whole, before a column cuts
it; a newline in a cell is escaped too)."""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import IO, TYPE_CHECKING, Any, NoReturn, TypeVar, cast

from vllm_cache_tools.redaction import dumps as redacted_dumps
from vllm_cache_tools.redaction import (
    is_secret_name,
    redact_string,
    redact_text,
    redact_value,
)
from vllm_cache_tools.safetext import escape_controls, escape_controls_but_sgr, has_controls

if TYPE_CHECKING:
    from collections.abc import Iterable

    from rich.console import Console  # imported where used: ls --json prints without rich

    from vllm_cache_tools.store.types import Problem

USAGE_ERROR = 2
LAYOUT_CHARS = "\n\t"
"""The control characters a writer's whole text keeps: its own line breaks and tabs."""


def shown(text: str) -> str:
    """``text`` as every human output prints it: secrets hidden, control characters but
    line breaks and tabs escaped."""
    return escape_controls(redact_text(text), LAYOUT_CHARS)


def shown_cell(text: str) -> str:
    """One table cell or field as printed: secrets hidden while the value is whole, every
    control character escaped (a newline in a file name would forge a row)."""
    return escape_controls(redact_text(text))


def shown_rows(rows: Sequence[Sequence[str]]) -> list[list[str]]:
    """Every cell of ``rows`` as :func:`shown_cell` shows it; at the cost of two searches
    over the distinct cells joined when none of them holds a secret's hint or a control
    character (a table of 40k entries: 0.01 s instead of 0.2 s)."""
    distinct = {c for r in rows for c in r}
    joined = " ".join(distinct)  # no hint and no control spans a space
    if redact_text(joined) is joined and not has_controls(joined):
        return [list(r) for r in rows]
    shown = {c: shown_cell(c) for c in distinct}
    return [[shown[c] for c in r] for r in rows]


def write_out(text: str) -> None:
    """Write rendered text to stdout with secrets hidden and control characters escaped."""
    sys.stdout.write(shown(text))


def write_err(text: str, flush: bool = False) -> None:
    """:func:`write_out` for stderr (prompts, notes)."""
    sys.stderr.write(shown(text))
    if flush:
        sys.stderr.flush()


def styled() -> bool:
    """Whether stdout takes this tool's own styling: a terminal, ``NO_COLOR`` unset and
    ``TERM`` not ``dumb``."""
    return (sys.stdout.isatty() and not os.environ.get("NO_COLOR")
            and os.environ.get("TERM") != "dumb")


def write_bold(text: str) -> None:
    """:func:`write_out`, bold where :func:`styled` (the one escape sequence written here)."""
    text = shown(text)
    if styled():
        body, nl = (text[:-1], "\n") if text.endswith("\n") else (text, "")
        text = f"\x1b[1m{body}\x1b[0m{nl}"
    sys.stdout.write(text)


def write_table(title: str, lines: Sequence[str]) -> None:
    """``title``, a blank line, then a table laid out by :func:`.render.render` (header bold
    where :func:`styled`). Its cells were each passed through :func:`shown_cell` before they
    were laid out, so the lines are only escaped again here, not redacted a second time (that
    cost a table of 40k entries 0.4 s)."""
    write_out(f"{shown_cell(title)}\n\n")
    write_bold(lines[0] + "\n")
    sys.stdout.write(escape_controls("".join(line + "\n" for line in lines[1:]), LAYOUT_CHARS))


def fail(message: str, code: int = USAGE_ERROR) -> NoReturn:
    sys.stderr.write(shown(f"vllm-cache: error: {message}\n"))
    raise SystemExit(code)


def refuse_terminal_stdin(what: str) -> None:
    """Where ``-`` reads stdin (log, unpack, predict --for-host): a terminal there means
    nothing is piped in, so say what to give (one line, exit 2) instead of waiting for
    typing. ``what``: the file to give instead."""
    if sys.stdin.isatty():
        fail(f"give {what}, or pipe one in (- reads stdin)")


def warn(message: str) -> None:
    sys.stderr.write(shown(f"vllm-cache: warning: {message}\n"))


def problem_line(p: Problem) -> str:
    """A scan :class:`~vllm_cache_tools.store.types.Problem` as a warning line says it."""
    return f"{p.kind}: {p.path}: {p.detail}"


def warn_unread(root_problems: Iterable[Problem]) -> None:
    """Warn (stderr) of the parts of the root a verb could not read, in the scan's words, so
    that an empty answer is not taken for a clean one."""
    from vllm_cache_tools.store.types import UNREAD_KINDS

    for p in root_problems:
        if p.kind in UNREAD_KINDS:
            warn(problem_line(p))


def redact_json(data: Any) -> Any:
    """A ``--json`` payload with every secret hidden (see :mod:`vllm_cache_tools.redaction`)."""
    return redact_value(None, data)


R = TypeVar("R")
_NAME_FIELDS = ("item", "name", "field", "var", "variable", "flag", "env", "key")
_VALUE_FIELDS = ("old", "new", "value", "values", "default", "before", "after")


def redact_record(record: R) -> R:
    """A frozen record (an ``Explanation`` with its ``Cause``s, ...) with secrets hidden by
    the same rules as :func:`redact_json`, for text rendered from records: a ``Cause`` naming
    ``HF_TOKEN`` keeps its name and loses its values, and what is derived from them (a
    headline) is derived from the hidden ones."""
    if isinstance(record, tuple):
        return cast(R, tuple(redact_record(x) for x in record))
    if not dataclasses.is_dataclass(record) or isinstance(record, type):
        return cast(R, redact_string(record) if isinstance(record, str) else record)
    values = {f.name: getattr(record, f.name) for f in dataclasses.fields(record) if f.init}
    named = next((values[n] for n in _NAME_FIELDS
                  if isinstance(values.get(n), str) and is_secret_name(values[n])), None)
    changed = {}
    for name, v in values.items():
        if named is not None and name in _VALUE_FIELDS:
            new = redact_value(named, v)
        elif isinstance(v, (tuple, str)) or dataclasses.is_dataclass(v):
            new = redact_record(v)
        else:
            new = redact_value(name, v)
        if new is not v and new != v:
            changed[name] = new
    return dataclasses.replace(record, **changed) if changed else record


def print_json(data: Any) -> None:
    # Compact on purpose: the C encoder is ~5x faster than indent=; pipe to `jq` to read.
    write_json_text(redacted_dumps(data, separators=(",", ":")) + "\n")


def write_json_text(text: str) -> None:
    """Write JSON text made by :func:`vllm_cache_tools.redaction.dumps` (secrets hidden, and
    ``ensure_ascii``: every control and non-ASCII character is a ``\\u`` escape) as it is:
    the one stdout writer that neither redacts nor escapes again (``ls --json`` writes a
    listing in parts through it)."""
    sys.stdout.write(text)


class RedactingStdout:
    """stdout for rich: each rendered chunk (whole lines) passes :func:`redact_text` and has
    its control characters escaped but rich's own SGR styling (the strings given to
    :func:`console`'s ``print`` are escaped before rich styles them, so a sequence left here
    is rich's). ``sys.stdout`` is looked up at each write, as rich does (tests swap it)."""

    def write(self, text: str) -> int:
        sys.stdout.write(escape_controls_but_sgr(redact_text(text), LAYOUT_CHARS))
        return len(text)

    def flush(self) -> None:
        sys.stdout.flush()

    def isatty(self) -> bool:
        return sys.stdout.isatty()

    def fileno(self) -> int:
        return sys.stdout.fileno()

    @property
    def encoding(self) -> str:
        return getattr(sys.stdout, "encoding", None) or "utf-8"


def console() -> Console:
    """A rich console on stdout whose every string is escaped (:func:`shown`'s control rule)
    before rich parses or styles it, and whose output is redacted (:class:`RedactingStdout`)."""
    from rich.console import Console

    class _SafeConsole(Console):
        def render_str(self, text: str, **kwargs: Any) -> Any:
            return super().render_str(escape_controls(text, LAYOUT_CHARS), **kwargs)

    # Piped output keeps whole lines (no 80-column wrapping) so it can be grepped.
    tty = sys.stdout.isatty()
    return _SafeConsole(file=cast(IO[str], RedactingStdout()), highlight=False,
                        soft_wrap=not tty, width=None if tty else 200)


class DelayedProgress:
    """A file counter on stderr that appears only when a scan takes longer than a moment, and
    only on a terminal."""

    def __init__(self, enabled: bool, delay: float = 0.4) -> None:
        self.enabled = enabled and sys.stderr.isatty() and not os.environ.get("CI")
        self.start = time.monotonic()
        self.delay = delay
        self._progress: Any = None
        self._task: Any = None

    def tick(self, files: int) -> None:
        if not self.enabled:
            return
        if self._progress is None:
            if time.monotonic() - self.start < self.delay:
                return
            from rich.console import Console
            from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            self._progress = Progress(SpinnerColumn(), TextColumn("scanning: {task.fields[n]} "
                                      "files"), TimeElapsedColumn(),
                                      console=Console(stderr=True), transient=True)
            self._progress.start()
            self._task = self._progress.add_task("scan", n=0, total=None)
        self._progress.update(self._task, n=files)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()

    def callback(self) -> Callable[[int], None] | None:
        return self.tick if self.enabled else None
