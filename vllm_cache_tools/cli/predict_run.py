"""What ``vllm-cache predict`` does (:func:`run_predict`): the verb's options are typer's, in
:mod:`vllm_cache_tools.cli.predict`.

A first predict in an environment is measured against vLLM's own import and config build
(issue 16: at most 1.2x that floor), so :func:`run_predict` with ``early`` starts the vLLM
probe (:func:`vllm_cache_tools.live.runner.prestart`) before it imports the rest."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def _prestart(vllm_args: Sequence[str], root: Path | None, python: str | None, usage: str,
              rank: int, fresh: bool, standby: bool, trace: bool, progress: Any) -> None:
    """Start the probe now, with the arguments :func:`vllm_cache_tools.analyze.predict.predict`
    will pass to ``run_probe`` (which then takes this run's answer): the probe imports vLLM
    while this process imports the rest."""
    from vllm_cache_tools.live.runner import prestart
    from vllm_cache_tools.live.trace_run import cold_root
    from vllm_cache_tools.store.locate import resolve_root

    env = dict(os.environ)
    resolved = resolve_root(root, env)
    vllm_root = resolved.vllm_root
    if os.path.lexists(vllm_root) and not vllm_root.is_dir():
        return  # predict refuses this root before it asks for the probe's answer
    env["VLLM_CACHE_ROOT"] = str(vllm_root)
    prestart(vllm_args, env, python, usage, rank, memo=True, fresh=fresh, standby=standby,
             progress=progress, trace=trace and cold_root(resolved.compile_cache))


def run_predict(vllm_args: Sequence[str], root: Path | None = None, json_out: bool = False,
                python: str | None = None, usage: str = "serve", rank: int = 0,
                fresh: bool = False, for_host: Path | None = None, no_standby: bool = False,
                no_trace: bool = False, *, early: bool = False) -> int:
    """``vllm-cache predict`` (see :func:`vllm_cache_tools.cli.predict.predict_cmd` for the
    options); the exit status. ``early``: start the probe before importing the rest."""
    from vllm_cache_tools.cli.common import fail
    from vllm_cache_tools.cli.stageline import StageLine

    args = list(vllm_args)
    if not args:
        fail("give the vLLM arguments after --, e.g. vllm-cache predict -- MODEL "
             "--max-model-len 128")
    if usage not in ("serve", "llm"):
        fail("--usage must be serve or llm")
    if rank < 0:
        fail(f"--rank must be 0 or more (got {rank})")
    if for_host is not None:
        from vllm_cache_tools.cli.predict_for_host import predict_for_host_cmd

        return predict_for_host_cmd(for_host, args, root, json_out, dict(os.environ))
    error: Exception | None = None
    # The stage line is erased before anything is printed (an error included).
    with StageLine("predict: ", enabled=None if not json_out else False) as show:
        if early:
            _prestart(args, root, python, usage, rank, fresh, not no_standby, not no_trace,
                      show)
        from vllm_cache_tools.analyze.predict import PredictError, predict

        try:
            p = predict(args, root=root, python=python, usage=usage, rank=rank, fresh=fresh,
                        standby=not no_standby, progress=show, trace=not no_trace)
        except PredictError as exc:
            error = exc
    if error is not None:
        fail(str(error))
    _render(p, json_out)
    return 0 if p.hit else 1


def _render(p: Any, json_out: bool) -> None:
    from vllm_cache_tools.cli.common import console, print_json

    if json_out:
        from vllm_cache_tools.views.payloads import predict_document
        from vllm_cache_tools.views.predict import prediction_json

        print_json(predict_document(prediction_json(p)))
        return
    from vllm_cache_tools.analyze.explain import show_value
    from vllm_cache_tools.keys.versions import recipe_verified_on

    con = console()
    verdict = "HIT" if p.hit else "MISS" if p.compiled else "NOTHING COMPILED"
    con.print(f"[bold]{verdict}[/bold]: vLLM "
              f"{p.parts['vllm_version']}, torch {p.parts['torch_version']}")
    unverified = (None if recipe_verified_on(p.parts["vllm_version"]) else
                  f"recipe not verified on vLLM {p.parts['vllm_version']}: this key is "
                  "computed from its source, never compared with folders it created")
    # A second compiled model's AOT entry (speculative decoding) under the target's, by tag.
    trees = [("AOT tree", p.aot), *((f"+ {d.tag}", d) for d in p.drafts),
             ("backend tree", p.backend)]
    for name, t in trees:
        verdict = {True: "hit", False: "miss", None: "-"}[t.hit]
        con.print(f"  {name:<13} {verdict:<5} {t.key or '-'}", markup=False)
        if t.key and unverified:
            con.print(f"  {'':<13} {unverified}", markup=False)
        if t.path:
            con.print(f"  {'':<13} {t.path}", markup=False)
        # markup off: rich took "[the artifact's copies ...]" for a style tag and dropped it
        con.print(f"  {'':<13} {t.detail}" + (f" [{t.evidence}]" if t.evidence else ""),
                  markup=False)
    con.print(f"  hashes        env {p.parts['env_hash'][:16]}  config "
              f"{p.parts['config_hash']}  compiler {p.parts['compiler_hash']}  code "
              f"{(p.parts['code_hash'] or 'unknown')[:16]}")
    if p.probe_run is not None:
        pr = p.probe_run
        con.print(f"  probe         {pr.seconds:.2f} s, memo: {pr.memo}"
                  + ("" if pr.memo == "hit" else
                     f"; served by {pr.served_by}, answer {pr.kept}; standby: "
                     f"{pr.standby}"), markup=False)
    if p.trace_run is not None:  # a cold root: the traced files, found without compiling
        tr = p.trace_run
        con.print(f"  trace         {tr.seconds:.2f} s, memo: {tr.memo}"
                  + ("" if tr.memo == "hit" else
                     f"; traced in {'the probe' if tr.served_by == 'probe' else 'its own'}"
                     f" process, answer {tr.kept}")
                  + (f"; failed: {tr.error}" if tr.error else ""), markup=False)
    if p.reasons:
        con.print("[bold]causes[/bold]")  # the word explain uses
        for c in p.reasons:
            con.print(f"  {c.component}: {c.item}: {show_value(c.old)} -> "
                      f"{show_value(c.new)} ({c.evidence})"
                      + (f" {c.detail}" if c.detail else ""), markup=False)


__all__ = ["run_predict"]
