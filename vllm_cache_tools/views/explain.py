"""``explain --json``: an :class:`Explanation` as the document scripts read."""

from __future__ import annotations

from typing import Any

from vllm_cache_tools.analyze.explain import Explanation


def explanation_json(x: Explanation) -> dict[str, Any]:
    return {
        "old": x.old, "new": x.new, "same_key": x.same_key, "headline": x.headline,
        "causes": [{"component": c.component, "item": c.item, "old": _jsonable(c.old),
                    "new": _jsonable(c.new), "evidence": c.evidence, "detail": c.detail}
                   for c in x.causes],
        "unexplained": [{"component": u.component, "detail": u.detail, "needs": u.needs}
                        for u in x.unexplained],
        "notes": list(x.notes),
    }


def _jsonable(v: object) -> object:
    return v if v is None or isinstance(v, (bool, int, float, str)) else str(v)


__all__ = ['explanation_json']
