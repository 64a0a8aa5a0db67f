"""The records a log read yields (:class:`StartLog` and what it holds), frozen and
documented field by field, with the helpers that interpret their raw values
(:func:`env_value`). No parsing here.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from vllm_cache_tools.read.logs.headers import _RANK_DIR, _RANK_IN_NAME

Outcome = Literal["hit", "miss", "partial", "load-failed", "disabled", "unknown"]
RangeAction = Literal["compile", "load"]

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
    # The bounded literal reader, not ast.literal_eval: a 1 MB value took ~450 MB through
    # ast (issue 12); pprint'ed env values are plain literals, anything else stays text.
    from vllm_cache_tools.read.errors import ReadError
    from vllm_cache_tools.read.pyliteral import parse_literal

    try:
        return parse_literal(raw)
    except ReadError:
        return raw
