"""Plain-data (JSON-ready) views of what the store read. The ``--json`` schemas live here.

Every ``--json`` document starts with ``"schema": SCHEMAS[verb]``. The number goes up when a
field changes meaning or goes away; new fields keep it. Times are ISO 8601 with a zone."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from vllm_cache_tools.keys.entry_proof import KeyProof
from vllm_cache_tools.store.locate import display_path
from vllm_cache_tools.store.summary import entry_summary as entry_summary
from vllm_cache_tools.store.types import CacheInfo, Entry
from vllm_cache_tools.units import iso

_PREFIX = "vllm-cache-tools"
# One id per document kind; rm prints prune's document (same plan, same fields).
SCHEMAS: dict[str, str] = {
    "ls": f"{_PREFIX}/ls/1",
    "ls-by-owner": f"{_PREFIX}/ls-by-owner/1",
    "ls-all-caches": f"{_PREFIX}/ls-all-caches/1",
    "prune-cache": f"{_PREFIX}/prune-cache/1",
    "show": f"{_PREFIX}/show/2",
    "predict": f"{_PREFIX}/predict/1",
    "predict-for-host": f"{_PREFIX}/predict/1/for-host",
    "host-profile": f"{_PREFIX}/host-profile/1",
    "explain": f"{_PREFIX}/explain/1",
    "log": f"{_PREFIX}/log/1",
    "log-traced": f"{_PREFIX}/log/1/traced",
    "log-compare": f"{_PREFIX}/log/1/compare",
    "prune": f"{_PREFIX}/prune/1",
    "verify": f"{_PREFIX}/verify/1",
    "audit": f"{_PREFIX}/audit/1",
    "stats": f"{_PREFIX}/stats/1",
    "drift": f"{_PREFIX}/drift/1",
    "diff-graph": f"{_PREFIX}/diff-graph/1",
    "pack": f"{_PREFIX}/pack/1", "unpack": f"{_PREFIX}/unpack/2", "push": f"{_PREFIX}/push/1",
    "pull": f"{_PREFIX}/pull/2", "warm": f"{_PREFIX}/warm/1",
    "prune-remote": f"{_PREFIX}/prune-remote/1",
    "dedup": f"{_PREFIX}/dedup/1",
}


def key_proof_document(p: KeyProof) -> dict[str, str | None]:
    """``key_proof`` of ``show --json``: how the entry's folder name was re-derived."""
    return {"status": p.status, "how": p.how, "derived": p.derived}


def with_schema(kind: str, data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` as the ``--json`` document of ``kind``: its schema id first."""
    return {"schema": SCHEMAS[kind], **{k: v for k, v in data.items() if k != "schema"}}


def predict_document(data: Mapping[str, Any]) -> dict[str, Any]:
    """``predict --json``: ``causes`` as in ``explain``; ``reasons`` stays one release as a
    deprecated alias (same list) for scripts written against 0.1."""
    out = with_schema("predict", data)
    if "reasons" in out and "causes" not in out:
        out["causes"] = out["reasons"]
    return out


# vLLM's log format is "%m-%d %H:%M:%S" in the serving process's local time: no year, no zone.
_LOG_STAMP = re.compile(r"(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:[.,](\d{1,6}))?")


def log_stamp_iso(stamp: str, ref: float) -> str | None:
    """A vLLM log stamp in ISO 8601: the latest year that does not put it after ``ref`` (when
    the log was last written), in this machine's time zone (vLLM's own was not logged)."""
    m = _LOG_STAMP.fullmatch(stamp.strip())
    if m is None:
        return None
    mo, d, h, mi, s = (int(x) for x in m.groups()[:5])
    frac = int((m.group(6) or "0").ljust(6, "0")[:6])
    limit = datetime.fromtimestamp(ref).astimezone() + timedelta(days=1)
    for year in (limit.year, limit.year - 1, limit.year - 2, limit.year - 3, limit.year - 4):
        try:
            t = datetime(year, mo, d, h, mi, s, frac).astimezone()  # local rules, DST included
        except ValueError:  # 02-29 outside a leap year, or no such date
            continue
        if t <= limit:
            return t.isoformat(timespec="milliseconds" if m.group(6) else "seconds")
    return None


def log_reference_time(names: Iterable[str]) -> float:
    """When the logs were last written: the newest input file's mtime (now for stdin)."""
    times = []
    for n in names:
        try:
            times.append(os.stat(n).st_mtime if n != "-" else time.time())
        except OSError:
            times.append(time.time())
    return max(times, default=time.time())


# A field named *_time in the JSON text. Inside string values every quote is escaped, so this
# only meets keys; the key's start is the quote before the match.
_TIME_FIELD = re.compile(r'_time": ("(?:[^"\\]|\\.)*"|null)')


def log_json(data: Any, names: Iterable[str]) -> str:
    """``json.dumps(data)`` with an ISO 8601 ``<field>_iso`` after every raw log stamp
    ``<field>`` named ``*_time`` (``"12-01 09:34:36"`` as logged, kept for scripts that read
    it). On the text, not the objects: ``log --json`` writes thousands of starts."""
    text = json.dumps(data)
    ref: float | None = None

    def add_iso(m: re.Match[str]) -> str:
        nonlocal ref
        key = text[text.rfind('"', 0, m.start()) + 1:m.start()] + "_time"
        iso = None
        if m.group(1) != "null":
            if ref is None:
                ref = log_reference_time(names)
            iso = log_stamp_iso(json.loads(m.group(1)), ref)
        return f'{m.group(0)}, "{key}_iso": {json.dumps(iso)}'

    return _TIME_FIELD.sub(add_iso, text)


def totals(entries: Iterable[Entry]) -> dict[str, int]:
    """What the listed entries hold on disk."""
    es = list(entries)
    return {"entries": len(es), "size_bytes": sum(e.size_bytes for e in es),
            "disk_bytes": sum(e.disk_bytes for e in es), "files": sum(e.stats.files for e in es)}


def ls_report(info: CacheInfo, entries: list[Entry], *,
              summaries: bool = True) -> dict[str, Any]:
    """``ls --json``; ``summaries=False``: ``entries`` left empty, for a caller that writes
    them one by one (cli/ls_run.py)."""
    listed = totals(entries)
    return with_schema("ls", {
        "root": display_path(info.root),
        # Kept from schema 1's first form; the same as totals.size_bytes.
        "total_size_bytes": listed["size_bytes"],
        "totals": listed,
        # Every entry under the root, whatever --filter kept.
        "root_totals": listed if len(entries) == len(info.entries) else totals(info.entries),
        "entries": [entry_summary(e) for e in entries] if summaries else [],
        "problems": [{"path": p.path, "kind": p.kind, "detail": p.detail}
                     for p in info.problems],
    })


def entry_detail(e: Entry) -> dict[str, Any]:
    """Everything ``show --json`` prints about one entry."""
    out = with_schema("show", entry_summary(e))
    out["created_source"] = e.created_source
    out["problems"] = [{"path": p.path, "kind": p.kind, "detail": p.detail} for p in e.problems]
    out["manifests"] = [{"digest": m.digest, "rank": m.rank, "prefix": m.prefix,
                         "created": iso(m.created), "path": display_path(m.path),
                         "vllm": (m.data.get("versions") or {}).get("vllm"),
                         "command_line": m.data.get("command_line"),
                         "timings": m.data.get("timings")} for m in e.manifests]
    if e.layout == "backend":
        f = e.factors
        # Imported here: only show needs it (its recipes import hashlib, ~3-4 ms of ls).
        from vllm_cache_tools.keys.key_check import key_check

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
