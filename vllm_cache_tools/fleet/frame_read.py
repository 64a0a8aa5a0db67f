"""A bundle file read by its frames in parallel. ``pack`` writes each entry as its own zstd
frame (:mod:`.frames`), so forked processes can each take a frame: decompress it, check its
members against the manifest as the one-stream reader does (:func:`.bundle_read.take_members`),
write them into the staging folder, and read each entry they wrote whole for the key proof
while its files are in the page cache (:attr:`.place.Staging.read`).

The order keeps every check before the first write: the trust check on the manifest's bytes
and signature, then the free space check on its file list (read in a few ms by
:func:`.records.manifest_files`); then the workers start, and the manifest is read and
checked in full here while they write (~0.15 s for 200 entries, most of it the recorder data
the hit check needs). It must list the very files the workers were checked against, or
nothing is placed.

Only a file that is a row of plain zstd frames, the first holding the manifest (and its
signature) alone, is read this way. Anything else (a pipe, one frame, a skippable frame,
damage, bytes after the last frame, too few cores, another thread running) goes to the
one-stream reader, which reports what is wrong with it."""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import stat
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zstandard

from vllm_cache_tools.fleet.bundle_read import (
    OnHead,
    OnSizes,
    check_complete,
    expected_files,
    listed_twice,
    parse_manifest,
    read_raw_head,
    rest_of_stream,
    take_members,
    tar_over,
    write_batch,
)
from vllm_cache_tools.fleet.errors import BundleError
from vllm_cache_tools.fleet.key_proof import read_staged
from vllm_cache_tools.fleet.place import Staging
from vllm_cache_tools.fleet.records import BundleManifest, FileRecord, ManifestFiles, manifest_files
from vllm_cache_tools.shared_file import SharedAppendFile
from vllm_cache_tools.store.folders import scan_workers
from vllm_cache_tools.store.parallel_read import forked_workers, started
from vllm_cache_tools.store.types import Entry

FRAME_READ_CORES = 2
"""From this many cores (:func:`~vllm_cache_tools.store.folders.scan_workers`) a framed bundle
is read by forked processes; on one, by the one-stream reader's decompressing thread and writer
threads. It was 4 until two workers on 2 cores beat the one stream in 8 of 8 interleaved rounds
(4-27% faster; docs/benchmarks.md, issue 27 sessions 11 and 12)."""

FRAME_READ_WORKERS = 8
"""At most this many forked workers write a bundle's frames. On the 16-core device, 992 MB
(docs/benchmarks.md, issue 27 session 15, 6 interleaved rounds over two calls): 16 workers
5.02 / 6.05 s median with 61.5 / 73.0 CPU seconds, 8 workers 4.89 / 5.46 s with 32.8 / 36.6
(faster in 5 of 6 rounds), 4 workers 6.19 s: past 8, the writers contend in the kernel for
the one file system and the disk, and only burn CPU."""

MAX_BLOCKS_BASE = 4096
MIN_BLOCK_BYTES = 4096
"""A file of more zstd blocks than ``MAX_BLOCKS_BASE + size // MIN_BLOCK_BYTES`` is read by
the one-stream reader (pack's blocks hold up to 128 KiB each: ~14 KB compressed on average in
the bench's bundles)."""

_MAGIC = b"\x28\xb5\x2f\xfd"
_RESERVED_BLOCK = 3
_RLE_BLOCK = 1


def frame_extents(fd: int, size: int) -> list[tuple[int, int]] | None:
    """The ``(offset, length)`` of each zstd frame of the file, found by their block headers
    (RFC 8878: nothing is decompressed), or ``None`` where the file is not a row of plain
    zstd frames and nothing else."""
    out: list[tuple[int, int]] = []
    pos = blocks = 0
    most = MAX_BLOCKS_BASE + size // MIN_BLOCK_BYTES
    while pos < size:
        head = os.pread(fd, 18, pos)
        if not head.startswith(_MAGIC):
            return None
        try:
            p = pos + zstandard.frame_header_size(head)
            checksum = zstandard.get_frame_parameters(head).has_checksum
        except zstandard.ZstdError:
            return None
        while True:
            b = os.pread(fd, 3, p)
            if len(b) < 3:
                return None
            v = int.from_bytes(b, "little")
            kind = (v >> 1) & 3
            if kind == _RESERVED_BLOCK:
                return None
            p += 3 + (1 if kind == _RLE_BLOCK else v >> 3)
            blocks += 1
            if blocks > most:
                return None  # tiny blocks by the million: one pread each would take minutes
            if v & 1:
                break
        p += 4 if checksum else 0
        if p > size:
            return None
        out.append((pos, p - pos))
        pos = p
    return out


class _FrameFile(io.RawIOBase):
    """The bytes ``[start, end)`` of the file open at ``fd`` (``pread``: the fd's offset is
    shared with the processes it was forked into)."""

    def __init__(self, fd: int, start: int, end: int) -> None:
        self.fd, self.pos, self.end = fd, start, end

    def readable(self) -> bool:
        return True

    def readinto(self, out: Any) -> int:
        n = min(len(out), self.end - self.pos)
        if n <= 0:
            return 0
        got = os.preadv(self.fd, [memoryview(out)[:n]], self.pos)
        self.pos += got
        return got


def _frame_tar(fd: int, extent: tuple[int, int], path: Path) -> Any:
    start, length = extent
    return tar_over(io.BufferedReader(_FrameFile(fd, start, start + length), 1 << 20), path)


@dataclass(frozen=True)
class _Job:
    """What every worker reads (set before the workers are forked: nothing is pickled)."""

    fd: int
    path: Path
    staging: Staging
    extents: Sequence[tuple[int, int]]
    expect: Mapping[str, FileRecord]
    owner: Mapping[str, int]
    """Each entry file's member name -> the entry's index in the manifest."""
    entries: Sequence[tuple[str, int]]
    """Each entry's path in the bundle and how many files it has."""
    answers: SharedAppendFile
    """Where the workers put their entries' deep reads (:func:`_frames`)."""


_JOB: _Job | None = None


@dataclass(frozen=True)
class FrameDone:
    """One frame read: the members written, their bytes, and whether the archive's end was
    in it."""

    names: tuple[str, ...]
    size: int
    ended: bool


Read = tuple[str, Entry | None]
"""The deep read of an entry a frame held whole, by the entry's path."""


def _frames(chunk: Sequence[int]) -> tuple[int, int]:
    """A worker's task: its frames read; where the pickle of what it found (each frame's
    :class:`FrameDone`, the entries' deep reads) was put in the answers file. Only that
    offset crosses the pool's pipe: a worker that sends megabytes holds the pipe's lock while
    the pipe is full, and a pool ended then (at the first lying frame) waited forever for
    that lock."""
    job = _JOB
    assert job is not None
    done: list[FrameDone] = []
    reads: list[Read] = []
    for i in chunk:
        d, r = _one_frame(job, i)
        done.append(d)
        reads += r
    # One pickle a chunk: the entries' traced source texts once (parallel_read._SOURCES).
    return job.answers.append(pickle.dumps((done, reads), pickle.HIGHEST_PROTOCOL))


def _one_frame(job: _Job, i: int) -> tuple[FrameDone, list[Read]]:
    seen: set[str] = set()

    def small(name: str, data: bytes, rec: FileRecord) -> None:
        write_batch(job.staging, job.path, [(name, data, rec)], None)

    try:
        with _frame_tar(job.fd, job.extents[i], job.path) as tar:
            take_members(tar, job.path, job.staging, job.expect, seen, None, small, None)
            # Stopped on a zero block (the archive's end, for tar), or zeros follow.
            ended = tar.fileobj.tell() > tar.offset
            ended = rest_of_stream(tar, job.path) or ended
    except FileExistsError as exc:  # another frame wrote it: a member listed twice
        raise BundleError(listed_twice(job.path, str(exc.filename))) from None
    counts: dict[int, int] = {}
    for name in seen:
        k = job.owner.get(name)
        if k is not None:
            counts[k] = counts.get(k, 0) + 1
    read = [(job.entries[k][0], read_staged(job.staging.path / job.entries[k][0]))
            for k, n in sorted(counts.items()) if n == job.entries[k][1]]
    return FrameDone(tuple(seen), sum(job.expect[name].size for name in seen), ended), read


CHUNKS_PER_WORKER = 4
"""The frames are handed out in about this many chunks per worker, in order, each to the next
worker free: one chunk's answers cross as one pickle. Chunks hold equal counts of frames.
Chunks of equal compressed bytes were slower on the 16-core device (275 MB: 0.76-0.89 s
against 0.64-0.85 s, 3 interleaved rounds; docs/benchmarks.md, issue 27 session 19): a
bundle's light frames (the bench's backend entries: 3 small files each, read whole for the
proof) cost more than their bytes say, and they ended in two long chunks. Equal counts come
within ~5% of an even spread of the measured per-frame times over 8 workers."""


def frame_chunks(frames: int, count: int, first: int = 0) -> list[list[int]]:
    """The frames ``first, first + 1, ...`` (``frames`` of them) in order, in about ``count``
    chunks of equal frame counts (the last may be shorter)."""
    k = max(1, frames // max(1, count))
    return [list(range(first + j, first + min(j + k, frames))) for j in range(0, frames, k)]


WRITE_BEHIND: bool | None = None
"""Whether the workers start each staged file's writeback as they close it
(:func:`.place.start_writeback`), so that the disk writes while later frames are still being
decompressed and the one flush before the renames finds less left. ``None`` (the default):
where the workers leave a core idle for each they use (:data:`WRITE_BEHIND_SPARE`), as on
the 16-core device with its 8 workers, where 992 MB unpacked ~12% faster (6 of 6 interleaved
pairs), 275 MB level (3 of 6; docs/benchmarks.md, issue 27 session 12). The writeback's block
work runs in the worker that starts it: on 2 cores (2 workers, the cores busy) it cost 0.45
CPU seconds and made unpack slower, 275 MB 1.80 -> 1.68 s without it (4 of 4 interleaved
rounds), 992 MB 8.56 -> 7.95 s (issue 27 session 17). Not in the one-stream reader's writer
threads either: there it made unpack 4-18% slower on 2 cores (docs/fleet.md)."""
WRITE_BEHIND_SPARE = 2
"""Write-behind (:data:`WRITE_BEHIND` ``None``) from this many cores per worker."""


def write_behind(cores: int, workers: int) -> bool:
    """Whether ``workers`` frame workers on ``cores`` cores start each file's writeback
    (:data:`WRITE_BEHIND`)."""
    if WRITE_BEHIND is not None:
        return WRITE_BEHIND
    return cores >= WRITE_BEHIND_SPARE * workers


def _sha512_meanwhile(data: bytes) -> Callable[[], bytes]:
    """The SHA-512 of ``data``, hashed by a thread of its own (``hashlib`` lets go of the GIL)
    while this one reads the manifest's file list: the result's call waits for the thread
    (ended then: the workers are forked only where no other thread runs). For the bench's
    12.5 MB manifest both took 40 ms one after the other, 25 ms so (docs/benchmarks.md, issue
    27 session 19)."""
    out: list[bytes] = []
    t = threading.Thread(target=lambda: out.append(hashlib.sha512(data).digest()),
                         name="manifest-digest", daemon=True)
    t.start()

    def result() -> bytes:
        t.join()
        return out[0] if out else hashlib.sha512(data).digest()

    return result


def extract_framed(path: Path, staging: Staging, on_bytes: Callable[[int], None] | None,
                   on_manifest: Callable[[BundleManifest], None] | None,
                   on_head: OnHead | None, on_sizes: OnSizes | None) -> BundleManifest | None:
    """:func:`.bundle_read.extract` by frames in forked processes, or ``None`` (nothing
    done, no callback called) where this bundle or host is not for it (module doc)."""
    n = scan_workers()
    if n < FRAME_READ_CORES or threading.active_count() > 1:
        return None
    try:
        # Looked at before it is opened: opening a FIFO here and then again in the one-stream
        # reader would lose what its writer sent.
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None  # the one-stream reader says why
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        extents = frame_extents(fd, st.st_size)
        if extents is None or len(extents) < 3:
            return None
        with _frame_tar(fd, extents[0], path) as tar:
            raw, sig, after = read_raw_head(tar, path)
            if after is not None or rest_of_stream(tar, path):
                return None  # not a head frame as pack writes it
        digest = _sha512_meanwhile(raw) if on_head is not None else None
        try:
            listed = manifest_files(raw)
        finally:
            head = digest() if digest is not None else b""  # its thread ended: none left
        if listed is None:
            return None
        if on_head is not None:
            on_head(head, sig)
        if on_sizes is not None:
            on_sizes(sum(f.size for f in listed.files.values()), len(listed.files))
        return _extract(fd, path, staging, extents, raw, listed,
                        min(n, FRAME_READ_WORKERS, len(extents) - 1), on_bytes, on_manifest)
    finally:
        os.close(fd)


def _extract(fd: int, path: Path, staging: Staging, extents: Sequence[tuple[int, int]],
             raw: bytes, listed: ManifestFiles, n: int,
             on_bytes: Callable[[int], None] | None,
             on_manifest: Callable[[BundleManifest], None] | None) -> BundleManifest:
    """The frames handed to ``n`` forked workers at once; the manifest is read in full and
    checked here while they write (the trust and space checks were made on its bytes and
    its file list before), and must list the very files they were checked against."""
    global _JOB
    answers = SharedAppendFile(os.fspath(staging.path))  # the root's own file system
    staging.write_behind = write_behind(scan_workers(), n)
    _JOB = _Job(fd, path, staging, extents, listed.files, listed.owner, listed.entries,
                answers)
    try:
        with forked_workers(n) as pool:
            chunks = frame_chunks(len(extents) - 1, n * CHUNKS_PER_WORKER, first=1)
            done = started(pool, _frames, chunks, 1) if pool is not None \
                else map(_frames, chunks)
            m = parse_manifest(raw, path)
            if expected_files(m) != listed.files or listed.entries != tuple(
                    (e.path, len(e.files)) for e in m.entries):
                raise BundleError(f"{path}: the manifest lists other files when read in full "
                                  "(a key given twice?): nothing placed")
            if on_manifest is not None:
                on_manifest(m)
            seen: set[str] = set()
            last = len(extents) - 1
            for chunk, at in zip(chunks, done, strict=True):
                got, reads = pickle.loads(answers.read(*at))
                for i, frame in zip(chunk, got, strict=True):
                    for name in frame.names:
                        if name in seen:
                            raise BundleError(listed_twice(path, name))
                        seen.add(name)
                    if frame.ended and i != last:
                        raise BundleError(f"{path}: data after the end of the bundle "
                                          "(appended or concatenated): nothing placed")
                    staging.written += frame.size
                    if on_bytes is not None and frame.size:
                        on_bytes(frame.size)
                staging.read.update(reads)
        check_complete(path, listed.files, seen)
    finally:
        _JOB = None
        answers.close()  # before the flush: its pages are dropped, never written
    # The staged data goes to disk while the key proof runs (the one flush before the renames
    # then finds little left to write).
    staging.start_flush()
    return m


__all__ = ["CHUNKS_PER_WORKER", "FRAME_READ_CORES", "FRAME_READ_WORKERS",
           "MAX_BLOCKS_BASE", "MIN_BLOCK_BYTES",
           "WRITE_BEHIND", "WRITE_BEHIND_SPARE", "FrameDone", "extract_framed", "frame_chunks",
           "frame_extents", "write_behind"]
