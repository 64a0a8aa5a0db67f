"""``warm``: fill a cache root for given vLLM arguments without weights and without serving
(:mod:`.warm_child` runs in the user's vLLM environment with ``--load-format dummy``), then
report what vLLM did, as its own log says it (:mod:`vllm_cache_tools.read.logs`): each
compiled function loaded from the cache or compiled, with its entry and time, and the entries
it wrote. An entry whose files changed while vLLM only loaded it (the recorder adds a manifest
beside it) was not written by vLLM. For CI and image builds: warm -> pack -> push."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TextIO

from vllm_cache_tools.errors import VctError
from vllm_cache_tools.fleet.errors import FleetError
from vllm_cache_tools.layout import AOT_DIRNAME, COMPILE_CACHE_DIRNAME
from vllm_cache_tools.read.logs import parse_lines
from vllm_cache_tools.safeio import NamedOutput
from vllm_cache_tools.store.locate import CacheRoot, resolve_root
from vllm_cache_tools.store.scan import RootError, scan
from vllm_cache_tools.store.types import Cause, Entry

CHILD = Path(__file__).resolve().parent / "warm_child.py"
RESULT = "VLLM_CACHE_TOOLS_WARM "


@dataclass(frozen=True)
class WarmedFunction:
    """One compiled function (``backbone``, a draft head...) in one vLLM process, as vLLM's
    log tells it."""

    process: str
    tag: str | None
    outcome: str
    """``loaded`` (nothing compiled), ``compiled``, ``load-failed`` (the artifact was there
    but did not load: compiled again and rewritten), ``partial`` (some graphs loaded, some
    compiled), ``disabled`` (the cache is off) or ``unknown``."""
    aot_key: str | None
    backend_key: str | None
    seconds: float | None
    """Compile time (vLLM's "torch.compile took", else its graph timings) or load time."""
    detail: str = ""


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
    """From vLLM's log: ``loaded`` (every function loaded from the cache: nothing compiled),
    ``compiled`` (at least one compiled), ``disabled`` or ``unknown`` (the log names no
    compiled function: eager mode, or a log without vLLM's lines)."""
    seconds: float
    engine_seconds: float | None
    log: Path | None
    functions: tuple[WarmedFunction, ...] = ()
    compile_seconds: float | None = None
    """vLLM's "init engine ... (compilation: N s)"."""
    causes: tuple[Cause, ...] = ()
    """Why vLLM compiled although the root held entries: the entry it wrote against the
    closest one it did not reuse (:mod:`vllm_cache_tools.analyze.miss_causes`)."""
    pack_ready: tuple[str, ...] = ()
    """Keys of the entries (those written and the other tree's entries of the same starts)
    whose records, file digests and link proofs are now in the pack memo
    (:func:`prepare_pack`): a pack of them reads no pickle and hashes no file."""
    prepare_seconds: float | None = None
    """What :func:`prepare_pack` took (``None``: not run)."""

    @property
    def compiled(self) -> tuple[WarmedFunction, ...]:
        return tuple(f for f in self.functions if f.outcome not in ("loaded", "disabled"))


_OUTCOME = {"hit": "loaded", "miss": "compiled", "load-failed": "load-failed",
            "partial": "partial", "disabled": "disabled", "unknown": "unknown"}


def _key_in(path: str | None, aot: bool) -> str | None:
    """The entry key in a path vLLM logged (``.../torch_aot_compile/<key>/rank_0_0/model``,
    ``.../torch_compile_cache/<key>/rank_0_0/backbone``)."""
    if not path:
        return None
    parts = Path(path).parts
    for i, part in enumerate(parts[:-1]):
        if part == (AOT_DIRNAME if aot else COMPILE_CACHE_DIRNAME):
            key = parts[i + 1]
            return None if key == AOT_DIRNAME else key
    return None


def read_warm_log(lines: Iterable[bytes | str], source: str
                  ) -> tuple[tuple[WarmedFunction, ...], float | None]:
    """What vLLM did, per compiled function, from its log of one start (the last start the
    log holds); and the engine's compilation seconds."""
    starts = parse_lines(lines, source)
    if not starts:
        return (), None
    start = starts[-1]
    out = []
    for proc, f in start.functions:
        outcome = _OUTCOME.get(f.outcome, f.outcome)
        times = [r.seconds for r in f.ranges if r.seconds is not None]
        seconds = f.total_s if f.total_s is not None else (sum(times) if times else None)
        detail = ""
        if f.load_failure is not None:
            detail = f"load failed: {f.load_failure.reason}"
        out.append(WarmedFunction(
            proc.label, f.tag, outcome,
            _key_in(f.aot_loaded or f.aot_saved or (f.load_failure.path if f.load_failure
                                                     else None), aot=True),
            _key_in(f.cache_dir or (f.factors.dir if f.factors else None), aot=False),
            seconds, detail))
    inits = [e.compilation_s for e in start.engine_inits if e.compilation_s is not None]
    return tuple(out), (max(inits) if inits else None)


def _overall(functions: Sequence[WarmedFunction]) -> str:
    kinds = {f.outcome for f in functions}
    if not kinds or kinds == {"unknown"}:
        return "unknown"
    if kinds == {"disabled"}:
        return "disabled"
    if kinds <= {"loaded", "disabled"}:
        return "loaded"
    return "compiled"


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
         log: str | os.PathLike[str] | None = None, force: bool = False,
         prepare: bool = True) -> WarmResult:
    """Start vLLM's engine for ``vllm_args`` with dummy weights in ``python``'s environment
    (``env``: the environment vLLM would run in; ``VLLM_CACHE_ROOT`` is set to ``root``),
    until it has compiled, then stop it; returns what vLLM's log says it loaded or compiled
    and the entries it wrote. vLLM's output goes to ``log``, else to this process's stderr
    (it is read either way). ``log``: a new file (:class:`~vllm_cache_tools.safeio.NamedOutput`,
    not atomic: it can be followed while vLLM runs); an existing name is refused unless
    ``force``, then replaced, never written through. ``prepare``: then
    :func:`prepare_pack` the entries written."""
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
        # Without --log, vLLM's output is kept in a temporary file as it is shown: warm
        # reports what vLLM's log says it did. A --log file is a NamedOutput (never written
        # through a planted link), read back through our own fd.
        named = NamedOutput(log_path, force=force, atomic=False) if log_path else None
        log_file: IO[bytes] = (named.file() if named is not None
                               else tempfile.TemporaryFile(prefix="vllm-cache-warm-"))  # noqa: SIM115
    except OSError as exc:
        raise FleetError(f"--log {log_path}: cannot write it: {exc.strerror or exc}") from None
    try:
        with log_file:
            returncode = _run_teed(cmd, full_env, log_file, None if log_path else sys.stderr,
                                   timeout, exe)
            log_file.seek(0)
            functions, compile_s, engine_s, tail, result_seen, no_vllm = _read_back(
                log_file, str(log_path or "vLLM's output"))
    finally:
        if named is not None:
            named.commit()
    if returncode != 0 or not result_seen:
        if no_vllm:
            raise FleetError(f"vLLM is not installed for {exe} (--python)")
        raise FleetError(f"vLLM exited with status {returncode} before it had compiled"
                         + (f": {tail[-400:]}" if tail else ""))
    after_info = scan(croot.vllm_root, check_in_use=False, use_index=False)
    saved = {k for f in functions if f.outcome != "loaded"
             for k in (("aot", f.aot_key), ("backend", f.backend_key)) if k[1]}
    out_entries = []
    for e in after_info.entries:
        k = (e.layout, e.key)
        new = k not in before
        # A loaded entry's files change too (the recorder writes its manifest beside it):
        # only what vLLM compiled counts as written.
        if new or (before[k] != e.modified and (k in saved or not functions)):
            out_entries.append(WarmedEntry(e.key, e.layout, e.state, str(e.path), new))
    outcome = _overall(functions)
    causes = (_why_compiled(after_info.entries, before, out_entries)
              if outcome == "compiled" and before else ())
    t1 = time.perf_counter()
    ready = prepare_pack(croot, out_entries) if prepare else ()
    return WarmResult(croot.vllm_root, tuple(sorted(out_entries, key=lambda w: (w.layout,
                                                                                 w.key))),
                      outcome, time.perf_counter() - t0, engine_s, log_path,
                      functions, compile_s, causes, ready,
                      time.perf_counter() - t1 if prepare else None)


def prepare_pack(croot: CacheRoot, written: Sequence[WarmedEntry]) -> tuple[str, ...]:
    """Do now what the next pack or push would do first for the entries vLLM wrote (warm ->
    pack -> push is CI's order): read and prove them, hash their files, and keep all of it
    in the pack memo (:mod:`.pack_memo`, our own cache dir: nothing is written in vLLM's
    root). A pack whose entries are unchanged since answers from the memo (100 starts on 2
    cores: 0.92 s instead of 1.90 s, benchmarks/pack_after_warm.py). Returns the keys it
    holds (the written entries and the other tree's entries of the same starts); ``()``
    where nothing was packable or the selection refused (a pack reads them then, and says
    why)."""
    from vllm_cache_tools.fleet.link_proof import PACKABLE
    from vllm_cache_tools.fleet.selection import select

    paths = [w.path for w in written if w.state in PACKABLE]
    if not paths:
        return ()
    try:
        sel = select(croot, paths)
    except (VctError, OSError):  # best effort: warm has done its job, the pack reads them
        return ()
    return tuple(r.key for r in sel.records)


def _why_compiled(entries: Sequence[Entry], before: Mapping[tuple[str, str], float | None],
                  written: Sequence[WarmedEntry]) -> tuple[Cause, ...]:
    """The cause engine, with the entry vLLM wrote (backend first: it stores every key part)
    as this start and the entries that were there before as the ones it could have reused."""
    from vllm_cache_tools.analyze.miss_causes import (
        key_parts_of_entry,
        miss_causes,
        neighbour_of_entry,
    )
    from vllm_cache_tools.store.entries import read_entry

    mine = {(w.layout, w.key) for w in written}
    new = sorted((e for e in entries if (e.layout, e.key) in mine),
                 key=lambda e: e.layout != "backend")
    if not new:
        return ()
    now = read_entry(new[0].path)
    olds = [read_entry(e.path) for e in entries if (e.layout, e.key) in before
            and (e.layout, e.key) not in mine and e.layout == now.layout]
    olds = olds or [read_entry(e.path) for e in entries if (e.layout, e.key) in before
                    and (e.layout, e.key) not in mine]
    if not olds:  # it rewrote the entries that were there (a load failure): their details say
        return ()
    return tuple(miss_causes([neighbour_of_entry(e) for e in olds], key_parts_of_entry(now),
                             wanted=now.key))


def _run_teed(cmd: Sequence[str], env: Mapping[str, str], log: IO[bytes],
              show: TextIO | None, timeout: float | None, exe: str) -> int:
    """Run vLLM, its output into ``log`` (and onto ``show``, a person's stderr, as it
    comes); its exit status."""
    try:
        proc = subprocess.Popen(cmd, env=dict(env), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    except OSError as exc:
        raise FleetError(f"cannot run {exe}: {exc.strerror or exc}") from None
    pipe = proc.stdout
    assert isinstance(pipe, io.BufferedReader)

    def copy() -> None:
        for chunk in iter(lambda: pipe.read1(1 << 16), b""):
            log.write(chunk)
            if show is not None:
                show.buffer.write(chunk)
                show.flush()

    reader = threading.Thread(target=copy, daemon=True)
    reader.start()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        reader.join(10)
        raise FleetError(f"vLLM did not finish compiling within {timeout:.0f} s") from None
    reader.join()
    log.flush()
    return proc.returncode


def _read_back(log: IO[bytes], source: str
               ) -> tuple[tuple[WarmedFunction, ...], float | None, float | None, str, bool,
                          bool]:
    """(functions, compilation seconds, engine seconds, last lines, whether the child's
    result line is there, whether vLLM is missing) from vLLM's output."""
    engine_s = None
    tail: list[str] = []
    seen = no_vllm = False

    def lines() -> Iterator[bytes]:
        nonlocal engine_s, seen, no_vllm
        for raw in log:
            text = raw.decode(errors="replace")
            if RESULT in text:
                seen = True
                with contextlib.suppress(ValueError, AttributeError):
                    engine_s = json.JSONDecoder().raw_decode(
                        text.split(RESULT, 1)[1])[0].get("engine_s")
            no_vllm = no_vllm or any(f"No module named '{m}'" in text for m in ("vllm", "torch"))
            tail.append(text.strip())
            del tail[:-3]
            yield raw

    functions, compile_s = read_warm_log(lines(), source)
    return functions, compile_s, engine_s, " | ".join(tail), seen, no_vllm


__all__ = ["WarmResult", "WarmedEntry", "WarmedFunction", "read_warm_log", "warm"]
