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
from typing import IO, Any, cast

import msgspec
import zstandard

from vllm_cache_tools import __version__
from vllm_cache_tools.fleet.bundle_read import extract, read_manifest
from vllm_cache_tools.fleet.errors import FleetError
from vllm_cache_tools.fleet.frames import FrameSpool, compressor, write_known
from vllm_cache_tools.fleet.host import host_facts
from vllm_cache_tools.fleet.records import (
    DEFAULT_LEVEL,
    MANIFEST_NAME,
    BundleManifest,
    manifest_json,
)
from vllm_cache_tools.fleet.redacted import document_without_secrets, redact_document
from vllm_cache_tools.fleet.selection import LocalFile, Selection
from vllm_cache_tools.fleet.sshsig import SigningKey
from vllm_cache_tools.fleet.tar_headers import member_header
from vllm_cache_tools.fleet.trust import BUNDLE_SIG_NAME
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
    # msgspec's encoder writes the same document (sorted keys, compact; its floats may be
    # spelled otherwise: 1e16 for 1e+16) in a third of json.dumps' time (0.13 -> 0.05 s for
    # the 12.5 MB manifest of 200 entries). Where its text is not ASCII, or it cannot encode
    # (a lone surrogate of a name that is not UTF-8), json.dumps writes it: escaped (\uXXXX),
    # no raw bidi or other non-ASCII character in a bundle.
    try:
        raw = msgspec.json.encode(data, order="sorted")
    except (UnicodeEncodeError, TypeError, msgspec.EncodeError):
        raw = b"\x80"
    if raw.isascii():
        return raw + b"\n"
    return (json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n").encode()


class _TarWriter:
    """A tar stream written straight into the compressor: tarfile's stream mode copies
    every block through its own buffer (a third of pack's time on small files). Headers
    are :mod:`.tar_headers`' (tarfile's own bytes)."""

    def __init__(self, out: Any, digest: Any = None, offset: int = 0) -> None:
        self.out = out
        self.offset = offset
        self.digest = digest  # a hashlib object fed the tar stream itself (an image layer's
        # diff_id), or None

    def write(self, b: bytes | memoryview) -> int:
        self.out.write(b)
        if self.digest is not None:
            self.digest.update(b)
        self.offset += len(b)
        return len(b)

    def add(self, name: str, data: bytes) -> None:
        self.write(member_header(name, len(data)))
        self.write(data)
        pad = -len(data) % tarfile.BLOCKSIZE
        if pad:
            self.write(tarfile.NUL * pad)

    def close(self) -> None:
        self.write(tarfile.NUL * (2 * tarfile.BLOCKSIZE))
        pad = -self.offset % tarfile.RECORDSIZE
        if pad:
            self.write(tarfile.NUL * pad)


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
                 tar_digest: bool = False, frames: FrameSpool | None = None) -> Written:
    """Write the bundle to ``out`` atomically, through :class:`~vllm_cache_tools.safeio.
    NamedOutput` (a new file beside it, put in place whole; an existing name, a planted
    symlink too, is refused unless ``force``, then replaced as a name, never written
    through); ``-`` writes to stdout. ``sync``: fsync the file before it is put in place.
    Off by default, as ``tar`` and ``zstd`` do: under another writer's load one fsync of a
    3 MB bundle took 0.4 s here (more than writing it), and a bundle torn by a power loss is
    never used (its zstd checksum and manifest digests refuse it, whole). ``signing_key``:
    the manifest carries the provenance and is signed; the signature is the second member
    (:data:`.trust.BUNDLE_SIG_NAME`). ``tar_digest``: also hash the tar stream before
    compression (:attr:`Written.tar_sha256`). ``frames``: the spool the selection compressed
    the entries into (:func:`.selection.select`'s ``frames``); without it the entries are
    compressed here, by the same workers.

    The bundle is zstd frames in a row: the manifest's (and signature's), one per entry
    (:mod:`.frames`), and one for the recorder's snapshots and the archive's end."""
    to_stdout = str(out) == "-"
    own = None
    if frames is None:
        own = frames = FrameSpool(None if to_stdout else os.fspath(out.parent) or ".", level)
        for rec, files in zip(sel.records, sel.files, strict=True):
            frames.submit(rec.path, (), files)
    try:
        return _write(sel, out, level, on_bytes, sync, force, signing_key, tar_digest, frames)
    finally:
        if own is not None:
            own.close()


def _write(sel: Selection, out: Path, level: int, on_bytes: Callable[[int], None] | None,
           sync: bool, force: bool, signing_key: SigningKey | None, tar_digest: bool,
           frames: FrameSpool) -> Written:
    manifest = selection_manifest(sel, with_provenance=signing_key is not None)
    head = manifest_bytes(manifest, sel.clean)
    sig = signing_key.sign(head) if signing_key is not None else None
    target = None if str(out) == "-" else NamedOutput(out, force=force)
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

        sink = cast(IO[bytes], Sink())
        tar_sha = hashlib.sha256() if tar_digest else None
        cctx = compressor(level, frames.threads * frames.workers)
        with cctx.stream_writer(sink, closefd=False, write_size=_BUF) as z:
            tar = _TarWriter(z, tar_sha)
            tar.add(MANIFEST_NAME, head)
            if sig is not None:
                tar.add(BUNDLE_SIG_NAME, sig)
        offset = tar.offset
        for rec in sel.records:
            framed = frames.framed(rec.path)
            if tuple(f.record for f in framed.files) != rec.files:
                raise FleetError(f"{rec.path}: its files changed while it was packed (being "
                                 "written?): run pack again")
            if framed.tar_size:
                frames.copy(framed, sink.write if tar_sha is None
                            else _unpacked_into(sink.write, tar_sha))
            offset += framed.tar_size
            if on_bytes is not None:
                on_bytes(sum(f.size for f in rec.files))
        with cctx.stream_writer(sink, closefd=False, write_size=_BUF) as z:
            tar = _TarWriter(z, tar_sha, offset)
            for x in sel.extras:
                write_known(tar, x.record.path, x)
                if on_bytes is not None:
                    on_bytes(x.record.size)
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
                   tar_sha.hexdigest() if tar_sha is not None else None)


def _unpacked_into(write: Callable[[bytes], object], h: Any) -> Callable[[bytes], object]:
    """``write``, with the frame's decompressed bytes hashed into ``h`` on the way (the tar
    stream's digest, an image layer's ``diff_id``)."""
    d = zstandard.ZstdDecompressor().decompressobj()

    def both(b: bytes) -> object:
        h.update(d.decompress(b))
        return write(b)
    return both


__all__ = ["DEFAULT_LEVEL", "Written", "extract", "manifest_bytes", "members",
           "read_manifest", "selection_manifest", "write_bundle"]
