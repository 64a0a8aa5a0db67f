"""``vllm-cache host-profile [-o FILE] [--json] [-- <vllm args>]``: what this host's vLLM
keys depend on, for ``predict --for-host`` on another machine."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from vllm_cache_tools.cli.common import console, fail, print_json, write_out
from vllm_cache_tools.fleet.host_profile import host_profile, profile_text, write_profile
from vllm_cache_tools.views.for_host import host_profile_document


def _summary(doc: dict[str, Any]) -> list[str]:
    inst, dev, cpu, v = (doc.get("install") or {}, doc.get("device") or {},
                         doc.get("cpu") or {}, doc.get("vllm") or {})
    vers = inst.get("versions") or {}
    gpus = ", ".join(f"{g['name']} (sm {g['capability']})" for g in dev.get("gpus") or [])
    lines = [f"host          {doc.get('host')}",
             "versions      " + ", ".join(f"{k} {x}" for k, x in vers.items() if x)
             + f", python {inst.get('python')}",
             f"prefix        {inst.get('prefix')} (traced files' paths enter the code hash)",
             f"cpu           {cpu.get('model')}; ISA: {' '.join(cpu.get('isa') or []) or '-'}",
             f"gpu           {gpus or '-'}; CUDA {dev.get('torch_cuda') or '-'}; driver "
             f"{dev.get('driver') or '-'}"]
    if v:
        pe = v.get("platform_env") or {}
        lines += [f"platform      {(v.get('platform') or {}).get('name')} set: "
                  + (", ".join(f"{k}={x}" for k, x in pe.items()) or "nothing"),
                  f"hashes        env {str(v.get('env_hash'))[:16]}  config "
                  f"{v.get('config_hash')}  (for: {' '.join(v.get('args') or [])})"]
    else:
        lines.append("vLLM          not asked (give the vLLM arguments after -- for the env "
                     "the platform sets and the config/compiler hashes)")
    return lines


def host_profile_cmd(
    ctx: typer.Context,
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", help="Write the profile (JSON) to this file (- for stdout, "
        "without the summary; not with --json).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the profile (JSON).")] = False,
    python: Annotated[str | None, typer.Option(
        "--python", help="Interpreter of the environment that runs vLLM (default: this "
        "one).")] = None,
    usage: Annotated[str, typer.Option(
        "--usage", help="serve or llm (as for predict).")] = "serve",
    force: Annotated[bool, typer.Option(
        "--force", help="Replace an existing -o FILE (it is replaced as a name, never "
        "written through).")] = False,
) -> None:
    """Record what this host's vLLM keys depend on, for `predict --for-host` elsewhere.

    CPU instruction-set flags, GPU name/capability, CUDA and driver, torch/triton/vLLM/Python
    versions and the install prefix; with vLLM arguments after --, also what vLLM's platform
    sets in the environment (e.g. VLLM_SSM_CONV_STATE_LAYOUT on avx512_bf16 CPUs) and the
    env/config/compiler hashes for those arguments. Runs inside the vLLM interpreter
    (--python). Exit status: 0 written, 2 error."""
    if usage not in ("serve", "llm"):
        fail("--usage must be serve or llm")
    to_stdout = output is not None and str(output) == "-"  # as pack's -o -
    if to_stdout and json_out:
        fail("--json prints to stdout, where -o - writes the profile: give one of them")
    if output is not None and not to_stdout:
        write_profile(output, None, force=force)  # a taken name: refused before the work
    doc = host_profile_document(host_profile(list(ctx.args), python=python, usage=usage))
    if to_stdout:
        write_out(profile_text(doc))
        return
    if output is not None:
        write_profile(output, doc, force=force)
    if json_out:
        print_json(doc)
        return
    con = console()
    for line in _summary(doc):
        con.print(line, markup=False, highlight=False)
    if output is not None:
        con.print(f"written to {output}", markup=False)
