"""The first pack in one pass: each file read once, its bytes hashed and compressed together.

The manifest comes first in a bundle and lists every file's sha256, so a pack used to read
every file twice: once to hash it (the selection), once to archive it (the writer). Here the
selection's hashing threads do both: each entry's files become its tar members (header, bytes,
padding), compressed into zstd frames written to a spool file of the thread's own; the
digests they return are those of the bytes in those frames. The bundle is then the
manifest's frame, the entries' frames copied from the spool in the bundle's order, and the
end of the archive (:func:`.bundle.write_bundle`).

The format does not change: a zstd stream may hold any number of frames, which decompress to
their concatenation (``zstd -d``, ``tar -I zstd``, and unpack's reader, which reads across
frames), and that concatenation is the same tar stream as before. Each frame is compressed by
one thread at the bundle's level, cut at file boundaries after :data:`FRAME_BYTES` of input
(so a frame's bytes depend on its files only: the same entries give the same bundle on any
machine, whichever thread compressed them, and with or without the pack memo).

A file is read from one open descriptor: what is hashed is what is packed. A file written in
place while it is read (its size or mtime moved between the ``fstat`` before and after, or it
gave other than its size in bytes) is refused ("changed while it was packed"), as before; a
hard link made to it meanwhile (its ctime alone moves) is not a change of its bytes."""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import zstandard

from vllm_cache_tools.fleet.errors import FleetError
from vllm_cache_tools.fleet.records import FileRecord
from vllm_cache_tools.fleet.selection import LocalFile, Walked, file_ident
from vllm_cache_tools.read.noatime import open_noatime

CHUNK = 1 << 20
FRAME_BYTES = 4 << 20
"""A frame is closed at the first file boundary past this much input: frames small enough
that the threads share an entry's work, large enough that zstd's window sees many files."""
_BLOCK = 512


def _pad(n: int) -> bytes:
    return b"\0" * (-n % _BLOCK)


@dataclass(frozen=True)
class Frame:
    """Compressed bytes in one thread's spool file."""

    spool: IO[bytes]
    offset: int
    length: int
    tar_bytes: int
    """Bytes of tar stream it decompresses to."""


@dataclass(frozen=True)
class SpooledEntry:
    """An entry's files, hashed, and the frames holding them as tar members named
    ``prefix/<path>``."""

    prefix: str
    files: tuple[LocalFile, ...]
    frames: tuple[Frame, ...]


def _changed(name: str) -> FleetError:
    return FleetError(f"{name} changed while it was packed (being written?): run pack again")


class Spool:
    """Frames of the entries compressed so far, by entry folder; spool files (unlinked
    temporary files, one per thread) removed at :meth:`close`."""

    def __init__(self, level: int, folder: str | os.PathLike[str] | None = None) -> None:
        self.level = level
        self.folder = os.fspath(folder) if folder is not None else None
        self._local = threading.local()
        self._lock = threading.Lock()
        self._files: list[IO[bytes]] = []
        self.entries: dict[str, SpooledEntry] = {}

    def _spool(self) -> IO[bytes]:
        f: IO[bytes] | None = getattr(self._local, "f", None)
        if f is None:
            # Closed by close(): one per thread, kept for the pack's whole length.
            f = tempfile.TemporaryFile(prefix=".vllm-cache-pack-", dir=self.folder)  # noqa: SIM115
            self._local.f = f
            with self._lock:
                self._files.append(f)
        return f

    def read_entry(self, prefix: str, walked: Walked) -> tuple[tuple[LocalFile, ...], bool]:
        """The selection's hasher (:func:`.selection.select`'s ``reader``): the files of one
        entry folder (``prefix``: its path under the vLLM root), hashed and compressed once;
        and whether each was the walk's file (the same identity after the read)."""
        from vllm_cache_tools.fleet.bundle import ustar_header

        out: list[LocalFile] = []
        same = True
        frames: list[Frame] = []
        spool = self._spool()
        cctx = zstandard.ZstdCompressor(level=self.level, write_checksum=True)
        cobj = cctx.compressobj()
        start = spool.seek(0, os.SEEK_END)
        tar_bytes = 0

        def emit(b: bytes) -> None:
            if b:
                spool.write(b)

        def close_frame() -> None:
            nonlocal cobj, start, tar_bytes
            emit(cobj.flush())
            end = spool.tell()
            frames.append(Frame(spool, start, end - start, tar_bytes))
            cobj = cctx.compressobj()
            start, tar_bytes = end, 0

        for rel, path, exe, ident in walked:
            name = f"{prefix}/{rel}" if prefix else rel
            with open_noatime(path, buffering=0) as f:
                before = os.fstat(f.fileno())
                size = before.st_size
                header = ustar_header(name, size, exe) or _pax_header(name, size, exe)
                emit(cobj.compress(header))
                h = hashlib.sha256()
                left = size
                while left > 0:
                    b = f.read(min(CHUNK, left))
                    if not b:
                        break
                    h.update(b)
                    emit(cobj.compress(b))
                    left -= len(b)
                after = os.fstat(f.fileno())
                if left or f.read(1) or (after.st_size, after.st_mtime_ns) != (
                        before.st_size, before.st_mtime_ns):
                    raise _changed(name)
                emit(cobj.compress(_pad(size)))
                tar_bytes += len(header) + size + len(_pad(size))
                now = file_ident(after)
            same &= now == ident
            out.append(LocalFile(FileRecord(rel, size, h.hexdigest(), exe), path, now))
            if tar_bytes >= FRAME_BYTES:
                close_frame()
        if tar_bytes:
            close_frame()
        files = tuple(out)
        with self._lock:
            self.entries[prefix] = SpooledEntry(prefix, files, tuple(frames))
        return files, same

    def read_known(self, prefix: str, files: Sequence[LocalFile]) -> tuple[Frame, ...]:
        """The frames of files whose digests are known (the pack memo's, or a snapshot's
        name): read, hashed and compressed once as :meth:`read_entry` does, and refused when
        a file's bytes are not the ones its record names."""
        walked = [(f.record.path, f.source, f.record.executable, f.ident or ())
                  for f in files]
        got, _ = self.read_entry(prefix, walked)
        for want, have in zip(files, got, strict=True):
            if have.record != want.record:
                name = f"{prefix}/{want.record.path}" if prefix else want.record.path
                raise _changed(name)
        return self.entries[prefix].frames

    def flush(self) -> None:
        """Every spool file's buffered bytes written (before its frames are read back)."""
        with self._lock:
            for f in self._files:
                f.flush()

    def frames_for(self, prefix: str, files: Sequence[LocalFile]) -> tuple[Frame, ...] | None:
        """The frames of the entry at ``prefix`` when they hold exactly ``files`` (the same
        paths, sizes, digests and modes), else ``None`` (then the writer reads them)."""
        e = self.entries.get(prefix)
        if e is None or [x.record for x in e.files] != [x.record for x in files]:
            return None
        return e.frames

    def close(self) -> None:
        with self._lock:
            for f in self._files:
                f.close()
            self._files.clear()
            self.entries.clear()

    def __enter__(self) -> Spool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _pax_header(name: str, size: int, exe: bool) -> bytes:
    from vllm_cache_tools.fleet.bundle import _header, _info

    return _header(_info(name, size, exe))


def copy_frames(frames: Sequence[Frame]) -> Iterator[bytes]:
    """The frames' bytes, in order, in pieces of at most :data:`CHUNK`."""
    for fr in frames:
        fd = fr.spool.fileno()
        pos, left = fr.offset, fr.length
        while left > 0:
            b = os.pread(fd, min(CHUNK, left), pos)
            if not b:
                raise FleetError("the pack's spool file was cut short: run pack again")
            yield b
            pos += len(b)
            left -= len(b)


def spool_folder(out: Path) -> str | None:
    """Where the spool files go: beside the bundle (its file system has room for the
    bundle), or the temporary folder when the bundle goes to stdout."""
    if str(out) == "-":
        return None
    parent = out.parent if str(out.parent) else Path(".")
    return str(parent) if parent.is_dir() else None


__all__ = ["FRAME_BYTES", "Frame", "Spool", "SpooledEntry", "copy_frames", "spool_folder"]
