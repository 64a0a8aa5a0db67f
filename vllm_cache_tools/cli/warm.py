"""``vllm-cache warm -- <vllm serve args>``: compile without weights, then stop."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from vllm_cache_tools.cli.common import fail, print_json
from vllm_cache_tools.cli.fleetcommon import (
    JsonOpt,
    PythonOpt,
    UsageOpt,
    check_usage,
    out,
    passthrough,
    run,
)
from vllm_cache_tools.cli.ls import RootOpt


def warm(
    ctx: typer.Context,
    root: RootOpt = None,
    python: PythonOpt = None,
    usage: UsageOpt = "serve",
    timeout: Annotated[float, typer.Option("--timeout", help="Give up after this many "
                                           "seconds.")] = 3600.0,
    log: Annotated[Path | None, typer.Option(
        "--log", help="Write vLLM's output to this new file (default: stderr).")] = None,
    force: Annotated[bool, typer.Option(
        "--force", help="Replace an existing --log FILE (it is replaced as a name, never "
        "written through).")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Fill the cache for these vLLM arguments without real weights and without serving.

    vLLM's engine is started with --load-format dummy (no weights are read; on vLLM 0.32 the
    load config adds nothing to the cache keys, so the entries are those of a real start:
    the fleet tests prove it against a real start) until it has compiled, then stopped. The
    entries written are reported: pack or push them (CI / image builds: warm, pack, push;
    pods: pull --if-hit before vLLM starts). Run it where vLLM runs (--python), with the
    environment vLLM gets: env variables enter the keys.
    Exit status: 0 done, 2 usage error or vLLM failed."""
    from vllm_cache_tools.fleet.warm import warm as do_warm
    from vllm_cache_tools.views.payloads import with_schema

    check_usage(usage)
    extra, args = passthrough(ctx.args)
    args = args or extra
    if not args:
        fail("give the vLLM arguments after --, e.g. vllm-cache warm -- MODEL "
             "--max-model-len 4096")
    r = run(lambda: do_warm(args, root=root, python=python, usage=usage, timeout=timeout,
                            log=log, force=force))
    if json_out:
        print_json(with_schema("warm", {
            "root": str(r.root), "outcome": r.outcome, "seconds": round(r.seconds, 3),
            "engine_seconds": r.engine_seconds,
            "entries": [{"key": e.key, "layout": e.layout, "state": e.state, "path": e.path,
                         "new": e.new} for e in r.entries]}))
        return
    out(f"warm: {r.outcome} in {r.seconds:.0f} s; {len(r.entries)} entries written under "
        f"{r.root}\n")
    from vllm_cache_tools.cli.render import key_column

    keys, w = key_column(e.key for e in r.entries)
    for e in r.entries:
        out(f"  {'new' if e.new else 'changed':<8} {e.layout:<7} {keys[e.key]:<{w}}  "
            f"{e.state}\n")
