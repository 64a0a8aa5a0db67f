"""Plain-data (JSON-ready) views of what the store read. The ``--json`` schemas live here."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from vllm_cache_tools.hashing import backend_key, env_hash_from_factors
from vllm_cache_tools.locate import display_path
from vllm_cache_tools.model import CacheInfo, Entry


def iso(t: float | None) -> str | None:
    if t is None:
        return None
    return datetime.fromtimestamp(t, tz=timezone.utc).isoformat(timespec="seconds")


def entry_summary(e: Entry) -> dict[str, Any]:
    """One row of ``ls --json``."""
    return {
        "key": e.key,
        "layout": e.layout,
        "path": display_path(e.path),
        "size_bytes": e.size_bytes,
        "disk_bytes": e.disk_bytes,
        "files": e.stats.files,
        "ranks": list(e.ranks),
        "prefixes": list(e.prefixes),
        "state": e.state,
        "state_detail": e.state_detail or None,
        "created": iso(e.created),
        "modified": iso(e.modified),
        "last_used": iso(e.last_used),
        "last_used_source": e.last_used_source,
        "hits": e.hits,
        "misses": e.misses,
        "vllm_version": e.vllm_version,
        "torch_version": e.torch_version,
        "model": e.model,
        "hardware": e.hardware,
    }


def ls_report(info: CacheInfo, entries: list[Entry]) -> dict[str, Any]:
    return {
        "root": display_path(info.root),
        "total_size_bytes": sum(e.size_bytes for e in entries),
        "entries": [entry_summary(e) for e in entries],
        "problems": [{"path": p.path, "kind": p.kind, "detail": p.detail}
                     for p in info.problems],
    }


def key_check(e: Entry) -> dict[str, Any] | None:
    """Re-hash a backend entry's stored factors and compare with its directory name."""
    f = e.factors
    if f is None or f.env is None or not (f.config_hash and f.code_hash and f.compiler_hash):
        return None
    env_hash = env_hash_from_factors(f.env)
    key = backend_key([env_hash, f.config_hash, f.code_hash, f.compiler_hash])
    return {"env_hash": env_hash, "recomputed_key": key, "matches": key == e.key,
            "recipe": "vllm 0.32-0.33 sha256(str([env, config, code, compiler]))[:10]"}


def entry_detail(e: Entry) -> dict[str, Any]:
    """Everything ``show --json`` prints about one entry."""
    out = entry_summary(e)
    out["created_source"] = e.created_source
    out["problems"] = [{"path": p.path, "kind": p.kind, "detail": p.detail} for p in e.problems]
    out["manifests"] = [{"digest": m.digest, "rank": m.rank, "prefix": m.prefix,
                         "created": iso(m.created), "path": display_path(m.path),
                         "vllm": (m.data.get("versions") or {}).get("vllm"),
                         "command_line": m.data.get("command_line"),
                         "timings": m.data.get("timings")} for m in e.manifests]
    if e.layout == "backend":
        f = e.factors
        check = key_check(e)
        out["hashes"] = None if f is None else {
            "env": check["env_hash"] if check else f.env_hash,
            "config": f.config_hash, "code": f.code_hash, "compiler": f.compiler_hash}
        out["key_check"] = check
        out["env_factors"] = f.env if f is not None else None
        out["prefix_dirs"] = [{
            "rank": p.rank,
            "prefix": p.prefix,
            "path": display_path(p.path),
            "files": [display_path(n) for n in p.files],
            "graph_files": list(p.graph.files) if p.graph else [],
            "submodules": list(p.graph.submodules) if p.graph else [],
            "compiled": None if p.compiled is None else [
                {"range": r.compile_range, "graph_index": r.graph_index,
                 "compiler": r.compiler, "artifact": r.artifact} for r in p.compiled],
            "missing_artifacts": list(p.missing_artifacts),
        } for p in e.prefix_dirs]
    else:
        info = e.aot_info
        out["ranks_detail"] = [{"rank": r.rank, "path": display_path(r.path),
                                "size_bytes": r.size_bytes, "error": r.error}
                               for r in e.aot_ranks]
        if info is not None:
            cf = info.compiled_fn
            out["code"] = {"qualname": info.qualname, "filename": info.filename,
                           "firstlineno": info.firstlineno}
            out["system"] = {"python": info.python_version, "torch": info.torch_version,
                             "cuda": info.cuda_version, "triton": info.triton_version,
                             "gpu": info.gpu_name, "device_type": info.device_type}
            out["traced_sources"] = [
                {"module": s.module, "function_lines": [s.firstlineno, s.lastlineno],
                 "checksum": s.checksum,
                 "content_bytes": len(s.content.encode()) if s.content is not None else None}
                for s in info.inlined_sources]
            out["compiled"] = None if cf is None else {
                "prefix": cf.prefix, "submodules": list(cf.submod_names),
                "compiled_ranges": list(cf.compiled_ranges),
                "artifact_bytes": cf.artifact_bytes}
    return out
