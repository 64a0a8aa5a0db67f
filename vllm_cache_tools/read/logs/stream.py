"""Reading whole logs: time order across logs (vLLM logs ``MM-DD`` without the year, see
:func:`resolve_years`), :class:`LogStream` over files and stdin, and the in-memory
:func:`parse_text` / :func:`parse_lines`.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import pickle
import sys
import tempfile
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import IO, Any, Literal

from vllm_cache_tools.read.logs.inputs import (
    CHUNK,
    LogInput,
    LogInputError,
    _filtered,
    _grep_lines,
    _is_gzip,
    _is_zstd,
    compressed,
    group_inputs,
    zstd_reader,
)
from vllm_cache_tools.read.logs.parser import LogParser
from vllm_cache_tools.read.logs.records import StartLog

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
            yield from self._maybe_compressed(item.name, src)
            return
        try:
            f = open(item.name, "rb", buffering=0)  # noqa: SIM115 - closed below
        except OSError as exc:
            raise LogInputError(f"{item.name}: {exc.strerror or exc}") from None
        try:
            head = f.read(4)
            f.seek(0)
            if not compressed(head) and self.accelerate:
                it = _grep_lines(item.name)
                if it is not None:
                    self.used_grep = True
                    yield from it
                    return
            yield from self._maybe_compressed(item.name, io.BufferedReader(f, CHUNK))
        finally:
            f.close()

    def _maybe_compressed(self, name: str, reader: Any) -> Iterator[tuple[int, bytes]]:
        head = reader.peek(4)[:4]
        read: Callable[[int], bytes]
        damaged: tuple[type[Exception], ...]
        if _is_zstd(head):
            import zstandard

            read, damaged = zstd_reader(reader.read1), (EOFError, OSError, zstandard.ZstdError)
        elif _is_gzip(head):
            # read1: a stream cut short still yields what came before the cut.
            read = gzip.GzipFile(fileobj=reader, mode="rb").read1
            damaged = (EOFError, OSError, zlib.error)
        else:
            # read1: whatever one read brings (a pipe need not fill CHUNK before we go on).
            yield from _filtered(reader.read1)
            return
        try:
            yield from _filtered(read)
        except damaged as exc:
            self.warnings.append(f"{name}: compressed data ends early or is damaged ({exc}); "
                                 "read what came before")


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
