"""Streaming ``prune --yes``: each entry is judged and moved into the trash as the scan reads
it, while threads remove what is already there, instead of scan everything, plan, then move.

Why: on roots of many small entries a two-phase prune pays for a whole scan before the first
byte is freed, and the removal cannot start before it ends; here the scan's worker processes
(:mod:`vllm_cache_tools.store.parallel_read`), this process's checks and moves, and the trash's
removal threads run at once, and the stats the scan makes serve the decision, the grace check,
the re-check before the move and the size report.

Only policies that judge each entry alone stream (:func:`streams`): ``--older-than``,
``--corrupt``, ``--partial``, ``--unhittable``, ``--load-failed``. ``--keep`` and the budgets
(``--max-size``, ``--max-files``) need every entry first and keep the two-phase path
(:mod:`vllm_cache_tools.maintain.plan` then :mod:`vllm_cache_tools.maintain.execute`), as do
dry runs and runs that ask for confirmation (the plan must be seen before anything moves).

Every protection of the two-phase path applies, in the same order and words
(:func:`~vllm_cache_tools.maintain.plan.protection_reason` on the entry as read, then the
fd-relative re-check of :class:`~vllm_cache_tools.maintain.execute.Mover` under the entry's
lock right before its one ``renameat``). What differs: the plan is printed after the run (it
is known only then), in the order entries were read, and planned backend entries carry no
proven same-sources links to AOT entries (those are read from entries already gone).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack

from vllm_cache_tools.keys.compat import Environment
from vllm_cache_tools.layout import COMPILE_CACHE_DIRNAME
from vllm_cache_tools.maintain.evidence import last_use
from vllm_cache_tools.maintain.execute import Busy, Mover, PruneResult
from vllm_cache_tools.maintain.plan import (
    PlannedEntry,
    Protections,
    PrunePlan,
    Skip,
    planned_entry,
    protection_reason,
)
from vllm_cache_tools.maintain.policies import (
    POLICY_SELECTORS,
    Choosing,
    Policies,
    reads_contents,
)
from vllm_cache_tools.read.manifest import read_ledger
from vllm_cache_tools.store.folders import scan_workers
from vllm_cache_tools.store.locate import CacheRoot
from vllm_cache_tools.store.parallel_read import (
    LIGHT_FORK_CORES,
    WorkerLost,
    forked_workers,
    pool_size,
    read_entries,
    read_light,
)
from vllm_cache_tools.store.scan import classify
from vllm_cache_tools.store.tree_stats import Listing
from vllm_cache_tools.store.types import Entry
from vllm_cache_tools.store.usage import apply_usage, summarize

STREAMED_NOTE = ("streamed: each entry was checked and moved as the scan read it (this plan is "
                 "printed after the run; backend/AOT source links not computed)")
LIGHT_NOTE = ("light read: these policies judge file times only, so no key file was parsed "
              "(models and versions not read)")


def streams(policies: Policies) -> bool:
    """Whether ``policies`` judge each entry alone (no whole-root view: no ``--keep``, no
    budget, no named entries), so that ``prune --yes`` can stream."""
    return (policies.keep is None and not policies.budgets() and not policies.named
            and not policies.empty)


def stream_prune(croot: CacheRoot, policies: Policies, protections: Protections | None = None,
                 *, environment: Environment | None = None, workers: int = 4,
                 proc_refresh_s: float = 1.0) -> PruneResult:
    """Scan ``croot`` (already refused or accepted by
    :func:`~vllm_cache_tools.maintain.plan.check_prunable_root`) and move each entry that
    ``policies`` choose and no protection keeps into the trash as it is read; ``workers``
    threads remove trash items meanwhile. Returns what :func:`execute_plan` returns, with
    the plan assembled from what was read."""
    if not streams(policies):
        raise ValueError(f"policies {policies.describe()} need the whole root: plan first")
    prot = protections or Protections()
    root = croot.vllm_root
    now = time.time()
    cc = root / COMPILE_CACHE_DIRNAME
    events = read_ledger(cc)[0]
    use = summarize(events)
    ledger = {k: u.last for k, u in use.items()}
    busy = Busy(root, proc_refresh_s)
    items = classify(cc, [])  # foreign items are no entries: prune leaves them, unreported
    light = not reads_contents(policies)
    planned: list[PlannedEntry] = []
    skipped: list[Skip] = []
    notes: list[str] = []
    total_bytes = total_files = count = 0
    selectors = [select for active, select in POLICY_SELECTORS.values() if active(policies)]
    mover: Mover | None = None
    stack = ExitStack()
    try:
        # The light read runs in forked processes from LIGHT_FORK_CORES cores (in this
        # thread on one): forked here, before any removal thread exists, and the same
        # processes then remove what was moved (the removal shares no interpreter lock with
        # this loop). The full read's pool forks on the first entry.
        n = scan_workers()
        pool = (stack.enter_context(forked_workers(pool_size(n, len(items))))
                if light and n >= LIGHT_FORK_CORES else None)
        entries: Iterator[tuple[Entry, Listing | None]] = (
            read_light(items, pool=pool) if light
            else ((e, None) for e in read_entries(items)))
        for e, listing in entries:
            if use:
                e = apply_usage((e,), use)[0]
            count += 1
            total_bytes += e.size_bytes
            total_files += e.stats.files
            c = Choosing([e], policies, environment, now, {id(e): last_use(e, ledger)})
            for select in selectors:
                select(c)
            notes += [n for n in c.notes if n not in notes]
            reasons = c.chosen.get(id(e))
            if reasons is None:
                skipped += [Skip(x.key, x.layout, x.path, f"{q} {why}")
                            for x, q, why in c.undecided]
                continue
            why_not = protection_reason(e, root, prot, now, busy.get())
            if why_not is not None:
                skipped.append(Skip(e.key, e.layout, e.path,
                                    f"{why_not} [{'; '.join(reasons)}]"))
                continue
            pe = planned_entry(e, root, tuple(reasons), c.lu[id(e)])
            if pe is None:
                skipped.append(Skip(e.key, e.layout, e.path, "vanished while planning"))
                continue
            planned.append(pe)
            if mover is None:
                mover = Mover(root, prot, create=True, workers=workers, busy=busy, pool=pool)
                if mover.ready:
                    mover.start()
            if mover.ready:
                mover.move(pe, listing)
            else:
                mover.skipped.append(Skip(pe.key, pe.layout, pe.path,
                                          "torch_compile_cache is missing or a symlink"))
        if mover is None:  # nothing chosen: still finish what interrupted runs left
            mover = Mover(root, prot, create=False, workers=workers, busy=busy)
            if mover.ready:
                mover.start()
        plan = PrunePlan(root, croot.source, tuple(_by_last_use(planned)), tuple(skipped),
                         policies.describe(), prot, now, total_bytes, count, environment,
                         tuple(_notes(planned, ledger, notes, light)),
                         total_files=total_files)
        if not mover.ready:
            mover.close()
            return PruneResult(plan, (), (*plan.skipped, *mover.skipped), 0)
        return mover.finish(plan)
    except WorkerLost:
        # A worker ended (killed: out of memory?) while reads were unanswered; some entries
        # may be in the trash already, which the read's own message would deny.
        moved = mover.moved if mover is not None else 0
        raise WorkerLost(f"a worker process ended without answering (killed: out of memory?); "
                         f"{moved} entries were already moved into the trash (this or the next "
                         "prune removes them), the others are untouched: run again") from None
    finally:
        if mover is not None:
            mover.close()
        stack.close()


def _by_last_use(planned: list[PlannedEntry]) -> list[PlannedEntry]:
    """The two-phase plan's order (least recently used first)."""
    return sorted(planned, key=lambda p: (p.last_used or 0.0, p.key))


def _notes(planned: list[PlannedEntry], ledger: dict[str, float], notes: list[str],
           light: bool) -> list[str]:
    """The plan's notes, as :func:`~vllm_cache_tools.maintain.plan.plan_prune` writes them,
    and that the run streamed."""
    out = list(notes)
    if planned:
        sources: dict[str, int] = {}
        for p in planned:
            src = p.last_used_source or "none"
            sources[src] = sources.get(src, 0) + 1
        note = "last use from " + ", ".join(f"{s} ({n})" for s, n in sorted(sources.items()))
        if not ledger:
            note += "; no hit ledger (the recorder plugin has not run on this root)"
        out.insert(0, note)
    out.append(STREAMED_NOTE)
    if light:
        out.append(LIGHT_NOTE)
    return out


__all__ = ["LIGHT_NOTE", "STREAMED_NOTE", "stream_prune", "streams"]
