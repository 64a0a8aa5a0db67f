"""The wrong-hit guard's comparison (issue 29, item 3): a start's recorded factors against the
manifest of the entry it is about to load, restricted to the curated list of
:mod:`.guard_fields`. Pure functions over manifest dicts as the recorder writes them
(``recorder/capture.base_manifest``), standard library only: the recorder runs them inside
vLLM at every hit, and ``audit``-side code can run them over read manifests."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from vllm_cache_tools.keys import guard_fields

COMPILED_EVENTS = ("miss", "load-failure")
"""A manifest whose ``timings.event`` is one of these was written by the start that compiled
the entry's artifact (a load failure compiles again and rewrites it)."""


@dataclass(frozen=True)
class GuardDifference:
    item: str
    """``<sub_config>.<field>``, ``env.<VAR>``, ``inductor.<option>``, ``functorch.<option>``
    or ``versions.<package>``."""
    entry: Any
    """The value the entry was compiled with."""
    start: Any
    """This start's value."""
    why: str


def _fields(config: Any, sub: str) -> Mapping[str, Any] | None:
    part = config.get(sub) if isinstance(config, Mapping) else None
    f = part.get("fields") if isinstance(part, Mapping) else None
    return f if isinstance(f, Mapping) else None


def _config(entry: Mapping[str, Any], start: Mapping[str, Any]) -> list[GuardDifference]:
    out = []
    for item, why in guard_fields.CONFIG_FIELDS.items():
        sub, name = item.split(".", 1)
        fe, fs = _fields(entry.get("config"), sub), _fields(start.get("config"), sub)
        if fe is None and fs is None:
            continue
        ve = fe.get(name) if fe is not None else None
        vs = fs.get(name) if fs is not None else None
        if ve != vs:
            out.append(GuardDifference(item, ve, vs, why))
    return out


def _undeclared(entry: Mapping[str, Any], start: Mapping[str, Any]) -> list[GuardDifference]:
    pe, ps = entry.get("process_env"), start.get("process_env")
    if not isinstance(pe, Mapping) or not isinstance(ps, Mapping):
        return []  # a recorder that did not keep every VLLM_* variable: nothing to compare
    names: set[str] = set()
    for m in (entry, start):
        u = m.get("undeclared_env")
        if isinstance(u, list):
            names.update(n for n in u if isinstance(n, str))
    return [GuardDifference(f"env.{n}", pe.get(n), ps.get(n), guard_fields.UNDECLARED_ENV)
            for n in sorted(names) if pe.get(n) != ps.get(n)]


def _inductor(entry: Mapping[str, Any], start: Mapping[str, Any]) -> list[GuardDifference]:
    ie, is_ = entry.get("inductor"), start.get("inductor")
    if not isinstance(ie, Mapping) or not isinstance(is_, Mapping):
        return []
    out = []
    for part, label in (("inductor_config", "inductor"), ("functorch_config", "functorch")):
        oe, os_ = ie.get(part), is_.get(part)
        if not isinstance(oe, Mapping) or not isinstance(os_, Mapping) or oe == os_:
            continue
        out += [GuardDifference(f"{label}.{k}", oe.get(k), os_.get(k),
                                guard_fields.INDUCTOR_OPTION)
                for k in sorted(set(oe) | set(os_)) if oe.get(k) != os_.get(k)]
    return out


def _versions(entry: Mapping[str, Any], start: Mapping[str, Any]) -> list[GuardDifference]:
    ve, vs = entry.get("versions"), start.get("versions")
    if not isinstance(ve, Mapping) or not isinstance(vs, Mapping):
        return []
    return [GuardDifference(f"versions.{p}", ve.get(p), vs.get(p), why)
            for p, why in guard_fields.VERSIONS.items() if ve.get(p) != vs.get(p)]


def guarded_differences(entry: Mapping[str, Any],
                        start: Mapping[str, Any]) -> tuple[GuardDifference, ...]:
    """What differs between the manifest the entry was compiled under (``entry``) and this
    start's (``start``) in an item of the curated list; empty when the hit is safe as far
    as the list knows."""
    return tuple(_config(entry, start) + _undeclared(entry, start) + _inductor(entry, start)
                 + _versions(entry, start))


def compiled_by(manifests: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """Of one entry folder's manifests, the one written by the start that compiled the
    artifact now in it: the newest (``created``) whose event is a miss or a load failure.
    ``None`` when no start of the recorder compiled it (an entry from before the recorder,
    or copied in without its manifests): then the guard cannot tell and stays silent."""
    best: Mapping[str, Any] | None = None
    for m in manifests:
        t = m.get("timings")
        if not isinstance(t, Mapping) or t.get("event") not in COMPILED_EVENTS:
            continue
        c = m.get("created")
        if not isinstance(c, (int, float)):
            continue
        if best is None or c > best["created"]:
            best = m
    return best

