"""A memo of ``stats``' count per ledger file, so a later run reads only the lines appended
since (ledgers only grow: the recorder appends, one line per decision).

What is kept for a ledger is its host's tally (:class:`~.stats_tally._Tally`: a few numbers per
start and per entry, never the events) as it stood after the file's last whole line, with
where that line ends, the damaged lines seen so far, and two fingerprints of the file: the
xxh3 of its first :data:`PROBE` bytes and of the :data:`PROBE` bytes before that end. The memo
is used only while the file is the same inode, at least that long, and both fingerprints
still match (a ledger rotated, truncated or rewritten is read again from its start); then only
the bytes past the end are read and added to the kept tally. So the first ``stats`` of a root
costs a full read plus writing the memos; later runs cost reading the memos, the appended
lines and the summing up per group.

Kept in our own cache dir (``<user cache>/vllm-cache-tools/stats/``, never in vLLM's root),
one msgpack file per ledger (by real path) and per tally kind (``--by entry`` keeps one more
table), decoded into typed records (never unpickled: anyone who can write there can only make
the counts wrong). Only ledgers of :data:`MIN_BYTES` or more are memoized (smaller ones read
faster than a memo would help); not with ``--since`` (the tally kept is of every event);
not for a host whose ledger comes in several copies (they are merged by event).
``VLLM_CACHE_TOOLS_STATS_MEMO=0`` turns it off.

Beside it, per ledger and ``--by``, the host's sums as the report uses them
(:class:`~.stats_tally._Partial`, :class:`Summary`: a few numbers per group and per entry),
kept only for a file that ended in a whole line, with the same fingerprints plus a digest of
the entry -> model table for ``--by model``. A later run with nothing appended and the same
models takes those sums as they are, without restoring the tally or summing up its starts
(the common case: ``stats`` run again before the fleet wrote more)."""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from collections.abc import Mapping
from operator import itemgetter
from pathlib import Path
from typing import Annotated, Any

import msgspec
import xxhash

from vllm_cache_tools import safeio
from vllm_cache_tools.analyze.stats_tally import MAX_PROBLEMS, MAX_STARTS, _Partial
from vllm_cache_tools.read.noatime import open_noatime
from vllm_cache_tools.store.locate import user_cache_dir

FORMAT = 2
"""Bump when what the tally keeps, or how a ledger line is judged, changes."""
PROBE = 4096
MIN_BYTES = 1 << 20
MAX_BYTES = 32 << 20
"""A memo file larger than this is not read: a tally is kept only up to
:data:`~.stats_tally.MAX_STARTS` starts (~10 MB of memo), and a larger file decoded would cost
several times its size in memory."""
DISABLE_VAR = "VLLM_CACHE_TOOLS_STATS_MEMO"


def enabled(environ: Mapping[str, str] = os.environ) -> bool:
    return environ.get(DISABLE_VAR, "1").strip().lower() not in ("0", "false", "no", "off")


Index = Annotated[int, msgspec.Meta(ge=0)]
Flags = Annotated[int, msgspec.Meta(ge=0, lt=16)]


class Kept(msgspec.Struct, array_like=True, frozen=True):
    """One ledger's memo. Strings that repeat (hosts, entries) are kept once, in ``names``,
    and referred to by index."""

    format: int
    by_entry: bool
    dev: int
    ino: int
    offset: int
    """Where the last whole line read ends."""
    lines: int
    head: str
    """xxh3 of the file's first :data:`PROBE` bytes."""
    before: str
    """xxh3 of the :data:`PROBE` bytes before ``offset``."""
    bad: int
    problems: list[str]
    names: list[str]
    starts: list[tuple[str, float, Flags, Index, Index, list[Index], float]]
    """(start id, first time, outcome flags, host, first entry, entries hit, load seconds)"""
    work: list[tuple[str, Index, int | None, float]]
    key_work: list[tuple[Index, str, Index, int | None, float]]
    aot_written: list[tuple[str, Index]]
    written: list[tuple[Index, float]]
    decisions: list[tuple[Index, str, Flags]]
    events: list[tuple[str, str, int]]


_DECODER = msgspec.msgpack.Decoder(Kept)
_ENCODER = msgspec.msgpack.Encoder()


def memo_dir() -> Path:
    return user_cache_dir() / "stats"


def _name(path: Path, by_entry: bool) -> str:
    real = os.fsencode(os.path.realpath(path))
    return f"{xxhash.xxh3_64_hexdigest(real)}{'-e' if by_entry else ''}.msgpack"


def _fingerprints(path: Path, offset: int) -> tuple[int, int, int, str, str] | None:
    """(dev, ino, size, head, before) of a ledger as it is now, for a memo ending at
    ``offset``; ``None`` when it cannot be read."""
    try:
        with open_noatime(path) as f:
            s = os.fstat(f.fileno())
            head = f.read(PROBE)
            start = max(0, offset - PROBE)
            f.seek(start)
            before = f.read(offset - start) if offset <= s.st_size else b""
    except OSError:
        return None
    return (s.st_dev, s.st_ino, s.st_size, xxhash.xxh3_64_hexdigest(head),
            xxhash.xxh3_64_hexdigest(before))


def load(path: Path, by_entry: bool) -> Kept | None:
    """The memo of ``path`` when it still describes the start of that file, else ``None``."""
    try:
        raw = safeio.read_regular(memo_dir() / _name(path, by_entry), MAX_BYTES)
        kept = _DECODER.decode(raw)
    except (OSError, msgspec.MsgspecError, RecursionError, MemoryError):
        return None
    if kept.format != FORMAT or kept.by_entry != by_entry or len(kept.starts) > MAX_STARTS:
        return None
    now = _fingerprints(path, kept.offset)
    if now is None:
        return None
    dev, ino, size, head, before = now
    if (dev, ino) != (kept.dev, kept.ino) or size < kept.offset or head != kept.head \
            or before != kept.before:
        return None
    return kept


def restore(kept: Kept, tally: Any) -> bool:
    """Put a memo's tally back into an empty :class:`~.stats_tally._Tally`; ``False`` when
    the memo refers to names it does not hold (then the tally is to be thrown away)."""
    try:
        _restore(kept, tally)
    except IndexError:
        return False
    return True


def _restore(kept: Kept, tally: Any) -> None:
    names = kept.names
    same = tally.strings.setdefault
    for n in names:
        same(n, n)
    starts = tally.starts
    for sid, t, flags, host, key0, hit, load_s in kept.starts:
        hk: Any = None if not hit else names[hit[0]] if len(hit) == 1 else {names[i]
                                                                             for i in hit}
        starts[sid] = [t, flags, names[host], names[key0], hk, load_s]
    tally.work = {(sid, names[h], pid): s for sid, h, pid, s in kept.work}
    tally.key_work = {(names[k], sid, names[h], pid): s for k, sid, h, pid, s in kept.key_work}
    tally.aot_written = [(sid, names[k]) for sid, k in kept.aot_written]
    tally.written = {names[k]: t for k, t in kept.written}
    if tally.decisions is not None:
        tally.decisions = {(names[k], sid): f for k, sid, f in kept.decisions}
    tally.events.update({(tree, ev): n for tree, ev, n in kept.events})


def save(path: Path, by_entry: bool, tally: Any, offset: int, lines: int, bad: int,
         problems: list[str]) -> None:
    """Keep ``tally`` as the count of ``path`` up to ``offset`` (best effort: a memo that
    cannot be written only costs the next run a full read)."""
    now = _fingerprints(path, offset)
    if now is None:
        return
    dev, ino, _size, head, before = now
    # Every host and entry name once (set and dict built in C: 1.7M lookups for 1M events).
    found = set(tally.strings)
    found.update(tally.written)
    for table, fields in ((tally.work, (1,)), (tally.key_work, (0, 2)),
                          (tally.aot_written, (1,)), (tally.decisions or {}, (0,))):
        for i in fields:
            found.update(map(itemgetter(i), table))
    names = list(found)
    pos = dict(zip(names, range(len(names)), strict=True))
    starts = [(sid, t, flags, pos[host], pos[key0],
               [] if hk is None else [pos[hk]] if hk.__class__ is str else [pos[k] for k in hk],
               load_s)
              for sid, (t, flags, host, key0, hk, load_s) in tally.starts.items()]
    kept = Kept(
        FORMAT, by_entry, dev, ino, offset, lines, head, before, bad, problems, names, starts,
        [(sid, pos[h], pid, s) for (sid, h, pid), s in tally.work.items()],
        [(pos[k], sid, pos[h], pid, s) for (k, sid, h, pid), s in tally.key_work.items()],
        [(sid, pos[k]) for sid, k in tally.aot_written],
        [(pos[k], t) for k, t in tally.written.items()],
        [(pos[k], sid, f) for (k, sid), f in (tally.decisions or {}).items()],
        [(tree, ev, n) for (tree, ev), n in tally.events.items()])
    _write(_name(path, by_entry), _ENCODER.encode(kept))


def _write(name: str, data: bytes) -> None:
    with contextlib.suppress(OSError):
        os.makedirs(user_cache_dir(), mode=0o700, exist_ok=True)
        fd = safeio.open_dirs(user_cache_dir(), "stats", create=True, mode=0o700)
        try:
            safeio.replace_at(fd, name, data)
        finally:
            os.close(fd)


def memoizable(paths: list[tuple[Path, str]], since: float | None) -> Path | None:
    """The one ledger of a host that may be memoized (see the module's docstring)."""
    if since is not None or len(paths) != 1 or not enabled():
        return None
    p = paths[0][0]
    try:
        return p if p.stat().st_size >= MIN_BYTES else None
    except OSError:
        return None


# ---- the sums of a host, as the report uses them ----

SUM_FORMAT = 2
"""Bump when :class:`~.stats_tally._Partial` or how it is summed up changes."""
Acc = Annotated[list[int | float], msgspec.Meta(min_length=10, max_length=10)]
Count = Annotated[int, msgspec.Meta(ge=0)]


class Summary(msgspec.Struct, array_like=True, frozen=True):
    """One ledger's :class:`~.stats_tally._Partial` for one ``--by``, as it stood when the
    file ended at ``offset`` in a whole line."""

    format: int
    by: str
    models: str
    """:func:`models_digest` of the table it was summed up with."""
    dev: int
    ino: int
    offset: int
    head: str
    before: str
    bad: Count
    problems: list[str]
    events: list[tuple[str, str, Count]]
    groups: list[tuple[str, Acc]]
    hits: list[tuple[str, str, Count]]
    entry_groups: list[tuple[str, Acc]]
    entry_hits: list[tuple[str, Count]]
    entry_time: list[tuple[str, float, float]]
    written: list[tuple[str, float]]
    last_hit: list[tuple[str, float]]
    hosts: list[str]
    first: float | None


_SUM_DECODER = msgspec.msgpack.Decoder(Summary)


def models_digest(by: str, models: Mapping[str, str]) -> str:
    """What of the entry -> model table a host's sums depend on (only ``--by model`` names
    groups by it)."""
    if by != "model":
        return ""
    return xxhash.xxh3_64_hexdigest(_ENCODER.encode(sorted(models.items())))


def _sum_name(path: Path, by: str) -> str:
    real = os.fsencode(os.path.realpath(path))
    return f"{xxhash.xxh3_64_hexdigest(real)}-{by}.sum"


def load_summary(path: Path, by: str, models: str) -> _Partial | None:
    """The kept sums of ``path`` (with its damaged lines) when the file is still exactly what
    they were summed from, else ``None``."""
    try:
        raw = safeio.read_regular(memo_dir() / _sum_name(path, by), MAX_BYTES)
        s = _SUM_DECODER.decode(raw)
    except (OSError, msgspec.MsgspecError, RecursionError, MemoryError):
        return None
    if s.format != SUM_FORMAT or s.by != by or s.models != models:
        return None
    now = _fingerprints(path, s.offset)
    if now is None or now != (s.dev, s.ino, s.offset, s.head, s.before):
        return None
    part = _Partial(
        events=Counter({(tree, ev): n for tree, ev, n in s.events}),
        groups={name: list(a) for name, a in s.groups},
        hits=Counter({(g, k): n for g, k, n in s.hits}),
        entry_groups={name: list(a) for name, a in s.entry_groups},
        entry_hits=Counter(dict(s.entry_hits)),
        entry_time={k: (t, c) for k, t, c in s.entry_time},
        written=dict(s.written), last_hit=dict(s.last_hit), hosts=set(s.hosts),
        first=s.first, bad=s.bad, problems=s.problems[:MAX_PROBLEMS])
    return part


def save_summary(path: Path, by: str, models: str, part: _Partial, offset: int) -> None:
    """Keep ``part`` as the sums of ``path`` while it ends at ``offset`` (best effort)."""
    now = _fingerprints(path, offset)
    if now is None or now[2] != offset:
        return
    dev, ino, _size, head, before = now
    s = Summary(
        SUM_FORMAT, by, models, dev, ino, offset, head, before, part.bad, part.problems,
        [(tree, ev, n) for (tree, ev), n in part.events.items()],
        list(part.groups.items()), [(g, k, n) for (g, k), n in part.hits.items()],
        list(part.entry_groups.items()), list(part.entry_hits.items()),
        [(k, t, c) for k, (t, c) in part.entry_time.items()],
        list(part.written.items()), list(part.last_hit.items()), sorted(part.hosts),
        part.first)
    _write(_sum_name(path, by), _ENCODER.encode(s))
