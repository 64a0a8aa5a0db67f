"""The recorder's ledgers read as a stream, for fleet statistics over millions of events.

:func:`vllm_cache_tools.read.manifest.read_ledger` returns every event as a record at once:
right for one root's ``ls``, too slow and too big for a fleet's year of starts (1,000,000
events are ~400 MB of JSON lines). This reader keeps memory flat (1 MB of lines at a time) and
reads the lines of a chunk in the exact form the recorder writes (``json.dumps(event,
sort_keys=True)`` in :mod:`vllm_cache_tools.recorder.write`) with one regular expression over
the whole chunk. A chunk with any other line (an older or newer recorder's, or a damaged one)
is read line by line, each line through ``json.loads`` and the same field checks. Both paths
give the same :class:`LedgerRow` for the same event (tested), so the fast one is only a
speed-up. Neither reads ``argv``, which statistics never use.

Files are opened like every cache read (:func:`~vllm_cache_tools.read.noatime.open_noatime`:
regular files only, no link followed, no atime left)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from vllm_cache_tools.read.errors import ReadError, UnreadableError
from vllm_cache_tools.read.manifest import parse_ledger_line
from vllm_cache_tools.read.noatime import open_noatime

CHUNK_BYTES = 1 << 20
MAX_LINE_BYTES = 64 * 1024
"""A recorder line is well under 4 KB (argv and a load-failure reason are the long parts);
anything longer is not read as an event."""
EVENTS = frozenset({"hit", "miss", "load-failure", "disabled"})
TREES = frozenset({"aot", "backend"})

RawRow = tuple[str, str, str, str, str, str, str, str, str, str, str, str]
"""A row as text, in this order: dynamo_s, event, host, key, manifest, pid, prefix, rank,
seconds, start, time, tree. Strings as they are (no JSON escapes left), numbers as JSON wrote
them; ``""`` for a field the line does not have, ``"null"`` for null. What the fast path hands
over without making more Python objects than the regex does."""


class LedgerRow(NamedTuple):
    """One ledger event, as much of it as statistics need."""

    time: float
    """When the recorder wrote it (Unix seconds)."""
    event: str
    """``hit``, ``miss``, ``load-failure`` or ``disabled``."""
    tree: str
    """``aot`` or ``backend``."""
    key: str
    """The entry's folder name."""
    rank: str
    prefix: str
    host: str
    manifest: str | None
    """The digest of the manifest the recorder wrote for this decision."""
    pid: int | None
    start: str | None
    """The id the recorder shares between the processes of one vLLM start; ``None`` in
    ledgers of recorders that did not write one (then a start is one process)."""
    seconds: float | None
    """Backend tree: time in vLLM's backend (compiling on a miss, loading on a hit). AOT tree:
    time in the load attempt (on a miss, compilation follows outside it)."""
    dynamo_s: float | None
    """Backend tree: Dynamo's bytecode transform before the backend ran."""


class LedgerProblem(NamedTuple):
    """A line (or a whole file, ``line`` 0) that could not be read as an event."""

    file: str
    line: int
    detail: str

    def __str__(self) -> str:
        return f"ledger {self.file} line {self.line}: {self.detail}" if self.line else \
            f"ledger {self.file}: {self.detail}"


_STR = r'"([^"\\\n]*)"'
_SECONDS = r"(null|[0-9]{1,9}(?:\.[0-9]+)?(?:e-[0-9]{1,3})?)"
# From the end of argv (the long first field, never read) to the end of the line, in the
# writer's sorted key order. '], "' cannot occur inside a JSON string (its quote would be
# escaped), so it starts the match at argv's end, once per line: a literal prefix the regex
# engine searches for fast. Every number and string it admits is valid as it stands (within
# the bounds parse_line checks, no escapes to undo): anything else goes the slow way.
_EVENT = re.compile(
    r'\], (?:"dynamo_s": ' + _SECONDS + r', )?"event": "(hit|miss|load-failure|disabled)", '
    r'"host": ' + _STR + r', "key": "([0-9a-f]+)", (?:"manifest": (?:"([0-9a-f]{1,64})"|null), )?'
    r'"pid": ([0-9]{1,9}|null), "prefix": ' + _STR + r', "rank": ' + _STR + r', '
    r'(?:"reason": (?:null|"[^"\\\n]*(?:\\.[^"\\\n]*)*"), )?'
    r'(?:"recorder_s": [0-9]{1,9}(?:\.[0-9]+)?(?:e-[0-9]{1,3})?, )?'
    r'"seconds": ' + _SECONDS + r', (?:"start": "([0-9A-Za-z_-]{1,64})", )?'
    r'"time": ((?:[0-6][0-9]{9}|7[0-2][0-9]{8}|[0-9]{1,9})(?:\.[0-9]+)?), '
    r'"tree": "(aot|backend)", "v": 1\}[ \t\r]*$', re.M)
_HEAD = '{"argv": ['


class _Bad(ValueError):
    pass


def _seconds(v: Any) -> float | None:
    """A duration as the ledger reader accepts one (finite, not negative)."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < math.inf:
        raise _Bad("a duration that is not a number of seconds")
    try:
        return float(v)
    except OverflowError:  # an int past 1e308 (found by the fuzzer)
        raise _Bad("a duration that is not a number of seconds") from None


def parse_line(line: str) -> LedgerRow:
    """One ledger line in any JSON form, judged by the ledger reader's own rules
    (:func:`vllm_cache_tools.read.manifest.parse_ledger_line`); ``ValueError`` (its one-line
    reason) for what is not an event, or is an event kind statistics do not know."""
    try:
        e = parse_ledger_line(line.encode("utf-8", errors="surrogateescape"))
    except ReadError as exc:
        raise _Bad(str(exc)) from None
    if e.event not in EVENTS or e.tree not in TREES:
        raise _Bad(f"unknown event {e.event!r} in tree {e.tree!r}")
    # The two fields that reader does not keep (the line is known to be a small JSON object).
    extra = json.loads(line)
    start = extra.get("start")
    if start is not None and not isinstance(start, str):
        raise _Bad("start is not a string")
    return LedgerRow(e.time, e.event, e.tree, e.key, e.rank, e.prefix, e.host,
                     e.manifest or None, e.pid, start or None, e.seconds,
                     _seconds(extra.get("dynamo_s")))


def to_row(raw: RawRow) -> LedgerRow:
    """A fast-path row as a :class:`LedgerRow` (every number in it is valid as it stands)."""
    dyn, event, host, key, manifest, pid, prefix, rank, seconds, start, t, tree = raw
    return LedgerRow(float(t), event, tree, key, rank, prefix, host, manifest or None,
                     None if pid == "null" else int(pid), start or None,
                     None if seconds == "null" else float(seconds),
                     float(dyn) if dyn else None)


def to_raw(row: LedgerRow) -> RawRow:
    """The inverse of :func:`to_row` (``repr`` of a float reads back exactly)."""
    def num(v: float | None) -> str:
        return "null" if v is None else repr(v)

    return ("" if row.dynamo_s is None else repr(row.dynamo_s), row.event, row.host, row.key,
            row.manifest or "", "null" if row.pid is None else str(row.pid), row.prefix, row.rank,
            num(row.seconds), row.start or "", repr(row.time), row.tree)


def _fast(text: str, n: int) -> list[RawRow] | None:
    """The rows of ``text`` (``n`` whole lines) when every line is in the recorder's own form
    and holds one event; ``None`` when one is not (the caller reads them one by one)."""
    if not text.startswith(_HEAD) or text.count(_HEAD) != n \
            or text.count("\n" + _HEAD) != n - 1:
        return None  # a blank, foreign or glued line
    rows: list[RawRow] = _EVENT.findall(text)
    if len(rows) != n:
        return None
    return rows


def _slow(lines: list[str], label: str, first: int) -> Iterator[RawRow | LedgerProblem]:
    for n, raw in enumerate(lines, first):
        if not raw or raw.isspace():
            continue
        if len(raw) > MAX_LINE_BYTES:
            yield LedgerProblem(label, n, "not a ledger event (line too long)")
            continue
        try:
            yield to_raw(parse_line(raw))
        except ValueError as exc:
            yield LedgerProblem(label, n, f"not a ledger event ({exc})" if str(exc) else
                                "not a ledger event")


def read_batches(path: Path, name: str | None = None
                 ) -> Iterator[list[RawRow] | LedgerProblem]:
    """The events of one ledger file, in file order: lists of :data:`RawRow` (see
    :func:`to_row`), with a :class:`LedgerProblem` for each line that is not an event and one
    (line 0) for a file that cannot be read. ``name``: how problems name the file."""
    label = name or path.name
    try:
        f = open_noatime(path)
    except OSError as exc:
        yield LedgerProblem(label, 0, str(exc) if isinstance(exc, UnreadableError)
                            else f"cannot read: {exc.strerror or exc}")
        return
    line = 0
    tail = b""
    with f:
        while True:
            try:
                chunk = f.read(CHUNK_BYTES)
            except OSError as exc:
                yield LedgerProblem(label, line, f"cannot read: {exc.strerror or exc}")
                return
            if not chunk:
                break
            data = tail + chunk
            cut = data.rfind(b"\n") + 1
            if cut == 0:
                if len(data) <= MAX_LINE_BYTES:
                    tail = data
                    continue
                line += 1  # one endless line: reported once, skipped to its end
                yield LedgerProblem(label, line, "not a ledger event (line too long)")
                while chunk and b"\n" not in chunk:
                    chunk = f.read(CHUNK_BYTES)
                data = chunk[chunk.find(b"\n") + 1:] if chunk else b""
                cut = data.rfind(b"\n") + 1
            tail = data[cut:]
            yield from _block(data[:cut], label, line)
            line += data.count(b"\n", 0, cut)
    if tail:
        yield from _block(tail + b"\n", label, line)


def _block(block: bytes, label: str, line: int) -> Iterator[list[RawRow] | LedgerProblem]:
    if not block:
        return
    text = block.decode("utf-8", errors="replace")
    n = text.count("\n")
    rows = _fast(text, n)
    if rows is not None:
        yield rows
        return
    batch: list[RawRow] = []
    for item in _slow(text.split("\n")[:n], label, line + 1):
        if isinstance(item, LedgerProblem):
            yield item
        else:
            batch.append(item)
    yield batch


def first_row(path: Path, limit: int = MAX_LINE_BYTES) -> LedgerRow | None:
    """The first event among a ledger's first ``limit`` bytes (``None``: none there, or the
    file cannot be read)."""
    try:
        with open_noatime(path) as f:
            head = f.read(limit)
    except OSError:
        return None
    for line in head.decode("utf-8", errors="replace").split("\n"):
        try:
            return parse_line(line)
        except ValueError:
            continue
    return None


def read_rows(path: Path, name: str | None = None) -> Iterator[LedgerRow | LedgerProblem]:
    """Like :func:`read_batches`, one :class:`LedgerRow` at a time (for callers that are not
    counting millions)."""
    for b in read_batches(path, name):
        if isinstance(b, LedgerProblem):
            yield b
        else:
            yield from map(to_row, b)
