"""Reading a bundle (:mod:`.bundle` describes the format): the manifest alone, or every
member checked and written into a staging folder. Nothing in the archive is trusted: the
manifest is checked field by field before anything is written, and every member must be a
regular file the manifest lists, of the listed size and sha256."""

from __future__ import annotations

import contextlib
import hashlib
import io
import tarfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, BinaryIO

import msgspec
import zstandard

from vllm_cache_tools.fleet.errors import BundleError, FleetError
from vllm_cache_tools.fleet.place import Staging
from vllm_cache_tools.fleet.records import (
    MANIFEST_NAME,
    BundleManifest,
    FileRecord,
    RecordedJSON,
    manifest_from_json,
)
from vllm_cache_tools.fleet.sshsig import MAX_SIGNATURE_BYTES
from vllm_cache_tools.fleet.trust import BUNDLE_SIG_NAME
from vllm_cache_tools.read import jsontext

MAX_MANIFEST_BYTES = 64 * 1024 * 1024
_BUF = 1 << 20


_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_OTHER_KINDS = ((b"\x1f\x8b", "a gzip file"), (b"\xfd7zXZ\x00", "an xz file"),
                (b"BZh", "a bzip2 file"), (b"PK\x03\x04", "a zip file"))
"""Leading bytes of archives a bundle is mistaken for (``x.tar.gz`` was "truncated or corrupt
bundle (unknown frame descriptor)", as if a bundle had been damaged)."""


def archive_kind_problem(head: bytes) -> str | None:
    """Why a file starting with ``head`` is not a bundle at all, or ``None`` when it starts
    like one (a zstd frame; a bundle's damage is found while reading it)."""
    if head.startswith(_ZSTD_MAGIC):
        return None
    kind = next((k for magic, k in _OTHER_KINDS if head.startswith(magic)), None)
    if kind is None and len(head) >= 262 and head[257:262] == b"ustar":
        kind = "an uncompressed tar"
    if kind is None:
        kind = "empty" if not head else "no zstd frame at its start"
    return f"not a zstd bundle ({kind}; bundles are made by `vllm-cache pack`)"


@contextmanager
def _open_tar(path: Path) -> Iterator[tarfile.TarFile]:
    try:
        f: BinaryIO = open(path, "rb")  # noqa: SIM115
    except OSError as exc:
        raise BundleError(f"cannot read {path}: {exc.strerror or exc}") from None
    with f, tar_over(f, path) as tar:
        yield tar


@contextmanager
def tar_over(f: BinaryIO, path: Path) -> Iterator[tarfile.TarFile]:
    """The tar stream of the zstd frames read from ``f`` (a buffered reader: a file, a pipe,
    or one frame's bytes of a bundle); ``path`` names the bundle in errors."""
    try:
        try:
            head = f.peek(512)  # type: ignore[attr-defined]  # a BufferedReader: pipes too
        except OSError as exc:
            raise BundleError(f"cannot read {path}: {exc.strerror or exc}") from None
        why = archive_kind_problem(head) if len(head) >= 4 or not head else None
        if why is not None:
            raise BundleError(f"{path}: {why}")
        reader = _Prefetch(zstandard.ZstdDecompressor().stream_reader(
            f, read_size=_BUF, read_across_frames=True))
        try:
            # tarfile's own stream mode ("r|") keeps the unread rest of its buffer and joins
            # and slices it at every read, 512-byte headers included (two thirds of the time
            # of reading a bundle through it); its plain mode over a reader that can only
            # seek forward reads each header and member straight from the decompressor's
            # chunks. The members are the same: tarfile parses every header either way.
            with tarfile.open(fileobj=_Forward(reader), mode="r:") as tar:
                yield tar
        finally:
            reader.close()
    except (zstandard.ZstdError, tarfile.TarError, EOFError) as exc:
        raise BundleError(f"{path}: truncated or corrupt bundle ({_why(exc)})") from None


class _Forward(io.RawIOBase):
    """A decompressed stream that can seek forward only (by reading), which is all tarfile's
    plain mode does when members are read in order; a backward seek is a corrupt bundle."""

    def __init__(self, src: _Prefetch) -> None:
        self.src = src
        self.pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_CUR:
            offset += self.pos
        elif whence != io.SEEK_SET:
            raise tarfile.ReadError("seek from the end of a stream")
        if offset < self.pos:
            raise tarfile.ReadError("a member before the one read (corrupt bundle)")
        while self.pos < offset:
            if not self.read(min(offset - self.pos, _BUF)):
                break
        return self.pos

    def read(self, n: int | None = -1) -> bytes:
        if n is None or n < 0:
            n = MAX_MANIFEST_BYTES + 1  # tarfile never asks for everything
        b = self.src.take(n)
        self.pos += len(b)
        return b

    def readinto(self, out: Any) -> int:
        b = self.read(len(out))
        out[:len(b)] = b
        return len(b)


class _Prefetch(io.RawIOBase):
    """Decompress in a second thread (zstd releases the GIL) while this one parses and
    writes, as ``tar -I zstd -x`` decompresses in a second process. Errors of the
    decompressor are raised here, in order."""

    def __init__(self, src: Any, depth: int = 8) -> None:
        import queue
        import threading

        self.q: queue.Queue[bytes | BaseException] = queue.Queue(depth)
        self.buf = b""
        self.pos = 0
        self.done = False
        self.stop = threading.Event()
        self.src = src
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self) -> None:
        import queue

        try:
            while not self.stop.is_set():
                b = self.src.read(_BUF)
                self._put(b)
                if not b:
                    return
        except BaseException as exc:  # handed to the reader
            with contextlib.suppress(queue.Full):
                self._put(exc)

    def _put(self, item: bytes | BaseException) -> None:
        import queue

        while not self.stop.is_set():
            try:
                self.q.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def readable(self) -> bool:
        return True

    def take(self, n: int) -> bytes:
        """Up to ``n`` bytes (fewer only at the end), sliced from the decompressed chunks:
        a read within one chunk is one copy, a whole chunk none."""
        parts = []
        while n > 0:
            self._refill()
            if self.pos >= len(self.buf):
                break
            k = min(n, len(self.buf) - self.pos)
            parts.append(self.buf[self.pos:self.pos + k])
            self.pos += k
            n -= k
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _refill(self) -> None:
        """Take the next decompressed chunk once the current one is used up (an empty chunk
        is the end; an exception from the decompressing thread is raised here)."""
        while self.pos >= len(self.buf) and not self.done:
            item = self.q.get()
            if isinstance(item, BaseException):
                self.done = True
                raise item
            if not item:
                self.done = True
            self.buf, self.pos = item, 0

    def readinto(self, out: Any) -> int:
        self._refill()
        n = min(len(out), len(self.buf) - self.pos)
        out[:n] = self.buf[self.pos:self.pos + n]
        self.pos += n
        return n

    def close(self) -> None:
        import queue

        self.stop.set()
        # A thread waiting to put a chunk in the full queue would wait out its timeout (up to
        # 0.1 s: every read of a bundle's head alone paid it): take what is there.
        with contextlib.suppress(queue.Empty):
            while True:
                self.q.get_nowait()
        self.t.join(5)
        with contextlib.suppress(Exception):
            self.src.close()
        super().close()


def _why(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:200]


@dataclass(frozen=True)
class BundleHead:
    """A bundle's manifest, the SHA-512 of its bytes (what a signature covers) and its
    signature (the member after it, :data:`.trust.BUNDLE_SIG_NAME`) when it has one."""

    manifest: BundleManifest
    sha512: bytes
    signature: bytes | None = None


def read_tar_head(tar: tarfile.TarFile, path: Path) -> tuple[BundleHead, tarfile.TarInfo | None]:
    """The head, and the member after it (the first file: read by the caller)."""
    raw, sig, nxt = read_raw_head(tar, path)
    return BundleHead(parse_manifest(raw, path), hashlib.sha512(raw).digest(), sig), nxt


def read_raw_head(tar: tarfile.TarFile, path: Path
                  ) -> tuple[bytes, bytes | None, tarfile.TarInfo | None]:
    """The manifest's bytes (unparsed), the signature's, and the member after them."""
    raw = _manifest_bytes(tar, path)
    nxt = tar.next()
    sig = None
    if nxt is not None and nxt.name == BUNDLE_SIG_NAME:
        if not nxt.isreg() or nxt.size > MAX_SIGNATURE_BYTES:
            raise BundleError(f"{path}: refused member {BUNDLE_SIG_NAME}: not a regular file "
                              f"of at most {MAX_SIGNATURE_BYTES} bytes (nothing placed)")
        f = tar.extractfile(nxt)
        assert f is not None
        sig = f.read()
        nxt = tar.next()
    return raw, sig, nxt


def _manifest_bytes(tar: tarfile.TarFile, path: Path) -> bytes:
    first = tar.next()
    if first is None or first.name != MANIFEST_NAME or not first.isreg():
        raise BundleError(f"{path}: not a vllm-cache bundle (its first member is not "
                          f"{MANIFEST_NAME})")
    if first.size > MAX_MANIFEST_BYTES:
        raise BundleError(f"{path}: bundle manifest over {MAX_MANIFEST_BYTES} bytes")
    f = tar.extractfile(first)
    assert f is not None
    return f.read()


def parse_manifest(raw: bytes, path: Path) -> BundleManifest:
    """The manifest read from its bytes and checked field by field."""
    try:
        # No container cap: a manifest lists every file it carries (its byte cap bounds it).
        data = _loads_by_entry(raw)
        if data is None:
            data = jsontext.loads(raw, "bundle manifest", max_containers=None)
    except ValueError as exc:  # ReadError: one line naming the bundle manifest
        raise BundleError(f"{path}: {_why(exc)}") from None
    return manifest_from_json(data)


def _loads_by_entry(raw: bytes) -> dict[str, Any] | None:
    """``jsontext.loads(raw)`` of a manifest, value by value: a 12 MB manifest of 200 entries
    held the GIL for ~0.1 s in one ``json.loads``, and the threads that feed the frame readers
    their frames and take their answers (:mod:`.frame_read`) waited that long. msgspec only
    finds where each value is; ``json.loads`` parses each, so the values are the same, and so
    are the nesting bounds (each value's own, less the levels above it). An entry's
    ``recorded`` object (~50 KB: most of the bytes) is kept unparsed until it is used
    (:class:`.records.RecordedJSON`: only a miss's causes read it; its bound is checked then).
    ``None`` where msgspec cannot split the text so (not UTF-8, ``NaN``, an entry that is no
    object, damage...): the caller parses it whole, as before."""
    try:
        top = msgspec.json.decode(raw, type=dict[str, msgspec.Raw])
        listed = top.get("entries")
        entries = None if listed is None else msgspec.json.decode(
            listed, type=list[dict[str, msgspec.Raw]])
    except (msgspec.DecodeError, RecursionError, MemoryError):
        return None
    depth = jsontext.MAX_DEPTH - 1  # below the document
    out = {k: _loads(v, depth) for k, v in top.items() if k != "entries" or entries is None}
    if entries is not None:
        out["entries"] = [{k: RecordedJSON(bytes(memoryview(v)))
                           if k == "recorded" and bytes(memoryview(v))[:1] == b"{"
                           else _loads(v, depth - 2) for k, v in fields.items()}
                          for fields in entries]
    return out


def _loads(v: msgspec.Raw, depth: int) -> Any:
    return jsontext.loads(bytes(memoryview(v)), "bundle manifest", max_depth=depth,
                          max_containers=None)


def read_manifest(path: Path) -> BundleManifest:
    """The bundle's manifest, checked (reads only the archive's first member)."""
    return read_head(path).manifest


def read_head(path: Path) -> BundleHead:
    """The bundle's manifest and signature (its first two members at most)."""
    with _open_tar(path) as tar:
        return read_tar_head(tar, path)[0]


def _kind(m: tarfile.TarInfo) -> str:
    return ("a symlink" if m.issym() else "a hard link" if m.islnk() else "a folder"
            if m.isdir() else "a device" if m.ischr() or m.isblk() else "a FIFO"
            if m.isfifo() else "not a regular file")


_SMALL = 4 << 20
"""Members up to this size are read whole and written by a worker thread."""
_IN_FLIGHT = 64 << 20
_BATCH_FILES = 32
_BATCH_BYTES = 1 << 20
"""Small members go to the writers in batches of up to this many files or bytes: one
future per batch instead of one per file (a bundle's files are mostly a few KiB)."""
WRITERS = 4
"""Threads creating files: creating a file is most of unpack's time (the inode, the
folder entry, the journal), the kernel does it without the GIL, and ext4 creates several
files at once; ``tar -x`` creates them one after the other."""


def _write(staging: Staging, path: Path, name: str, src: IO[bytes], rec: FileRecord,
           on_bytes: Callable[[int], None] | None) -> None:
    try:
        staging.write(name, src, rec, on_bytes=on_bytes)
    except FleetError as exc:
        raise BundleError(f"{path}: {exc} : nothing placed") from None


def write_batch(staging: Staging, path: Path, batch: list[tuple[str, bytes, FileRecord]],
                 on_bytes: Callable[[int], None] | None) -> None:
    for name, data, rec in batch:
        try:
            staging.write_bytes(name, data, rec, on_bytes=on_bytes)
        except FleetError as exc:
            raise BundleError(f"{path}: {exc} : nothing placed") from None


class _Writers:
    """Members written (size and sha256 checked) by :data:`WRITERS` threads, in order of
    submission, with at most :data:`_IN_FLIGHT` bytes read ahead; the first failure is
    raised in the reading thread (at a later submit, or at :meth:`finish`)."""

    def __init__(self, staging: Staging, path: Path,
                 on_bytes: Callable[[int], None] | None) -> None:
        from collections import deque
        from concurrent.futures import Future, ThreadPoolExecutor

        self.staging, self.path, self.on_bytes = staging, path, on_bytes
        self.pool = ThreadPoolExecutor(WRITERS, thread_name_prefix="vllm-cache-unpack")
        self.pending: deque[tuple[Future[None], int]] = deque()
        self.bytes = 0
        self.batch: list[tuple[str, bytes, FileRecord]] = []
        self.batch_bytes = 0

    def submit(self, name: str, data: bytes, rec: FileRecord) -> None:
        self.batch.append((name, data, rec))
        self.batch_bytes += len(data)
        if len(self.batch) >= _BATCH_FILES or self.batch_bytes >= _BATCH_BYTES:
            self._send()

    def _send(self) -> None:
        if not self.batch:
            return
        self.pending.append((self.pool.submit(write_batch, self.staging, self.path,
                                              self.batch, self.on_bytes), self.batch_bytes))
        self.bytes += self.batch_bytes
        self.batch, self.batch_bytes = [], 0
        while self.pending and (self.bytes > _IN_FLIGHT or len(self.pending) > 1024
                                or self.pending[0][0].done()):
            self._next()

    def _next(self) -> None:
        fut, n = self.pending.popleft()
        self.bytes -= n
        fut.result()

    def finish(self) -> None:
        self._send()
        while self.pending:
            self._next()

    def __enter__(self) -> _Writers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


def take_members(tar: tarfile.TarFile, path: Path, staging: Staging,
                 expect: Mapping[str, FileRecord], seen: set[str],
                 first: tarfile.TarInfo | None,
                 small: Callable[[str, bytes, FileRecord], None],
                 on_bytes: Callable[[int], None] | None) -> None:
    """Each member of ``tar`` from ``first`` (else the next), checked against the manifest
    (``expect``: its files by member name; ``seen``: those taken, added to) and written into
    ``staging``: the small ones read whole and handed to ``small``, the others copied here.
    Raises :class:`BundleError` at the first member that is not a listed regular file of the
    listed size (the digest is checked as it is written)."""
    while (member := first if first is not None else tar.next()) is not None:
        first = None
        name = member.name
        if name.startswith("/") or ".." in name.split("/"):
            raise BundleError(f"{path}: refused member {name!r}: absolute or '..' path "
                              "(nothing placed)")
        if not member.isreg():
            raise BundleError(f"{path}: refused member {name!r}: {_kind(member)} "
                              "(bundles hold regular files only; nothing placed)")
        rec = expect.get(name)
        if rec is None or name in seen:
            raise BundleError(listed_twice(path, name))
        if member.size != rec.size:
            raise BundleError(f"{path}: {name}: {member.size} bytes, manifest says "
                              f"{rec.size} (tampered): nothing placed")
        if rec.size <= _SMALL:
            # Read straight from the archive (a regular member's bytes follow its
            # header): no file object per member. Length and digest: write_bytes.
            tar.fileobj.seek(member.offset_data)
            small(name, tar.fileobj.read(rec.size), rec)
        else:
            src = tar.extractfile(member)
            assert src is not None
            _write(staging, path, name, src, rec, on_bytes)
        seen.add(name)


def listed_twice(path: Path, name: str) -> str:
    return (f"{path}: member {name!r} is not in the bundle manifest (or listed twice): "
            "nothing placed")


def rest_of_stream(tar: tarfile.TarFile, path: Path) -> bool:
    """After the last member of ``tar``: whether anything followed it (the archive's end, which
    is zeros; ``BundleError`` where a byte is not zero: bytes appended to the file are no zstd
    frame (the decompressor raises), another frame's data is not zeros)."""
    seen = False
    while rest := tar.fileobj.read(_BUF):
        seen = True
        if rest.count(0) != len(rest):
            raise BundleError(f"{path}: data after the end of the bundle (appended or "
                              "concatenated): nothing placed")
    return seen


def expected_files(m: BundleManifest) -> dict[str, FileRecord]:
    """Every file the manifest lists, by its member name."""
    expect: dict[str, FileRecord] = {}
    for e in m.entries:
        for f in e.files:
            expect[f"{e.path}/{f.path}"] = f
    for x in m.extras:
        expect[x.path] = x
    return expect


OnHead = Callable[[bytes, bytes | None], None]
"""Given the SHA-512 of the manifest's bytes and the signature's bytes (``None``: unsigned)."""
OnSizes = Callable[[int, int], None]
"""Given the bytes and the number of files the manifest lists."""


def extract(path: Path, staging: Staging,
            on_bytes: Callable[[int], None] | None = None,
            on_manifest: Callable[[BundleManifest], None] | None = None,
            on_head: OnHead | None = None, on_sizes: OnSizes | None = None) -> BundleManifest:
    """Check the bundle and write every file it lists into ``staging``; raises
    :class:`BundleError` (nothing placed) at the first member that is not a listed regular
    file of the listed size and digest, or when a listed file is missing. ``on_head`` (the
    trust check) and then ``on_sizes`` (the free space check) are called before the first
    file is written: raising there writes nothing. ``on_manifest`` gets the checked manifest
    (one pass over the bundle: the caller's checks run while the files are extracted).

    A bundle file of several zstd frames (as ``pack`` writes them: one per entry) is read
    by forked processes, a frame each, where there are the cores (:mod:`.frame_read`)."""
    from vllm_cache_tools.fleet.frame_read import extract_framed

    done = extract_framed(path, staging, on_bytes, on_manifest, on_head, on_sizes)
    if done is not None:
        return done
    with _open_tar(path) as tar, _Writers(staging, path, on_bytes) as writers:
        head, pending = read_tar_head(tar, path)
        m = head.manifest
        if on_head is not None:
            on_head(head.sha512, head.signature)
        if on_sizes is not None:
            on_sizes(m.size_bytes, m.files)
        if on_manifest is not None:
            on_manifest(m)
        expect = expected_files(m)
        seen: set[str] = set()
        take_members(tar, path, staging, expect, seen, pending, writers.submit, on_bytes)
        rest_of_stream(tar, path)
        writers.finish()
        check_complete(path, expect, seen)
    return m


def check_complete(path: Path, expect: Mapping[str, FileRecord], seen: set[str]) -> None:
    missing = sorted(set(expect) - seen)
    if missing:
        raise BundleError(f"{path}: truncated: {len(missing)} listed files missing "
                          f"(first: {missing[0]}): nothing placed")


__all__ = ["MAX_MANIFEST_BYTES", "WRITERS", "BundleHead", "extract", "read_head",
           "read_manifest"]
