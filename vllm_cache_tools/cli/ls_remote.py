"""``vllm-cache ls URL``: a remote store's entries, as the same table and JSON as a local ls
(called from :mod:`vllm_cache_tools.cli.ls` when its argument is a URL)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from vllm_cache_tools.cli.common import print_json, warn, write_out
from vllm_cache_tools.cli.fleetcommon import run
from vllm_cache_tools.store.filters import parse_filter, sort_entries
from vllm_cache_tools.store.types import Entry, TreeStats
from vllm_cache_tools.units import human_age, human_size
from vllm_cache_tools.views.payloads import entry_summary, totals, with_schema


def _entry(e: object) -> Entry:
    from vllm_cache_tools.fleet.remote import StoreEntry

    assert isinstance(e, StoreEntry)
    r = e.record
    size = r.size_bytes
    t = e.pushed_at
    return Entry(key=r.key, layout=r.layout,  # type: ignore[arg-type]
                 path=Path(r.path), stats=TreeStats(size_bytes=size, disk_bytes=size,
                                                    files=len(r.files)),
                 ranks=r.ranks, prefixes=r.prefixes, state=r.state,  # type: ignore[arg-type]
                 state_detail=r.state_detail, created=t, created_source="pushed",
                 modified=t, last_used=t, last_used_source=None,
                 vllm_version=r.versions.get("vllm"), torch_version=r.versions.get("torch"),
                 model=r.model, hardware=r.hardware.get("label"), checkpoint=r.checkpoint)


def ls_remote(url: str, *, json_out: bool, sort: str, filter_expr: str | None,
              wide: bool, trust: Path | None = None,
              storage_option: Sequence[str] | None = None) -> None:
    from vllm_cache_tools.cli.ls_run import _row, ls_columns
    from vllm_cache_tools.cli.render import print_table, shown_keys
    from vllm_cache_tools.fleet.remote import Store, parse_storage_options

    pred = parse_filter(filter_expr) if filter_expr else None
    sort_entries([], sort)
    opts = run(lambda: parse_storage_options(storage_option or []))
    store = run(lambda: Store(url, opts))
    run(lambda: store.ensure_marker(create=False))
    listing = run(store.listing)
    found = listing.entries
    problems = [x.warning for x in listing.skipped]
    for w in problems:
        warn(w)
    by_key = {(e.record.layout, e.record.key): e for e in found}
    from vllm_cache_tools.fleet.trust import resolve_policy

    policy = run(lambda: resolve_policy(trust))
    judged = None
    if policy is not None:
        from vllm_cache_tools.fleet.store_trust import judge_entries

        judged = run(lambda: judge_entries(store, found, policy))
    allv = [_entry(e) for e in found]
    entries = sort_entries([e for e in allv if pred is None or pred(e)], sort)
    if json_out:
        rows = []
        for e in entries:
            row = entry_summary(e)
            row["path"] = store.fs.unstrip_protocol(store.index_path(e.layout, e.key)) \
                if hasattr(store.fs, "unstrip_protocol") else row["path"]
            row["last_used_source"] = "pushed"
            row["entry_path"] = by_key[(e.layout, e.key)].record.path
            row["provenance"] = dict(by_key[(e.layout, e.key)].provenance) or None
            if judged is not None:
                from vllm_cache_tools.fleet.placed import signature_json

                row["signature"] = signature_json(judged[(e.layout, e.key)])
            rows.append(row)
        listed = totals(entries)
        print_json(with_schema("ls", {
            "root": store.url, "total_size_bytes": listed["size_bytes"], "totals": listed,
            "root_totals": listed if len(entries) == len(allv) else totals(allv),
            "entries": rows, "problems": problems}))
        return
    write = write_out
    if not allv:
        write(f"No entries in {store.url}.\n")
        return
    keys = shown_keys(e.key for e in allv)
    rows2 = []
    columns = ls_columns()
    if judged is not None:
        from vllm_cache_tools.cli.render import Column

        columns = (*columns, Column("SIGNER", shrink_to=40))
    for e in entries:
        cells = _row(e, keys)
        cells[6] = f"{human_age(e.last_used)} (pushed)"
        if judged is not None:
            j = judged[(e.layout, e.key)]
            cells.append(j.signer or "-" if j.trusted else f"REFUSED: {j.reason}")
        rows2.append(cells)
    print_table(store.url, columns, rows2, wide=wide)
    listed = totals(entries)
    shown = f"{len(entries)} of {len(allv)}" if pred else str(len(entries))
    write(f"\n{shown} entries, {human_size(listed['size_bytes'])} total, {listed['files']} files "
          "(LAST USED: when pushed)\n")
