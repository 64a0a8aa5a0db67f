"""A bundle's entries compressed while the selection still runs: each entry's members (tar
headers, bytes, padding) are one zstd frame, made by a worker thread as soon as the entry's
files are known, into an unnamed spool file beside the output; the writer then puts the
manifest's frame first and copies the entries' frames after it in the bundle's order
(:func:`.bundle.write_bundle`). Each file is read once: hashed (when the pack memo does not
know it) and compressed in the same pass, while the selection's proofs run.

The frames are deterministic: zstd's multi-threaded mode gives the same bytes for any number
of its workers and any write size (checked), and a frame depends only on its entry's files,
so the same entries give the same bundle whichever order the workers finish in. Frames in a
row are one zstd stream to every reader (``zstd -d``, ``tar -I zstd``, :mod:`.bundle_read`)."""

from __future__ import annotations

import hashlib
import os
import tarfile
import tempfile
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, TimeoutError
from dataclasses import dataclass
from multiprocessing.pool import Pool
from typing import IO, Any, cast

import zstandard

from vllm_cache_tools.fleet.errors import FleetError
from vllm_cache_tools.fleet.records import FileRecord
from vllm_cache_tools.fleet.selection import LocalFile, file_ident
from vllm_cache_tools.fleet.tar_headers import member_header
from vllm_cache_tools.layout import is_manifest_name
from vllm_cache_tools.read.manifest import MAX_MANIFEST_BYTES
from vllm_cache_tools.read.noatime import walked_fd
from vllm_cache_tools.shared_file import SharedAppendFile
from vllm_cache_tools.store.folders import scan_workers
from vllm_cache_tools.store.parallel_read import WORKER_LOST, worker_pids

_BUF = 1 << 20
_WATCH_S = 1.0
"""How often a wait for a forked worker's entry looks whether the workers are all there."""
_FLUSH = 4 << 20
"""A worker hands its compressed bytes to the spool in pieces of about this size."""
_GATHER = 8 << 20
MAX_WORKERS = 4
"""Entries compressed at once, at most (one per core below). Each compressor has
``cores // workers`` zstd threads of its own (the bytes do not depend on that number)."""

Walked = Sequence[tuple[str, str, bool, tuple[int, ...]]]


def compressor(level: int, threads: int = 1) -> zstandard.ZstdCompressor:
    """The bundle's compressor: multi-threaded mode (its bytes are the same for any number of
    threads), frames that carry their checksum."""
    return zstandard.ZstdCompressor(level=level, write_checksum=True, threads=max(1, threads))


@dataclass(frozen=True)
class Framed:
    """One entry compressed: its files (hashed where they were not known), whether each
    kept the walk's identity through its read, and where its frame lies in the spool."""

    files: tuple[LocalFile, ...]
    same: bool
    extents: tuple[tuple[int, int], ...]
    tar_size: int
    """The frame's uncompressed size: the entry's members (a multiple of 512)."""
    manifests: tuple[tuple[str, bytes], ...] = ()
    """The recorder manifests carried (path here, the bytes archived; those over
    :data:`~vllm_cache_tools.read.manifest.MAX_MANIFEST_BYTES` apart): the secret check
    reads what the bundle holds, not what the file holds by then."""


class FrameSpool:
    """Entries' frames made by worker threads, or by forked processes
    (:meth:`use_processes`), into an unnamed temporary file in ``directory`` (the output's
    folder: the same filesystem; the system's temporary folder when ``None``: created
    without a name, no link there is followed). Start it after any process pool has forked
    (its threads start at the first :meth:`submit`). Use as a context manager: leaving it
    cancels what is queued, waits for what runs and drops the file."""

    def __init__(self, directory: str | None, level: int, workers: int | None = None) -> None:
        cores = scan_workers()
        self.workers = max(1, min(workers or cores, MAX_WORKERS))
        self.threads = max(1, cores // self.workers)
        self.level = level
        self.directory = directory
        # The spool: forked workers (use_processes) each take their piece of it.
        self._spool = SharedAppendFile(directory)
        self._pool: ThreadPoolExecutor | None = None
        self._procs: Pool | None = None
        self._jobs: dict[str, Future[Framed]] = {}
        self._local = threading.local()
        _SPOOLS[id(self)] = self

    def __enter__(self) -> FrameSpool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        self._spool.close()
        _SPOOLS.pop(id(self), None)

    def use_processes(self, pool: Pool) -> None:
        """Make the entries submitted from now on in ``pool``'s processes (forked after this
        spool was made: they hold it), one zstd thread each: they do not share this
        process's GIL (threads here slowed the selection's proofs beside them). Wait for them
        (:meth:`wait`) before the pool ends."""
        self._procs, self.threads = pool, 1
        self._pids = worker_pids(pool)

    def wait(self) -> None:
        """Wait for every entry submitted (raising the first error)."""
        for job in list(self._jobs.values()):
            self._result(job)

    def carried(self) -> dict[str, bytes]:
        """The recorder manifests archived, by path here, as archived (:meth:`wait` first)."""
        return {src: raw for job in self._jobs.values() if job.done() and not job.exception()
                for src, raw in job.result().manifests}

    def _result(self, job: Future[Framed]) -> Framed:
        """The job's result; :class:`FleetError` where a worker process ended without
        answering (killed: a pool does not tell, and its job would be waited for forever)."""
        while True:
            try:
                return job.result(timeout=_WATCH_S)
            except TimeoutError:
                if self._procs is not None and worker_pids(self._procs) != self._pids:
                    raise FleetError(WORKER_LOST) from None

    def submit(self, prefix: str, walked: Walked,
               known: Sequence[LocalFile] | None = None) -> Future[Framed]:
        """Compress the entry whose members are named ``prefix/<relative path>``: ``walked``
        (:func:`.selection.entry_walk`'s files) hashed on the way, or the ``known`` files
        (records whose digests are known: a file whose identity moved since is hashed and
        checked against its record). Once per prefix; later calls return the first job."""
        job = self._jobs.get(prefix)
        if job is None and self._procs is not None:
            job = self._jobs[prefix] = Future()
            self._procs.apply_async(_frame_in_worker, (id(self), prefix, walked, known),
                                    callback=job.set_result, error_callback=job.set_exception)
        elif job is None:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.workers,
                                                thread_name_prefix="vllm-cache-pack")
            job = self._jobs[prefix] = self._pool.submit(self._frame, prefix, walked, known)
        return job

    def framed(self, prefix: str) -> Framed:
        """The entry's frame (waits for it; its worker's error is raised here)."""
        job = self._jobs.get(prefix)
        if job is None:
            raise FleetError(f"{prefix}: not compressed for the bundle (an internal error)")
        return self._result(job)

    def copy(self, framed: Framed, write: Callable[[bytes], object]) -> None:
        """Hand the frame's bytes to ``write``, in order."""
        fd = self._spool.fileno()
        for off, n in framed.extents:
            while n > 0:
                b = os.pread(fd, min(n, _BUF), off)
                if not b:
                    raise FleetError("the pack's spool file shrank (removed or truncated?)")
                write(b)
                off += len(b)
                n -= len(b)

    def _append(self, b: bytes | bytearray) -> tuple[int, int]:
        try:
            return self._spool.append(b)
        except OSError as exc:
            raise FleetError(f"cannot write the pack's spool file in "
                             f"{self.directory or tempfile.gettempdir()}: "
                             f"{exc.strerror or exc}: not packed") from None

    def _frame(self, prefix: str, walked: Walked, known: Sequence[LocalFile] | None) -> Framed:
        extents: list[tuple[int, int]] = []
        sink = _Pieces(_FLUSH, lambda b: extents.append(self._append(b)))
        files: list[LocalFile] = []
        manifests: list[tuple[str, bytes]] = []
        same = True
        size = 0
        cctx = getattr(self._local, "cctx", None)
        if cctx is None:  # one per worker thread: a multi-threaded context is costly to make
            cctx = self._local.cctx = compressor(self.level, self.threads)
        with cctx.stream_writer(cast(IO[bytes], sink), closefd=False, write_size=_BUF) as zw:
            z = _Pieces(_GATHER, zw.write)
            todo: Sequence[Any] = known if known is not None else walked
            for item in todo:
                source = item.source if isinstance(item, LocalFile) else item[1]
                keep = _carried(source)
                try:
                    if isinstance(item, LocalFile):
                        lf, n = item, write_known(z, f"{prefix}/{item.record.path}", item,
                                                  keep)
                    else:
                        rel, path, exe, ident = item
                        lf, n = _hashed(z, prefix, rel, path, exe, keep)
                        same &= lf.ident == ident
                except OSError as exc:
                    rel = item.record.path if isinstance(item, LocalFile) else item[0]
                    raise FleetError(f"cannot read {prefix}/{rel}: {exc.strerror or exc}: "
                                     "not packed") from None
                if keep is not None and len(keep) <= MAX_MANIFEST_BYTES:
                    manifests.append((source, bytes(keep)))
                files.append(lf)
                size += n
            z.flush()
        sink.flush()
        return Framed(tuple(files), same, tuple(extents), size, tuple(manifests))


_SPOOLS: dict[int, FrameSpool] = {}
"""The open spools, by id: a forked worker finds the one its job names (it holds a copy)."""


def _frame_in_worker(spool: int, prefix: str, walked: Walked,
                     known: Sequence[LocalFile] | None) -> Framed:
    s = _SPOOLS[spool]
    s.threads = 1  # one zstd thread a worker: there is a worker per core
    return s._frame(prefix, walked, known)


def _carried(source: str) -> bytearray | None:
    """Where the bytes of the file at ``source`` are to be kept as it is archived: a
    recorder manifest's (the secret check reads them)."""
    return bytearray() if is_manifest_name(os.path.basename(source)) else None


class _Pieces:
    """Writes gathered and handed to ``emit`` in pieces of at least ``limit`` bytes: the
    entry's tar bytes to its compressor (one call, one release of the GIL, for many small
    files instead of three calls a file), the compressor's output to the spool."""

    def __init__(self, limit: int, emit: Callable[[bytearray], object]) -> None:
        self.limit, self.emit = limit, emit
        self.buf = bytearray()

    def write(self, b: Any) -> int:
        self.buf += b
        if len(self.buf) >= self.limit:
            self.flush()
        return len(b)

    def flush(self) -> None:
        if self.buf:
            self.emit(self.buf)
            self.buf = bytearray()


def _copy(z: Any, fd: int, name: str, size: int, h: Any, keep: bytearray | None) -> None:
    """``size`` bytes of the file open at ``fd`` into the frame and its padding, hashed into
    ``h`` when given, kept in ``keep`` when given, up to just past
    :data:`MAX_MANIFEST_BYTES` (a file that grew is caught by its identity afterwards)."""
    left = size
    while left > 0:
        b = os.read(fd, min(_BUF, left))
        if not b:
            raise FleetError(f"{name} shrank while it was packed (being written?): run pack "
                             "again")
        if h is not None:
            h.update(b)
        if keep is not None and len(keep) <= MAX_MANIFEST_BYTES:
            keep += b
        z.write(b)
        left -= len(b)
    pad = -size % tarfile.BLOCKSIZE
    if pad:
        z.write(tarfile.NUL * pad)


def _hashed(z: Any, prefix: str, rel: str, path: str, exe: bool,
            keep: bytearray | None = None) -> tuple[LocalFile, int]:
    """A file the memo does not know: archived at its size when opened, hashed on the way
    (its identity after the read is its record's: a file replaced since the walk is carried
    as it is now)."""
    name = f"{prefix}/{rel}"
    h = hashlib.sha256()
    with walked_fd(path) as (fd, st):
        size = st.st_size
        header = member_header(name, size, exe)
        z.write(header)
        _copy(z, fd, name, size, h, keep)
        after = file_ident(os.fstat(fd))
    if after[2] != size:
        raise FleetError(f"{name} changed while it was packed (being written?): run pack again")
    return (LocalFile(FileRecord(rel, size, h.hexdigest(), exe), path, after),
            len(header) + size + (-size % tarfile.BLOCKSIZE))


def write_known(z: Any, name: str, lf: LocalFile, keep: bytearray | None = None) -> int:
    """Archive a file whose record is known as member ``name`` into ``z``: as it is when its
    identity is the one the record was made at (checked again after the read), else hashed
    on the way and refused if its bytes differ from the record. Returns the member's size in
    the tar stream."""
    rec = lf.record
    with walked_fd(lf.source) as (fd, st):
        header = member_header(name, rec.size, rec.executable)
        z.write(header)
        if lf.ident is not None and file_ident(st) == lf.ident:
            _copy(z, fd, name, rec.size, None, keep)
            if file_ident(os.fstat(fd)) != lf.ident:
                raise FleetError(f"{name} changed while it was packed (being written?): run "
                                 "pack again")
        else:
            h = hashlib.sha256()
            _copy(z, fd, name, rec.size, h, keep)
            if h.hexdigest() != rec.sha256:
                raise FleetError(f"{name} changed while it was packed (being written?): run "
                                 "pack again")
    return len(header) + rec.size + (-rec.size % tarfile.BLOCKSIZE)


__all__ = ["MAX_WORKERS", "FrameSpool", "Framed", "compressor", "write_known"]
