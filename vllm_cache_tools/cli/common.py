"""Shared CLI pieces: errors, root option, output helpers, progress.

Every byte the CLI prints passes :mod:`vllm_cache_tools.redaction` here: :func:`print_json`
and :func:`redact_json` hide secrets structurally (by field name, ``name/old/new`` records,
command lines), and :func:`console` / :func:`write_out` / :func:`fail` / :func:`warn` hide them
in the rendered text (``NAME=value``, ``'name': 'v'``, ``--api-key v``, URLs with userinfo).
A secret that vLLM wrote into ``cache_key_factors.json``, a log or an old manifest is
therefore never printed, whatever the command."""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any, NoReturn, TypeVar, cast

from vllm_cache_tools.redaction import dumps as redacted_dumps
from vllm_cache_tools.redaction import (
    is_secret_name,
    redact_string,
    redact_text,
    redact_value,
)

if TYPE_CHECKING:
    from collections.abc import Iterable

    from rich.console import Console  # imported where used: ls --json prints without rich

    from vllm_cache_tools.store.types import Problem

USAGE_ERROR = 2


def fail(message: str, code: int = USAGE_ERROR) -> NoReturn:
    sys.stderr.write(redact_text(f"vllm-cache: error: {message}\n"))
    raise SystemExit(code)


def refuse_terminal_stdin(what: str) -> None:
    """Where ``-`` reads stdin (log, unpack, predict --for-host): a terminal there means
    nothing is piped in, so say what to give (one line, exit 2) instead of waiting for
    typing. ``what``: the file to give instead."""
    if sys.stdin.isatty():
        fail(f"give {what}, or pipe one in (- reads stdin)")


def warn(message: str) -> None:
    sys.stderr.write(redact_text(f"vllm-cache: warning: {message}\n"))


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
    sys.stdout.write(redacted_dumps(data, separators=(",", ":")) + "\n")


def write_out(text: str) -> None:
    """Write rendered text to stdout with secrets hidden."""
    sys.stdout.write(redact_text(text))


class RedactingStdout:
    """stdout for rich: each rendered chunk (whole lines) passes :func:`redact_text`.
    ``sys.stdout`` is looked up at each write, as rich does (tests swap it)."""

    def write(self, text: str) -> int:
        sys.stdout.write(redact_text(text))
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
    from rich.console import Console

    # Piped output keeps whole lines (no 80-column wrapping) so it can be grepped.
    tty = sys.stdout.isatty()
    return Console(file=cast(IO[str], RedactingStdout()), highlight=False, soft_wrap=not tty,
                   width=None if tty else 200)


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
