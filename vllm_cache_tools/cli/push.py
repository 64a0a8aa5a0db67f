"""``vllm-cache push KEY... URL``: entries to a remote store (s3://, gs://, file://, oci://)."""

from __future__ import annotations

from typing import Annotated

import typer

from vllm_cache_tools.cli.common import fail, print_json
from vllm_cache_tools.cli.fleetcommon import (
    JobsOpt,
    JsonOpt,
    SignOpt,
    StorageOpt,
    byte_bar,
    footprint_line,
    out,
    run,
)
from vllm_cache_tools.cli.ls import RootOpt
from vllm_cache_tools.units import human_size


def push(
    args: Annotated[list[str], typer.Argument(
        metavar="KEY... URL", help="Entries (keys, unique prefixes, paths), then the store's "
        "URL: s3://bucket/prefix, gs://bucket/prefix, file:///shared/path, or an OCI "
        "registry oci://HOST[:PORT]/REPO[:TAG] (:TAG is then an index of what this push "
        "holds, for pinning).",
        show_default=False)],
    root: RootOpt = None,
    model: Annotated[str | None, typer.Option(
        "--model", help="Also every entry whose served model or traced model code contains "
        "this text.")] = None,
    filter_expr: Annotated[str | None, typer.Option(
        "--filter", help="Also every entry matching this ls --filter expression.")] = None,
    force: Annotated[bool, typer.Option(
        "--force", help="Replace the store's index of an entry that it holds with other "
        "files.")] = False,
    jobs: JobsOpt = 8,
    storage_option: StorageOpt = None,
    sign: SignOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Push entries to a remote store.

    Each file goes to a content-addressed blob (one copy for all entries, ranks and pushes
    that hold the same bytes); blobs already in the store are skipped, so an interrupted push
    resumes. Each entry's index object is published last, once all its blobs exist: a pull
    never sees half an entry. Every index object carries the entry's provenance; --sign
    KEYFILE signs it (the signature is the object <index>.json.sig beside it, written first;
    an entry already there is signed too). Linked entries of the same start, manifests and
    snapshots go along, as with pack. Credentials come the standard way (AWS_* variables
    including AWS_ENDPOINT_URL, ~/.aws; for oci://, REGISTRY_AUTH_FILE or
    ~/.docker/config.json) and are never printed. S3 needs the s3 extra: pip install
    'vllm-cache-tools[s3]' (oci://: [oci]). A registry on a loopback address is reached over
    plain HTTP, any other over HTTPS unless -o plain_http=true.
    Exit status: 0 pushed (or already there), 1 refused (the store holds another version of
    an entry), 2 usage, store or I/O error."""
    from vllm_cache_tools.fleet.api import push as do_push
    from vllm_cache_tools.fleet.remote import is_url, parse_storage_options
    from vllm_cache_tools.views.fleet import push_document

    if len(args) < 1 or not is_url(args[-1]):
        fail("give the store's URL last, e.g. vllm-cache push KEY s3://bucket/prefix")
    refs, url = args[:-1], args[-1]
    opts = run(lambda: parse_storage_options(storage_option or []))
    with byte_bar("pushing", not json_out) as bar:
        r = run(lambda: do_push(refs, url, root=root, model=model, filter_expr=filter_expr,
                                force=force, workers=jobs, storage_options=opts,
                                progress=bar, sign=sign))
    if json_out:
        print_json(push_document(r))
    else:
        from vllm_cache_tools.cli.render import key_column

        keys, w = key_column(e.key for e in r.entries)
        for e in r.entries:
            out(f"{e.action:<8} {e.layout:<7} {keys[e.key]:<{w}}"
                + (f"  ({e.detail})" if e.detail else "") + "\n")
        saved = r.logical_bytes - r.bytes_uploaded
        refused = sum(e.action == "refused" for e in r.entries)
        if r.footprint is not None:
            out(f"{r.url}: {footprint_line(r.footprint)}\n")
        out(f"  as {r.blobs_uploaded + r.blobs_present} distinct blobs (one per content): "
            f"{r.blobs_uploaded} uploaded ({human_size(r.bytes_uploaded)}), "
            f"{r.blobs_present} already there; {human_size(saved)} of "
            f"{human_size(r.logical_bytes)} not sent; {r.seconds:.1f} s\n")
        if r.pinned:
            out(f"  tag {r.pinned}: an index of these {len(r.entries) - refused} entries "
                "(pull it to get exactly them)\n")
    raise typer.Exit(1 if any(e.action == "refused" for e in r.entries) else 0)
