"""``vllm-cache predict --for-host FILE -- <vllm args>``: rendering of
:func:`vllm_cache_tools.analyze.for_host.predict_for_host` (called by ``cli/predict.py``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from vllm_cache_tools.analyze.for_host import RECOMPUTED, predict_for_host
from vllm_cache_tools.analyze.host_record import load_host_record
from vllm_cache_tools.cli.common import console, print_json, refuse_terminal_stdin
from vllm_cache_tools.keys.versions import recipe_verified_on
from vllm_cache_tools.store.locate import resolve_root
from vllm_cache_tools.views.for_host import for_host_json


def predict_for_host_cmd(record_path: Path, args: Sequence[str], root: Path | None,
                         json_out: bool, env: Mapping[str, str]) -> int:
    """Print the prediction; the exit status (0: both named folders are in the root)."""
    if str(record_path) == "-":
        refuse_terminal_stdin("a host profile file")
    rec = load_host_record(record_path)
    cc = resolve_root(root, env).compile_cache
    p = predict_for_host(rec, args, env, cc if cc.is_dir() else None)
    named = [k for k in (p.backend_key, p.aot_key) if k]
    status = 0 if named and all(v for v in p.present.values() if v is not None) and all(
        p.present[t] is not None for t, k in (("backend", p.backend_key), ("aot", p.aot_key))
        if k) else 1
    if json_out:
        print_json(for_host_json(p))
        return status
    con = console()
    v, pf = rec.versions, rec.platform

    def say(text: str) -> None:
        con.print(text, markup=False, highlight=False)

    say(f"FOR HOST {rec.host or '?'} ({rec.source} {rec.path})")
    say("  versions " + ", ".join(f"{k} {x}" for k, x in v.items() if x) + "; "
        + ", ".join(f"{k} {x}" for k, x in pf.items() if x))
    if rec.platform_env:
        say("  set by that host's vLLM platform: "
            + ", ".join(f"{k}={x}" for k, x in sorted(rec.platform_env.items())))
    ver = str(v.get("vllm") or "")
    for name, key, detail in (("AOT tree", p.aot_key, p.aot_detail),
                              ("backend tree", p.backend_key, p.backend_detail)):
        tree = "aot" if name == "AOT tree" else "backend"
        here = {True: "present here", False: "not here", None: ""}[p.present[tree]]
        say(f"  {name:<13} {key or '-'}  {here}".rstrip())
        if detail:
            say(f"  {'':<13} {detail}")
        trusted = p.trusted(tree)
        if key and trusted:
            say(f"  {'':<13} not recomputed here: " + ", ".join(
                f"{f.name} ({f.status})" for f in trusted))
        if key and not recipe_verified_on(ver):
            say(f"  {'':<13} recipe not verified on vLLM {ver}")
    say("factors")
    for f in p.factors:
        mark = "" if f.status == RECOMPUTED else f" [{f.status}]"
        say(f"  {f.name:<13} {(f.value or '-')[:16]:<16}{mark} {f.detail}")
    return status
