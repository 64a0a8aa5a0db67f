"""``predict --for-host --json`` and ``host-profile``: the documents scripts read."""

from __future__ import annotations

from typing import Any

from vllm_cache_tools.analyze.for_host import HostPrediction
from vllm_cache_tools.keys.versions import recipe_verified_on
from vllm_cache_tools.views.payloads import with_schema


def for_host_json(p: HostPrediction) -> dict[str, Any]:
    r = p.record
    ver = str(r.versions.get("vllm") or "")

    def tree(name: str, key: str | None, detail: str) -> dict[str, Any]:
        return {"key": key, "detail": detail, "present": p.present.get(name),
                "recorded_key": r.recorded_keys.get(name),
                "taken_on_trust": [f.name for f in p.trusted(name)],
                "recipe_verified_on": recipe_verified_on(ver)}

    return with_schema("predict-for-host", {
        "host": {"source": r.source, "path": r.path, "name": r.host, "versions": r.versions,
                 "platform": r.platform, "platform_env": r.platform_env,
                 "evidence": list(r.evidence)},
        "backend": tree("backend", p.backend_key, p.backend_detail),
        "aot": tree("aot", p.aot_key, p.aot_detail),
        "factors": [{"name": f.name, "value": f.value, "status": f.status,
                     "detail": f.detail} for f in p.factors],
    })


def host_profile_document(profile: dict[str, Any]) -> dict[str, Any]:
    return with_schema("host-profile", profile)


__all__ = ["for_host_json", "host_profile_document"]
