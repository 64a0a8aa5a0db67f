"""``vllm-cache prune-remote URL``: a remote store's old entries and unreferenced blobs."""

from __future__ import annotations

from typing import Annotated

import typer

from vllm_cache_tools.cli.common import fail, print_json
from vllm_cache_tools.cli.fleetcommon import JsonOpt, StorageOpt, out, run
from vllm_cache_tools.units import human_size


def prune_remote(
    url: Annotated[str, typer.Argument(help="The store's URL.", show_default=False)],
    older_than: Annotated[str | None, typer.Option(
        "--older-than", help="Remove entries pushed longer ago than this (e.g. 30d, 12h).")]
    = None,
    max_size: Annotated[str | None, typer.Option(
        "--max-size", help="Then remove the oldest entries until the store holds at most "
        "this (e.g. 50G; blobs shared by entries counted once).")] = None,
    grace: Annotated[str, typer.Option(
        "--grace", help="Never remove a blob younger than this (a push in progress uploads "
        "blobs before it publishes its index).")] = "1h",
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Remove; without it, only say "
                                      "what would go.")] = False,
    storage_option: StorageOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Prune a remote store by age and size.

    Entries (index objects) pushed longer ago than --older-than go, then the oldest until
    the store fits --max-size; then every blob no remaining entry lists and older than
    --grace. Without --yes nothing is removed (a dry run). In an oci:// registry the
    entries' manifests go and the registry's garbage collection reclaims their blobs; an
    entry a tag pins (the index a push to URL:TAG made) is never removed: the plan lists it
    with its tags.
    Exit status: 0 done, 2 usage or store error."""
    from vllm_cache_tools.fleet.remote import parse_storage_options
    from vllm_cache_tools.fleet.remote_ops import prune_store
    from vllm_cache_tools.units import parse_age, parse_size
    from vllm_cache_tools.views.fleet import prune_remote_document

    if older_than is None and max_size is None:
        fail("give --older-than and/or --max-size")
    age = parse_age(older_than) if older_than else None
    size = parse_size(max_size) if max_size else None
    grace_s = parse_age(grace)
    opts = run(lambda: parse_storage_options(storage_option or []))
    r = run(lambda: prune_store(url, older_than_s=age, max_bytes=size, dry_run=not yes,
                                grace_s=grace_s, storage_options=opts))
    from vllm_cache_tools.cli.common import warn

    for w in r.skipped:
        warn(w)
    if r.skipped:
        warn("no blob removed while an index object cannot be read (which blobs it lists "
             "is not known)")
    if json_out:
        print_json(prune_remote_document(r))
        return
    verb = "would remove" if r.dry_run else "removed"
    out(f"{r.url}: {verb} {len(r.removed)} entries and {r.blobs_removed} blobs "
        f"({human_size(r.bytes_freed)}); {r.kept} entries kept\n")
    for k in r.removed:
        out(f"  {k}\n")
    if r.pinned:
        out(f"  kept {len(r.pinned)} entries a tag pins (delete or move the tag to let them "
            "go):\n")
        for k, tags in r.pinned:
            out(f"  {k}  pinned by {', '.join(tags)}\n")
    if r.url.startswith("oci://"):
        out("  blobs: a registry cannot list them; its garbage collection reclaims those no "
            "manifest references any more (distribution: registry garbage-collect)\n")
