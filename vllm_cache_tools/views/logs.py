"""``log --json`` and its modes: starts, summaries, traced files, comparisons as documents."""

from __future__ import annotations

from typing import Any

from vllm_cache_tools.analyze.log_compare import StartComparison, classify_traced, traced_groups
from vllm_cache_tools.analyze.log_outcome import StartSummary
from vllm_cache_tools.read.logs import CompiledFunction, ProcessLog, StartLog


def function_json(p: ProcessLog, f: CompiledFunction) -> dict[str, Any]:
    return {
        "tag": f.tag,
        "code": ({"name": f.code_name, "file": f.code_file, "line": f.code_line}
                 if f.code_name else None),
        "where": str(f.where),
        "first_time": f.first_time,
        "last_time": f.last_time,
        "outcome": f.outcome,
        "started_compiling": f.started_compiling,
        "cache_dir": f.cache_dir,
        "cache_disabled": f.cache_disabled,
        "aot": {"loaded": f.aot_loaded, "saved": f.aot_saved, "save_error": f.aot_save_error},
        "load_failure": ({"path": f.load_failure.path, "reason": f.load_failure.reason,
                          "where": str(f.load_failure.where)} if f.load_failure else None),
        "factors": ({**f.factors.as_dict(), "dir": f.factors.dir} if f.factors else None),
        "config_hash_logged": f.config_hash_logged,
        "env_factors_raw": f.env_raw,
        "env_factors_truncated": f.env_truncated,
        "traced_files": list(f.traced_files),
        "graph_saved": list(f.graph_saved),
        "timings": {
            "dynamo_s": f.dynamo_s,
            "total_s": f.total_s,
            "ranges": [{"label": r.label, "action": r.action, "seconds": r.seconds,
                        "where": str(r.where)} for r in f.ranges],
        },
        "graphs_loaded": f.graphs_loaded,
        "graphs_stored": f.graphs_stored,
    }


def start_json(st: StartLog) -> dict[str, Any]:
    return {
        "index": st.index,
        "where": str(st.where),
        "last_line": st.last_line,
        "first_time": st.first_time,
        "last_time": st.last_time,
        "vllm_version": st.vllm_version,
        "model": st.model,
        "compile_mode": st.compile_mode,
        "enforce_eager": st.enforce_eager,
        "args_given": None if st.args is None else sorted(str(k) for k in st.args),
        "ends_log": st.ends_log,
        "incomplete": st.incomplete,
        "processes": [{
            "pid": p.pid, "name": p.name, "names": list(p.names), "ip": p.ip, "rank": p.rank,
            "engine_init": ({"seconds": p.engine_init.seconds,
                             "compilation_s": p.engine_init.compilation_s,
                             "where": str(p.engine_init.where)} if p.engine_init else None),
            "functions": [function_json(p, f) for f in p.functions],
        } for p in st.processes],
        "warnings": list(st.warnings),
    }


def summary_json(s: StartSummary) -> dict[str, Any]:
    return {
        "index": s.index,
        "where": s.where,
        "first_time": s.first_time,
        "last_time": s.last_time,
        "vllm_version": s.vllm_version,
        "model": s.model,
        "outcome": s.outcome,
        "why": list(s.why),
        "compile_s": s.compile_s,
        "load_s": s.load_s,
        "time_basis": s.time_basis,
        "engine_init_s": s.engine_init_s,
        "engine_compile_s": s.engine_compile_s,
        "saved_s": s.saved_s,
        "would_save_s": s.would_save_s,
        "saving_regression": s.regression,
        "saving_note": s.saving_note,
        "backend_dirs": list(s.backend_dirs),
        "aot_paths": list(s.aot_paths),
        "functions": [{
            "process": f.process, "pid": f.pid, "rank": f.rank, "tag": f.tag,
            "outcome": f.outcome, "why": f.why, "compile_s": f.times.compile_s,
            "load_s": f.times.load_s, "time_basis": f.times.basis,
            "dynamo_s": f.times.dynamo_s, "inductor_s": f.times.inductor_s,
            "cache_dir": f.cache_dir, "aot_path": f.aot_path, "aot_action": f.aot_action,
            "factors": f.factors, "traced_files": f.traced_files,
            "env_factors": f.env_factors, "saved_s": f.saved_s,
            "would_save_s": f.would_save_s, "saving_basis": f.saving_basis,
        } for f in s.functions],
        "warnings": list(s.warnings),
    }


def traced_json(st: StartLog) -> dict[str, Any]:
    groups = []
    for procs, f in traced_groups(st):
        files = [classify_traced(t) for t in f.traced_files]
        groups.append({
            "processes": procs, "tag": f.tag, "where": str(f.where),
            "files": [{"path": t.path, "kind": t.kind, "module": t.module,
                       "unexpected": t.unexpected} for t in files],
            "counts": {k: sum(1 for t in files if t.kind == k)
                       for k in ("vllm", "torch", "third-party", "other", "dynamic")},
        })
    return {"index": st.index, "where": str(st.where), "model": st.model, "groups": groups}


def comparison_json(c: StartComparison, explain_command: str | None = None) -> dict[str, Any]:
    """``explain_command``: the ``vllm-cache explain --logs`` line that names the config field
    or source line behind each change of this comparison."""
    return {
        "old": c.old_ref, "new": c.new_ref,
        "model": {"old": c.old_model, "new": c.new_model},
        "vllm_version": {"old": c.old_version, "new": c.new_version},
        "slots": [{
            "slot": s.slot, "old_process": s.old_process, "new_process": s.new_process,
            "outcome": {"old": s.old_outcome, "new": s.new_outcome},
            "hashes": [{"component": h.component, "old": h.old, "new": h.new,
                        "changed": h.changed} for h in s.hashes],
            "changed": list(s.changed_components),
            "env_changes": [{"name": e.name, "old": e.old, "new": e.new}
                            for e in s.env_changes],
            "traced_added": list(s.traced_added), "traced_removed": list(s.traced_removed),
            "cache_dir": {"old": s.old_cache_dir, "new": s.new_cache_dir},
            "aot": {"old": s.old_aot, "new": s.new_aot},
            "notes": list(s.notes),
        } for s in c.slots],
        "unmatched_old": list(c.unmatched_old), "unmatched_new": list(c.unmatched_new),
        "notes": list(c.notes),
        "explainer": explain_command or "vllm-cache explain --logs OLD NEW",
    }


__all__ = ['comparison_json', 'function_json', 'start_json', 'summary_json', 'traced_json']
