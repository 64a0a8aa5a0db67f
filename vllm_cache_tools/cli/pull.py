"""``vllm-cache pull URL [KEY...] [--if-hit] [-- <vllm serve args>]``: entries from a remote
store into the cache root, checked like unpack. The verb's options (typer); what it does:
:mod:`.pull_run`."""

from __future__ import annotations

from typing import Annotated

import typer

from vllm_cache_tools.cli.fleetcommon import (
    JobsOpt,
    JsonOpt,
    PythonOpt,
    RequireSigOpt,
    RootOpt,
    StorageOpt,
    TrustOpt,
    UsageOpt,
    passthrough,
)


def pull(
    ctx: typer.Context,
    url: Annotated[str, typer.Argument(help="The store: s3://bucket/prefix, gs://..., "
                                       "file:///shared/path, oci://HOST[:PORT]/REPO[:TAG] (a "
                                       "registry; with :TAG only the entries that tag pins).",
                                       show_default=False)],
    root: RootOpt = None,
    if_hit: Annotated[bool, typer.Option(
        "--if-hit", help="Fetch only the entries vLLM's next start here will use (needs the "
        "vLLM arguments after --), and nothing when it would not hit.")] = False,
    check: Annotated[bool, typer.Option("--check", help="Decide only: fetch nothing.")]
    = False,
    force: Annotated[bool, typer.Option(
        "--force", help="Fetch even when the checks say vLLM would not use the entries, and "
        "place entries whose key could not be re-derived from their files.")]
    = False,
    python: PythonOpt = None,
    usage: UsageOpt = "serve",
    jobs: JobsOpt = 8,
    storage_option: StorageOpt = None,
    trust: TrustOpt = None,
    require_signature: RequireSigOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Pull entries from a remote store into the cache root.

    KEY... (after URL) names entries by key or unique prefix (default: all of them); linked
    entries of the same start come along. The checks of unpack run on the store's index
    objects before any blob moves; with --if-hit and the vLLM arguments after --, only the
    entries the next start here will load are fetched (a pod's init step: pull --if-hit
    before vLLM starts). Blobs are fetched in parallel, each size and sha256 checked, into a
    staging folder inside the root; entries are then renamed into place under their locks.
    With a trust policy (--trust or $VLLM_CACHE_TOOLS_TRUST) each entry's index object must
    carry a signature by a key the policy allows now: the others are refused (exit 1; none
    of their bytes fetched) and the trusted ones go on. Each placed entry's origin, signer
    and provenance are recorded (show).
    Exit status: 0 done (or --check: would hit), 1 refused / would not hit, 2 usage, store
    or I/O error (a listed blob missing, no credentials)."""
    from vllm_cache_tools.cli.pull_run import run_pull

    refs, vllm_args = passthrough(ctx.args)
    raise typer.Exit(run_pull(url, refs, vllm_args, root=root, if_hit=if_hit, check=check,
                              force=force, python=python, usage=usage, jobs=jobs,
                              storage_option=storage_option, json_out=json_out,
                              trust=trust, require_signature=require_signature))
