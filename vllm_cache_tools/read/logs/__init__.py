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

The package, in reading order (imports only point up this list):

* :mod:`.records` -- the frozen records a read yields (:class:`StartLog` and what it holds);
* :mod:`.headers` -- line headers and process prefixes;
* :mod:`.patterns` -- :data:`ANCHORS` and one regex per message kind;
* :mod:`.builders` -- mutable per-function/process/start state, frozen into records;
* :mod:`.parser` -- :class:`LogParser`, line by line;
* :mod:`.inputs` -- files, rotation, gzip, stdin, the grep pre-filter;
* :mod:`.stream` -- time order across logs, :class:`LogStream`, :func:`parse_text`.

This module re-exports the public names, so ``from vllm_cache_tools.read.logs import X``
keeps working for every name it offered as one module.
"""

from vllm_cache_tools.read.logs.inputs import LogInput, LogInputError, check_inputs, group_inputs
from vllm_cache_tools.read.logs.parser import LogParser
from vllm_cache_tools.read.logs.patterns import ANCHORS
from vllm_cache_tools.read.logs.records import (
    CompiledFunction,
    EngineInit,
    LoadFailure,
    LoggedFactors,
    Outcome,
    ProcessLog,
    RangeAction,
    RangeTiming,
    StartLog,
    Where,
    env_value,
)
from vllm_cache_tools.read.logs.stream import LogStream, parse_lines, parse_text, resolve_years

__all__ = [
    "ANCHORS",
    "CompiledFunction",
    "EngineInit",
    "LoadFailure",
    "LogInput",
    "LogInputError",
    "LogParser",
    "LogStream",
    "LoggedFactors",
    "Outcome",
    "ProcessLog",
    "RangeAction",
    "RangeTiming",
    "StartLog",
    "Where",
    "check_inputs",
    "env_value",
    "group_inputs",
    "parse_lines",
    "parse_text",
    "resolve_years",
]
