"""Run one real vLLM start. Executed by the harness with the test venv's Python.

Usage: python start_vllm.py SPEC.json
SPEC: {"model_dir": str, "llm_kwargs": {...}, "make_model": bool}
Builds the tiny random Llama on first use (no hub), then starts vLLM's offline engine, generates
a few tokens and exits. Prints one line ``VLLM_CACHE_TOOLS_RESULT {json}`` at the end.
"""

from __future__ import annotations

import json
import os
import sys
import time


def make_tiny_llama(model_dir: str) -> None:
    """A deterministic 2-layer Llama (FACTS.md: head_dim 64 works with the CPU attention
    kernel, 16 does not) and a word-level tokenizer, written locally."""
    if os.path.exists(os.path.join(model_dir, "config.json")):
        return
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(0)
    tmp = model_dir + f".tmp{os.getpid()}"
    os.makedirs(tmp, exist_ok=True)
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for i in range(3, 512):
        vocab[f"w{i}"] = i
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                   eos_token="</s>")
    fast.save_pretrained(tmp)
    cfg = LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=256,
                      num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                      max_position_embeddings=256, torch_dtype="float32",
                      bos_token_id=1, eos_token_id=2)
    model = LlamaForCausalLM(cfg).to(torch.float32)
    model.save_pretrained(tmp, safe_serialization=True)
    os.rename(tmp, model_dir)


def main() -> None:
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    make_tiny_llama(spec["model_dir"])
    if spec.get("make_model_only"):
        return
    from vllm import LLM, SamplingParams

    t0 = time.time()
    llm = LLM(model=spec["model_dir"], **spec["llm_kwargs"])
    t1 = time.time()
    out = llm.generate(["w5 w6 w7"], SamplingParams(max_tokens=3, temperature=0.0))
    result = {"init_s": t1 - t0, "text": out[0].outputs[0].text}
    print("VLLM_CACHE_TOOLS_RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
