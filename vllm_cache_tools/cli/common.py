"""Shared CLI pieces: errors, root option, output helpers, progress."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any, NoReturn

from rich.console import Console

from vllm_cache_tools.query import format_size

USAGE_ERROR = 2


def fail(message: str, code: int = USAGE_ERROR) -> NoReturn:
    sys.stderr.write(f"vllm-cache: error: {message}\n")
    raise SystemExit(code)


def warn(message: str) -> None:
    sys.stderr.write(f"vllm-cache: warning: {message}\n")


def print_json(data: Any) -> None:
    # Compact on purpose: the C encoder is ~5x faster than indent=; pipe to `jq` to read.
    sys.stdout.write(json.dumps(data, separators=(",", ":")) + "\n")


def console() -> Console:
    # Piped output keeps whole lines (no 80-column wrapping) so it can be grepped.
    tty = sys.stdout.isatty()
    return Console(highlight=False, soft_wrap=not tty, width=None if tty else 200)


def human_size(n: int | None) -> str:
    return "-" if n is None else format_size(n)


def human_age(t: float | None, now: float | None = None) -> str:
    if t is None:
        return "-"
    secs = max(0.0, (time.time() if now is None else now) - t)
    for unit, n in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= n:
            return f"{secs / n:.0f}{unit} ago"
    return f"{secs:.0f}s ago"


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
