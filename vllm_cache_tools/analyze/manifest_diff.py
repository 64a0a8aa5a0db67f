"""Field-level differences between two recorder manifests (pure functions): which sub-config
field, env factor or Inductor option changed. Used by ``explain`` (between entries, where the
hashes differ) and ``audit`` (within one entry, where they do not)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from vllm_cache_tools.keys.compiler import diff_inductor_factors
from vllm_cache_tools.layout import RUNTIME_FIELDS
from vllm_cache_tools.read.manifest import Manifest
from vllm_cache_tools.store.types import Cause


def _fields(part: Any) -> Mapping[str, Any]:
    if isinstance(part, Mapping):
        f = part.get("fields")
        return f if isinstance(f, Mapping) else {}
    return {}


def _hash(part: Any) -> Any:
    return part.get("hash") if isinstance(part, Mapping) else None


def field_changes(old: Mapping[str, Any], new: Mapping[str, Any],
                  hashed_only: bool) -> list[tuple[str, Any, Any]]:
    """(``<sub_config>.<field>``, old, new) for every differing field. ``hashed_only``: only in
    sub-configs whose own hash differs (what explains a new key); otherwise in all of them
    (what ``audit`` looks for)."""
    out: list[tuple[str, Any, Any]] = []
    for name in sorted(set(old) | set(new)):
        po, pn = old.get(name), new.get(name)
        if hashed_only and _hash(po) == _hash(pn):
            continue
        fo, fn = _fields(po), _fields(pn)
        for k in sorted(set(fo) | set(fn)):
            item = f"{name}.{k}"
            if fo.get(k) != fn.get(k) and item not in RUNTIME_FIELDS:
                out.append((item, fo.get(k), fn.get(k)))
        if (po is None) != (pn is None) and not (fo or fn):
            out.append((name, "unset" if po is None else "set",
                        "unset" if pn is None else "set"))
    return out


def config_field_causes(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None,
                        evidence: str) -> list[Cause]:
    """Config causes from two sets of sub-config parts (a manifest's, or live hashing's)."""
    if not old or not new:
        return []
    return [Cause("config", item, o, n, evidence) for item, o, n in
            field_changes(old, new, hashed_only=True)]


def inductor_causes(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None,
                    evidence: str, without_functorch: bool = False) -> list[Cause]:
    """Compiler causes from two sets of raw Inductor factors. ``without_functorch``: the
    functorch config of one side was taken inside torch's ``aot_compile`` patch and the other's
    outside it, so they are not comparable."""
    if not old or not new:
        return []
    o, n = dict(old), dict(new)
    if without_functorch:
        o.pop("functorch_config", None)
        n.pop("functorch_config", None)
    return diff_inductor_factors(o, n, evidence)


def config_causes(a: Manifest, b: Manifest) -> list[Cause]:
    return config_field_causes(a.config, b.config, "recorder manifests")


def compiler_causes(a: Manifest, b: Manifest) -> list[Cause]:
    return inductor_causes(a.inductor, b.inductor, "recorder manifests (Inductor factors)")


def pick_pair(old: Sequence[Manifest], new: Sequence[Manifest]) -> tuple[Manifest, Manifest] | None:
    """The newest manifest of each side on the same rank/prefix (else the newest of each)."""
    if not old or not new:
        return None
    for m in reversed(new):
        same = [o for o in old if (o.rank, o.prefix) == (m.rank, m.prefix)]
        if same:
            return same[-1], m
    return old[-1], new[-1]
