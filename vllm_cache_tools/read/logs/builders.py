"""Builders: the mutable per-function, per-process and per-start state a read fills in, frozen
into :mod:`.records` when a start is emitted.
"""

from __future__ import annotations

import re
from typing import Any

from vllm_cache_tools.read.logs.records import (
    CompiledFunction,
    EngineInit,
    LoadFailure,
    LoggedFactors,
    ProcessLog,
    RangeTiming,
    StartLog,
    Where,
)

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
    # Digit runs cut at 18: a sort key, and int() of 5000 digits raises (found by the fuzzer).
    return tuple(int(x) for x in re.findall(r"\d{1,18}", rank or ""))


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
