"""``verify --json``: a :class:`VerifyReport` as the document scripts read."""

from __future__ import annotations

from vllm_cache_tools.maintain.verify import VerifyReport
from vllm_cache_tools.store.locate import display_path


def verify_json(report: VerifyReport) -> dict[str, object]:
    return {"root": display_path(report.root), "checked": report.checked,
            "problems": [{"key": p.key, "path": p.path, "kind": p.kind, "detail": p.detail,
                          "layout": p.layout, "fixable": p.fixable or p.kind == "orphan-tmp",
                          "note": p.note}
                         for p in report.problems]}


__all__ = ['verify_json']
