"""Which entries a pack or push carries, and their records: the named entries, the entries of
the other tree proven to come from the same start
(:mod:`vllm_cache_tools.keys.source_link`), and the recorder's source snapshots their
manifests name. Files are read the store's way (no symlink followed, no atime left, regular
files only)."""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vllm_cache_tools.errors import UsageError
from vllm_cache_tools.fleet.errors import FleetError, Refused
from vllm_cache_tools.fleet.link_proof import PACKABLE, EntryFacts, link_entries
from vllm_cache_tools.fleet.pack_memo import PackMemo, fingerprint
from vllm_cache_tools.fleet.prepared import manifest_snapshots, prepare, prepare_at, record_of
from vllm_cache_tools.fleet.records import EntryRecord, FileRecord, snapshot_path
from vllm_cache_tools.fleet.redacted import (
    RECORD_DEPTH,
    Seen,
    files_clean,
    linked_clean,
    redacted_record,
    refuse_secret_manifests,
)
from vllm_cache_tools.layout import SOURCES_DIRNAME, STATE_DIRNAME, short_key
from vllm_cache_tools.read.noatime import open_noatime
from vllm_cache_tools.store.filters import parse_filter
from vllm_cache_tools.store.folders import scan_workers
from vllm_cache_tools.store.locate import CacheRoot, display_path, resolve_root
from vllm_cache_tools.store.lookup import AmbiguousKey, EntryNotFound, locate_entries
from vllm_cache_tools.store.parallel_read import forked_workers
from vllm_cache_tools.store.scan import RootError, scan
from vllm_cache_tools.store.types import Entry

if TYPE_CHECKING:
    from vllm_cache_tools.fleet.frames import FrameSpool

CHUNK = 1 << 20
HASH_THREADS = 2
"""At most this many threads hash the files the pack memo does not know. hashlib lets go of
the GIL for the digest, not for the Python around each file, and the link proof runs in this
thread meanwhile: on the 16-core device a cold selection of 100 starts took 1.32-1.46 s with
a thread per core (16), 1.10-1.23 s with 4, 1.01-1.35 s with 2 and 1.09-1.14 s with 1; of 360
starts 4.8-5.2, 3.7-4.6, 3.5-4.1 and 3.9 s."""
FRAME_FORK_ENTRIES = 8
FRAME_FORK_CORES = 4
"""A pack of :data:`FRAME_FORK_ENTRIES` entries or more on this many cores compresses them in
the read-ahead's forked workers (:meth:`.frames.FrameSpool.use_processes`: on the 16-core
device a first pack of 100 starts 1.6-2.0 s -> 0.85-0.99 s against threads); fewer entries, or
fewer cores, in threads of this process (on 2 cores a pack from the memo took 1.37-1.84 s in
two forked workers, 1.25-1.31 s in two threads: the workers and this process shared the two
cores three ways)."""
READ_AHEAD_CORES = 2
"""From this many cores, the selected entries' pickles are read by forked processes. Once
their results shared each traced source text (:func:`.parallel_read.read_deep`), receiving
them cost this process ~1 ms an entry instead of ~3, and 2 cores gained too: a cold
selection of 100 starts 2.2 -> 1.6-1.8 s (it was 4 cores before)."""


@dataclass(frozen=True)
class LocalFile:
    """A file to carry: its record and where it is here."""

    record: FileRecord
    source: str
    """Its path here (text: a ``Path`` per file cost a pack of 4,700 files ~0.1 s)."""
    ident: tuple[int, ...] | None = None
    """:func:`file_ident` when it was hashed: a pack compares it instead of hashing again."""


def file_ident(st: os.stat_result) -> tuple[int, ...]:
    """What changes when a file is replaced or written: device, inode, size, mtime and ctime
    (ns). vLLM and Inductor replace files by rename (a new inode), never in place."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@dataclass(frozen=True)
class Selection:
    """Entries with their records and files, and the snapshots they name."""

    root: Path
    entries: tuple[Entry, ...]
    """Deep reads without their traced source texts and recorder manifests
    (:class:`.prepared.Prepared`), or the listing's entry where the pack memo answered."""
    records: tuple[EntryRecord, ...]
    files: tuple[tuple[LocalFile, ...], ...]
    """Per entry, in the order of ``records``."""
    extras: tuple[LocalFile, ...]
    snapshot_shas: tuple[tuple[str, ...], ...] = ()
    """Per entry, the sha256 of the source snapshots its manifests name."""
    clean: tuple[bool, ...] = ()
    """Per entry, whether its record is as the redaction of a bundle manifest leaves it (no
    secret found in it where it sits there): the manifest is not redacted again for it."""


def file_digest(path: str | os.PathLike[str]) -> tuple[str, int]:
    """(sha256, size) of a regular file, read without following a link or leaving an atime."""
    sha, n, _ = file_digest_ident(path)
    return sha, n


def file_digest_ident(path: str | os.PathLike[str]) -> tuple[str, int, tuple[int, ...]]:
    """(sha256, size, :func:`file_ident` after the read) of a regular file."""
    h = hashlib.sha256()
    n = 0
    with open_noatime(path, buffering=0) as f:
        while True:
            b = f.read(CHUNK)
            if not b:
                break
            h.update(b)
            n += len(b)
        ident = file_ident(os.fstat(f.fileno()))
    return h.hexdigest(), n, ident


def entry_walk(top: Path) -> tuple[list[tuple[str, str, bool, tuple[int, ...]]], str]:
    """Every file under an entry folder, sorted, as (relative path, path, executable,
    :func:`file_ident`), and the :func:`.pack_memo.fingerprint` of its files and folders. A
    symlink, FIFO, socket or device inside is refused: what it points at is not the entry."""
    out: list[tuple[str, str, bool, tuple[int, ...]]] = []
    dirs: list[tuple[str, bool, tuple[int, ...]]] = []
    stack = [""]
    base = os.fspath(top)
    while stack:
        rel = stack.pop()
        with os.scandir(f"{base}/{rel}" if rel else base) as it:
            items = list(it)
        for e in items:
            r = f"{rel}/{e.name}" if rel else e.name
            s = e.stat(follow_symlinks=False)
            if stat.S_ISDIR(s.st_mode):
                stack.append(r)
                dirs.append((r + "/", False, file_ident(s)))
            elif stat.S_ISREG(s.st_mode):
                out.append((r, e.path, bool(s.st_mode & 0o111), file_ident(s)))
            else:
                raise Refused(f"{display_path(e.path)} is not a regular file or folder "
                              "(symlink, FIFO, device): not packed")
    out.sort()
    fp = fingerprint(sorted([*((r, x, i) for r, _, x, i in out), *dirs]))
    return out, fp


def entry_files(top: Path) -> list[tuple[str, str, bool]]:
    """(relative path, path, executable) of every file under an entry folder, sorted
    (:func:`entry_walk`)."""
    return [(r, p, x) for r, p, x, _ in entry_walk(top)[0]]


Walked = list[tuple[str, str, bool, tuple[int, ...]]]


def _hash_files(walked: Walked) -> tuple[tuple[LocalFile, ...], bool]:
    """The files, hashed; and whether each was the walk's file (same identity after the read:
    the records may then be kept in the memo under the walk's fingerprint)."""
    out = []
    same = True
    for rel, path, exe, ident in walked:
        sha, size, after = file_digest_ident(path)
        same &= after == ident
        out.append(LocalFile(FileRecord(rel, size, sha, exe), path, after))
    return tuple(out), same


def _files_of(job: Future[Any]) -> Future[tuple[tuple[LocalFile, ...], bool]]:
    """The files and identity flag of a :class:`.frames.Framed` job, as a future."""
    out: Future[tuple[tuple[LocalFile, ...], bool]] = Future()

    def done(j: Future[Any]) -> None:
        if j.cancelled():
            out.cancel()
            return
        exc = j.exception()
        if exc is not None:
            out.set_exception(exc)
        else:
            out.set_result((j.result().files, j.result().same))
    job.add_done_callback(done)
    return out


def _known_files(walked: Walked, rec: EntryRecord) -> tuple[LocalFile, ...] | None:
    """The files of a memo's record, with the walk's identities (the fingerprint matched)."""
    if [r for r, *_ in walked] != [f.path for f in rec.files]:
        return None
    return tuple(LocalFile(f, path, ident)
                 for f, (_, path, _, ident) in zip(rec.files, walked, strict=True))


def _snapshots(shas: Iterable[str], cc: Path) -> tuple[LocalFile, ...]:
    out = []
    for sha in sorted(set(shas)):
        p = cc / STATE_DIRNAME / SOURCES_DIRNAME / sha
        try:
            digest, size, ident = file_digest_ident(p)
        except OSError:
            continue  # swept or never kept: the manifest still names its hash
        if digest == sha:
            out.append(LocalFile(FileRecord(snapshot_path(sha), size, sha), os.fspath(p), ident))
    return tuple(out)


def _locate(refs: Sequence[str], croot: CacheRoot) -> list[Path]:
    try:
        return locate_entries(refs, croot)
    except (AmbiguousKey, EntryNotFound, RootError) as exc:
        raise FleetError(str(exc)) from None


def select(root: str | os.PathLike[str] | CacheRoot | None, refs: Sequence[str] = (), *,
           model: str | None = None, filter_expr: str | None = None, linked: bool = True,
           allow_states: Sequence[str] = PACKABLE,
           progress: Callable[[str], None] | None = None,
           frames: FrameSpool | None = None) -> Selection:
    """The entries named by ``refs`` (keys, unique prefixes, paths), by ``model`` (a
    substring of the served model or traced model code) or by ``filter_expr`` (``ls
    --filter``), plus (``linked``) the other tree's entries proven to be of the same starts.
    Raises :class:`FleetError` when nothing is selected, :class:`Refused` for an entry in a
    state whose files are not whole (partial, corrupt, unknown).

    An entry whose files are unchanged since an earlier pack or push (:mod:`.pack_memo`) is
    not read again: its record, digests and link proofs come from the memo.

    ``frames`` (a pack): every selected entry is compressed into it as soon as its files are
    known, the files the memo does not know hashed in the same pass (:mod:`.frames`), while
    the proofs run."""
    croot = root if isinstance(root, CacheRoot) else resolve_root(root)
    if not refs and model is None and filter_expr is None:
        raise FleetError("name the entries: KEY..., --model or --filter")
    try:
        # The listing index (as ls uses it) answers for unchanged entries: every entry that
        # is packed, and every candidate of a link proof, is walked again below (file by
        # file), and read again unless the pack memo knows its files unchanged.
        info = scan(croot, check_in_use=False)
        pred = parse_filter(filter_expr) if filter_expr else None
    except (RootError, UsageError) as exc:
        raise FleetError(str(exc)) from None
    by_path = {os.path.realpath(e.path): e for e in info.entries}
    chosen: list[str] = []
    for path in _locate(refs, croot):
        real = os.path.realpath(path)
        if real not in by_path:  # a path into another root, never mapped
            raise FleetError(f"{display_path(path)} is not an entry of "
                             f"{display_path(info.root)} (pass that root with --root)")
        chosen.append(real)
    if model is not None or pred is not None:
        for e in info.entries:
            if model is not None and model not in f"{e.checkpoint or ''} {e.model or ''}":
                continue
            if pred is not None and not pred(e):
                continue
            chosen.append(os.path.realpath(e.path))
    if not chosen:
        raise FleetError("no entry matches the selection")
    facts = EntryFacts(by_path, PackMemo(croot.compile_cache), entry_walk)
    seen: Seen = {}  # the redaction's memo (entries read here, their records, manifests)
    links: dict[str, set[str]] = {p: set() for p in dict.fromkeys(chosen)}
    known: dict[str, tuple[EntryRecord, tuple[LocalFile, ...], tuple[str, ...]]] = {}

    def memo_hit(p: str) -> None:
        hit = facts.memo.record(p, facts.walk(p)[1])
        files = _known_files(facts.walk(p)[0], hit[0]) if hit else None
        if hit is not None and files is not None:
            known[p] = (hit[0], files, hit[1])

    # The files of the entries the memo does not know are hashed by a thread per core:
    # hashlib and file reads let go of the GIL. Their pickles (the safe pickle reader is
    # pure Python) are read meanwhile: where there are READ_AHEAD_CORES cores or more, the
    # selected entries' by forked processes, one per core (started before this process has
    # threads; after the scan's forked checkers), else by this thread, which then runs the
    # link proofs (reading the few other candidates itself).
    for p in links:
        memo_hit(p)
    tried = set(links)
    with ExitStack() as stack:
        cores = scan_workers()
        pool = None
        if frames is not None and cores >= FRAME_FORK_CORES and len(links) >= FRAME_FORK_ENTRIES:
            # One pool of forked workers reads the pickles, then compresses the entries.
            pool = stack.enter_context(forked_workers(cores))
            if pool is not None:
                frames.use_processes(pool)
        ahead = facts.read_ahead([p for p in links if p not in known]
                                 if cores >= READ_AHEAD_CORES else (),
                                 partial(prepare_at, os.fspath(info.root)), cores, pool=pool)
        next(ahead, None)
        hashing: dict[str, Future[tuple[tuple[LocalFile, ...], bool]]] = {}
        framed: set[str] = set()  # submitted to ``frames`` (once each)
        with ThreadPoolExecutor(max_workers=min(cores, HASH_THREADS)) as ex:

            def hash_unknown(ps: Iterable[str]) -> None:
                for p in ps:
                    if p in hashing or p in framed or (p in known and frames is None):
                        continue
                    if p not in tried:
                        tried.add(p)
                        memo_hit(p)
                    if frames is not None:
                        prefix = os.path.relpath(by_path[p].path, info.root).replace(os.sep, "/")
                        job = frames.submit(prefix, facts.walk(p)[0],
                                            known[p][1] if p in known else None)
                        framed.add(p)
                        if p not in known:
                            hashing[p] = _files_of(job)
                    elif p not in known:
                        hashing[p] = ex.submit(_hash_files, facts.walk(p)[0])

            hash_unknown(links)
            for _ in ahead:
                pass
            if linked:
                if progress is not None:
                    progress("linking the two trees' entries of each start")
                link_entries(info.entries, facts, links)
                hash_unknown(links)
            deep = {p: facts.prepared.get(p) or prepare(facts.full(p), info.root, seen,
                                                         facts.layouts)
                    for p in links if p not in known}
            states = [(by_path[p].key, known[p][0].state, known[p][0].state_detail)
                      if p in known else (by_path[p].key, deep[p].entry.state,
                                          deep[p].entry.state_detail)
                      for p in links]
            bad = [s for s in states if s[1] not in allow_states]
            if bad:
                ex.shutdown(wait=False, cancel_futures=True)  # no more hashing for a refusal
                key, state, detail = bad[0]
                raise Refused(f"entry {short_key(key)} is {state}"
                              + (f" ({detail})" if detail else "")
                              + ": its files are not whole, not packed")
            if progress is not None and deep:
                progress(f"hashing {sum(d.entry.stats.files for d in deep.values())} files")
            if frames is not None and pool is not None:
                frames.wait()  # every entry compressed before the workers end (or lost)
            # In threads of this process, the entries still compressing go on while the
            # records are made and the bundle's manifest is written: the writer waits for
            # each frame in turn (a pack from the memo of 100 starts on 2 cores: 1.01 ->
            # 0.94 s). The secret check needs the frames of the entries it reads (carried):
            # those the memo does not know are waited for below (hashed), and where one is
            # not done the check reads the manifest again, checked against its record.
            hashed = {p: hashing[p].result() for p in deep}
    memoized = set(known)
    for p, d in deep.items():
        files, same = hashed[p]
        rec = replace(d.record, files=tuple(x.record for x in files))
        snaps = d.snapshots
        if same:
            facts.memo.put_record(p, facts.walk(p)[1], rec, snaps)
            memoized.add(p)
        known[p] = (rec, files, snaps)
    ordered = sorted(links, key=lambda p: (known[p][0].layout, known[p][0].key))
    # The manifests the deep reads found clean serve the secret check where those were the
    # bytes carried (refuse_secret_manifests compares their digests).
    checked = {m: sha for d in deep.values() for m, sha in d.clean_manifests.items()}
    records, clean = _redacted(ordered, known, links, facts, memoized, seen,
                               {p for p, d in deep.items() if d.record_clean}, checked,
                               frames.carried() if frames is not None else None)
    facts.memo.forget_missing(by_path)
    facts.memo.save()
    return Selection(info.root, tuple(deep[p].entry if p in deep else by_path[p]
                                      for p in ordered), records,
                     tuple(known[p][1] for p in ordered),
                     _snapshots((s for p in ordered for s in known[p][2]),
                                croot.compile_cache),
                     tuple(known[p][2] for p in ordered), clean)


def _redacted(ordered: Sequence[str],
              known: dict[str, tuple[EntryRecord, tuple[LocalFile, ...], tuple[str, ...]]],
              links: dict[str, set[str]], facts: EntryFacts, memoized: set[str], seen: Seen,
              clean_but_files: set[str], manifests_checked: Mapping[str, str],
              carried: Mapping[str, bytes] | None = None
              ) -> tuple[tuple[EntryRecord, ...], tuple[bool, ...]]:
    """The records of ``ordered``, every secret hidden in what is written about each entry
    (redacted where they sit in a bundle manifest), and whether each was left as it was;
    :class:`Refused` when a recorder manifest to be carried holds one. An entry the memo
    found clean at its fingerprint is not redacted or read again (its ``linked`` aside); the
    others are, and those found clean are marked so (``memoized``: their record is the
    memo's, under the walk's fingerprint); ``seen``: the redaction's memo;
    ``clean_but_files``: the entries whose records the redaction leaves as they are but for
    their files and ``linked`` (:attr:`.prepared.Prepared.record_clean`);
    ``manifests_checked``: the recorder manifests found clean, path -> sha256 of the bytes
    checked; ``carried``: those a pack archived, as archived, by path."""
    records: list[EntryRecord] = []
    clean: list[bool] = []
    checked: list[str] = []
    marked = [facts.memo.is_clean(p, facts.walk(p)[1]) for p in ordered]
    for p, was_clean in zip(ordered, marked, strict=True):
        rec = replace(known[p][0], linked=tuple(sorted(links[p])))
        if was_clean and linked_clean(rec, RECORD_DEPTH):
            records.append(rec)
            clean.append(True)
            continue
        # A record is redacted field by field (files and ``linked`` are lists, which never
        # make the rest redacted whole): the rest found clean where it was read, the files
        # and ``linked`` are all there is left to check.
        red = rec if p in clean_but_files and linked_clean(rec, RECORD_DEPTH) and files_clean(
            rec, seen, RECORD_DEPTH) else redacted_record(rec, seen, RECORD_DEPTH)
        records.append(red)
        clean.append(red is rec)
        if red is rec and p in memoized:
            checked.append(p)
    todo = [i for i, was_clean in enumerate(marked) if not was_clean]
    refuse_secret_manifests([records[i] for i in todo], (known[ordered[i]][1] for i in todo),
                            seen, carried=carried, checked=manifests_checked)
    for p in checked:  # no secret in the record, none in its manifests (or Refused above)
        facts.memo.mark_clean(p, facts.walk(p)[1])
    return tuple(records), tuple(clean)


__all__ = ["PACKABLE", "LocalFile", "Selection", "entry_files", "entry_walk", "file_digest",
           "file_digest_ident", "file_ident", "manifest_snapshots", "record_of", "select"]
