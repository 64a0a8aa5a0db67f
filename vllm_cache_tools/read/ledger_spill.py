"""Ledger events partitioned to disk, for counts that would not fit in memory at once.

A fleet analysis groups events by start (``stats``' tally, ``drift``'s starts): everything it
keeps is per start, so a ledger with a million starts (one file from a million hosts, or one
host's years of restarts) needs memory for a million starts. :class:`Spill` splits the events
into ``parts`` files by a key the caller picks (the host, or the start), each a run of
msgpack frames of events in file order; each part is then read and counted on its own, with
the memory of one part. Events that share the key land in one part, in their order: a count
over each part, summed up, is the count over the whole (a grace hash partition).

Parts are written in a private temporary folder (``tempfile.mkdtemp``: mode 700, under
``$TMPDIR``), as arrays of the event's fields (about half the bytes of the JSON line: unknown
fields such as ``argv`` are not kept), read back by the same typed record, and removed when
the spill is closed, whatever happened."""

from __future__ import annotations

import contextlib
import os
import shutil
import struct
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType

import msgspec
import xxhash

from vllm_cache_tools.read.errors import UnreadableError
from vllm_cache_tools.read.ledger_stream import StatsEvent

FRAME_EVENTS = 4096
"""Events kept per part before they are written (a few MB over all parts)."""
MAX_PARTS = 256
"""Open part files at once (well under the usual 1024 descriptors)."""
_HEAD = struct.Struct("<I")


class _Packed(StatsEvent, array_like=True, frozen=True, gc=False):
    """A :class:`StatsEvent` as an array of its fields (on disk only)."""


_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(list[_Packed])
_astuple = msgspec.structs.astuple
_xxh = xxhash.xxh3_64_intdigest


class SpillError(UnreadableError):
    """A part could not be written or read back (e.g. no space left in ``$TMPDIR``)."""


class Spill:
    """Events partitioned by a stable hash of ``key(event)`` into ``parts`` temporary files;
    use as a context manager (the files go when it ends)."""

    def __init__(self, parts: int, key: Callable[[StatsEvent], str],
                 prefix: str = "vllm-cache-ledger-") -> None:
        self.parts = max(1, min(parts, MAX_PARTS))
        self.key = key
        self.events = 0
        self.bytes = 0
        self._dir = Path(tempfile.mkdtemp(prefix=prefix))
        self._buf: list[list[StatsEvent]] = [[] for _ in range(self.parts)]
        self._files = []
        try:
            for i in range(self.parts):
                fd = os.open(self._dir / f"{i}.part",
                             os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                self._files.append(os.fdopen(fd, "wb", buffering=1 << 16))
        except OSError as exc:
            self.close()
            raise SpillError(f"cannot spill ledger events to {self._dir}: "
                             f"{exc.strerror or exc}") from None

    def __enter__(self) -> Spill:
        return self

    def __exit__(self, t: type[BaseException] | None, v: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    @property
    def folder(self) -> Path:
        return self._dir

    def add(self, rows: Sequence[StatsEvent]) -> None:
        n, key, buf, full = self.parts, self.key, self._buf, FRAME_EVENTS
        # A stable hash (not Python's, salted per process): the same ledger gives the same
        # parts, so the order starts are met in, and any tie it breaks, is reproducible.
        for i, r in zip([_xxh(key(r).encode("utf-8", "surrogatepass")) % n for r in rows],
                        rows, strict=True):
            b = buf[i]
            b.append(r)
            if len(b) >= full:
                self._flush(i)
        self.events += len(rows)

    def _flush(self, i: int) -> None:
        b = self._buf[i]
        if not b:
            return
        data = _ENCODER.encode([_astuple(r) for r in b])
        b.clear()
        try:
            self._files[i].write(_HEAD.pack(len(data)))
            self._files[i].write(data)
        except OSError as exc:
            raise SpillError(f"cannot spill ledger events to {self._dir}: "
                             f"{exc.strerror or exc}") from None
        self.bytes += len(data) + _HEAD.size

    def finish(self) -> None:
        """Write what is buffered and close the part files for writing."""
        for i in range(self.parts):
            self._flush(i)
        try:
            for f in self._files:
                f.close()
        except OSError as exc:
            raise SpillError(f"cannot spill ledger events to {self._dir}: "
                             f"{exc.strerror or exc}") from None
        self._files = []

    def read(self, i: int) -> Iterator[list[StatsEvent]]:
        """Part ``i``'s events, in the order they were added, a frame at a time."""
        try:
            with open(self._dir / f"{i}.part", "rb") as f:
                while head := f.read(_HEAD.size):
                    (n,) = _HEAD.unpack(head)
                    data = f.read(n)
                    if len(data) != n:
                        raise SpillError(f"{self._dir}/{i}.part: cut short")
                    yield _DECODER.decode(data)  # type: ignore[misc]
        except OSError as exc:
            raise SpillError(f"cannot read back {self._dir}/{i}.part: "
                             f"{exc.strerror or exc}") from None
        except msgspec.MsgspecError as exc:  # changed under us: not our bytes any more
            raise SpillError(f"{self._dir}/{i}.part: {exc}") from None

    def drop(self, i: int) -> None:
        """Remove part ``i`` once it was counted (the folder shrinks as the count goes)."""
        with contextlib.suppress(OSError):
            os.unlink(self._dir / f"{i}.part")

    def close(self) -> None:
        for f in self._files:
            with contextlib.suppress(OSError):
                f.close()
        self._files = []
        shutil.rmtree(self._dir, ignore_errors=True)


def parts_for(size: int, part_bytes: int) -> int:
    """How many parts for ``size`` bytes of ledger lines, about ``part_bytes`` each."""
    return max(2, min(MAX_PARTS, -(-size // max(1, part_bytes))))
