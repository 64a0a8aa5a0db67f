"""``predict --json``: a :class:`Prediction` as the document scripts read."""

from __future__ import annotations

from typing import Any

from vllm_cache_tools.analyze.predict import Prediction, TreePrediction
from vllm_cache_tools.keys.versions import recipe_verified_on


def prediction_json(p: Prediction) -> dict[str, Any]:
    verified = recipe_verified_on(str(p.parts.get("vllm_version") or ""))

    def tree(t: TreePrediction, extra: str) -> dict[str, Any]:
        return {"key": t.key, "path": t.path, "hit": t.hit, "detail": t.detail,
                extra: t.evidence or None, "recipe_verified_on": verified}

    parts = {k: v for k, v in p.parts.items() if k not in ("env", "process_env")}
    return {
        "hit": p.hit,
        "compiled": p.compiled,
        "backend": tree(p.backend, "code_hash_evidence"),
        "aot": tree(p.aot, "source_check"),
        "aot_drafts": [{**tree(d, "source_check"), "tag": d.tag} for d in p.drafts],
        "parts": parts,
        "reasons": [{"component": c.component, "item": c.item, "old": c.old, "new": c.new,
                     "evidence": c.evidence, "detail": c.detail} for c in p.reasons],
        "probe": None if p.probe_run is None else {
            "memo": p.probe_run.memo, "kept": p.probe_run.kept,
            "seconds": round(p.probe_run.seconds, 3), "served_by": p.probe_run.served_by,
            "standby": p.probe_run.standby,
            "inductor_factors_from": p.probe_run.data.get("inductor_from"),
            "timings": p.probe_run.timings or None},
        "trace": None if p.trace_run is None else {
            "memo": p.trace_run.memo, "kept": p.trace_run.kept,
            "seconds": round(p.trace_run.seconds, 3), "served_by": p.trace_run.served_by,
            "files": len(p.trace_run.files), "exact": p.trace_run.exact,
            "error": p.trace_run.error},
    }


__all__ = ['prediction_json']
