"""Models of the truth matrix that ``start_family.py`` does not make (issue 26).

Usage: python truth_models.py KIND BASE_DIR OUT_DIR
Executed with the vLLM venv's Python (torch, transformers, safetensors). Kinds:

- ``draft``: a 1-layer tiny Llama with the base model's vocab and tokenizer (a draft model
  for ``speculative_config`` method ``draft_model``);
- ``eagle``: an EAGLE-1 head for the base tiny Llama, as EAGLE checkpoints ship it: a Llama
  config with one layer and the head's weights (``fc`` over [embedding, hidden state], one
  decoder layer without its input norm, the embeddings); vLLM maps the architecture to
  ``EagleLlamaForCausalLM``;
- ``w8a8``: the base tiny Llama as a compressed-tensors ``int-quantized`` checkpoint, written by
  hand: every decoder linear layer's weight int8 per output channel (symmetric, scale
  absmax/127, ``weight_scale`` float32 ``[out, 1]``), activations int8 per token, dynamic;
  ``lm_head`` and the embeddings stay float32;
- ``gptq``: the base tiny Llama as a GPTQ checkpoint (4 bits, symmetric, groups of 64 input
  rows, ``desc_act`` off, AutoGPTQ's v1 layout): ``qweight`` int32 ``[in / 8, out]`` (eight
  4-bit values per word along the input), ``qzeros`` int32 ``[groups, out / 8]`` (zero 8,
  stored as 7 in v1), ``scales`` float16 ``[groups, out]``, ``g_idx`` int32 ``[in]``;
- ``awq``: the same as an AutoAWQ GEMM checkpoint (4 bits, zero point, groups of 64):
  ``qweight`` int32 ``[in, out / 8]`` and ``qzeros`` int32 ``[groups, out / 8]`` packed along
  the output in AWQ's order (0, 2, 4, 6, 1, 3, 5, 7), ``scales`` float16 ``[groups, out]``.

Kept apart from start_family.py: that script's bytes key every case of the matrix. A model is
written into ``OUT_DIR.tmpPID`` and renamed, so a half-written one is never used. A
changed maker needs a new folder name (``-v2``): the truth cases are keyed by it.
"""

from __future__ import annotations

import json
import os
import shutil
import sys

LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

W8A8_CONFIG = {
    "quant_method": "compressed-tensors",
    "format": "int-quantized",
    "quantization_status": "compressed",
    "config_groups": {"group_0": {
        "targets": ["Linear"],
        "weights": {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel",
                    "dynamic": False},
        "input_activations": {"num_bits": 8, "type": "int", "symmetric": True,
                              "strategy": "token", "dynamic": True},
    }},
    "ignore": ["lm_head"],
}


def _copy_tokenizer(base: str, tmp: str) -> None:
    for name in os.listdir(base):
        if name.startswith("tokenizer") or name == "special_tokens_map.json":
            shutil.copy2(os.path.join(base, name), tmp)


def make_draft(base: str, tmp: str) -> None:
    import torch
    import transformers as tf

    cfg = tf.AutoConfig.from_pretrained(base)
    cfg.num_hidden_layers = 1
    torch.manual_seed(1)
    tf.LlamaForCausalLM(cfg).to(torch.float32).save_pretrained(tmp, safe_serialization=True)
    _copy_tokenizer(base, tmp)


def make_eagle(base: str, tmp: str) -> None:
    import torch
    import transformers as tf
    from safetensors.torch import save_file

    cfg = tf.AutoConfig.from_pretrained(base)
    cfg.num_hidden_layers = 1
    torch.manual_seed(2)
    layer = tf.LlamaForCausalLM(cfg).to(torch.float32).state_dict()
    out = {"fc.weight": torch.randn(cfg.hidden_size, 2 * cfg.hidden_size) * 0.02}
    for name, t in layer.items():
        if name.startswith("model.layers.0.") and "input_layernorm" not in name:
            out[name[len("model."):]] = t.contiguous()
        elif name == "model.embed_tokens.weight":
            out["embed_tokens.weight"] = t.contiguous()
    save_file(out, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
    cfg.save_pretrained(tmp)
    _copy_tokenizer(base, tmp)


def _write_quantized(base: str, tmp: str, linear, qconfig: dict,  # type: ignore[no-untyped-def]
                     also: tuple[str, ...] = ()) -> None:
    """The base model with each decoder linear layer's weight replaced by what
    ``linear(stem, weight)`` gives (tensor name -> tensor), everything else as it was; the
    base config with ``quantization_config``; the tokenizer and the files named in ``also``."""
    import torch
    from safetensors.torch import load_file, save_file

    tensors = load_file(os.path.join(base, "model.safetensors"))
    out: dict[str, torch.Tensor] = {}
    for name, t in tensors.items():
        if name.endswith(".weight") and name.split(".")[-2] in LINEARS:
            out.update(linear(name[: -len("weight")], t))
        else:
            out[name] = t.contiguous()
    save_file(out, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(base, "config.json")) as f:
        cfg = json.load(f)
    cfg["quantization_config"] = qconfig
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    for name in also:
        if os.path.exists(os.path.join(base, name)):
            shutil.copy2(os.path.join(base, name), tmp)
    _copy_tokenizer(base, tmp)


def make_w8a8(base: str, tmp: str) -> None:
    import torch

    def linear(stem: str, t: torch.Tensor) -> dict[str, torch.Tensor]:
        w = t.to(torch.float32)
        scale = (w.abs().amax(dim=1, keepdim=True) / 127.0).clamp(min=1e-8)
        return {stem + "weight": torch.round(w / scale).clamp(-128, 127).to(torch.int8)
                .contiguous(), stem + "weight_scale": scale.contiguous()}

    _write_quantized(base, tmp, linear, W8A8_CONFIG, also=("generation_config.json",))


GPTQ_GROUP = 64


def _pack_int32(q, dim: int):  # type: ignore[no-untyped-def]
    """Eight 4-bit values per int32 along ``dim`` (the lowest bits first), as AutoGPTQ."""
    import torch

    q = q.to(torch.int64).movedim(dim, 0)
    q = q.reshape(q.shape[0] // 8, 8, *q.shape[1:])
    word = sum(q[:, k] << (4 * k) for k in range(8))
    word = (word + 2**31) % 2**32 - 2**31  # the unsigned word as int32 bits
    return word.to(torch.int32).movedim(0, dim).contiguous()


def make_gptq(base: str, tmp: str) -> None:
    import torch

    def linear(stem: str, t: torch.Tensor) -> dict[str, torch.Tensor]:
        w = t.to(torch.float32).t()  # [in, out]
        n_in, n_out = w.shape
        groups = w.reshape(n_in // GPTQ_GROUP, GPTQ_GROUP, n_out)
        scale = (groups.abs().amax(dim=1) / 7.0).clamp(min=1e-6).to(torch.float16)
        q = torch.round(groups / scale.to(torch.float32)[:, None, :]) + 8
        q = q.clamp(0, 15).reshape(n_in, n_out)
        return {stem + "qweight": _pack_int32(q, 0),
                stem + "qzeros": _pack_int32(torch.full((n_in // GPTQ_GROUP, n_out), 7), 1),
                stem + "scales": scale.contiguous(),
                stem + "g_idx": (torch.arange(n_in) // GPTQ_GROUP).to(torch.int32)}

    _write_quantized(base, tmp, linear, {
        "quant_method": "gptq", "bits": 4, "group_size": GPTQ_GROUP, "desc_act": False,
        "sym": True, "lm_head": False, "checkpoint_format": "gptq"})


AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)


def _pack_awq(q):  # type: ignore[no-untyped-def]
    """Eight 4-bit values per int32 along the output, AWQ's order: nibble i holds column
    ``AWQ_ORDER[i]`` of each eight."""
    import torch

    q = q.to(torch.int64).reshape(q.shape[0], q.shape[1] // 8, 8)
    word = sum(q[:, :, AWQ_ORDER[i]] << (4 * i) for i in range(8))
    return ((word + 2**31) % 2**32 - 2**31).to(torch.int32).contiguous()


def make_awq(base: str, tmp: str) -> None:
    import torch

    def linear(stem: str, t: torch.Tensor) -> dict[str, torch.Tensor]:
        w = t.to(torch.float32).t()  # [in, out]
        n_in, n_out = w.shape
        groups = w.reshape(n_in // GPTQ_GROUP, GPTQ_GROUP, n_out)
        lo, hi = groups.amin(dim=1), groups.amax(dim=1)
        scale = ((hi - lo) / 15.0).clamp(min=1e-6).to(torch.float16)
        zero = torch.round(-lo / scale.to(torch.float32)).clamp(0, 15)
        q = torch.round(groups / scale.to(torch.float32)[:, None, :]) + zero[:, None, :]
        return {stem + "qweight": _pack_awq(q.clamp(0, 15).reshape(n_in, n_out)),
                stem + "qzeros": _pack_awq(zero), stem + "scales": scale.contiguous()}

    _write_quantized(base, tmp, linear, {"quant_method": "awq", "bits": 4,
                                         "group_size": GPTQ_GROUP, "zero_point": True,
                                         "version": "gemm"})


def _make_wna16(base: str, tmp: str, bits: int) -> None:
    import torch
    from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32

    def linear(stem: str, t: torch.Tensor) -> dict[str, torch.Tensor]:
        w = t.to(torch.float32)  # [out, in]
        n_out, n_in = w.shape
        size = GPTQ_GROUP if bits == 4 else n_in  # W8A16: one group per channel
        top = 2 ** (bits - 1) - 1
        groups = w.reshape(n_out, n_in // size, size)
        scale = (groups.abs().amax(dim=2) / top).clamp(min=1e-6).to(torch.bfloat16)
        q = torch.round(groups / scale.to(torch.float32)[:, :, None]).clamp(-top - 1, top)
        return {stem + "weight_packed": pack_to_int32(q.reshape(n_out, n_in).to(torch.int8),
                                                      bits),
                stem + "weight_scale": scale.contiguous(),
                stem + "weight_shape": torch.tensor([n_out, n_in], dtype=torch.int64)}

    _write_quantized(base, tmp, linear, {
        "quant_method": "compressed-tensors", "format": "pack-quantized",
        "quantization_status": "compressed",
        "config_groups": {"group_0": {
            "targets": ["Linear"], "input_activations": None,
            "weights": {"num_bits": bits, "type": "int", "symmetric": True,
                        **({"strategy": "group", "group_size": GPTQ_GROUP} if bits == 4
                           else {"strategy": "channel"}),
                        "dynamic": False}}},
        "ignore": ["lm_head"]})


def make_w4a16(base: str, tmp: str) -> None:
    _make_wna16(base, tmp, 4)


def make_w8a16(base: str, tmp: str) -> None:
    _make_wna16(base, tmp, 8)


MAKERS = {"draft": make_draft, "eagle": make_eagle, "gptq": make_gptq, "awq": make_awq,
          "w4a16": make_w4a16, "w8a16": make_w8a16, "w8a8": make_w8a8}


def main() -> None:
    kind, base, out_dir = sys.argv[1:4]
    if os.path.exists(os.path.join(out_dir, "config.json")):
        return
    tmp = out_dir + f".tmp{os.getpid()}"
    os.makedirs(tmp, exist_ok=True)
    MAKERS[kind](base, tmp)
    os.rename(tmp, out_dir)


if __name__ == "__main__":
    main()
