"""``vllm-cache pack KEY... -o FILE``: one start's cache in one deterministic .tar.zst."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from vllm_cache_tools.cli.common import print_json
from vllm_cache_tools.cli.fleetcommon import (
    JsonOpt,
    SignOpt,
    byte_bar,
    footprint_line,
    out,
    run,
)
from vllm_cache_tools.cli.ls import RootOpt
from vllm_cache_tools.units import human_size


def pack(
    refs: Annotated[list[str] | None, typer.Argument(
        metavar="[KEY...]", help="Entries: keys, unique key prefixes (as ls prints them) or "
        "paths inside entries.", show_default=False)] = None,
    output: Annotated[Path, typer.Option("--output", "-o", help="Bundle to write (.tar.zst; "
                                         "- for stdout, the default: not with --json).",
                                         show_default=False)] = Path("-"),
    root: RootOpt = None,
    model: Annotated[str | None, typer.Option(
        "--model", help="Also every entry whose served model or traced model code contains "
        "this text.")] = None,
    filter_expr: Annotated[str | None, typer.Option(
        "--filter", help="Also every entry matching this ls --filter expression.")] = None,
    level: Annotated[int, typer.Option("--level", help="zstd level (1-19).", min=1,
                                       max=19)] = 3,
    sync: Annotated[bool, typer.Option(
        "--sync", help="Flush the bundle to disk (fsync) before exiting; without it, as with "
        "tar, a power loss can leave a torn bundle, which unpack refuses.")] = False,
    force: Annotated[bool, typer.Option(
        "--force", help="Replace an existing -o FILE (it is replaced as a name, never "
        "written through).")] = False,
    sign: SignOpt = None,
    fmt: Annotated[str, typer.Option(
        "--format", help="bundle (a .tar.zst) or oci-image: -o DIR becomes an OCI image "
        "layout whose one layer is the bundle, so the image's filesystem is a cache root "
        "(Kubernetes ImageVolume; push it with skopeo copy oci:DIR docker://HOST/REPO:TAG).")]
    = "bundle",
    json_out: JsonOpt = False,
) -> None:
    """Pack entries into one .tar.zst bundle.

    Each named entry comes with the other tree's entries proven to be of the same start (the
    AOT artifact's traced sources reproduce the backend entry's code hash), every rank and
    prefix, and the recorder's manifests and source snapshots when present. A manifest
    inside lists every file's size and sha256, the key parts, the vLLM / torch / Triton /
    Python versions, the hardware and the traced files' paths. The same entries give the
    same bytes (sorted members, fixed times and owners), unless signed: --sign KEYFILE adds
    the provenance to the manifest and its SSHSIG signature as the second member (unpack
    --trust checks it; so does ssh-keygen -Y verify -n vllm-cache). Entries that are
    partial, corrupt or unreadable are refused (exit 1). An existing -o FILE (or a symlink
    there) is refused without --force. --format oci-image writes -o DIR (a new folder) as
    an OCI image layout instead: its layer is the bundle, so a runtime that unpacks the image
    gives a cache root (with the bundle's manifest at its top), for Kubernetes ImageVolume.
    Exit status: 0 packed, 1 refused, 2 usage or I/O error."""
    import sys

    from vllm_cache_tools.fleet.api import pack as do_pack
    from vllm_cache_tools.views.fleet import pack_document

    if fmt not in ("bundle", "oci-image"):
        from vllm_cache_tools.cli.common import fail

        fail(f"--format {fmt}: bundle or oci-image")
    image = fmt == "oci-image"
    if str(output) == "-" and (json_out or sys.stdout.isatty() or image):
        from vllm_cache_tools.cli.common import fail

        fail("an OCI image layout is a folder: give -o DIR" if image else
             "--json prints to stdout, where the bundle would go: give -o FILE" if json_out
             else "give -o FILE (or redirect stdout): a bundle is binary")
    with byte_bar("packing", not json_out and str(output) != "-") as bar:
        r = run(lambda: do_pack(refs or [], output, root=root, model=model,
                                filter_expr=filter_expr, level=level, progress=bar,
                                sync=sync, force=force, sign=sign, image=image))
    if json_out:
        print_json(pack_document(r))
        return
    if str(output) == "-":
        return
    assert r.footprint is not None
    if r.image is not None:
        out(f"packed {footprint_line(r.footprint)} into the OCI image layout {r.path} "
            f"({r.image.architecture}): one layer, the bundle, {human_size(r.size_bytes)} "
            f"(tar+zstd, {r.image.layer_digest}); manifest {r.image.manifest_digest}\n"
            f"  push it: skopeo copy oci:{r.path} docker://HOST/REPO:TAG\n")
    else:
        out(f"packed {footprint_line(r.footprint)} into {r.path}: "
            f"{human_size(r.size_bytes)} compressed, sha256 {r.sha256}\n")
    if r.signer:
        out(f"  signed by key {r.signer} (namespace vllm-cache)\n")
    from vllm_cache_tools.cli.render import key_column

    keys, w = key_column(e.key for e in r.entries)
    for e in r.entries:
        out(f"  {e.layout:<7} {keys[e.key]:<{w}}  {len(e.files):>4} files "
            f"{human_size(e.size_bytes):>7}  {e.state}\n")
