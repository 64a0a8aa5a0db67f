"""Use of each entry, from the recorder's ledger: hits, misses, load failures and the last
time vLLM decided it. Where it exists it is the source of truth for "last used" (``ls``,
prune's LRU policy); otherwise the store's atime/mtime evidence stands."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from vllm_cache_tools.read.manifest import LedgerEvent, read_ledger
from vllm_cache_tools.store.types import Entry


@dataclass(frozen=True)
class Usage:
    hits: int
    misses: int
    load_failures: int
    first: float
    last: float
    last_event: str
    failures_since_hit: int = 0
    """Load failures after the last hit (all of them when it never hit): the starts that
    found the entry and paid a failed load plus a compile, and the next may again."""
    last_failure: str | None = None
    """vLLM's reason for the latest of those (its first line)."""


def summarize(events: Iterable[LedgerEvent]) -> dict[str, Usage]:
    """Entry key -> usage. One start that decides several ranks/prefixes of one entry counts
    once per (host, pid)."""
    seen: dict[str, dict[tuple[str, int | None], LedgerEvent]] = {}
    for e in events:
        if e.event == "disabled":
            continue
        seen.setdefault(e.key, {})[(e.host, e.pid)] = e
    out: dict[str, Usage] = {}
    for key, starts in seen.items():
        evs = sorted(starts.values(), key=lambda e: e.time)
        since = [e for e in evs if e.event == "load-failure"]
        hits_at = [i for i, e in enumerate(evs) if e.event == "hit"]
        if hits_at:
            since = [e for e in evs[hits_at[-1] + 1:] if e.event == "load-failure"]
        out[key] = Usage(
            failures_since_hit=len(since),
            last_failure=failure_line(since[-1].reason) if since else None,
            hits=sum(e.event == "hit" for e in evs),
            misses=sum(e.event == "miss" for e in evs),
            load_failures=sum(e.event == "load-failure" for e in evs),
            first=evs[0].time, last=evs[-1].time, last_event=evs[-1].event)
    return out


def failure_line(reason: str | None) -> str:
    """The first line of vLLM's load-failure message, without its "Compiling model again due
    to a load failure from PATH, reason:" lead (the path is the entry's own)."""
    text = (reason or "").strip()
    line = text.splitlines()[0] if text else ""
    _, sep, after = line.partition("reason: ")
    return (after if sep else line).strip() or "no reason logged"


def start_of(e: LedgerEvent) -> tuple[str, str] | None:
    """The vLLM start an event belongs to: its host and the recorder's start id, or its host
    and process where the recorder wrote no start id; ``None`` (no evidence) with neither."""
    if e.start:
        return e.host, e.start
    return (e.host, f"pid {e.pid}") if e.pid is not None else None


@dataclass(frozen=True)
class StartUse:
    """What one vLLM start decided, from the ledger: the entries of both trees it compiled or
    loaded (one start's backend and AOT entries are the recorder's proof that they belong
    together) and its last decision."""

    start: tuple[str, str]
    keys: frozenset[str]
    last: float


def starts_used(events: Iterable[LedgerEvent]) -> list[StartUse]:
    """Every start of the ledger with the entry keys it decided (``disabled`` events aside),
    oldest first."""
    keys: dict[tuple[str, str], set[str]] = {}
    last: dict[tuple[str, str], float] = {}
    for e in events:
        s = start_of(e)
        if s is None or e.event == "disabled":
            continue
        keys.setdefault(s, set()).add(e.key)
        last[s] = max(last.get(s, e.time), e.time)
    return sorted((StartUse(s, frozenset(k), last[s]) for s, k in keys.items()),
                  key=lambda u: (u.last, u.start))


def usage(compile_cache: Path) -> dict[str, Usage]:
    return summarize(read_ledger(compile_cache)[0])


def apply_usage(entries: Iterable[Entry], use: Mapping[str, Usage]) -> list[Entry]:
    """Entries with their hit counts and ``last_used`` from the ledger where it knows them.
    When the store's evidence is newer (a start with the recorder off, or another reader of the
    files), that later time is kept with its own source: last use is never moved back, so
    prune's age policies stay on the safe side."""
    out = []
    for e in entries:
        u = use.get(e.key)
        if u is None:
            out.append(e)
            continue
        if e.last_used is not None and e.last_used > u.last:
            e = replace(e, hits=u.hits, misses=u.misses)
        else:
            e = replace(e, last_used=u.last, last_used_source="ledger", hits=u.hits,
                        misses=u.misses)
        out.append(_load_failed(e, u) if u.failures_since_hit else e)
    return out


def _load_failed(e: Entry, u: Usage) -> Entry:
    """A complete entry that vLLM failed to load since its last hit is ``load-failed``; a
    more specific state (corrupt, partial, unloadable, in use, unknown) stays."""
    n = u.failures_since_hit
    e = replace(e, load_failed=n)
    if e.state != "complete":
        return e
    return replace(e, state="load-failed", state_detail=(
        f"vLLM failed to load it {times(n)} since its last hit (recorder ledger): "
        f"{u.last_failure}"))


def times(n: int) -> str:
    return f"{n} time" + ("" if n == 1 else "s")
