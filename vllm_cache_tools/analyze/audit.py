"""``audit``: for starts that reused one entry, compare their recorder manifests and flag what
changed although vLLM's key did not (a factor outside the key: the class of bug where a stale
compiled graph is reused, e.g. ``num_speculative_tokens``). Pure over deep-read entries."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_cache_tools.analyze.manifest_diff import field_changes
from vllm_cache_tools.read.manifest import Manifest
from vllm_cache_tools.store.types import Entry


@dataclass(frozen=True)
class Finding:
    layout: str
    key: str
    rank: str
    prefix: str
    item: str
    """``<sub_config>.<field>``, ``env.<VAR>``, ``versions.<pkg>`` or ``inductor.<option>``."""
    old: Any
    new: Any
    old_manifest: str
    new_manifest: str
    old_command: tuple[str, ...]
    new_command: tuple[str, ...]
    verdict: str = "possible false hit"
    """``possible false hit``, or ``ignored by vLLM`` for a ``VLLM_*`` variable vLLM declares
    and leaves out of its env hash on purpose (ports, hosts, logging, paths)."""


@dataclass(frozen=True)
class AuditReport:
    root: Path
    entries: int
    with_manifests: int
    reused: int
    """Entries with at least two distinct manifests for one rank/prefix."""
    findings: tuple[Finding, ...]

    @property
    def possible_false_hits(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.verdict == "possible false hit")


PROCESS_ENV = "process_env"
"""Manifest field: every ``VLLM_*`` variable of the start's process (recorder)."""


def _dict_changes(prefix: str, old: Any, new: Any) -> list[tuple[str, Any, Any]]:
    o = old if isinstance(old, dict) else {}
    n = new if isinstance(new, dict) else {}
    return [(f"{prefix}.{k}", o.get(k), n.get(k)) for k in sorted(set(o) | set(n))
            if o.get(k) != n.get(k)]


def manifest_changes(a: Manifest, b: Manifest) -> list[tuple[str, Any, Any]]:
    """Everything recorded that differs between two manifests of one entry, except the start
    itself (command line, host, pid, times) and vLLM's runtime bookkeeping."""
    out = field_changes(a.config, b.config, hashed_only=False)
    out += _dict_changes("env", a.env, b.env)
    pa, pb = a.data.get(PROCESS_ENV), b.data.get(PROCESS_ENV)
    if isinstance(pa, dict) and isinstance(pb, dict):  # both recorders kept every VLLM_*
        out += [c for c in _dict_changes("env", pa, pb) if c[0][4:] not in a.env]
    out += _dict_changes("versions", a.data.get("versions"), b.data.get("versions"))
    ia, ib = a.inductor or {}, b.inductor or {}
    out += _dict_changes("inductor", ia.get("inductor_config"), ib.get("inductor_config"))
    out += _dict_changes("functorch", ia.get("functorch_config"), ib.get("functorch_config"))
    if ia.get("system") != ib.get("system") and ia and ib:
        out.append(("inductor.system", ia.get("system"), ib.get("system")))
    fa = {f["path"]: f.get("sha256") for f in a.data.get("traced_files") or []}
    fb = {f["path"]: f.get("sha256") for f in b.data.get("traced_files") or []}
    out += [(f"traced_file:{p}", fa.get(p), fb.get(p)) for p in sorted(set(fa) | set(fb))
            if fa.get(p) != fb.get(p)]
    return out


def verdict(item: str, a: Manifest, b: Manifest) -> str:
    """A variable vLLM declares but keeps out of its env hash was left out on purpose;
    anything else that changed under one key is a possible false hit (an undeclared
    ``VLLM_*`` variable, a config field compute_hash leaves out, an option, a source)."""
    if item.startswith("env.") and item[4:] not in a.env:
        names = {n for m in (a, b) for n in (m.data.get("undeclared_env") or [])}
        if item[4:] not in names:
            return "ignored by vLLM"
    return "possible false hit"


def audit_entry(e: Entry) -> list[Finding]:
    groups: dict[tuple[str, str], list[Manifest]] = {}
    for m in e.manifests:
        groups.setdefault((m.rank, m.prefix), []).append(m)
    out: list[Finding] = []
    for (rank, prefix), ms in sorted(groups.items()):
        first = ms[0]  # the start that created the entry (oldest record)
        for later in ms[1:]:
            for item, old, new in manifest_changes(first, later):
                out.append(Finding(
                    e.layout, e.key, rank, prefix, item, old, new, first.digest, later.digest,
                    tuple(first.data.get("command_line") or ()),
                    tuple(later.data.get("command_line") or ()),
                    verdict(item, first, later)))
    return out


def audit(root: Path, entries: Iterable[Entry]) -> AuditReport:
    es = list(entries)
    with_m = [e for e in es if e.manifests]
    reused = [e for e in with_m
              if len({(m.rank, m.prefix) for m in e.manifests}) < len(e.manifests)]
    findings = [f for e in reused for f in audit_entry(e)]
    return AuditReport(root, len(es), len(with_m), len(reused), tuple(findings))
