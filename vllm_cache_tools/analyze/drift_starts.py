"""The starts ``drift`` compares (:mod:`.drift`): from the recorder's ledgers (one per start
id, else per process, with the manifest digests its events name, the lowest rank's per tree),
or from manifests alone (each manifest's first writer).

Bounded (issue 23): past :data:`MAX_STARTS` starts held at once, the ledgers are read again
into parts on disk by start (:class:`~vllm_cache_tools.read.ledger_spill.Spill`), and each
part's starts are handed on and dropped; every event of a start is in its part, so the starts
are the same. Only the (tree, key, manifest) triples the caller has manifests for are kept as
"named"."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vllm_cache_tools.analyze.inputs import Inputs
from vllm_cache_tools.read.ledger_spill import Spill, parts_for
from vllm_cache_tools.read.ledger_stream import LedgerProblem, StatsEvent, read_batches
from vllm_cache_tools.read.manifest import Manifest

MAX_STARTS = 100_000
"""Starts held at once while the ledgers are read (~1 KB each); past it the ledgers are read
again into parts on disk (by start), each part's starts resolved and dropped."""
SPILL_PART_BYTES = 32 << 20
"""Ledger bytes per part (~35,000 starts of the recorder's lines)."""


@dataclass(slots=True)
class Start:
    host: str
    picks: dict[str, tuple[tuple[int, ...], str, str]] = field(default_factory=dict)
    """tree -> (rank order, key, manifest digest) of the lowest rank seen."""
    keys: set[tuple[str, str]] = field(default_factory=set)
    work: dict[str, float] = field(default_factory=dict)
    """worker -> backend seconds on misses"""

    def pick(self, tree: str, rank: str, key: str, digest: str) -> None:
        order = rank_order(rank)
        cur = self.picks.get(tree)
        if cur is None or order < cur[0]:
            self.picks[tree] = (order, key, digest)

    @property
    def compile_seconds(self) -> float:
        return max(self.work.values(), default=0.0)


def _add_rows(starts: dict[str, Start], rows: Sequence[StatsEvent],
              wanted: Mapping[tuple[str, str, str], Any], named: set[tuple[str, str, str]]
              ) -> None:
    for r in rows:
        host, key, tree, manifest = r.host, r.key, r.tree, r.manifest
        sid = r.start or f"{host}:{r.pid}"
        st = starts.get(sid)
        if st is None:
            st = starts[sid] = Start(host)
        st.keys.add((tree, key))
        if manifest:
            st.pick(tree, r.rank, key, manifest)
            if (tree, key, manifest) in wanted:  # only manifests the source has: bounded
                named.add((tree, key, manifest))
        if tree == "backend" and r.event in ("miss", "load-failure"):
            w = f"{host}:{r.pid}"
            st.work[w] = st.work.get(w, 0.0) + (r.seconds or 0.0) + (r.dynamo_s or 0.0)


def starts_from_ledgers(inputs: Inputs, wanted: Mapping[tuple[str, str, str], Any],
                         named: set[tuple[str, str, str]], problems: list[str],
                         caps: list[str]) -> Iterator[tuple[str, Start]]:
    """Starts from the ledgers, each once (in parts on disk when there are more than
    :data:`MAX_STARTS`); ``named`` gets every (tree, key, manifest) of ``wanted`` an event
    names (complete once this is exhausted)."""
    bad = [0]
    found: list[str] = []

    def batches() -> Iterator[list[StatsEvent]]:
        bad[0] = 0
        found.clear()
        for path in inputs.ledgers:
            for b in read_batches(path):
                if isinstance(b, LedgerProblem):
                    if b.line == 0:  # the whole file (unreadable, not a regular file)
                        found.append(str(b))
                    else:
                        bad[0] += 1
                    continue
                yield b

    starts: dict[str, Start] = {}
    for b in batches():
        _add_rows(starts, b, wanted, named)
        if len(starts) > MAX_STARTS:
            break
    else:
        yield from starts.items()
        _damaged(bad[0], found, problems)
        return
    starts.clear()
    size = sum(_size(p) for p in inputs.ledgers)
    with Spill(parts_for(size, SPILL_PART_BYTES), _start_of, "vllm-cache-drift-") as sp:
        for b in batches():
            sp.add(b)
        sp.finish()
        for i in range(sp.parts):
            part: dict[str, Start] = {}
            for b in sp.read(i):
                _add_rows(part, b, wanted, named)
            yield from part.items()
            sp.drop(i)
        caps.append(f"the ledgers hold more than {MAX_STARTS:,} starts: read in {sp.parts} "
                    f"parts by start ({sp.bytes / 1e6:,.0f} MB in a temporary folder, "
                    "removed), exactly")
    _damaged(bad[0], found, problems)


def _start_of(r: StatsEvent) -> str:
    return r.start or f"{r.host}:{r.pid}"


def _size(p: os.PathLike[str]) -> int:
    try:
        return os.stat(p).st_size
    except OSError:
        return 0


def _damaged(bad: int, found: list[str], problems: list[str]) -> None:
    problems += found
    if bad:
        problems.append(f"{bad} damaged ledger line(s) skipped (vllm-cache stats lists them)")


@functools.lru_cache(maxsize=4096)
def rank_order(rank: str) -> tuple[int, ...]:
    """``rank_1_0`` -> (1, 0) (a few names in a fleet, asked once per event: cached)."""
    return tuple(int(x) for x in _DIGITS.findall(rank)) or (1 << 30,)


_DIGITS = re.compile(r"\d+")


def starts_from_manifests(manifests: Iterable[Manifest]) -> dict[str, Start]:
    """Each manifest's first writer (its host and pid) as a start; only the lowest rank of
    each entry (the other ranks' workers are the same starts)."""
    ms = list(manifests)
    lowest: dict[tuple[str, str], tuple[int, ...]] = {}
    for m in ms:
        o = rank_order(m.rank)
        if o < lowest.get((m.tree, m.key), (1 << 31,)):
            lowest[m.tree, m.key] = o
    starts: dict[str, Start] = {}
    for m in ms:
        if rank_order(m.rank) != lowest[m.tree, m.key]:
            continue
        host = str(m.data.get("host") or "?")
        sid = f"{host}:{m.data.get('pid')}"
        st = starts.setdefault(sid, Start(host))
        st.keys.add((m.tree, m.key))
        st.pick(m.tree, m.rank, m.key, m.digest)
    return starts
