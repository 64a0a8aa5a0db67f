"""``vllm-cache predict -- <vllm serve args>``: will this start hit, and which folders?"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from vllm_cache_tools.cli.ls import RootOpt
from vllm_cache_tools.cli.predict_run import run_predict


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
        "manifest (vct-manifest.*.json) or a `vllm-cache host-profile` file made there (- "
        "reads the profile from stdin). "
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
    raise typer.Exit(run_predict(list(ctx.args), root=root, json_out=json_out, python=python,
                                 usage=usage, rank=rank, fresh=fresh, for_host=for_host,
                                 no_standby=no_standby, no_trace=no_trace, early=True))
