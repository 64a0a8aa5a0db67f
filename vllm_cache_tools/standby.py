"""The probe standby: after a predict, a probe process that has already imported vLLM waits
(``VLLM_CACHE_TOOLS_PROBE_STANDBY`` seconds, default 300; ``0`` turns it off) on a private Unix
socket for the next predict in the same interpreter, environment, working directory and
machine — any arguments. It answers one request and leaves; the predict it served starts the
next one. Like sccache's server: one idle process per environment, gone when idle.

Why it is as exact as a fresh probe: it imports only what a fresh probe imports before it
parses the arguments (``STANDBY_IMPORTS`` in the probe) and serves one request per process,
so no state carries from one request to the next. Why it is never stale: it notes every
file's stat when it imports it; the answer's dependencies carry those, and the caller
re-checks them (:func:`vllm_cache_tools.probememo.stale_dependency`) and runs a fresh probe
instead when any file changed since.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import socket
import stat
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

STANDBY_VAR = "VLLM_CACHE_TOOLS_PROBE_STANDBY"
IDLE_S = 300.0
MAX_IDLE_S = 86400.0


def idle_seconds(environ: Mapping[str, str]) -> float | None:
    """How long a standby waits (None: no standby)."""
    raw = environ.get(STANDBY_VAR, "").strip().lower()
    if raw in ("0", "off", "false", "no"):
        return None
    try:
        value = float(raw) if raw else IDLE_S
    except ValueError:
        return IDLE_S
    if not math.isfinite(value):
        return MAX_IDLE_S if value > 0 else None
    return min(value, MAX_IDLE_S) if value > 0 else None


SUN_PATH_MAX = 100
"""Unix socket paths must fit ``sockaddr_un.sun_path`` (108 bytes on Linux, 104 on macOS)."""


def _private(d: Path) -> bool:
    with contextlib.suppress(OSError):
        d.mkdir(mode=0o700, exist_ok=True)
        st = d.lstat()
        return (stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()
                and not st.st_mode & 0o077)
    return False


def runtime_dir(name_len: int = 0) -> Path | None:
    """A folder only this user can enter, where a socket name of ``name_len`` bytes fits:
    ``$XDG_RUNTIME_DIR/vllm-cache-tools``, else ``<tmp>/vllm-cache-tools-<uid>``, else
    ``/tmp/vllm-cache-tools-<uid>``; None when none is (or can be made) private."""
    candidates = []
    if os.environ.get("XDG_RUNTIME_DIR"):
        candidates.append(Path(os.environ["XDG_RUNTIME_DIR"]) / "vllm-cache-tools")
    candidates += [Path(tempfile.gettempdir()) / f"vllm-cache-tools-{os.getuid()}",
                   Path("/tmp") / f"vllm-cache-tools-{os.getuid()}"]
    for d in candidates:
        if len(os.fsencode(d)) + 1 + name_len <= SUN_PATH_MAX and _private(d):
            return d
    return None


def socket_path(key: str) -> Path | None:
    name = f"probe-{key[:32]}.sock"
    d = runtime_dir(len(name))
    return None if d is None else d / name


def ask(path: Path, request: Mapping[str, Any], timeout: float = 900.0
        ) -> dict[str, Any] | None:
    """The standby's answer (with its ``deps``), or None when none is listening or it
    failed: the caller then runs a fresh probe."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(2.0)
        s.connect(str(path))
        s.settimeout(timeout)
        s.sendall(json.dumps(dict(request)).encode())
        s.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := s.recv(1 << 20):
            chunks.append(chunk)
    except OSError:
        return None
    finally:
        s.close()
    text = b"".join(chunks).decode("utf-8", "replace")
    line = next((ln for ln in text.splitlines() if ln.startswith("VCT_PROBE ")), None)
    if line is None:
        return None
    try:
        data = json.loads(line.split(" ", 1)[1])
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def alive(path: Path) -> bool:
    """A standby listens at ``path`` (a connection without a request is ignored by it)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(1.0)
        s.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        s.close()


def start(path: Path, python: str, probe: Path, env: Mapping[str, str],
          idle_s: float) -> bool:
    """Start a standby at ``path`` unless one listens there (the standby itself replaces a
    socket file nobody listens on, under a lock). Detached, silent, in its own session."""
    if alive(path):
        return False
    try:
        subprocess.Popen([python, str(probe), "--standby", str(path), str(idle_s)],
                         env=dict(env), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)
    except OSError:
        return False
    return True


__all__ = ["IDLE_S", "STANDBY_VAR", "alive", "ask", "idle_seconds", "runtime_dir",
           "socket_path", "start"]
