"""probe.InspectHere (issue 24): vLLM's registry inspects a model class in the probe's own
process instead of a subprocess that imports vLLM and torch again. A stand-in package with the
registry's module name, imported in a fresh interpreter: the hook patches the module only when
it is imported (never earlier) and the registry's code then calls the function directly. The
real registry is covered by tests/test_cold_root.py and tests/test_probe_inproc.py (keys equal
to vLLM's, the Inductor factors computed in the probe)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from vllm_cache_tools.live.runner import PROBE

REGISTRY = '''
import os

def _run_in_subprocess(fn):
    return ("subprocess", os.getpid())

def inspect():
    return _run_in_subprocess(lambda: ("here", os.getpid()))
'''

CHECK = f'''
import importlib.util, os, sys
spec = importlib.util.spec_from_file_location("_vct_probe", {str(PROBE)!r})
probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(probe)
probe.InspectHere().install()
assert "vllm.model_executor.models.registry" not in sys.modules  # not imported ahead
import vllm.model_executor.models.registry as reg
how, pid = reg.inspect()
assert (how, pid) == ("here", os.getpid()), (how, pid)
import vllm.other  # other modules load as usual
print("ok")
'''


def _package(root: Path) -> None:
    pkg = root / "vllm" / "model_executor" / "models"
    pkg.mkdir(parents=True)
    for d in (root / "vllm", root / "vllm" / "model_executor", pkg):
        (d / "__init__.py").write_text("")
    (pkg / "registry.py").write_text(REGISTRY)
    (root / "vllm" / "other.py").write_text("X = 1\n")


def test_registry_inspects_in_this_process(tmp_path: Path) -> None:
    _package(tmp_path)
    r = subprocess.run([sys.executable, "-c", CHECK], cwd=tmp_path, capture_output=True,
                       text=True, timeout=60, env={"PYTHONPATH": str(tmp_path)})
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_without_the_hook_the_subprocess_path_stays(tmp_path: Path) -> None:
    _package(tmp_path)
    code = ("import vllm.model_executor.models.registry as reg; "
            "print(reg.inspect()[0])")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                       text=True, timeout=60, env={"PYTHONPATH": str(tmp_path)})
    assert r.stdout.strip() == "subprocess", r.stderr
