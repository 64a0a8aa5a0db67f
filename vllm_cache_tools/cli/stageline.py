"""A transient stage line on a terminal's stderr (``⠋ vLLM building its config  4.2 s``) for
commands that wait on something slow: only when stderr is a terminal and not in CI, erased
when the work ends, so piped output, logs and ``--json`` never see it."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Mapping
from types import TracebackType
from typing import TextIO

from vllm_cache_tools.safetext import escape_controls

FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
ASCII_FRAMES = "|/-\\"
CI_VARS = ("CI", "GITHUB_ACTIONS", "GITLAB_CI", "BUILDKITE", "JENKINS_URL", "TF_BUILD")


def wanted(stream: TextIO, environ: Mapping[str, str]) -> bool:
    """A stage line only for a person watching: a terminal, not CI, not ``TERM=dumb``."""
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        return False
    return (tty and environ.get("TERM", "") != "dumb"
            and not any(environ.get(v, "").strip().lower() not in ("", "0", "false")
                        for v in CI_VARS))


class StageLine:
    """``with StageLine() as show: show("stage")`` redraws one line every ``interval`` s:
    the current stage and the seconds since the start. Callable from any thread; does nothing
    when ``enabled`` is False (default: :func:`wanted` on ``stream``)."""

    def __init__(self, prefix: str = "", stream: TextIO | None = None,
                 enabled: bool | None = None, interval: float = 0.1) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = wanted(self.stream, os.environ) if enabled is None else enabled
        self.prefix = prefix
        self.interval = interval
        self.stage = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = time.monotonic()
        encoding = getattr(self.stream, "encoding", None) or "ascii"
        try:
            FRAMES.encode(encoding)
            self.frames = FRAMES
        except (UnicodeEncodeError, LookupError):
            self.frames = ASCII_FRAMES

    def __call__(self, stage: str) -> None:
        self.stage = stage

    def __enter__(self) -> StageLine:
        self._t0 = time.monotonic()
        if self.enabled:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._write("\r\x1b[2K")  # erase: nothing of it stays on the screen

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            if self.stage:
                secs = time.monotonic() - self._t0
                frame = self.frames[i % len(self.frames)]
                line = escape_controls(f"{frame} {self.prefix}{self.stage}  {secs:.1f} s")
                # One screen line, or the erase at the end would leave the wrapped part.
                self._write("\r\x1b[2K" + line[:max(10, self._width() - 1)])
                i += 1
            self._stop.wait(self.interval)

    def _width(self) -> int:
        try:
            columns = os.get_terminal_size(self.stream.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
        return columns or 80  # 0: a terminal that never said its size

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            pass  # a closed terminal must not fail the command


__all__ = ["StageLine", "wanted"]
