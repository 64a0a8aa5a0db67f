"""``vllm-cache pull URL [KEY...] [--if-hit] [-- <vllm serve args>]``: entries from a remote
store into the cache root, checked like unpack."""

from __future__ import annotations

from typing import Annotated

import typer

from vllm_cache_tools.cli.common import fail, print_json
from vllm_cache_tools.cli.fleetcommon import (
    JobsOpt,
    JsonOpt,
    PythonOpt,
    StorageOpt,
    UsageOpt,
    byte_bar,
    check_usage,
    entries_line,
    out,
    passthrough,
    render_check,
    render_placements,
    run,
)
from vllm_cache_tools.cli.ls import RootOpt
from vllm_cache_tools.units import human_size


def pull(
    ctx: typer.Context,
    url: Annotated[str, typer.Argument(help="The store: s3://bucket/prefix, gs://..., "
                                       "file:///shared/path.", show_default=False)],
    root: RootOpt = None,
    if_hit: Annotated[bool, typer.Option(
        "--if-hit", help="Fetch only the entries vLLM's next start here will use (needs the "
        "vLLM arguments after --), and nothing when it would not hit.")] = False,
    check: Annotated[bool, typer.Option("--check", help="Decide only: fetch nothing.")]
    = False,
    force: Annotated[bool, typer.Option(
        "--force", help="Fetch even when the checks say vLLM would not use the entries.")]
    = False,
    python: PythonOpt = None,
    usage: UsageOpt = "serve",
    jobs: JobsOpt = 8,
    storage_option: StorageOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Pull entries from a remote store into the cache root.

    KEY... (after URL) names entries by key or unique prefix (default: all of them); linked
    entries of the same start come along. The checks of unpack run on the store's index
    objects before any blob moves; with --if-hit and the vLLM arguments after --, only the
    entries the next start here will load are fetched (a pod's init step: pull --if-hit
    before vLLM starts). Blobs are fetched in parallel, each size and sha256 checked, into a
    staging folder inside the root; entries are then renamed into place under their locks.
    Exit status: 0 done (or --check: would hit), 1 refused / would not hit, 2 usage, store
    or I/O error (a listed blob missing, no credentials)."""
    from vllm_cache_tools.fleet.api import pull as do_pull
    from vllm_cache_tools.fleet.remote import is_url, parse_storage_options
    from vllm_cache_tools.views.fleet import pull_document

    check_usage(usage)
    if not is_url(url):
        fail(f"{url!r} is not a store URL (s3://..., gs://..., file:///...)")
    refs, vllm_args = passthrough(ctx.args)
    opts = run(lambda: parse_storage_options(storage_option or []))
    with byte_bar("pulling", not json_out) as bar:
        r = run(lambda: do_pull(url, refs, root=root, vllm_args=vllm_args, if_hit=if_hit,
                                force=force, check_only=check, python=python, usage=usage,
                                workers=jobs, storage_options=opts, progress=bar))
    if json_out:
        print_json(pull_document(r))
    else:
        out(f"{r.url}: {entries_line(r.selected)} selected\n")
        if r.check is not None:
            out(render_check(r.check))
        if r.refused:
            out("nothing fetched (--force fetches anyway)\n")
        elif r.checked_only:
            out("--check: nothing fetched\n")
        elif not r.selected:
            out("nothing to fetch\n")
        else:
            out(render_placements(r.placements))
            out(f"{human_size(r.bytes_downloaded)} downloaded in {r.seconds:.1f} s\n")
    if r.checked_only:
        raise typer.Exit(0 if r.check is None or r.check.would_hit else 1)
    raise typer.Exit(0 if r.ok else 1)
