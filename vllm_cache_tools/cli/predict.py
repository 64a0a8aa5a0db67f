"""``vllm-cache predict -- <vllm serve args>``: will this start hit, and which folders?"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from vllm_cache_tools.analyze.explain import show_value
from vllm_cache_tools.analyze.predict import PredictError, predict
from vllm_cache_tools.cli.common import console, fail, print_json
from vllm_cache_tools.cli.ls import RootOpt
from vllm_cache_tools.cli.stageline import StageLine
from vllm_cache_tools.keys.versions import recipe_verified_on
from vllm_cache_tools.views.payloads import predict_document
from vllm_cache_tools.views.predict import prediction_json


def predict_cmd(
    ctx: typer.Context,
    root: RootOpt = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    python: Annotated[str | None, typer.Option(
        "--python", help="Interpreter of the environment that runs vLLM (default: this "
        "one).")] = None,
    usage: Annotated[str, typer.Option(
        "--usage", help="serve (vllm serve / API server defaults) or llm (offline LLM "
        "class defaults).")] = "serve",
    rank: Annotated[int, typer.Option("--rank", help="Worker rank to predict for.")] = 0,
    fresh: Annotated[bool, typer.Option(
        "--fresh", help="Run the vLLM probe even when its memoized answer is still valid, "
        "and replace it (the memo is off with VLLM_CACHE_TOOLS_PROBE_MEMO=0).")] = False,
    for_host: Annotated[Path | None, typer.Option(
        "--for-host", help="Predict for another host from what it recorded: a recorder "
        "manifest (vct-manifest.*.json) or a `vllm-cache host-profile` file made there. "
        "Nothing runs vLLM here; each key input is said to be recomputed, recorded or not "
        "reproducible here.")] = None,
    no_standby: Annotated[bool, typer.Option(
        "--no-standby", help="Neither ask nor leave a waiting vLLM probe (~0.5 GB for up "
        "to 300 s; same as VLLM_CACHE_TOOLS_PROBE_STANDBY=0).")] = False,
    no_trace: Annotated[bool, typer.Option(
        "--no-trace", help="On a root with no evidence of the traced files, do not trace the "
        "model to name the backend key (a second vLLM import, ~10 s; the key is then "
        "unknown).")] = False,
) -> None:
    """Predict the cache folders and hit/miss of a vLLM start, without starting it.

    Pass the arguments you give `vllm serve` after `--`, in the environment you start it
    with, e.g.: vllm-cache predict -- /models/m --max-model-len 128 -cc '{"mode": 3}'.
    The probe's answer is memoized and reused while its inputs are unchanged: arguments,
    environment, working directory, interpreter, machine, and every file it read (checked
    by stat on each use). After a predict, a standby probe with vLLM imported waits 300 s
    for the next one with the same interpreter, one per interpreter, none when memory is
    short (--no-standby or VLLM_CACHE_TOOLS_PROBE_STANDBY=0: none). On a terminal, stderr
    shows what predict is waiting for.
    With --for-host FILE, the keys another host's vLLM would name (exit 0 when both named
    folders are in the root here, 1 otherwise).
    Exit status: 0 predicted hit, 1 predicted miss, 2 usage error."""
    args = list(ctx.args)
    if not args:
        fail("give the vLLM arguments after --, e.g. vllm-cache predict -- MODEL "
             "--max-model-len 128")
    if usage not in ("serve", "llm"):
        fail("--usage must be serve or llm")
    if for_host is not None:
        from vllm_cache_tools.cli.predict_for_host import predict_for_host_cmd

        raise typer.Exit(predict_for_host_cmd(for_host, args, root, json_out, dict(os.environ)))
    error: PredictError | None = None
    # The stage line is erased before anything is printed (an error included).
    with StageLine("predict: ", enabled=None if not json_out else False) as show:
        try:
            p = predict(args, root=root, python=python, usage=usage, rank=rank, fresh=fresh,
                        standby=not no_standby, progress=show,
                        trace=not no_trace)
        except PredictError as exc:
            error = exc
    if error is not None:
        fail(str(error))
    if json_out:
        print_json(predict_document(prediction_json(p)))
    else:
        con = console()
        con.print(f"[bold]{'HIT' if p.hit else 'MISS'}[/bold]: vLLM "
                  f"{p.parts['vllm_version']}, torch {p.parts['torch_version']}")
        unverified = (None if recipe_verified_on(p.parts["vllm_version"]) else
                      f"recipe not verified on vLLM {p.parts['vllm_version']}: this key is "
                      "computed from its source, never compared with folders it created")
        for name, t in (("AOT tree", p.aot), ("backend tree", p.backend)):
            verdict = {True: "hit", False: "miss", None: "-"}[t.hit]
            con.print(f"  {name:<13} {verdict:<5} {t.key or '-'}")
            if t.key and unverified:
                con.print(f"  {'':<13} {unverified}")
            if t.path:
                con.print(f"  {'':<13} {t.path}")
            con.print(f"  {'':<13} {t.detail}" + (f" [{t.evidence}]" if t.evidence else ""))
        con.print(f"  hashes        env {p.parts['env_hash'][:16]}  config "
                  f"{p.parts['config_hash']}  compiler {p.parts['compiler_hash']}  code "
                  f"{(p.parts['code_hash'] or 'unknown')[:16]}")
        if p.probe_run is not None:
            pr = p.probe_run
            con.print(f"  probe         {pr.seconds:.2f} s, memo: {pr.memo}"
                      + ("" if pr.memo == "hit" else
                         f"; served by {pr.served_by}, answer {pr.kept}; standby: "
                         f"{pr.standby}"))
        if p.trace_run is not None:  # a cold root: the traced files, found without compiling
            tr = p.trace_run
            con.print(f"  trace         {tr.seconds:.2f} s, memo: {tr.memo}"
                      + ("" if tr.memo == "hit" else f"; answer {tr.kept}")
                      + (f"; failed: {tr.error}" if tr.error else ""), markup=False)
        if p.reasons:
            con.print("[bold]causes[/bold]")  # the word explain uses
            for c in p.reasons:
                con.print(f"  {c.component}: {c.item}: {show_value(c.old)} -> "
                          f"{show_value(c.new)} ({c.evidence})"
                          + (f" {c.detail}" if c.detail else ""), markup=False)
    raise typer.Exit(0 if p.hit else 1)
