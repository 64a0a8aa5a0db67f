"""The cause builders of ``explain``: one function per kind of evidence (env factors, traced
sources, system info, the forward's position, vLLM's engine-config and non-default-args log
lines), each turning two records into :class:`~vllm_cache_tools.store.types.Cause` items."""

from __future__ import annotations

import difflib
from typing import Any

from vllm_cache_tools.keys.hardware import hardware_detail
from vllm_cache_tools.read.aot_model import AotModelInfo
from vllm_cache_tools.redaction import same_value
from vllm_cache_tools.store.types import Cause


def env_causes(old: dict[str, Any], new: dict[str, Any], evidence: str) -> list[Cause]:
    """Env factors that differ; those a platform sets from the machine say so."""
    return [Cause("env", k, old.get(k), new.get(k), evidence, hardware_detail("env", k) or "")
            for k in sorted(set(old) | set(new)) if not same_value(k, old.get(k), new.get(k))]


def source_causes(old: AotModelInfo, new: AotModelInfo, evidence: str,
                  context: int = 2) -> list[Cause]:
    """Traced files whose compile-time copies differ, with a unified diff."""
    a = {s.module: s.content for s in old.inlined_sources}
    b = {s.module: s.content for s in new.inlined_sources}
    out = []
    for m in sorted(set(a) | set(b)):
        if a.get(m) == b.get(m):
            continue
        if a.get(m) is None or b.get(m) is None:
            out.append(Cause("code", m, "traced" if m in a else "not traced",
                             "traced" if m in b else "not traced", evidence,
                             "the set of traced modules changed"))
            continue
        diff = "".join(difflib.unified_diff(
            (a[m] or "").splitlines(keepends=True), (b[m] or "").splitlines(keepends=True),
            fromfile=f"{m} (old)", tofile=f"{m} (new)", n=context))
        out.append(Cause("code", m.replace(".", "/") + ".py", "compile-time copy",
                         "changed copy", evidence, diff))
    return out


def system_causes(old: AotModelInfo, new: AotModelInfo, evidence: str) -> list[Cause]:
    out = []
    for item, x, y in (("torch", old.torch_version, new.torch_version),
                       ("CUDA", old.cuda_version, new.cuda_version),
                       ("triton", old.triton_version, new.triton_version),
                       ("GPU", old.gpu_name, new.gpu_name),
                       ("device", old.device_type, new.device_type),
                       ("python", old.python_version, new.python_version)):
        if x != y:
            out.append(Cause("compiler", item, x, y, evidence,
                             hardware_detail("compiler", item) or ""))
    return out


def forward_causes(old: AotModelInfo, new: AotModelInfo, evidence: str) -> list[Cause]:
    out = []
    if old.qualname != new.qualname:
        out.append(Cause("model", "compiled forward", old.qualname, new.qualname, evidence))
    elif old.firstlineno != new.firstlineno:
        out.append(Cause("code", f"{new.qualname} first line", old.firstlineno,
                         new.firstlineno, evidence,
                         "a change above forward moved it: part of the AOT key "
                         "(_model_hash_key), so a new AOT folder"))
    return out


_CFG_FIELD = {"max_seq_len": "model_config.max_model_len", "dtype": "model_config.dtype",
              "tensor_parallel_size": "parallel_config.tensor_parallel_size",
              "pipeline_parallel_size": "parallel_config.pipeline_parallel_size",
              "data_parallel_size": "parallel_config.data_parallel_size",
              "quantization": "model_config.quantization",
              "kv_cache_dtype": "cache_config.cache_dtype",
              "enforce_eager": "model_config.enforce_eager",
              "compilation_config": "compilation_config",
              "speculative_config": "speculative_config", "seed": "model_config.seed"}


def parse_engine_config(line: str) -> dict[str, str]:
    """Top-level ``key=value`` pairs of vLLM's "Initializing a V1 LLM engine (...) with config:
    ..." log line (nesting by brackets and quotes respected)."""
    text = line.split("with config: ", 1)[-1].strip()
    out: dict[str, str] = {}
    depth, quote, start = 0, "", 0
    for i, ch in enumerate(text + ","):
        if quote:
            if ch == quote:
                quote = ""
            continue
        if ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            part = text[start:i].strip()
            if "=" in part:
                k, v = part.split("=", 1)
                out[k.strip()] = v.strip()
            start = i + 1
    return out


def config_line_causes(old: dict[str, str], new: dict[str, str], evidence: str) -> list[Cause]:
    """Differing top-level fields of two engine-config lines; values as Python values where
    the text is a literal (``128``), else the text (``torch.bfloat16``)."""
    out = []
    for k in sorted(set(old) | set(new)):
        if old.get(k) != new.get(k) and k not in ("served_model_name",):
            out.append(Cause("config", _CFG_FIELD.get(k, f"engine config {k}"),
                             _text_value(old.get(k)), _text_value(new.get(k)), evidence))
    return out


def _text_value(raw: str | None) -> object:
    from vllm_cache_tools.read.logs import env_value

    return None if raw is None else env_value(raw)


# Arguments of vLLM's "non-default args:" line and the config field each sets.
_ARG_FIELD = {"max_model_len": "model_config.max_model_len", "dtype": "model_config.dtype",
              "model": "model_config.model", "revision": "model_config.revision",
              "tensor_parallel_size": "parallel_config.tensor_parallel_size",
              "pipeline_parallel_size": "parallel_config.pipeline_parallel_size",
              "data_parallel_size": "parallel_config.data_parallel_size",
              "quantization": "model_config.quantization",
              "kv_cache_dtype": "cache_config.cache_dtype",
              "block_size": "cache_config.block_size",
              "enforce_eager": "model_config.enforce_eager", "seed": "model_config.seed",
              "max_num_seqs": "scheduler_config.max_num_seqs",
              "max_num_batched_tokens": "scheduler_config.max_num_batched_tokens"}
# Arguments that configure the server, not the engine: never in the config hash.
_SERVER_ARGS = frozenset({"host", "port", "api_key", "served_model_name", "disable_log_stats",
                          "disable_log_requests", "enable_log_requests", "uvicorn_log_level",
                          "ssl_keyfile", "ssl_certfile", "ssl_ca_certs", "allowed_origins",
                          "allowed_methods", "allowed_headers", "root_path", "middleware",
                          "api_server_count", "log_config_file", "disable_uvicorn_access_log",
                          "max_log_len", "response_role", "chat_template"})
MAX_ARG_DEPTH = 4


def _arg_diffs(name: str, old: object, new: object, depth: int = 0
               ) -> list[tuple[str, object, object]]:
    """(dotted field, old, new) for every leaf that differs; nested dicts (``additional_config``,
    ``compilation_config``, ``hf_overrides``) are followed so the field itself is named."""
    if old == new:
        return []
    if depth < MAX_ARG_DEPTH and isinstance(old, dict | None) and isinstance(new, dict | None):
        old, new = old or {}, new or {}  # a dict given on one side only: name its fields
        out = []
        for k in sorted(set(old) | set(new), key=str):
            out += _arg_diffs(f"{name}.{k}", old.get(k), new.get(k), depth + 1)
        return out
    return [(name, old, new)]


def args_causes(old: dict[Any, Any] | None, new: dict[Any, Any] | None,
                evidence: str) -> list[Cause]:
    """Config causes from two starts' ``non-default args:`` lines (read by
    :func:`~vllm_cache_tools.read.pyrepr.parse_repr`): the arguments that differ, with nested
    fields named (``additional_config.request_id``); secret-named values redacted."""
    from vllm_cache_tools.live.probe import redact
    from vllm_cache_tools.read.pyrepr import plain

    if old is None or new is None:
        return []
    out = []
    for k in sorted(set(old) | set(new), key=str):
        name = str(k)
        if name in _SERVER_ARGS:
            continue
        for item, a, b in _arg_diffs(name, plain(old.get(k)), plain(new.get(k))):
            leaf = item.rsplit(".", 1)[-1]
            out.append(Cause("config", _ARG_FIELD.get(item, item), redact(leaf, a),
                             redact(leaf, b), evidence))
    return out


