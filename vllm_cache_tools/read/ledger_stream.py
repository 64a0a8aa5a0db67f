"""The recorder's ledger lines: one record type, one set of rules, and a streaming reader for
fleet statistics over millions of events.

Every ledger line is judged by :class:`LedgerEvent` alone: a typed msgspec record whose field
types and bounds *are* the rules (a plausible POSIX time, durations that are finite and not
negative, a process id, strings where strings belong; unknown fields such as ``argv`` are
skipped). :func:`parse_ledger_line` applies them to one line (``ls``'s
:func:`vllm_cache_tools.read.manifest.read_ledger`); :func:`read_batches` to a 64 KB block of
lines at once: the block is decoded as one JSON array (its newlines turned into commas) in C,
and stands only when it holds as many values as lines (a newline inside a value, e.g. one
event's halves on two lines, makes fewer); any other block is read again line by line, each
line by :func:`parse_ledger_line`. The block path is only a speed-up: a block decodes only
when every one of its lines decodes by the same decoder, to the same record (tested).
Statistics use :class:`StatsEvent`, the same record narrowed to the event kinds and trees it
counts (any other kind is a damaged line to it).

A line msgspec's strict parser refuses but Python's ``json`` reads (a lone surrogate escape,
which a non-UTF-8 byte in a command line becomes) is read by ``json`` within bounded depth and
size, then checked against the same record.

Files are opened like every cache read (:func:`~vllm_cache_tools.read.noatime.open_noatime`:
regular files only, no link followed, no atime left); memory stays flat (64 KB of lines at a
time: blocks under glibc's mmap threshold, so their copies reuse the same heap memory; 1 MB
blocks came from fresh pages each time, and those page faults were 40% of reading 1M events:
1.44 s -> 0.82 s CPU, back to back; counting each block's lines, which exactness needs, adds
0.15 s)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple, TypeVar

import msgspec

from vllm_cache_tools.read import jsontext
from vllm_cache_tools.read.errors import ReadError, UnreadableError
from vllm_cache_tools.read.noatime import open_noatime

CHUNK_BYTES = 64 << 10
MAX_LINE_BYTES = 64 * 1024
"""A recorder line is well under 4 KB (argv and a load-failure reason are the long parts);
anything longer is not read as an event."""
MAX_DEPTH = 8
"""Nesting of a ledger line read by ``json`` (the recorder writes 2: the line and argv)."""

Seconds = Annotated[float, msgspec.Meta(ge=0.0, le=1e9)]
"""One compile or load: ~31 years at most, so no sum of them reaches inf (stats printed
"compiling infd" and wrote ``Infinity``, which is not JSON, for two lines of 1.7e308)."""
PosixTime = Annotated[float, msgspec.Meta(ge=0.0, lt=7.3e9)]
"""1970 .. 2200, as :func:`vllm_cache_tools.read.jsontext.finite_time`."""
Pid = Annotated[int, msgspec.Meta(ge=0, lt=1 << 32)]
Text = Annotated[str, msgspec.Meta(min_length=1)]


class GuardNote(msgspec.Struct, frozen=True, gc=False):
    """The wrong-hit guard's note on a decision (``recorder/guard.py``): this start differed
    from the entry's compiling start in a listed item vLLM's key leaves out. Its list of
    differences is skipped here (``audit`` reads them from the manifests)."""

    mode: str = ""
    """``warn`` or ``strict``."""
    action: str = ""
    """``loaded`` (warn) or ``recompiled`` (strict: the cache off for that process)."""
    rules: int | None = None
    """The version of the curated list (``keys/guard_fields.RULES_VERSION``)."""


class LedgerEvent(msgspec.Struct, frozen=True, gc=False):
    """One ledger line, as the recorder writes it (``recorder/hooks.py``: one line per
    decision of one worker about one entry)."""

    time: PosixTime
    """When the recorder wrote it (Unix seconds)."""
    event: Text
    """``hit``, ``miss``, ``load-failure`` or ``disabled`` (newer recorders may add kinds)."""
    tree: str
    """``aot`` or ``backend``."""
    key: Text
    """The entry's folder name."""
    rank: str = ""
    prefix: str = ""
    host: str = ""
    pid: Pid | None = None
    manifest: str | None = None
    """The digest of the manifest the recorder wrote for this decision."""
    reason: str | None = None
    """vLLM's words for a load failure."""
    seconds: Seconds | None = None
    """Backend tree: time in vLLM's backend (compiling on a miss, loading on a hit). AOT tree:
    time in the load attempt (on a miss, compilation follows outside it)."""
    recorder_s: Seconds | None = None
    """Time that process had spent in the recorder when it wrote this event."""
    start: str | None = None
    """The id the recorder shares between the processes of one vLLM start; ``None`` in
    ledgers of recorders that did not write one (then a start is one process)."""
    dynamo_s: Seconds | None = None
    """Backend tree: Dynamo's bytecode transform before the backend ran."""
    guard: GuardNote | None = None
    """Set when the wrong-hit guard warned about this decision."""


class StatsEvent(LedgerEvent, frozen=True, gc=False):
    """A :class:`LedgerEvent` of a kind statistics count."""

    event: Literal["hit", "miss", "load-failure", "disabled"]
    tree: Literal["aot", "backend"]


E = TypeVar("E", bound=LedgerEvent)

_LINE: dict[type[LedgerEvent], msgspec.json.Decoder[Any]] = {
    LedgerEvent: msgspec.json.Decoder(LedgerEvent), StatsEvent: msgspec.json.Decoder(StatsEvent)}
_BLOCK = msgspec.json.Decoder(list[StatsEvent])


class LedgerProblem(NamedTuple):
    """A line (or a whole file, ``line`` 0) that could not be read as an event."""

    file: str
    line: int
    detail: str

    def __str__(self) -> str:
        return f"ledger {self.file} line {self.line}: {self.detail}" if self.line else \
            f"ledger {self.file}: {self.detail}"


def _invalid(exc: Exception) -> ReadError:
    return ReadError(jsontext.one_line(exc, 120))


def parse_ledger_line(line: bytes, kind: type[E] = LedgerEvent) -> E:  # type: ignore[assignment]
    """One ledger line as ``kind``; :class:`ReadError` (one line) for anything the recorder
    never writes: wrong types, implausible times, negative or endless durations, JSON that is
    not one object, deeper than :data:`MAX_DEPTH` or not UTF-8."""
    try:
        return _LINE[kind].decode(line)  # type: ignore[no-any-return]
    except msgspec.ValidationError as exc:
        raise _invalid(exc) from None
    except (msgspec.DecodeError, RecursionError):
        pass  # not JSON to msgspec: json may still read it (lone surrogates)
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        raise ReadError("not UTF-8") from None
    data = jsontext.loads(text, "ledger line", max_depth=MAX_DEPTH)
    if not isinstance(data, dict):
        raise ReadError("not a JSON object")
    try:
        return msgspec.convert(data, kind)
    except msgspec.ValidationError as exc:
        raise _invalid(exc) from None
    except UnicodeError:  # a lone surrogate where msgspec checks text (found by the fuzzer)
        raise ReadError("a field that is not text") from None


def _lines(lines: list[bytes], label: str, first: int) -> Iterator[StatsEvent | LedgerProblem]:
    for n, raw in enumerate(lines, first):
        if not raw or raw.isspace():
            continue
        if len(raw) > MAX_LINE_BYTES:
            yield LedgerProblem(label, n, "not a ledger event (line too long)")
            continue
        try:
            yield parse_ledger_line(raw, StatsEvent)
        except ReadError as exc:
            yield LedgerProblem(label, n, f"not a ledger event ({exc})")


def _block(data: bytes, end: int, label: str, line: int,
           out: list[list[StatsEvent] | LedgerProblem]) -> int:
    """Append the events of ``data[:end]`` (whole lines, each ending in a newline), which
    starts after ``line`` lines of its file, to ``out``; returns the number of lines."""
    if not end:
        return 0
    n = data.count(b"\n", 0, end)
    try:
        # JSON strings cannot hold a raw newline, so every newline lies between two tokens:
        # as commas they make the block an array with one value per line, or with fewer when
        # a newline lies inside a value (a comma there can still parse: `["a"` + `"b"]`).
        # Two copies of the block in all (replace, join), not five.
        commas = memoryview(data.replace(b"\n", b","))[:end - 1]
        rows = _BLOCK.decode(b"".join((b"[", commas, b"]")))
        if len(rows) == n:
            out.append(rows)
            return n
    except (msgspec.MsgspecError, RecursionError):
        pass  # a blank, damaged or foreign line somewhere: one line at a time
    batch: list[StatsEvent] = []
    lines = data[:end - 1].split(b"\n")
    for item in _lines(lines, label, line + 1):
        if isinstance(item, LedgerProblem):
            out.append(item)
        else:
            batch.append(item)
    out.append(batch)
    return len(lines)


class Complete(NamedTuple):
    """Where the file's whole lines end (:func:`read_from`): what was read up to
    here can be continued from ``offset`` after lines are appended; a last line without its
    newline (the recorder may be writing it) follows this mark."""

    offset: int
    lines: int


def read_batches(path: Path, name: str | None = None
                 ) -> Iterator[list[StatsEvent] | LedgerProblem]:
    """The events of one ledger file, in file order: lists of :class:`StatsEvent`, with a
    :class:`LedgerProblem` for each line that is not an event and one (line 0) for a file that
    cannot be read. ``name``: how problems name the file."""
    for b in read_from(path, name):
        if not isinstance(b, Complete):
            yield b


def read_from(path: Path, name: str | None = None, offset: int = 0, line: int = 0
              ) -> Iterator[list[StatsEvent] | LedgerProblem | Complete]:
    """:func:`read_batches` from ``offset`` (the end of a line, with ``line`` lines before
    it), with a :class:`Complete` after the last whole line."""
    label = name or path.name
    try:
        f = open_noatime(path)
    except OSError as exc:
        yield LedgerProblem(label, 0, str(exc) if isinstance(exc, UnreadableError)
                            else f"cannot read: {exc.strerror or exc}")
        return
    tail = b""
    done = offset
    with f:
        if offset:
            f.seek(offset)
        while True:
            try:
                chunk = f.read(CHUNK_BYTES)
            except OSError as exc:
                yield LedgerProblem(label, line, f"cannot read: {exc.strerror or exc}")
                return
            if not chunk:
                break
            done += len(chunk)
            data = tail + chunk if tail else chunk
            cut = data.rfind(b"\n") + 1
            if cut == 0:
                if len(data) <= MAX_LINE_BYTES:
                    tail = data
                    continue
                line += 1  # one endless line: reported once, skipped to its end
                yield LedgerProblem(label, line, "not a ledger event (line too long)")
                while chunk and b"\n" not in chunk:
                    chunk = f.read(CHUNK_BYTES)
                    done += len(chunk)
                data = chunk[chunk.find(b"\n") + 1:] if chunk else b""
                cut = data.rfind(b"\n") + 1
            tail = data[cut:]
            out: list[list[StatsEvent] | LedgerProblem] = []
            line += _block(data, cut, label, line, out)
            yield from out
    yield Complete(done - len(tail), line)
    if tail:
        out = []
        _block(tail + b"\n", len(tail) + 1, label, line, out)
        yield from out


def first_row(path: Path, limit: int = MAX_LINE_BYTES) -> StatsEvent | None:
    """The first event among a ledger's first ``limit`` bytes (``None``: none there, or the
    file cannot be read)."""
    try:
        with open_noatime(path) as f:
            head = f.read(limit)
    except OSError:
        return None
    for line in head.split(b"\n"):
        try:
            return parse_ledger_line(line, StatsEvent)
        except ReadError:
            continue
    return None


def read_rows(path: Path, name: str | None = None) -> Iterator[StatsEvent | LedgerProblem]:
    """Like :func:`read_batches`, one event at a time (for callers that are not counting
    millions)."""
    for b in read_batches(path, name):
        if isinstance(b, LedgerProblem):
            yield b
        else:
            yield from b
