"""``vllm-cache unpack FILE [-- <vllm serve args>]``: check a bundle, then place it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from vllm_cache_tools.cli.common import print_json
from vllm_cache_tools.cli.fleetcommon import (
    JsonOpt,
    PythonOpt,
    RequireSigOpt,
    RootOpt,
    TrustOpt,
    UsageOpt,
    byte_bar,
    check_usage,
    footprint_line,
    out,
    passthrough,
    render_check,
    render_placements,
    render_signature,
    run,
)


def unpack(
    ctx: typer.Context,
    bundle: Annotated[Path, typer.Argument(help="The bundle (.tar.zst; - reads it from "
                                           "stdin, as pack -o - writes it).",
                                           show_default=False)],
    root: RootOpt = None,
    force: Annotated[bool, typer.Option(
        "--force", help="Place even when the checks say vLLM would not use the entries, and "
        "entries whose key could not be re-derived from their files (an entry already there "
        "with other files, or whose files give another key, is still never placed).")] = False,
    check: Annotated[bool, typer.Option(
        "--check", help="Only check (integrity of the manifest, compatibility, relocation, "
        "and with -- args the hit): place nothing.")] = False,
    python: PythonOpt = None,
    usage: UsageOpt = "serve",
    trust: TrustOpt = None,
    require_signature: RequireSigOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Check a bundle and place its entries in the cache root.

    Before placing anything: the manifest is checked; the entries' Python / torch / CUDA /
    Triton / GPU against this environment (--python: vLLM's interpreter), the CPU
    instruction sets against the packing host's; relocation (the backend code hash includes
    the traced files' absolute paths) and the traced sources (vLLM's AOT loader compares
    them); and, given the vLLM arguments after --, whether vLLM's next start here would load
    them (predict). A predicted miss is refused with its causes (--force places anyway).
    Files are written to a staging folder inside the root and every size and sha256 checked
    (a truncated or tampered bundle, a member outside its entry, a link or device: nothing
    placed); each entry's key is re-derived from its staged files (its factors, its
    recorder manifest, or a backend entry of the same start): another key is refused, an
    unproven one needs --force; only vLLM's current folder spelling is placed. Then each
    entry is renamed into place under its lock. An entry already there with the same files
    is left as is; with other files it is never overwritten.
    With a trust policy (--trust or $VLLM_CACHE_TOOLS_TRUST) the manifest's signature is
    checked first: unsigned, untrusted, expired or tampered is refused (exit 1) before any
    file is written. Each placed entry's origin, signer and provenance are recorded (show).
    Exit status: 0 placed (or --check: would hit / compatible), 1 refused (would not hit,
    another entry of a key is there, or a key not proven from its files), 2 usage, bundle
    or I/O error."""
    from vllm_cache_tools.fleet.api import unpack as do_unpack
    from vllm_cache_tools.views.fleet import unpack_document

    check_usage(usage)
    extra, vllm_args = passthrough(ctx.args)
    if extra:
        from vllm_cache_tools.cli.common import fail

        fail(f"unexpected arguments {' '.join(extra)!r}: put the vLLM arguments after --")
    shown = str(bundle)
    if shown == "-":  # pack ... | ssh pod vllm-cache unpack - (read once, forward only)
        from vllm_cache_tools.cli.common import refuse_terminal_stdin

        refuse_terminal_stdin("a bundle file")
        bundle, shown = Path("/dev/stdin"), "<stdin>"
    from vllm_cache_tools.fleet.trust import resolve_policy

    policy = run(lambda: resolve_policy(trust, require_signature))
    with byte_bar("unpacking", not json_out) as bar:
        r = run(lambda: do_unpack(bundle, root=root, vllm_args=vllm_args, force=force,
                                  check_only=check, python=python, usage=usage,
                                  progress=bar, trust=policy))
    if json_out:
        print_json(unpack_document(r))
    else:
        m = r.manifest
        out(f"bundle {shown}: {footprint_line(m.footprint)} ({m.created_by or 'unknown tool'}, "
            f"format {m.format_version})\n")
        out(render_signature(r.signature, m.provenance))
        out(render_check(r.check))
        if r.refused:
            out("nothing placed (--force places anyway)\n")
        elif r.checked_only:
            out("--check: nothing placed (all of the above would be)\n")
        else:
            out(render_placements(r.placements))
    code = 0
    if r.checked_only:
        code = 0 if r.check.would_hit else 1
    elif not r.ok:
        code = 1
    raise typer.Exit(code)
