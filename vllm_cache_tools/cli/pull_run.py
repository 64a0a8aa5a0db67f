"""What ``vllm-cache pull`` does (:func:`run_pull`): the verb's options are typer's, in
:mod:`vllm_cache_tools.cli.pull`.

``pull --if-hit -- <serve args>`` is a pod's init step, and its decision is meant to take
under a second: the store's client (s3fs, aiobotocore, aiohttp) costs ~0.4 s of imports, so
:func:`run_pull` starts importing it at once (a thread; see
:func:`vllm_cache_tools.fleet.remote.prefetch_backend`) and imports the rest beside it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vllm_cache_tools.cli.common import fail, print_json, warn
from vllm_cache_tools.cli.fleetout import (
    byte_bar,
    check_usage,
    entries_line,
    footprint_line,
    out,
    render_check,
    render_placements,
    run,
)
from vllm_cache_tools.fleet.remote import is_url, prefetch_backend
from vllm_cache_tools.units import human_size


def run_pull(url: str, refs: Sequence[str] = (), vllm_args: Sequence[str] = (), *,
             root: Path | None = None, if_hit: bool = False, check: bool = False,
             force: bool = False, python: str | None = None, usage: str = "serve",
             jobs: int = 8, storage_option: Sequence[str] | None = None,
             json_out: bool = False, trust: Path | str | None = None,
             require_signature: bool = False) -> int:
    """``vllm-cache pull`` (see :func:`vllm_cache_tools.cli.pull.pull` for the options); the
    exit status."""
    check_usage(usage)
    if not is_url(url):
        fail(f"{url!r} is not a store URL (s3://..., gs://..., file:///..., oci://...)")
    prefetch_backend(url)  # no-op when already under way; the rest imports beside it
    from vllm_cache_tools.fleet.api import pull as do_pull
    from vllm_cache_tools.fleet.remote import parse_storage_options
    from vllm_cache_tools.fleet.trust import resolve_policy

    opts = run(lambda: parse_storage_options(storage_option or []))
    policy = run(lambda: resolve_policy(trust, require_signature))
    with byte_bar("pulling", not json_out) as bar:
        r = run(lambda: do_pull(url, list(refs), root=root, vllm_args=list(vllm_args),
                                if_hit=if_hit, force=force, check_only=check, python=python,
                                usage=usage, workers=jobs, storage_options=opts,
                                progress=bar, trust=policy))
    for w in r.skipped:
        warn(w)
    if json_out:
        from vllm_cache_tools.views.fleet import pull_document

        print_json(pull_document(r))
    else:
        out(f"{r.url}: {footprint_line(r.footprint) if r.footprint else entries_line(r.selected)}"
            " selected\n")
        if r.signatures is not None:
            out(render_signatures(r.signatures))
        if r.check is not None:
            out(render_check(r.check))
        if r.refused:
            out("nothing fetched (--force fetches anyway)\n")
        elif r.checked_only:
            out("--check: nothing fetched\n")
        elif not r.selected:
            out("nothing to fetch\n")
            out(render_placements(r.placements))
        else:
            out(render_placements(r.placements))
            out(f"{human_size(r.bytes_downloaded)} downloaded in {r.seconds:.1f} s\n")
    if r.checked_only:
        return 0 if (r.check is None or r.check.would_hit) and r.ok else 1
    return 0 if r.ok else 1


def render_signatures(judged: Any) -> str:
    """One line per entry judged by the trust policy: its signer, or why it is refused."""
    from vllm_cache_tools.cli.render import key_column

    keys, w = key_column(judged)
    return "".join(f"{'trusted' if s.trusted else 'refused':<9} {keys[k]:<{w}}  "
                   + (f"signed by {s.signer} (key {s.fingerprint})" if s.trusted else s.reason)
                   + "\n" for k, s in judged.items())


__all__ = ["run_pull"]
