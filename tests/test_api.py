"""The Python API: every example in docs/api.md runs, in order, in one namespace, from the
repository's folder, and prints what the page says it prints. The predict example needs the
real-vLLM harness (its venv and tiny model); without them it is skipped, with the reason.
Also: the top-level names are the functions, whatever was imported before."""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.realvllm.harness import SCENARIOS, cpu_has, model_dir, start_env, venv_python

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "api.md"
BLOCK = re.compile(r"```python\n(?P<code>.*?)```\s*(?:```text\n(?P<out>.*?)```)?"
                   r"(?:\s*<!-- without avx512_bf16 -->[^`]*```text\n(?P<alt>.*?)```)?", re.S)
"""An example, what it prints, and (after the marker) what it prints on a CPU without
avx512_bf16, where vLLM's CPU platform sets other key inputs (keys/hardware.py)."""



def _examples() -> list[tuple[str, str | None]]:
    bf16 = cpu_has("avx512_bf16")
    return [(m["code"], m["out"] if bf16 or m["alt"] is None else m["alt"])
            for m in BLOCK.finditer(DOC.read_text(encoding="utf-8"))]


def _run(code: str, ns: dict[str, Any]) -> str:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(compile(code, str(DOC), "exec"), ns)
    return buf.getvalue()


def _tree(top: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under ``top``: (size, mtime in ns), without following links."""
    out = {}
    for d, dirs, files in os.walk(top):
        for n in [*dirs, *files]:
            st = os.lstat(os.path.join(d, n))
            out[os.path.relpath(os.path.join(d, n), top)] = (st.st_size, st.st_mtime_ns)
    return out


def _harness_missing() -> str | None:
    if not venv_python().exists():
        return f"no vLLM test venv at {venv_python()} (made by the real-vLLM harness)"
    if not (model_dir() / "config.json").exists():
        return f"no tiny test model at {model_dir()} (made by the real-vLLM harness)"
    return None


def test_every_example_in_docs_api_runs_and_prints_what_the_page_says(
        monkeypatch: pytest.MonkeyPatch) -> None:
    examples = _examples()
    assert len(examples) >= 5
    monkeypatch.chdir(REPO)
    shipped = _tree(REPO / "examples")
    import vllm_cache_tools as vct

    roots: list[Path] = []
    real_predict = vct.predict

    def predict(*args: Any, **kwargs: Any) -> Any:
        roots.append(Path(kwargs["root"]).resolve())
        return real_predict(*args, **kwargs)

    monkeypatch.setattr(vct, "predict", predict)
    ns: dict[str, Any] = {"__name__": "docs_api"}
    skipped = None
    for code, expected in examples:
        if "vct.predict(" in code:
            skipped = _harness_missing()
            if skipped is not None:
                continue
            # The environment the example root was made in (the compile scenario's start),
            # plus what the example reads; nothing of the test runner's own.
            keep = {k: v for k, v in os.environ.items()
                    if k.startswith("XDG_") or k == "VLLM_CACHE_TOOLS_PROBE_STANDBY"}
            env = {**keep, **start_env(REPO / "examples" / "sample_cache",
                                       SCENARIOS["compile"].starts[1]),
                   "MODEL": str(model_dir()), "VLLM_PYTHON": str(venv_python())}
            for k in list(os.environ):
                monkeypatch.delenv(k)
            for k, v in env.items():
                monkeypatch.setenv(k, v)
        out = _run(code, ns)
        if expected is not None:
            assert out == expected, f"docs/api.md example printed:\n{out}\n---\n{code}"
    # The examples read the shipped root and change copies of it only (the predict example
    # wrote vLLM's modelinfos/ into examples/sample_cache: its probe runs vLLM on the root).
    assert _tree(REPO / "examples") == shipped
    assert not any(r.is_relative_to(REPO / "examples") for r in roots), roots
    # ... and remove their copies (a suite run left two in /tmp each time).
    assert not any(r.exists() for r in roots), roots
    if skipped is not None:
        pytest.skip(f"the predict example was not run: {skipped}")


def test_top_level_names_are_the_functions_after_their_modules_were_imported() -> None:
    code = ("import importlib, vllm_cache_tools as vct\n"
            "for m in ('analyze.predict', 'analyze.explain', 'maintain.verify',\n"
            "          'maintain.plan', 'maintain.execute', 'cli'):\n"
            "    importlib.import_module('vllm_cache_tools.' + m)\n"
            "import vllm_cache_tools.analyze.predict\n"
            "from vllm_cache_tools import predict, explain, verify, plan_prune, execute_plan\n"
            "from vllm_cache_tools.analyze.predict import predict as p2\n"
            "assert predict is p2 and vct.predict is p2, vct.predict\n"
            "assert callable(explain) and callable(verify) and callable(vct.verify)\n"
            "assert plan_prune.__module__ == 'vllm_cache_tools.maintain.plan'\n"
            "assert set(vct.__all__) <= set(dir(vct))\n"
            "for name in vct.__all__:\n"
            "    getattr(vct, name)\n"
            "print('ok')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and r.stdout == "ok\n", r.stderr


def test_the_package_import_stays_light() -> None:
    """The recorder plugin imports the package in every vLLM process: exporting the API
    must not import it."""
    code = ("import sys, vllm_cache_tools\n"
            "heavy = [m for m in ('store.scan', 'analyze.predict', 'maintain.plan',\n"
            "                     'maintain.execute', 'maintain.verify', 'analyze.explain')\n"
            "         if 'vllm_cache_tools.' + m in sys.modules]\n"
            "print(heavy)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60)
    assert r.stdout == "[]\n", r.stderr


def test_api_names_resolve_to_typed_objects() -> None:
    vct = importlib.import_module("vllm_cache_tools")
    assert (REPO / "vllm_cache_tools" / "py.typed").exists()
    for name in ("predict", "explain", "plan_prune", "plan_prune_root", "execute_plan",
                 "verify", "scan"):
        fn = getattr(vct, name)
        assert callable(fn) and fn.__annotations__.get("return"), name
