"""``vllm-cache warm -- <vllm serve args>``: compile without weights, then stop."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

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
    environment vLLM gets: env variables enter the keys. The entries written are then read,
    proven and hashed as a pack would (kept in our pack memo, not in the root), so the pack
    that follows reads no pickle and hashes no file for them.
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
            "engine_seconds": r.engine_seconds, "compile_seconds": r.compile_seconds,
            "functions": [{"process": f.process, "tag": f.tag, "outcome": f.outcome,
                           "aot_key": f.aot_key, "backend_key": f.backend_key,
                           "seconds": f.seconds, "detail": f.detail} for f in r.functions],
            "entries": [{"key": e.key, "layout": e.layout, "state": e.state, "path": e.path,
                         "new": e.new} for e in r.entries],
            "causes": [{"component": c.component, "item": c.item, "old": c.old, "new": c.new,
                        "evidence": c.evidence, "detail": c.detail} for c in r.causes],
            "pack_ready": list(r.pack_ready),
            "prepare_seconds": (round(r.prepare_seconds, 3)
                                if r.prepare_seconds is not None else None)}))
        return
    out(headline(r))
    from vllm_cache_tools.cli.render import key_column
    from vllm_cache_tools.layout import short_key

    for f in r.functions:
        keys = ", ".join(x for x in (f"aot {short_key(f.aot_key)}" if f.aot_key else "",
                                     f"backend {f.backend_key}" if f.backend_key else "")
                         if x)
        took = f" in {f.seconds:.1f} s" if f.seconds is not None else ""
        out(f"  {f.outcome:<11} {f.tag or 'model'} ({f.process}){took}"
            + (f"  {keys}" if keys else "") + (f"  [{f.detail}]" if f.detail else "") + "\n")
    keys_w, w = key_column(e.key for e in r.entries)
    for e in r.entries:
        out(f"  {'new' if e.new else 'rewritten':<11} {e.layout:<7} {keys_w[e.key]:<{w}}  "
            f"{e.state}\n")
    if r.pack_ready:
        out(f"  pack prepared: {len(r.pack_ready)} entries in {r.prepare_seconds or 0:.1f} s "
            "(the next pack skips hashing and proofs)\n")
    if r.causes:
        from vllm_cache_tools.analyze.explain import show_value

        out("causes (why the entries already in the root were not reused)\n")
        for c in r.causes:
            out(f"  {c.component}: {c.item}: {show_value(c.old)} -> {show_value(c.new)} "
                f"({c.evidence})" + (f" {c.detail}" if c.detail else "") + "\n")


def headline(r: Any) -> str:
    """One line: what vLLM did, as its log says it, and the entries it wrote."""
    took = f" in {r.seconds:.0f} s"
    comp = (f" (vLLM's compilation: {r.compile_seconds:.1f} s)"
            if r.compile_seconds is not None else "")
    if r.outcome == "loaded":
        return (f"warm: loaded from the cache, nothing compiled{took}{comp}; "
                f"{len(r.entries)} entries written under {r.root}\n")
    if r.outcome == "compiled":
        n = len(r.compiled)
        return (f"warm: compiled {n} function{'s' if n != 1 else ''}{took}{comp}; "
                f"{len(r.entries)} entries written under {r.root}\n")
    if r.outcome == "disabled":
        return f"warm: vLLM's compile cache is disabled: nothing kept{took}\n"
    return (f"warm: vLLM's log names no compiled function (eager mode?){took}; "
            f"{len(r.entries)} entries written under {r.root}\n")
