"""``warm``: fill a cache root for given vLLM arguments without weights and without serving
(:mod:`.warm_child` runs in the user's vLLM environment with ``--load-format dummy``), then
report which entries appeared or changed. For CI and image builds: warm -> pack -> push."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from vllm_cache_tools.fleet.errors import FleetError
from vllm_cache_tools.safeio import NamedOutput
from vllm_cache_tools.store.locate import resolve_root
from vllm_cache_tools.store.scan import RootError, scan

CHILD = Path(__file__).resolve().parent / "warm_child.py"
RESULT = "VLLM_CACHE_TOOLS_WARM "
LOADED = "Directly load AOT compilation"
MAX_LOG_READ = 64 * 1024 * 1024
"""The end of vLLM's log read back for its result line (a DEBUG start writes ~5 MB)."""
COMPILED = ("saved AOT compiled function", "Compiling a graph", "Computation graph saved")


@dataclass(frozen=True)
class WarmedEntry:
    key: str
    layout: str
    state: str
    path: str
    new: bool
    """False: it existed and changed (rewritten after a load failure)."""


@dataclass(frozen=True)
class WarmResult:
    root: Path
    entries: tuple[WarmedEntry, ...]
    outcome: str
    """``compiled`` (new entries), ``loaded`` (the cache already hit: nothing to do) or
    ``unknown``."""
    seconds: float
    engine_seconds: float | None
    log: Path | None


def _snapshot(root: Path) -> dict[tuple[str, str], float | None]:
    if not root.is_dir():
        return {}
    try:
        info = scan(root, check_in_use=False, use_index=False)
    except RootError:
        return {}
    return {(e.layout, e.key): e.modified for e in info.entries}


def warm(vllm_args: Sequence[str], *, root: str | os.PathLike[str] | None = None,
         python: str | None = None, usage: str = "serve",
         env: Mapping[str, str] | None = None, timeout: float | None = None,
         log: str | os.PathLike[str] | None = None, force: bool = False) -> WarmResult:
    """Start vLLM's engine for ``vllm_args`` with dummy weights in ``python``'s environment
    (``env``: the environment vLLM would run in; ``VLLM_CACHE_ROOT`` is set to ``root``),
    until it has compiled, then stop it; returns the entries written. ``log``: a new file
    for vLLM's output (:class:`~vllm_cache_tools.safeio.NamedOutput`, not atomic: it can be
    followed while vLLM runs); an existing name is refused unless ``force``, then replaced,
    never written through."""
    if not vllm_args:
        raise FleetError("give the vLLM arguments after --, e.g. vllm-cache warm -- MODEL "
                         "--max-model-len 4096")
    if log is not None and os.fspath(log) == "-":
        # Not stdout: that is the report's (one JSON document with --json), and warm reads
        # the log back for vLLM's result line.
        raise FleetError("--log -: vLLM's output goes to stderr without --log; give --log "
                         "a file to keep it")
    t0 = time.perf_counter()
    full_env = dict(os.environ if env is None else env)
    croot = resolve_root(root, full_env)
    croot.vllm_root.mkdir(parents=True, exist_ok=True)
    full_env["VLLM_CACHE_ROOT"] = str(croot.vllm_root)
    before = _snapshot(croot.vllm_root)
    exe = python or sys.executable
    log_path = Path(log) if log is not None else None
    # Given as -c, not by path: a script's folder goes first on sys.path, and this package's
    # module names would shadow the standard library's in vLLM's process.
    cmd = [exe, "-c", CHILD.read_text(), json.dumps({"args": list(vllm_args), "usage": usage})]
    try:
        log_file = (NamedOutput(log_path, force=force, atomic=False)
                    if log_path else None)
    except OSError as exc:
        raise FleetError(f"--log {log_path}: cannot write it: {exc.strerror or exc}") from None
    text = ""
    try:
        proc = subprocess.run(cmd, env=full_env, stderr=subprocess.STDOUT,
                              stdout=log_file.fd if log_file else sys.stderr.fileno(),
                              timeout=timeout, stdin=subprocess.DEVNULL)
        if log_file is not None:  # read back through our fd, not by its name
            text = log_file.read_back(MAX_LOG_READ).decode(errors="replace")
    except subprocess.TimeoutExpired:
        raise FleetError(f"vLLM did not finish compiling within {timeout:.0f} s") from None
    except OSError as exc:
        raise FleetError(f"cannot run {exe}: {exc.strerror or exc}") from None
    finally:
        if log_file is not None:
            log_file.commit()
    if proc.returncode != 0 or (log_path and RESULT not in text):
        tail = " | ".join(line.strip() for line in text.splitlines()[-3:]) if text else ""
        if "No module named 'vllm'" in text:
            raise FleetError(f"vLLM is not installed for {exe} (--python)")
        raise FleetError(f"vLLM exited with status {proc.returncode} before it had compiled"
                         + (f": {tail[-400:]}" if tail else ""))
    engine_s = None
    for line in text.splitlines():
        if line.startswith(RESULT):
            engine_s = json.loads(line[len(RESULT):]).get("engine_s")
    after_info = scan(croot.vllm_root, check_in_use=False, use_index=False)
    out_entries = []
    for e in after_info.entries:
        k = (e.layout, e.key)
        if k not in before or before[k] != e.modified:
            out_entries.append(WarmedEntry(e.key, e.layout, e.state, str(e.path),
                                           k not in before))
    outcome = ("compiled" if out_entries else "loaded" if LOADED in text or not text
               else "unknown")
    return WarmResult(croot.vllm_root, tuple(sorted(out_entries, key=lambda w: (w.layout,
                                                                                 w.key))),
                      outcome, time.perf_counter() - t0, engine_s, log_path)


__all__ = ["WarmResult", "WarmedEntry", "warm"]
