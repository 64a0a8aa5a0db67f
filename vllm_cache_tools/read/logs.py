"""Reader for vLLM's own log output: what each start compiled, loaded, hashed and timed.

vLLM says a lot about its compile cache in its log, at INFO and (much more) at DEBUG level
(``VLLM_LOGGING_LEVEL=DEBUG``). This module turns one or more log files (plain, rotated, gzip,
or stdin) into :class:`StartLog` records: one per vLLM start, holding per process and per
compiled function the lines the compile cache is about. It streams: lines are pre-filtered
by four fixed substrings, only the survivors are decoded and matched, and each start is
yielded as soon as the next one begins, so memory stays flat on a log of any size.

Formats handled (each reconstructed from vLLM's source at that version; see tests/test_logs.py):

* the line header ``LEVEL MM-DD HH:MM:SS file.py:123] msg`` (vLLM <= 0.7), ``[file.py:123]``
  (0.8+), ``[compilation/backends.py:1104]`` (0.11+ at DEBUG level, path relative to vllm/);
* process prefixes added per output line by vLLM or Ray: ``(VllmWorkerProcess pid=..)``,
  ``(VllmWorker rank=1 pid=..)``, ``(EngineCore_DP0 pid=..)``, ``(Worker_TP0 pid=..)``,
  ``(RayWorkerWrapper pid=.., ip=..)``, with or without ANSI colour, possibly after other
  prefixes (journald, docker compose, a progress bar on the same line);
* multi-line records (``Traced files`` list, the pprint'ed ``Compile env factors (raw)`` dict):
  vLLM's ``NewLineFormatter`` repeats the whole header on every continuation line, so a
  continuation is a line whose header equals the record's. A logging setup that does not
  repeat the header loses those lists (the single-line facts are still read);
* the compile-cache messages from vLLM 0.6 to 0.33: see :data:`ANCHORS` and ``_dispatch``.

Lines that match nothing are ignored; a log cut short yields what it holds plus a warning.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import IO, Any, Literal

from vllm_cache_tools.errors import VctError
from vllm_cache_tools.read.pyrepr import parse_repr

# Every line the parser uses contains one of these (vLLM 0.6 .. 0.33, INFO and DEBUG):
# "ompil" covers compile/compiling/Compiling/compilation/torch.compile/Compile env and, in
# DEBUG logs of vLLM >= 0.11, every line from vllm/compilation/ (location "[compilation/..");
# "backends.py:" covers continuation lines and INFO lines of older versions
# ("[backends.py:370] /path/file.py", "Dynamo bytecode transform time");
# "engine (" covers "init engine (profile, ...)" and "Initializing a V1 LLM engine (v0.8.5)";
# "default args: {" the arguments a start was given ("non-default args: {...}", vLLM >= 0.9,
# logged before the engine; it costs grep -F some 5-15% more time on a serving-style log,
# "non-default args" more). Few and long enough that grep (or a bytes `in`) rejects the other
# lines quickly.
ANCHORS: tuple[bytes, ...] = (b"ompil", b"backends.py:", b"engine (", b"default args: {")

_A0, _A1, _A2, _A3 = ANCHORS
_S0, _S1, _S2, _S3 = (a.decode() for a in ANCHORS)

_OPENERS = ("Traced files (", "Compile env factors (")

MAX_LINE = 1 << 20
"""Longer lines are cut there (a line this long is never one of ours, but must not cost
memory)."""
MAX_TRACED = 100_000
MAX_FUNCTIONS = 10_000
MAX_PROCESSES = 10_000
MAX_ENV = 100_000

Outcome = Literal["hit", "miss", "partial", "load-failed", "disabled", "unknown"]
RangeAction = Literal["compile", "load"]


class LogInputError(VctError, ValueError):
    """A log input could not be opened; the message is one line meant for users."""


# --------------------------------------------------------------------------------------------
# What we read


@dataclass(frozen=True)
class Where:
    """A position in the input: file (as given) and 1-based line number."""

    source: str
    line: int | None

    def __str__(self) -> str:
        return f"{self.source}:{self.line}" if self.line is not None else self.source


@dataclass(frozen=True)
class LoggedFactors:
    """``torch.compile cache factors: env=.. cfg=.. comp=.. code=.. dir=..`` (vLLM >= 0.14,
    DEBUG): the four hashes vLLM combined into the backend cache directory name."""

    env_hash: str | None
    config_hash: str | None
    compiler_hash: str | None
    code_hash: str | None
    dir: str | None

    def as_dict(self) -> dict[str, str | None]:
        return {"env": self.env_hash, "config": self.config_hash,
                "compiler": self.compiler_hash, "code": self.code_hash}


@dataclass(frozen=True)
class RangeTiming:
    """One "Compiling a graph for X takes N s" or "Directly load the compiled graph(s) for X
    from the cache, took N s" line. ``label`` is what vLLM printed after "for": ``compile
    range (1, 128)`` (>= 0.14), ``dynamic shape`` (0.10-0.13), ``general shape`` or
    ``shape 8`` (<= 0.9)."""

    label: str
    action: RangeAction
    seconds: float | None
    where: Where


@dataclass(frozen=True)
class LoadFailure:
    """The AOT artifact existed but did not load, so vLLM compiled again (and overwrote it)."""

    path: str
    reason: str
    where: Where


@dataclass(frozen=True)
class CompiledFunction:
    """Everything logged about one compiled function (``[backbone]``, an eagle head, ...) in
    one process during one start."""

    tag: str | None
    """vLLM's log prefix tag (``backbone``...; vLLM >= ~0.30), None when not logged."""
    code_name: str | None
    code_file: str | None
    code_line: int | None
    where: Where
    first_time: str | None
    last_time: str | None
    started_compiling: bool
    traced_files: tuple[str, ...]
    cache_dir: str | None
    """Backend tree directory from "Using cache directory: .. for vLLM's torch.compile"."""
    cache_disabled: bool
    factors: LoggedFactors | None
    env_raw: dict[str, str] | None = field(hash=False, compare=True)
    """Raw env factors as pprint'ed by vLLM: variable -> Python repr text of the value."""
    env_truncated: bool
    config_hash_logged: str | None
    graph_saved: tuple[str, ...]
    aot_loaded: str | None
    aot_saved: str | None
    aot_save_error: str | None
    load_failure: LoadFailure | None
    ranges: tuple[RangeTiming, ...]
    graphs_loaded: int
    graphs_stored: int
    cached_for_later: tuple[str, ...]
    dynamo_s: float | None
    total_s: float | None
    """"torch.compile took/takes N s in total" (VLLM_COMPILE mode only)."""

    @property
    def outcome(self) -> Outcome:
        if self.cache_disabled:
            return "disabled"
        loaded = self.aot_loaded is not None or any(r.action == "load" for r in self.ranges) \
            or self.graphs_loaded > 0
        compiled = (self.aot_saved is not None or self.aot_save_error is not None
                    or any(r.action == "compile" for r in self.ranges)
                    or self.graphs_stored > 0 or bool(self.cached_for_later))
        if self.load_failure is not None:
            return "load-failed"
        if loaded and compiled:
            return "partial"
        if loaded:
            return "hit"
        if compiled:
            return "miss"
        return "unknown"

    @property
    def env_values(self) -> dict[str, Any] | None:
        """The raw env factors as Python values (``ast.literal_eval``; text kept when that
        fails)."""
        if self.env_raw is None:
            return None
        return {k: env_value(v) for k, v in self.env_raw.items()}


@dataclass(frozen=True)
class EngineInit:
    """``init engine (profile, create kv cache, warmup model) took N s (compilation: M s)``."""

    seconds: float
    compilation_s: float | None
    where: Where


@dataclass(frozen=True)
class ProcessLog:
    pid: int | None
    """None for lines without a process prefix (the main process, or old EngineCore)."""
    names: tuple[str, ...]
    """Every name this pid was printed with, in order (``VllmWorker-0``, ``Worker_TP0``)."""
    ip: str | None
    functions: tuple[CompiledFunction, ...]
    engine_init: EngineInit | None

    @property
    def name(self) -> str:
        for n in reversed(self.names):
            if _RANK_IN_NAME.search(n):
                return n
        return self.names[-1] if self.names else ""

    @property
    def label(self) -> str:
        if self.pid is None:
            return self.name or "(no process prefix)"
        return f"{self.name} pid={self.pid}" if self.name else f"pid={self.pid}"

    @property
    def rank(self) -> str | None:
        """``rank_R_D`` from the cache paths this process logged, else ``rank R`` from its
        name (``_TP1``, ``rank=1``), else None."""
        for f in self.functions:
            for p in (f.cache_dir, f.aot_saved, f.aot_loaded,
                      f.load_failure.path if f.load_failure else None,
                      f.factors.dir if f.factors else None):
                if p:
                    m = _RANK_DIR.search(p)
                    if m:
                        return m.group(0)
        for n in reversed(self.names):
            m = _RANK_IN_NAME.search(n)
            if m:
                return f"rank {m.group(1)}"
        return None


@dataclass(frozen=True)
class StartLog:
    """One vLLM start as seen in the log: from "Initializing ... engine" (or the first
    compile line) to the next start or the end of the input stream."""

    index: int
    """1-based: in log order within one log; across several logs (:class:`LogStream`), in
    time order."""
    where: Where
    last_line: int | None
    first_time: str | None
    last_time: str | None
    vllm_version: str | None
    model: str | None
    processes: tuple[ProcessLog, ...]
    warnings: tuple[str, ...]
    ends_log: bool = False
    """The input ends inside this start (no later start follows in its log)."""
    compile_mode: int | None = None
    """``compilation_config`` mode (``level`` before vLLM 0.11) from the engine config line:
    0 none (eager), 1 plain Dynamo, 2 Dynamo traced once, 3 VLLM_COMPILE; None: not logged."""
    enforce_eager: bool | None = None
    engine_config: str | None = None
    """The text after "with config: " of the engine line (``key=value, ...``)."""
    args: dict[Any, Any] | None = field(default=None, hash=False, compare=True)
    """vLLM's ``non-default args: {...}`` line (the arguments the start was given), read by
    :func:`~vllm_cache_tools.read.pyrepr.parse_repr`: literals as values, other reprs as
    :class:`~vllm_cache_tools.read.pyrepr.Opaque` text. May hold secrets (``api_key``):
    redact before showing values."""

    @property
    def functions(self) -> Iterator[tuple[ProcessLog, CompiledFunction]]:
        for p in self.processes:
            for f in p.functions:
                yield p, f

    @property
    def engine_inits(self) -> tuple[EngineInit, ...]:
        return tuple(p.engine_init for p in self.processes if p.engine_init is not None)

    @property
    def incomplete(self) -> bool:
        """The log ends inside this start before its engine said it was ready ("init engine
        ... took"): a start still running, or a log cut short."""
        return self.ends_log and not self.engine_inits

    @property
    def compiles(self) -> bool | None:
        """Whether the config asks for torch.compile (None: the log does not say)."""
        if self.enforce_eager:
            return False
        if self.compile_mode is not None:
            return self.compile_mode > 0
        if self.args is not None:
            cc = self.args.get("compilation_config")
            mode = _mode_of(cc.get("mode", cc.get("level"))) if isinstance(cc, dict) else None
            if self.args.get("enforce_eager") is True or mode == 0:
                return False
            if mode is not None:
                return True
        return None


def _mode_of(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    m = re.search(r": (\d+)>$", str(v)) if isinstance(v, str) else None
    return int(m.group(1)) if m else None


def env_value(raw: str) -> Any:
    import ast

    try:
        return ast.literal_eval(raw)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return raw


# --------------------------------------------------------------------------------------------
# Line headers

_LEVEL_RE = re.compile(r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d-\d\d \d\d:\d\d:\d\d)"
                       r"(?:[.,]\d+)? \[?([^\s\]]+?:\d+)\] ?")
_PROC_RE = re.compile(r"\((?:([^()]*?) )?pid=(\d{1,10})(?:, ip=([^()\s]+))?\)")
_ANSI_RE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
_TAG_RE = re.compile(r"\[([A-Za-z0-9_.\-]+)\] ")
_RANK_DIR = re.compile(r"rank_\d+_\d+")
_RANK_IN_NAME = re.compile(r"(?:_TP|rank=|TP)(\d+)")


@dataclass
class _Line:
    proc: tuple[str, int | None]
    """(name, pid); ("", None) when there is no process prefix."""
    ip: str | None
    ts: str
    loc: str
    header: str
    """The header text (prefix, level, time, location): equal on every line of one record."""
    msg: str


def _parse_line(text: str) -> _Line | None:
    if "\x1b" in text:
        text = _ANSI_RE.sub("", text)
    m = _LEVEL_RE.search(text)
    if m is None:
        return None
    start = m.start()
    name, pid, ip = "", None, None
    head = text[:start].rstrip()
    if head.endswith(")"):
        i = head.rfind("(")
        pm = _PROC_RE.fullmatch(head, i) if i >= 0 else None
        if pm is not None:
            name, pid, ip = pm.group(1) or "", int(pm.group(2)), pm.group(3)
            start = i
    msg = text[m.end():]
    cr = msg.find("\r")
    if cr >= 0:
        msg = msg[:cr]
    return _Line((name, pid), ip, m.group(1), m.group(2), text[start:m.end()], msg)


# --------------------------------------------------------------------------------------------
# Message patterns (one regex per message kind; dispatched on a cheap substring first)

_NUM = r"(\d+(?:\.\d+)?)"
_START_FN = re.compile(r"Start compiling function (?:<code object (\S+) at \S+, "
                       r"file \"([^\"]*)\", line (\d+)>)?")
_CACHE_DIR = re.compile(r"Using cache directory: (.+?) for vLLM's torch\.compile")
_FACTORS = re.compile(r"torch\.compile cache factors: env=(\S*) cfg=(\S*) comp=(\S*) "
                      r"code=(\S*)(?: dir=(.*))?")
_DYNAMO = re.compile(r"Dynamo bytecode transform time: " + _NUM + " s")
_COMPILING = re.compile(r"Compiling a graph for (.+?) takes " + _NUM + " s")
_DIRECT_GRAPHS = re.compile(r"Directly load the compiled graphs?(?:\(s\))? for (.+?) from the "
                            r"cache(?:, took " + _NUM + " s)?")
_LOOKUP_06 = re.compile(r"Directly lookup the graph for (.+?) from the cache")
_NTH_LOAD = re.compile(r"[Dd]irectly (?:load|lookup) the \d+-th graph")
_NTH_STORE = re.compile(r"[Ss]tore the \d+-th graph")
_CACHE_FOR_LATER = re.compile(r"Cache the graph (?:of |for )(.+?) for later use")
_GRAPH_SAVED = re.compile(r"Computation graph saved to (.+)")
_AOT_SAVED = re.compile(r"saved AOT compiled function to (.+)")
_AOT_SAVE_ERR = re.compile(r"(?:unable to save AOT compiled function to (\S+): |"
                           r"Cannot save aot compilation to path (\S+), error: )(.*)")
_AOT_LOADED = re.compile(r"Directly load AOT compilation from path (.+)")
_AOT_FAILED = re.compile(r"(?:Compiling model again due to a load failure from (.+?), reason: |"
                         r"Cannot load aot compilation from path (.+?), error: )(.*)")
_TOTAL = re.compile(r"torch\.compile (?:took|takes) " + _NUM + r" s in total")
_INIT_ENGINE = re.compile(r"init engine \(profile, create kv cache, warmup model\) took "
                          + _NUM + r" s(?:econds)?(?: \(compilation: " + _NUM + " s)?")
_ENGINE = re.compile(r"Initializing (?:a V[01] LLM|an LLM) engine \(v([^)\s]*)\) with config: "
                     r"(?:.*?\bmodel='([^']*)')?")
def _match_from(pattern: re.Pattern[str], msg: str, *prefixes: str) -> re.Match[str] | None:
    """``pattern`` (which starts with one of ``prefixes``) tried once where each prefix first
    occurs: ``search`` would retry its lazy ``(.+?) <suffix>`` from every later occurrence,
    quadratic on a hostile line (300 KB: a minute). A later occurrence cannot match where the
    first does not: the lazy group may span it."""
    for prefix in prefixes:
        i = msg.find(prefix)
        if i >= 0:
            m = pattern.match(msg, i)
            if m is not None:
                return m
    return None


_ENV_ENTRY = re.compile(r"[{ ]'([^'\\]+)': (.*)")
# compilation_config={'mode': <CompilationMode.VLLM_COMPILE: 3>, .. (0.11+),
# {"level":3,.. (0.8-0.10, JSON), {'level': 3, ..; CompilationConfig(level=3, ..
_MODE = re.compile(r"\bcompilation_config=(?:\{\s*['\"]|\w+\()(?:mode|level)['\"]?\s*[:=]\s*"
                   r"(?:<[\w.]+:\s*(\d+)>|(\d+))")
_EAGER = re.compile(r"\benforce_eager=(True|False)\b")
_ARGS = "non-default args: "


# --------------------------------------------------------------------------------------------
# Builders (mutable while reading; frozen when the start is emitted)


class _Fn:
    __slots__ = ("aot_loaded", "aot_save_error", "aot_saved", "cache_dir", "cache_disabled",
                 "cached_for_later", "code_file", "code_line", "code_name", "config_hash",
                 "dynamo_s", "env", "env_last", "env_truncated", "factors", "first_time",
                 "graph_saved", "graphs_loaded", "graphs_stored", "last_time", "load_failure",
                 "ranges", "started", "tag", "total_s", "traced", "traced_seen", "where")

    def __init__(self, where: Where, ts: str | None) -> None:
        self.where = where
        self.first_time = ts
        self.last_time = ts
        self.tag: str | None = None
        self.code_name: str | None = None
        self.code_file: str | None = None
        self.code_line: int | None = None
        self.started = False
        self.traced: list[str] = []
        self.traced_seen: set[str] = set()
        self.cache_dir: str | None = None
        self.cache_disabled = False
        self.factors: LoggedFactors | None = None
        self.env: dict[str, str] | None = None
        self.env_last: str | None = None
        self.env_truncated = False
        self.config_hash: str | None = None
        self.graph_saved: list[str] = []
        self.aot_loaded: str | None = None
        self.aot_saved: str | None = None
        self.aot_save_error: str | None = None
        self.load_failure: LoadFailure | None = None
        self.ranges: list[RangeTiming] = []
        self.graphs_loaded = 0
        self.graphs_stored = 0
        self.cached_for_later: list[str] = []
        self.dynamo_s: float | None = None
        self.total_s: float | None = None

    @property
    def done(self) -> bool:
        """Past the end of one compilation: the next "Start compiling" is another one."""
        return self.total_s is not None or self.aot_loaded is not None \
            or self.aot_saved is not None

    def freeze(self) -> CompiledFunction:
        return CompiledFunction(
            tag=self.tag, code_name=self.code_name, code_file=self.code_file,
            code_line=self.code_line, where=self.where, first_time=self.first_time,
            last_time=self.last_time, started_compiling=self.started,
            traced_files=tuple(self.traced), cache_dir=self.cache_dir,
            cache_disabled=self.cache_disabled, factors=self.factors, env_raw=self.env,
            env_truncated=self.env_truncated, config_hash_logged=self.config_hash,
            graph_saved=tuple(self.graph_saved), aot_loaded=self.aot_loaded,
            aot_saved=self.aot_saved, aot_save_error=self.aot_save_error,
            load_failure=self.load_failure, ranges=tuple(self.ranges),
            graphs_loaded=self.graphs_loaded, graphs_stored=self.graphs_stored,
            cached_for_later=tuple(self.cached_for_later), dynamo_s=self.dynamo_s,
            total_s=self.total_s)


class _Block:
    """An open multi-line record: continuation lines carry exactly this header."""

    __slots__ = ("fn", "header", "kind", "proc")

    def __init__(self, kind: str, header: str, fn: _Fn, proc: _Proc) -> None:
        self.kind = kind
        self.header = header
        self.fn = fn
        self.proc = proc


class _Proc:
    __slots__ = ("block", "engine_init", "fns", "ip", "is_engine", "names", "pid")

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        self.is_engine = False
        self.names: list[str] = []
        self.ip: str | None = None
        self.fns: list[_Fn] = []
        self.engine_init: EngineInit | None = None
        self.block: _Block | None = None

    def freeze(self) -> ProcessLog:
        return ProcessLog(self.pid, tuple(self.names), self.ip,
                          tuple(f.freeze() for f in self.fns), self.engine_init)


class _Start:
    def __init__(self, index: int, where: Where, ts: str | None) -> None:
        self.index = index
        self.where = where
        self.last_line = where.line
        self.first_time = ts
        self.last_time = ts
        self.version: str | None = None
        self.model: str | None = None
        self.compile_mode: int | None = None
        self.enforce_eager: bool | None = None
        self.engine_config: str | None = None
        self.args: dict[Any, Any] | None = None
        self.procs: dict[int | None, _Proc] = {}
        self.warnings: list[str] = []
        self.engines: set[int | None] = set()
        self.capped: set[str] = set()

    @property
    def has_content(self) -> bool:
        return any(p.fns or p.engine_init for p in self.procs.values())

    def warn_once(self, key: str, message: str) -> None:
        if key not in self.capped:
            self.capped.add(key)
            self.warnings.append(message)

    def freeze(self, ends_log: bool = False) -> StartLog:
        for p in self.procs.values():
            blk = p.block
            if blk is not None and blk.kind == "env" and blk.fn.env is not None:
                # The dict never closed ("}" / "Vllm config hash:"): the log stops inside it.
                _finish_env(blk.fn, closed=False)
            p.block = None
        kept = [b.freeze() for b in self.procs.values() if b.fns or b.engine_init or b.is_engine]
        # Ranked workers in rank order after the rest (engine, API server), else as they came.
        order = {id(pl): i for i, pl in enumerate(kept)}
        procs = tuple(sorted(kept, key=lambda pl: (pl.rank is not None, _rank_key(pl.rank),
                                                   order[id(pl)])))
        warnings = list(self.warnings)
        for pl in procs:
            for f in pl.functions:
                name = f"[{f.tag}]" if f.tag else "compiled function"
                if f.env_truncated:
                    warnings.append(f"{pl.label}: {name}: the raw env factor dict is cut "
                                    "short (log truncated?); read what was there")
                if f.started_compiling and f.outcome == "unknown" and f.total_s is None:
                    warnings.append(f"{pl.label}: {name} started compiling at {f.where} but "
                                    "the log never says how it ended (truncated log, crash, "
                                    "or INFO lines filtered out)")
        return StartLog(self.index, self.where, self.last_line, self.first_time,
                        self.last_time, self.version, self.model, procs, tuple(warnings),
                        ends_log=ends_log, compile_mode=self.compile_mode,
                        enforce_eager=self.enforce_eager, engine_config=self.engine_config,
                        args=self.args)


def _rank_key(rank: str | None) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", rank or ""))


def _finish_env(fn: _Fn, closed: bool) -> None:
    env = fn.env
    if env is None:
        return
    last = fn.env_last
    if last is not None:
        v = env[last].rstrip()
        if v.endswith("}") and (closed or _balanced(v[:-1])):
            v = v[:-1]
            closed = True
        env[last] = v.rstrip(",")
    fn.env_last = None
    if not closed:
        fn.env_truncated = True


def _balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
    return depth == 0


# --------------------------------------------------------------------------------------------
# The parser


class LogParser:
    """Feed it lines (``feed``), take finished starts (``pop``); ``close`` ends the stream.

    Lines need not be pre-filtered; lines without any of :data:`ANCHORS` are ignored
    anyway, which is what makes the grep pre-filter safe."""

    def __init__(self, source: str = "<log>", first_index: int = 1) -> None:
        self.source = source
        self._next_index = first_index
        self._start: _Start | None = None
        self._done: list[StartLog] = []
        self._hot: _Block | None = None
        self.lines_seen = 0

    # -- public

    def feed(self, raw: bytes | str, lineno: int | None = None) -> None:
        # The same anchor test as the grep pre-filter, so every input path reads the same.
        if isinstance(raw, bytes):
            if not (_A0 in raw or _A1 in raw or _A2 in raw or _A3 in raw):
                return
            text = raw.decode("utf-8", "replace")
        else:
            if not (_S0 in raw or _S1 in raw or _S2 in raw or _S3 in raw):
                return
            text = raw
        text = text.rstrip("\r\n")
        hot = self._hot
        if hot is not None and hot.proc.block is hot and text.startswith(hot.header):
            # Fast path: the next line of the multi-line record being read (most lines of a
            # DEBUG log's compile section are these).
            msg = text[len(hot.header):]
            cr = msg.find("\r")
            if cr >= 0:
                msg = msg[:cr]
            if not msg.startswith(_OPENERS) and self._start is not None:
                self._start.last_line = lineno
                if hot.kind == "traced":
                    _add_traced(self._start, hot.fn, msg)
                else:
                    self._env_line(hot.proc, hot, msg)
                return
        line = _parse_line(text)
        if line is None:
            return
        self.lines_seen += 1
        self._handle(line, Where(self.source, lineno))

    def set_source(self, source: str) -> None:
        self.source = source

    @property
    def pending(self) -> bool:
        return bool(self._done)

    @property
    def next_index(self) -> int:
        return self._next_index

    def pop(self) -> list[StartLog]:
        done, self._done = self._done, []
        return done

    def close(self) -> list[StartLog]:
        if self._start is not None:
            self._emit(ends_log=True)
        return self.pop()

    # -- internals

    def _emit(self, ends_log: bool = False) -> None:
        st = self._start
        assert st is not None
        self._start = None
        if st.has_content or st.version or st.model or st.args is not None:
            self._done.append(st.freeze(ends_log))
            self._next_index = st.index + 1

    def _new_start(self, where: Where, ts: str) -> _Start:
        if self._start is not None:
            self._emit()
        self._start = _Start(self._next_index, where, ts)
        return self._start

    def _proc(self, st: _Start, line: _Line) -> _Proc:
        name, pid = line.proc
        p = st.procs.get(pid)
        if p is None:
            if len(st.procs) >= MAX_PROCESSES:
                st.warn_once("procs", f"more than {MAX_PROCESSES} processes in one start; "
                             "the rest are ignored")
                p = _Proc(pid)  # detached: read but never reported
            else:
                p = st.procs[pid] = _Proc(pid)
        if name and (not p.names or p.names[-1] != name):
            if name not in p.names:
                p.names.append(name)
            else:
                p.names.remove(name)
                p.names.append(name)
        if line.ip:
            p.ip = line.ip
        return p

    def _handle(self, line: _Line, where: Where) -> None:
        msg = line.msg
        st = self._start
        # Continuation of an open multi-line record of this process?
        if st is not None:
            p = st.procs.get(line.proc[1])
            if p is not None and p.block is not None:
                blk = p.block
                if line.header == blk.header and not msg.startswith(_OPENERS):
                    self._hot = blk
                    st.last_line = where.line
                    if blk.kind == "traced":
                        _add_traced(st, blk.fn, msg)
                    else:
                        self._env_line(p, blk, msg)
                    return
                if blk.kind == "env":
                    _finish_env(blk.fn, closed=False)
                p.block = None

        if msg.startswith(_ARGS):
            # Logged once per start, before the engine: a start boundary.
            args = parse_repr(msg[len(_ARGS):])
            args = args if isinstance(args, dict) else {}
            if st is None or st.has_content or st.engines or (
                    st.args is not None and st.args != args):
                st = self._new_start(where, line.ts)
            st.args = args
            st.last_line, st.last_time = where.line, line.ts
            return

        m = _ENGINE.search(msg) if "engine (" in msg else None
        if m is not None and "Initializing" in msg:
            pid = line.proc[1]
            if st is None or (st.has_content and pid not in st.engines) or pid in st.engines:
                st = self._new_start(where, line.ts)
            st.engines.add(pid)
            self._proc(st, line).is_engine = True
            st.version = st.version or m.group(1)
            st.model = st.model or m.group(2)
            if st.engine_config is None:
                st.engine_config = msg.partition("with config: ")[2]
                mm = _MODE.search(msg)
                if mm is not None:
                    st.compile_mode = int(mm.group(1) or mm.group(2))
                me = _EAGER.search(msg)
                if me is not None:
                    st.enforce_eager = me.group(1) == "True"
            st.last_line, st.last_time = where.line, line.ts
            return

        tag = None
        if msg.startswith("["):
            tm = _TAG_RE.match(msg)
            if tm is not None:
                tag, msg = tm.group(1), msg[tm.end():]
        if st is None:
            st = self._new_start(where, line.ts)
        p = self._proc(st, line)
        if self._dispatch(st, p, line, tag, msg, where):
            st.last_line, st.last_time = where.line, line.ts

    def _fn(self, st: _Start, p: _Proc, tag: str | None, where: Where, ts: str,
            opening: bool = False) -> _Fn:
        """The function record a line belongs to. Tagged lines go to the latest record with
        that tag (or claim the current untagged one); untagged lines go to the current record.
        An ``opening`` line (start of compilation, traced-file list) begins a new record when
        the one it would join has already finished."""
        cur = p.fns[-1] if p.fns else None
        fn: _Fn | None = cur
        if tag is not None:
            fn = next((f for f in reversed(p.fns) if f.tag == tag), None)
            if fn is None and cur is not None and cur.tag is None:
                fn = cur
        if fn is not None and opening and fn.done:
            fn = None
        if fn is None:
            fn = _Fn(where, ts)
            if len(p.fns) >= MAX_FUNCTIONS:
                st.warn_once("fns", f"more than {MAX_FUNCTIONS} compiled functions in one "
                             "process; the rest are ignored")
            else:
                p.fns.append(fn)
        if tag is not None and fn.tag is None:
            fn.tag = tag
        fn.last_time = ts
        return fn

    def _dispatch(self, st: _Start, p: _Proc, line: _Line, tag: str | None, msg: str,
                  where: Where) -> bool:
        ts = line.ts
        if "init engine" in msg:
            m = _INIT_ENGINE.search(msg)
            if m is None:
                return False
            p.engine_init = EngineInit(float(m.group(1)),
                                       float(m.group(2)) if m.group(2) else None, where)
            return True
        if msg.startswith("Start compiling function"):
            m = _START_FN.match(msg)
            fn = self._fn(st, p, tag, where, ts, opening=True)
            fn.started = True
            if m is not None and m.group(1):
                fn.code_name, fn.code_file, fn.code_line = (m.group(1), m.group(2),
                                                            int(m.group(3)))
            return True
        if msg.startswith("Starting torch.compile"):
            fn = self._fn(st, p, tag, where, ts, opening=True)
            fn.started = True
            return True
        if msg.startswith("Traced files ("):
            fn = self._fn(st, p, tag, where, ts, opening=True)
            p.block = self._hot = _Block("traced", line.header, fn, p)
            rest = msg.partition(":")[2].strip()
            if rest:  # a logging setup that kept the list on one line
                for path in rest.split():
                    _add_traced(st, fn, path)
            return True
        if msg.startswith("Compile env factors ("):
            fn = self._fn(st, p, tag, where, ts)
            fn.env = {}
            fn.env_last = None
            fn.env_truncated = False
            p.block = self._hot = _Block("env", line.header, fn, p)
            return True
        if "torch.compile" in msg:
            m = _TOTAL.search(msg)
            if m is not None:
                self._fn(st, p, tag, where, ts).total_s = float(m.group(1))
                return True
            m = _match_from(_CACHE_DIR, msg, "Using cache directory: ")
            if m is not None:
                self._fn(st, p, tag, where, ts).cache_dir = m.group(1)
                return True
            m = _FACTORS.search(msg)
            if m is not None:
                self._fn(st, p, tag, where, ts).factors = LoggedFactors(
                    m.group(1) or None, m.group(2) or None, m.group(3) or None,
                    m.group(4) or None, m.group(5) or None)
                return True
            if "torch.compile cache is disabled" in msg:
                self._fn(st, p, tag, where, ts).cache_disabled = True
                return True
            return False
        if "AOT" in msg or "aot compilation" in msg:
            m = _AOT_LOADED.search(msg)
            if m is not None:
                self._fn(st, p, tag, where, ts).aot_loaded = m.group(1)
                return True
            m = _AOT_SAVED.search(msg)
            if m is not None:
                self._fn(st, p, tag, where, ts).aot_saved = m.group(1)
                return True
            m = _AOT_SAVE_ERR.search(msg)
            if m is not None:
                fn = self._fn(st, p, tag, where, ts)
                fn.aot_save_error = f"{m.group(1) or m.group(2)}: {m.group(3)}"
                return True
        if "load failure from" in msg or "Cannot load aot compilation" in msg:
            m = _match_from(_AOT_FAILED, msg, "Compiling model again due to a load failure",
                            "Cannot load aot compilation from path")
            if m is not None:
                fn = self._fn(st, p, tag, where, ts)
                fn.load_failure = LoadFailure(m.group(1) or m.group(2) or "", m.group(3),
                                              where)
                return True
        if "Dynamo bytecode transform time" in msg:
            m = _DYNAMO.search(msg)
            if m is not None:
                self._fn(st, p, tag, where, ts).dynamo_s = float(m.group(1))
                return True
            return False
        if msg.startswith("Compiling a graph for"):
            m = _COMPILING.match(msg)
            if m is not None:
                fn = self._fn(st, p, tag, where, ts)
                fn.ranges.append(RangeTiming(m.group(1), "compile", float(m.group(2)), where))
                return True
            return False
        if "irectly l" in msg:
            m = _match_from(_DIRECT_GRAPHS, msg, "Directly load the compiled graph")
            if m is not None:
                fn = self._fn(st, p, tag, where, ts)
                fn.ranges.append(RangeTiming(m.group(1), "load",
                                             float(m.group(2)) if m.group(2) else None, where))
                return True
            m = _match_from(_LOOKUP_06, msg, "Directly lookup the graph for ")
            if m is not None:
                fn = self._fn(st, p, tag, where, ts)
                fn.ranges.append(RangeTiming(m.group(1), "load", None, where))
                return True
            if _NTH_LOAD.match(msg):
                self._fn(st, p, tag, where, ts).graphs_loaded += 1
                return True
            return False
        if _NTH_STORE.match(msg):
            self._fn(st, p, tag, where, ts).graphs_stored += 1
            return True
        if msg.startswith("Cache the graph"):
            m = _CACHE_FOR_LATER.match(msg)
            if m is not None:
                self._fn(st, p, tag, where, ts).cached_for_later.append(m.group(1))
                return True
            return False
        if msg.startswith("Computation graph saved to"):
            m = _GRAPH_SAVED.match(msg)
            if m is not None:
                self._fn(st, p, tag, where, ts).graph_saved.append(m.group(1))
                return True
        return False

    def _env_line(self, p: _Proc, blk: _Block, msg: str) -> None:
        fn = blk.fn
        env = fn.env
        if env is None:
            return
        if msg.startswith("Vllm config hash: "):
            fn.config_hash = msg[len("Vllm config hash: "):].strip() or None
            _finish_env(fn, closed=True)
            p.block = None
            return
        if msg.startswith("{}"):
            _finish_env(fn, closed=True)
            return
        m = _ENV_ENTRY.match(msg)
        if m is not None:
            if fn.env_last is not None:
                env[fn.env_last] = env[fn.env_last].rstrip().rstrip(",")
            key = m.group(1)
            if len(env) >= MAX_ENV and key not in env:
                return
            env[key] = m.group(2)
            fn.env_last = key
        elif fn.env_last is not None:
            # pprint wrapped a long value over several lines: keep it one Python expression.
            env[fn.env_last] = env[fn.env_last] + " " + msg.strip()


def _add_traced(st: _Start, fn: _Fn, path: str) -> None:
    path = path.strip()
    if not path or path in fn.traced_seen:
        return
    if len(fn.traced) >= MAX_TRACED:
        st.warn_once("traced", f"more than {MAX_TRACED} traced files for one function; the "
                     "rest are ignored")
        return
    fn.traced_seen.add(path)
    fn.traced.append(path)


# --------------------------------------------------------------------------------------------
# Inputs: files (plain, gzip, rotated), stdin; grep as an optional pre-filter


@dataclass(frozen=True)
class LogInput:
    """One input: a path, or ``-`` for stdin."""

    name: str

    @property
    def is_stdin(self) -> bool:
        return self.name == "-"

    @property
    def display(self) -> str:
        return "<stdin>" if self.is_stdin else self.name


_ROTATED = re.compile(r"^(?P<base>.+?)(?:\.(?P<n>\d+))?(?P<gz>\.gz)?$")


def group_inputs(names: Sequence[str]) -> list[list[LogInput]]:
    """Split the inputs into streams. Rotated files of one log (``vllm.log``, ``vllm.log.1``,
    ``vllm.log.2.gz``) form one stream, oldest first, since a start can straddle a rotation;
    every other input is a stream of its own, in the order given."""
    groups: dict[str, list[tuple[int, int, str]]] = {}
    order: list[str] = []
    for pos, name in enumerate(names):
        if name == "-":
            key, n = f"-#{pos}", 0
        else:
            m = _ROTATED.match(name)
            assert m is not None
            key = m.group("base")
            n = int(m.group("n")) if m.group("n") else 0
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append((n, pos, name))
    return [[LogInput(name) for _, _, name in sorted(groups[k], key=lambda t: (-t[0], t[1]))]
            for k in order]


def check_inputs(names: Sequence[str]) -> None:
    """Fail early, with one line, on inputs that cannot be read."""
    for name in names:
        if name == "-":
            continue
        p = Path(name)
        if not p.exists():
            raise LogInputError(f"{name}: no such file")
        if p.is_dir():
            raise LogInputError(f"{name}: is a directory, not a log file")
        if not os.access(p, os.R_OK):
            raise LogInputError(f"{name}: permission denied")


def _is_gzip(head: bytes) -> bool:
    return head[:2] == b"\x1f\x8b"


CHUNK = 1 << 20


def _blocks(read: Callable[[int], bytes]) -> Iterator[bytes]:
    """The input in big pieces that end at a line end. A line longer than :data:`MAX_LINE`
    is cut there and its rest skipped, so memory stays bounded whatever the input."""
    carry = b""
    cut: bytes | None = None  # the start of an over-long line whose end is being skipped
    while True:
        data = read(CHUNK)
        if not data:
            if cut is not None:
                yield cut + b"\n"
            elif carry:
                yield carry
            return
        if cut is not None:
            nl = data.find(b"\n")
            if nl < 0:
                continue
            yield cut + b"\n"
            cut = None
            data = data[nl + 1:]
        if carry:
            data = carry + data
        last = data.rfind(b"\n")
        if last < 0:
            carry = data
        else:
            yield data[:last + 1]
            carry = data[last + 1:]
        if len(carry) > MAX_LINE:
            cut, carry = carry[:MAX_LINE], b""


def _filtered(read: Callable[[int], bytes]) -> Iterator[tuple[int, bytes]]:
    """(line number, line) of the lines holding an anchor: each piece is searched for each
    anchor in C (``bytes.find``), so lines without one cost no Python work."""
    base = 0
    for block in _blocks(read):
        starts: set[int] = set()
        for anchor in ANCHORS:
            i = block.find(anchor)
            while i >= 0:
                starts.add(block.rfind(b"\n", 0, i) + 1)
                e = block.find(b"\n", i)
                if e < 0:
                    break
                i = block.find(anchor, e)
        line, prev = base, 0
        for s in sorted(starts):
            line += block.count(b"\n", prev, s)
            e = block.find(b"\n", s)
            yield line + 1, block[s:e] if e >= 0 else block[s:]
            prev = s
        base += block.count(b"\n")


SPLIT_MIN = 64 << 20
"""Files at least this big are searched by several greps at once (one per CPU, at most
MAX_PARTS)."""
MAX_PARTS = 16


def _grep_cmd(exe: str, offsets: bool) -> list[str]:
    cmd = [exe, "-a", "-n"] + (["-b"] if offsets else []) + ["-F"]
    for anchor in ANCHORS:
        cmd += ["-e", anchor.decode()]
    return cmd


def _grep_lines(path: str) -> Iterator[tuple[int, bytes]] | None:
    """Candidate lines through ``grep -F`` with the same anchors (about 2.5 times faster than
    the Python search on a 1 GiB log, benchmarks/bench_log.py); None when there is no grep.
    A big file is cut into parts at line ends and each part searched by its own grep."""
    exe = shutil.which("grep")
    if exe is None:
        return None
    env = {**os.environ, "LC_ALL": "C"}
    try:
        size = os.path.getsize(path)
        parts = min(os.cpu_count() or 1, MAX_PARTS) if size >= SPLIT_MIN else 1
        if parts > 1:
            return _grep_split(exe, path, size, parts, env)
        proc = subprocess.Popen([*_grep_cmd(exe, False), "--", path], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                bufsize=1 << 20)
    except OSError:
        return None
    return _read_grep(proc)


def _line_ends(path: str, size: int, parts: int) -> list[int]:
    """Part boundaries: ``parts + 1`` offsets, each (but 0 and ``size``) just after a line
    end."""
    cuts = [0]
    with open(path, "rb") as f:
        for i in range(1, parts):
            f.seek(max(cuts[-1], size * i // parts))
            while True:
                chunk = f.read(1 << 16)
                if not chunk:
                    return [*cuts, size]
                nl = chunk.find(b"\n")
                if nl >= 0:
                    cuts.append(f.tell() - len(chunk) + nl + 1)
                    break
    return [*cuts, size]


class _Part(threading.Thread):
    """One grep over ``[start, EOF)`` of the file, stopped once it reports a line at or past
    ``end``: keeps (local line number, line) of its own range in a spooled file and the local
    number of the first line past it (the same line the next part's grep reports first: that
    is how the parts' line numbers are joined)."""

    def __init__(self, exe: str, path: str, start: int, end: int, env: dict[str, str]) -> None:
        super().__init__(daemon=True)
        self.limit = end - start
        self.kept = tempfile.SpooledTemporaryFile(max_size=8 << 20)  # noqa: SIM115
        self.first_local: int | None = None
        self.past_local: int | None = None
        self.error: str | None = None
        self.f = open(path, "rb")  # noqa: SIM115 - closed in run()
        self.f.seek(start)
        self.proc = subprocess.Popen(_grep_cmd(exe, True), stdin=self.f,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                     bufsize=1 << 20)

    def run(self) -> None:
        for n, line in self.lines():
            self.kept.write(b"%d:%s\n" % (n, line))

    def lines(self) -> Iterator[tuple[int, bytes]]:
        """(local line number, line) of this part's range, as grep reports them (the first
        part is read this way directly, the others by their thread into ``kept``)."""
        proc = self.proc
        assert proc.stdout is not None and proc.stderr is not None
        killed = False
        try:
            out: Any = proc.stdout
            for block in _blocks(out.read1):
                for raw in block.split(b"\n")[:-1]:  # blocks end at a line end
                    c1 = raw.find(b":")
                    c2 = raw.find(b":", c1 + 1)
                    try:
                        n, off = int(raw[:c1]), int(raw[c1 + 1:c2])
                    except ValueError:
                        continue
                    if self.first_local is None:
                        self.first_local = n
                    if off >= self.limit:
                        self.past_local = n
                        killed = True
                        proc.kill()
                        return
                    yield n, raw[c2 + 1:]
        finally:
            self.error = _finish_grep(proc, killed)
            self.f.close()


def _grep_split(exe: str, path: str, size: int, parts: int,
                env: dict[str, str]) -> Iterator[tuple[int, bytes]]:
    cuts = _line_ends(path, size, parts)
    workers = [_Part(exe, path, cuts[i], cuts[i + 1], env) for i in range(len(cuts) - 1)]
    for w in workers[1:]:
        w.start()
    delta = 0  # global line number = local + delta
    try:
        yield from workers[0].lines()  # the first part streams while the others search
        if workers[0].error is not None:
            raise LogInputError(f"grep failed: {workers[0].error}")
        for i, w in enumerate(workers):
            if i == 0:
                continue
            w.join()
            if w.error is not None:
                raise LogInputError(f"grep failed: {w.error}")
            if i > 0:
                prev = workers[i - 1]
                if prev.past_local is None:
                    return  # no candidate line after the previous part's range: done
                # The previous part's first line past its range is this part's first line.
                assert w.first_local is not None
                delta += prev.past_local - w.first_local
            w.kept.seek(0)
            for raw in _blocks(w.kept.read):
                for line in raw.split(b"\n")[:-1]:
                    colon = line.find(b":")
                    yield int(line[:colon]) + delta, line[colon + 1:]
    finally:
        for w in workers:
            if w.proc.poll() is None:
                w.proc.kill()
            if w.is_alive() or w.ident is not None:
                w.join()
            w.kept.close()


def _read_grep(proc: subprocess.Popen[bytes]) -> Iterator[tuple[int, bytes]]:
    assert proc.stdout is not None and proc.stderr is not None
    try:
        out: Any = proc.stdout  # a BufferedReader: read1 takes what grep has written so far
        for block in _blocks(out.read1):
            lines = block.split(b"\n")
            if block.endswith(b"\n"):
                lines.pop()
            for raw in lines:  # "LINENO:line" (grep -n)
                colon = raw.find(b":")
                try:
                    n = int(raw[:colon])
                except ValueError:
                    continue
                yield n, raw[colon + 1:]
    finally:
        error = _finish_grep(proc)
    if error is not None:
        raise LogInputError(f"grep failed: {error}")


def _finish_grep(proc: subprocess.Popen[bytes], killed: bool = False) -> str | None:
    """Close a grep's pipes and reap it; its error (exit status 2 or more) in one line, or
    None (1 means no line matched; a grep we killed has no error)."""
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read(4096)
    proc.stderr.close()
    rc = proc.wait()
    if killed or rc <= 1:
        return None
    msg = err.decode("utf-8", "replace").strip().splitlines()
    return msg[-1] if msg else f"exit status {rc}"


# --------------------------------------------------------------------------------------------
# Time order across logs. vLLM's lines say ``MM-DD HH:MM:SS`` without the year.

CLOCK_SLACK = timedelta(days=1)
"""How far a logged time may lie after the bound it is read against: the log's clock zone may
differ from this machine's (up to 26 h apart), and processes of one start print a little out
of order."""


def _dated(stamp: str | None, year: int) -> datetime | None:
    try:
        return datetime.strptime(f"{year}-{stamp}", "%Y-%m-%d %H:%M:%S")
    except (ValueError, TypeError):
        return None


def resolve_years(stamps: Sequence[str | None], bound: datetime) -> list[datetime | None]:
    """Full dates for the ``MM-DD HH:MM:SS`` times of one log's starts, oldest first. A log is
    written in time order and ends before ``bound`` (its file's modification time, or now):
    walking back from the end, each start takes the latest year that puts it no later than the
    start after it (plus :data:`CLOCK_SLACK`), so a log across New Year (12-31 .. 01-01) and
    logs of different years come out right. None where a time cannot be read."""
    out: list[datetime | None] = [None] * len(stamps)
    limit = bound + CLOCK_SLACK
    for i in range(len(stamps) - 1, -1, -1):
        if not stamps[i]:
            continue
        best = None
        for year in range(limit.year, limit.year - 9, -1):  # 02-29 waits for a leap year
            t = _dated(stamps[i], year)
            if t is not None and t <= limit:
                best = t
                break
        if best is not None:
            out[i] = best
            limit = best + CLOCK_SLACK
    return out


def _time_key(times: list[datetime | None], bound: datetime) -> list[datetime]:
    """Sort keys for one log's starts, never decreasing (a log is in time order even when its
    clock is not): a start whose time cannot be read stays just after the start before it
    (else before the next one; else at the file's modification time)."""
    keys: list[datetime] = []
    for i, t in enumerate(times):
        if t is None:
            t = keys[-1] if keys else next((x for x in times[i + 1:] if x is not None), bound)
        # Never before a start above it in the same log (a clock set back, zones mixed).
        keys.append(max(t, keys[-1]) if keys else t)
    return keys


class LogStream:
    """Iterate over the starts in some log inputs.

    ``LogStream(["vllm.log.1", "vllm.log"])``: each stream (see :func:`group_inputs`) is
    parsed in turn. One stream is read streaming: starts are yielded as they complete. Starts
    of several streams are yielded in time order (``order="time"``, the default), numbered in
    that order; that needs the whole input read first, so the starts wait in an anonymous
    temporary file meanwhile (``notes`` then says how they were ordered). ``order="input"``:
    stream by stream, in the order given. Problems that are not about one start (a damaged
    gzip stream) go to ``warnings``. ``accelerate`` uses grep as a pre-filter for plain files
    when it is available (same result, faster)."""

    def __init__(self, names: Sequence[str], accelerate: bool = True,
                 stdin: IO[bytes] | None = None, order: Literal["time", "input"] = "time",
                 now: datetime | None = None) -> None:
        self.names = list(names)
        self.accelerate = accelerate
        self.stdin = stdin
        self.order = order
        self.now = now
        self.warnings: list[str] = []
        self.notes: list[str] = []
        self.used_grep = False

    def __iter__(self) -> Iterator[StartLog]:
        streams = group_inputs(self.names)
        if self.order == "time" and len(streams) > 1:
            return self._by_time(streams)
        return self._in_order(streams)

    def _bound(self, stream: list[LogInput]) -> tuple[datetime, bool]:
        """The latest time a stream's lines can carry: its newest file's modification time
        (True), or now for stdin and unreadable files (False)."""
        mtimes = []
        for item in stream:
            if not item.is_stdin:
                with contextlib.suppress(OSError):
                    mtimes.append(os.stat(item.name).st_mtime)
        if mtimes and len(mtimes) == len(stream):
            return datetime.fromtimestamp(max(mtimes)), True
        return self.now or datetime.now(), False

    def _by_time(self, streams: list[list[LogInput]]) -> Iterator[StartLog]:
        # An anonymous (already unlinked) temporary file that only this process writes.
        with tempfile.TemporaryFile() as spill:
            rows: list[tuple[datetime, int, int, int]] = []
            guessed = False
            for pos, stream in enumerate(streams):
                bound, from_file = self._bound(stream)
                stamps, offsets = [], []
                for st in self._in_order([stream]):
                    offsets.append(spill.tell())
                    pickle.dump(st, spill, protocol=pickle.HIGHEST_PROTOCOL)
                    stamps.append(st.first_time)
                times = resolve_years(stamps, bound)
                missing = sum(t is None for t in times)
                if missing:
                    self.warnings.append(
                        f"{stream[0].display}: {missing} start(s) without a readable time; "
                        "placed after the start before them in that log (else by the "
                        + ("file's modification time" if from_file else "order given") + ")")
                keys = _time_key(times, bound)
                for seq, (key, off) in enumerate(zip(keys, offsets, strict=True)):
                    rows.append((key, pos, seq, off))
                guessed = guessed or not from_file
            rows.sort()
            if [r[1:3] for r in rows] != sorted(r[1:3] for r in rows):
                self.notes.append(
                    "starts are numbered and shown in time order across the logs, not in the "
                    "order the files were given (times from the log lines; their year, which "
                    "vLLM does not log, from each file's modification time"
                    + (", or from now for stdin" if guessed else "") + ")")
            for index, (_, _, _, off) in enumerate(rows, 1):
                spill.seek(off)
                st = pickle.load(spill)  # written above by this process, never a cache file
                yield replace(st, index=index)

    def _in_order(self, streams: list[list[LogInput]]) -> Iterator[StartLog]:
        index = 1
        for stream in streams:
            parser = LogParser(stream[0].display, first_index=index)
            for item in stream:
                parser.set_source(item.display)
                feed, done = parser.feed, parser._done
                for n, raw in self._lines(item):
                    feed(raw, n)
                    if done:
                        yield from parser.pop()
                        done = parser._done
            yield from parser.close()
            index = parser.next_index

    def _lines(self, item: LogInput) -> Iterator[tuple[int, bytes]]:
        if item.is_stdin:
            src: Any = self.stdin if self.stdin is not None else sys.stdin.buffer
            if not isinstance(src, io.BufferedReader):
                src = io.BufferedReader(src, 1 << 20)
            yield from self._maybe_gzip(item.name, src)
            return
        try:
            f = open(item.name, "rb", buffering=0)  # noqa: SIM115 - closed below
        except OSError as exc:
            raise LogInputError(f"{item.name}: {exc.strerror or exc}") from None
        try:
            head = f.read(2)
            f.seek(0)
            if not _is_gzip(head) and self.accelerate:
                it = _grep_lines(item.name)
                if it is not None:
                    self.used_grep = True
                    yield from it
                    return
            yield from self._maybe_gzip(item.name, io.BufferedReader(f, CHUNK))
        finally:
            f.close()

    def _maybe_gzip(self, name: str, reader: Any) -> Iterator[tuple[int, bytes]]:
        if _is_gzip(reader.peek(2)[:2]):
            gz = gzip.GzipFile(fileobj=reader, mode="rb")
            try:
                # read1: a stream cut short still yields what came before the cut.
                yield from _filtered(gz.read1)
            except (EOFError, OSError, zlib.error) as exc:
                self.warnings.append(f"{name}: compressed data ends early or is damaged "
                                     f"({exc}); read what came before")
            return
        # read1: whatever one read brings (a pipe need not fill CHUNK before we go on).
        yield from _filtered(reader.read1)


def parse_text(text: str | bytes, source: str = "<text>") -> list[StartLog]:
    """Parse a whole log held in memory (tests, excerpts)."""
    data = text.encode() if isinstance(text, str) else text
    return parse_lines(data.splitlines(keepends=True), source)


def parse_lines(lines: Iterable[bytes | str], source: str = "<lines>") -> list[StartLog]:
    parser = LogParser(source)
    out: list[StartLog] = []
    for n, raw in enumerate(lines, 1):
        parser.feed(raw, n)
        out.extend(parser.pop())
    out.extend(parser.close())
    return out
