"""Bundles: one start's cache (or any selection) in one deterministic ``.tar.zst``.

Layout: the first member is the manifest (:data:`.records.MANIFEST_NAME`, JSON, sorted keys),
in a signed bundle (``pack --sign``) its SSHSIG signature second
(:data:`.trust.BUNDLE_SIG_NAME`; the manifest then carries the provenance), then every file of
every entry at its path relative to the vLLM root, sorted, then the
recorder's source snapshots. Members are regular files only, with mtime 0, uid/gid 0, no
owner names and mode 0644 (0755 when executable), with ustar headers (pax where a name does
not fit); zstd frames carry their checksum. So the same entries give the same bytes (image
layers and content-addressed stores dedupe them), a truncated file fails the zstd checksum,
and a changed byte fails the manifest's sha256.

Reading (:mod:`.bundle_read`, re-exported here) never trusts the archive: the manifest is
checked field by field (paths that stay below their entry, keys that are keys, a known format
version) before anything is written, and every member must be a regular file the manifest
lists, of the listed size and digest. Files go to a staging folder inside the target root
(:mod:`.place`); nothing reaches an entry folder until all of them are checked."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, BinaryIO, cast

import zstandard

from vllm_cache_tools import __version__
from vllm_cache_tools.fleet.bundle_read import extract, read_manifest
from vllm_cache_tools.fleet.errors import FleetError
from vllm_cache_tools.fleet.host import host_facts
from vllm_cache_tools.fleet.records import (
    DEFAULT_LEVEL,
    MANIFEST_NAME,
    BundleManifest,
    FileRecord,
    manifest_json,
)
from vllm_cache_tools.fleet.redacted import document_without_secrets, redact_document
from vllm_cache_tools.fleet.selection import LocalFile, Selection, file_ident
from vllm_cache_tools.fleet.sshsig import SigningKey
from vllm_cache_tools.fleet.trust import BUNDLE_SIG_NAME
from vllm_cache_tools.read.noatime import open_noatime
from vllm_cache_tools.redaction import is_clean
from vllm_cache_tools.safeio import NamedOutput

_BUF = 1 << 20


def manifest_bytes(m: BundleManifest, clean_entries: Sequence[bool] = ()) -> bytes:
    """The manifest as the bundle's first member. ``clean_entries``: per record, whether
    redaction leaves it as it is there (:attr:`.selection.Selection.clean`)."""
    # Compact: json's C encoder (indent= takes the Python one, a tenth of pack's CPU time
    # on 450 files). `tar -xOf B vllm-cache-bundle.json | jq` reads it.
    # No secret in clear, whatever built the records (select redacts them): the records of
    # one host's starts share most of their fields, each distinct value is redacted once
    # (redact_document; redacting the 13 MB manifest of 200 entries whole took 0.9 s).
    # Records the selection found clean where they sit here are not walked again (checking
    # and redacting the manifest of 200 entries was a third of writing the bundle).
    data = manifest_json(m)
    known = (document_without_secrets(data, "entries")
             if len(clean_entries) == len(m.entries) and all(clean_entries) else None)
    if known is not None:
        data = known
    elif not is_clean(data):
        data = redact_document(data)
    return (json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n").encode()


def _info(name: str, size: int, executable: bool = False) -> tarfile.TarInfo:
    t = tarfile.TarInfo(name)
    t.size = size
    t.mtime = 0
    t.mode = 0o755 if executable else 0o644
    t.uid = t.gid = 0
    t.uname = t.gname = ""
    t.type = tarfile.REGTYPE
    return t


class _Checked(io.RawIOBase):
    """A cache file read for the archive, hashed on the way: a file that changed between
    hashing and archiving is caught (the bundle would contradict its manifest)."""

    def __init__(self, f: BinaryIO, rec: FileRecord, name: str) -> None:
        self.f, self.rec, self.name = f, rec, name
        self.h = hashlib.sha256()

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        b = self.f.read(n)
        self.h.update(b)
        return b

    def readinto(self, buf: Any) -> int:
        b = self.read(len(buf))
        buf[:len(b)] = b
        return len(b)

    def check(self) -> None:
        if self.h.hexdigest() != self.rec.sha256:
            raise FleetError(f"{self.name} changed while it was packed (being written?): "
                             "run pack again")


_TEMPLATES: dict[int, bytes] = {}
_MAX_USTAR_SIZE = 8 ** 11 - 1


def _split_name(name: str) -> tuple[str, str] | None:
    """ustar's (prefix, name) split of a long ASCII name, as :mod:`tarfile` makes it: at
    the first ``/`` whose rest fits the 100-byte name field, if the prefix then fits its 155
    bytes (a later ``/`` only makes the prefix longer). One ``find`` instead of tarfile's
    join of every split (a tenth of a warm pack's header time)."""
    cut = name.find("/", max(0, len(name) - 101))
    if cut < 0 or cut > 155:
        return None
    return name[:cut], name[cut + 1:]


def ustar_header(name: str, size: int, executable: bool = False) -> bytes | None:
    """The header :meth:`tarfile.TarInfo.tobuf` writes in ustar format for one of our
    members (:func:`_info`), or ``None`` where it would not fit ustar (a non-ASCII or too
    long name, 8 GiB or more). Made from tarfile's own header of an empty member, with the
    name, size and checksum put in: tobuf is a tenth of pack's time on 450 small files."""
    if not name.isascii() or size > _MAX_USTAR_SIZE:
        return None
    prefix = ""
    if len(name) > 100:
        split = _split_name(name)
        if split is None:
            return None
        prefix, name = split
    mode = 0o755 if executable else 0o644
    t = _TEMPLATES.get(mode)
    if t is None:
        t = _TEMPLATES[mode] = _info("", 0, executable).tobuf(tarfile.USTAR_FORMAT, "ascii",
                                                               "strict")
    h = bytearray(t)
    h[0:len(name)] = name.encode("ascii")
    h[124:136] = b"%011o\0" % size
    h[345:345 + len(prefix)] = prefix.encode("ascii")
    h[148:156] = b"        "
    h[148:155] = b"%06o\0" % sum(h)
    return bytes(h)


def _header(info: tarfile.TarInfo) -> bytes:
    """A ustar header when the name fits its 100 + 155 byte prefix split (ASCII), else a
    pax one: Inductor's paths are 100-160 bytes, and a pax header per member was a third of
    the archive's headers' cost and 1 KiB more per file to compress. Every tar reads both."""
    if info.name.isascii():
        try:
            return info.tobuf(tarfile.USTAR_FORMAT, "ascii", "strict")
        except ValueError:  # too long to split
            pass
    return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


class _TarWriter:
    """A tar stream written straight into the compressor: tarfile's stream mode copies
    every block through its own buffer (a third of pack's time on small files). Headers
    come from :meth:`tarfile.TarInfo.tobuf`, so the archive is what tarfile writes."""

    def __init__(self, out: Any, digest: Any = None) -> None:
        self.out = out
        self.offset = 0
        self.digest = digest  # a hashlib object fed the tar stream itself (an image layer's
        # diff_id), or None

    def _write(self, b: bytes | memoryview) -> None:
        self.out.write(b)
        if self.digest is not None:
            self.digest.update(b)
        self.offset += len(b)

    def add(self, info: tarfile.TarInfo, src: Any, header: bytes | None = None) -> None:
        self._write(header or _header(info))
        left = info.size
        while left > 0:
            b = src.read(min(_BUF, left))
            if not b:
                raise FleetError(f"{info.name} shrank while it was packed (being written?): "
                                 "run pack again")
            self._write(b)
            left -= len(b)
        pad = -info.size % tarfile.BLOCKSIZE
        if pad:
            self._write(tarfile.NUL * pad)

    def close(self) -> None:
        self._write(tarfile.NUL * (2 * tarfile.BLOCKSIZE))
        pad = -self.offset % tarfile.RECORDSIZE
        if pad:
            self._write(tarfile.NUL * pad)


def _same(f: BinaryIO, lf: LocalFile, name: str) -> None:
    """The file the selection hashed, unchanged (same inode, size, mtime, ctime) after it is
    archived: reading it a second time costs no second hash. A bundle that contradicts its
    manifest anyway is refused whole by unpack."""
    if not _unchanged(f, lf):
        raise FleetError(f"{name} changed while it was packed (being written?): run pack "
                         "again")


def _unchanged(f: BinaryIO, lf: LocalFile) -> bool:
    return file_ident(os.fstat(f.fileno())) == lf.ident


def selection_manifest(sel: Selection, with_provenance: bool = False) -> BundleManifest:
    """The manifest of ``sel``; ``with_provenance`` (a signed bundle): who, when, with what
    (:mod:`.provenance`)."""
    facts = host_facts()
    prov: dict[str, Any] = {}
    if with_provenance:
        from vllm_cache_tools.fleet.provenance import provenance, read_recorder_manifests

        prov = provenance(sel.records, facts, read_recorder_manifests(
            [lf.source for fs in sel.files for lf in fs]))
    return BundleManifest(sel.records, tuple(x.record for x in sel.extras), facts,
                          f"vllm-cache-tools {__version__}", provenance=prov)


def members(sel: Selection) -> Iterator[tuple[str, LocalFile]]:
    for rec, files in zip(sel.records, sel.files, strict=True):
        for lf in files:
            yield f"{rec.path}/{lf.record.path}", lf
    for x in sel.extras:
        yield x.record.path, x


@dataclass(frozen=True)
class Written:
    path: Path
    sha256: str
    size_bytes: int
    tar_sha256: str | None = None
    """The sha256 of the uncompressed tar stream (``tar_digest=True``): an OCI image
    layer's ``diff_id``."""


def write_bundle(sel: Selection, out: Path, level: int = DEFAULT_LEVEL,
                 on_bytes: Callable[[int], None] | None = None, sync: bool = False,
                 force: bool = False, signing_key: SigningKey | None = None,
                 tar_digest: bool = False) -> Written:
    """Write the bundle to ``out`` atomically, through :class:`~vllm_cache_tools.safeio.
    NamedOutput` (a new file beside it, put in place whole; an existing name, a planted
    symlink too, is refused unless ``force``, then replaced as a name, never written
    through); ``-`` writes to stdout. ``sync``: fsync the file before it is put in place.
    Off by default, as ``tar`` and ``zstd`` do: under another writer's load one fsync of a
    3 MB bundle took 0.4 s here (more than writing it), and a bundle torn by a power loss is
    never used (its zstd checksum and manifest digests refuse it, whole). ``signing_key``:
    the manifest carries the provenance and is signed; the signature is the second member
    (:data:`.trust.BUNDLE_SIG_NAME`). ``tar_digest``: also hash the tar stream before
    compression (:attr:`Written.tar_sha256`)."""
    manifest = selection_manifest(sel, with_provenance=signing_key is not None)
    head = manifest_bytes(manifest, sel.clean)
    sig = signing_key.sign(head) if signing_key is not None else None
    to_stdout = str(out) == "-"
    target = None if to_stdout else NamedOutput(out, force=force)
    digest = hashlib.sha256()
    size = 0
    raw: IO[bytes]
    raw = os.fdopen(os.dup(1), "wb") if target is None else target.file()
    try:
        class Sink(io.RawIOBase):
            def writable(self) -> bool:
                return True

            def write(self, b: Any) -> int:
                nonlocal size
                digest.update(b)
                size += len(b)
                raw.write(b)
                return len(b)

        # Worker threads (one per CPU): compression runs beside reading and hashing (as
        # `tar -I zstd` runs zstd beside tar). zstd's multi-threaded output depends neither
        # on timing nor on the number of workers (measured: the same bytes with 1, 2, 4 and
        # -1 workers and any write size), so bundles stay deterministic across machines.
        cctx = zstandard.ZstdCompressor(level=level, write_checksum=True, threads=-1)
        sink = cast(IO[bytes], Sink())
        with cctx.stream_writer(sink, closefd=False, write_size=_BUF) as z:
            tar = _TarWriter(z, hashlib.sha256() if tar_digest else None)
            tar.add(_info(MANIFEST_NAME, len(head)), io.BytesIO(head))
            if sig is not None:
                tar.add(_info(BUNDLE_SIG_NAME, len(sig)), io.BytesIO(sig))
            for name, lf in members(sel):
                with open_noatime(lf.source, buffering=0) as f:
                    info = _info(name, lf.record.size, lf.record.executable)
                    header = ustar_header(name, lf.record.size, lf.record.executable)
                    if lf.ident is None or not _unchanged(f, lf):
                        # Not hashed by the selection, or its identity moved since (a
                        # hard link made or removed changes the ctime, not the bytes): hashed
                        # as it is archived, and refused if the bytes differ.
                        src = _Checked(f, lf.record, name)
                        tar.add(info, src, header)
                        src.check()
                    else:  # hashed by the selection: the same file, unchanged since?
                        tar.add(info, f, header)
                        _same(f, lf, name)
                if on_bytes is not None:
                    on_bytes(lf.record.size)
            tar.close()
        raw.flush()
        if sync and target is not None:
            os.fsync(raw.fileno())
    except BaseException:
        raw.close()
        if target is not None:
            target.abort()
        raise
    raw.close()
    if target is not None:
        target.commit()
    return Written(out, digest.hexdigest(), size,
                   tar.digest.hexdigest() if tar.digest is not None else None)


__all__ = ["DEFAULT_LEVEL", "Written", "extract", "manifest_bytes", "members",
           "read_manifest", "selection_manifest", "write_bundle"]
