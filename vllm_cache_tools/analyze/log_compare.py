"""Comparing what vLLM logged, independent of any rendering: which on-disk cache entry a
function used (links cold and warm starts), traced-file classes, and the factor-level
comparison of two starts (which of env/config/compiler/code hash changed, which raw env
variables differ, which traced files came or went). Pure functions over
:mod:`vllm_cache_tools.read.logs` records; no I/O.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from vllm_cache_tools.read.logs import (
    CompiledFunction,
    Outcome,
    ProcessLog,
    StartLog,
    env_value,
)

TracedKind = Literal["vllm", "torch", "third-party", "other", "dynamic"]

COMPONENTS = ("env", "config", "compiler", "code")
FACTORS_NOTE = ("factor hashes are logged only at DEBUG level (VLLM_LOGGING_LEVEL=DEBUG) by "
                "vLLM >= 0.14")
# --------------------------------------------------------------------------------------------
# Entries: which on-disk cache entry a function used (links cold and warm starts)


def entry_ids(f: CompiledFunction) -> tuple[str, ...]:
    ids = []
    for p in (f.aot_saved, f.aot_loaded, f.load_failure.path if f.load_failure else None,
              f.cache_dir):
        if p:
            p = os.path.normpath(p)
            if p not in ids:
                ids.append(p)
    return tuple(ids)


def aot_path(f: CompiledFunction) -> tuple[str | None, str | None]:
    """(path, what happened to it): saved / loaded / load failed / save failed."""
    if f.aot_loaded:
        return f.aot_loaded, "loaded"
    if f.load_failure is not None:
        return f.load_failure.path, "load failed" + (", then saved" if f.aot_saved else "")
    if f.aot_saved:
        return f.aot_saved, "saved"
    if f.aot_save_error:
        return f.aot_save_error.split(": ", 1)[0], "save failed"
    return None, None

def _short(h: str | None, n: int = 12) -> str:
    return "-" if h is None else h[:n]

def _root(path: str) -> str:
    """The vLLM cache root of a backend or AOT path (the part before torch_compile_cache)."""
    i = path.find("/torch_compile_cache/")
    return path[:i] if i >= 0 else os.path.dirname(path)


def _dirname(p: str | None) -> str:
    if not p:
        return "-"
    m = re.search(r"torch_compile_cache/(?:torch_aot_compile/)?([0-9a-f]+)", p)
    return m.group(1)[:12] if m else p


def _val(raw: str | None) -> str:
    return "(absent)" if raw is None else raw

# --------------------------------------------------------------------------------------------
# Traced files (the seed article's `grep "Traced files"` workflow)


@dataclass(frozen=True)
class TracedFile:
    path: str
    kind: TracedKind
    module: str
    """Path inside its package root (``model_executor/models/llama.py``), or the path."""

    @property
    def unexpected(self) -> bool:
        """Outside vllm/ and torch/: a third-party package or user code whose edits now
        change vLLM's code hash (and so the cache key)."""
        return self.kind in ("third-party", "other")


_SITE = re.compile(r"/(?:site|dist)-packages/")


def classify_traced(path: str) -> TracedFile:
    if path.startswith("<") or not path:
        return TracedFile(path, "dynamic", path)
    norm = path.replace("\\", "/")
    found = list(_SITE.finditer(norm))
    if found:
        m = found[-1]
        rel = norm[m.end():]
        top, _, rest = rel.partition("/")
        if top == "vllm":
            return TracedFile(path, "vllm", rest)
        if top == "torch":
            return TracedFile(path, "torch", rest)
        return TracedFile(path, "third-party", rel)
    for pkg in ("vllm", "torch"):
        i = norm.rfind(f"/{pkg}/")
        if i >= 0 or norm.startswith(f"{pkg}/"):
            rest = norm[i + len(pkg) + 2:] if i >= 0 else norm[len(pkg) + 1:]
            return TracedFile(path, "vllm" if pkg == "vllm" else "torch", rest)
    return TracedFile(path, "other", path)


def traced_groups(start: StartLog) -> list[tuple[list[str], CompiledFunction]]:
    """Functions of a start with their traced files, identical lists across ranks merged:
    [(process labels, function)]."""
    groups: dict[tuple[str | None, tuple[str, ...]], tuple[list[str], CompiledFunction]] = {}
    for p, f in start.functions:
        if not f.traced_files:
            continue
        key = (f.tag, tuple(sorted(f.traced_files)))
        if key in groups:
            groups[key][0].append(p.label)
        else:
            groups[key] = ([p.label], f)
    return list(groups.values())


def _traced_diff(old: Sequence[str], new: Sequence[str]) -> tuple[list[str], list[str]]:
    o, n = set(old), set(new)
    return sorted(n - o), sorted(o - n)

# --------------------------------------------------------------------------------------------
# Factor-level comparison of two starts


@dataclass(frozen=True)
class EnvChange:
    name: str
    old: str | None
    """Python repr text as vLLM printed it; None when the variable is not in that dict."""
    new: str | None


def env_diff(old: dict[str, str], new: dict[str, str]) -> list[EnvChange]:
    out = []
    for k in sorted(set(old) | set(new)):
        a, b = old.get(k), new.get(k)
        if a != b and (a is None or b is None or env_value(a) != env_value(b)):
            out.append(EnvChange(k, a, b))
    return out


@dataclass(frozen=True)
class HashChange:
    component: str
    old: str | None
    new: str | None

    @property
    def changed(self) -> bool:
        return self.old != self.new


@dataclass(frozen=True)
class SlotComparison:
    slot: str
    old_process: str
    new_process: str
    old_outcome: Outcome
    new_outcome: Outcome
    hashes: tuple[HashChange, ...]
    """Empty when either start did not log factor hashes."""
    env_changes: tuple[EnvChange, ...]
    traced_added: tuple[str, ...]
    traced_removed: tuple[str, ...]
    old_cache_dir: str | None
    new_cache_dir: str | None
    old_aot: str | None
    new_aot: str | None
    notes: tuple[str, ...]

    @property
    def changed_components(self) -> tuple[str, ...]:
        return tuple(h.component for h in self.hashes if h.changed)


@dataclass(frozen=True)
class StartComparison:
    old_ref: str
    new_ref: str
    old_model: str | None
    new_model: str | None
    old_version: str | None
    new_version: str | None
    slots: tuple[SlotComparison, ...]
    unmatched_old: tuple[str, ...]
    unmatched_new: tuple[str, ...]
    notes: tuple[str, ...]


def _slots(start: StartLog) -> dict[tuple[str, str], tuple[ProcessLog, CompiledFunction]]:
    out: dict[tuple[str, str], tuple[ProcessLog, CompiledFunction]] = {}
    for pi, p in enumerate(start.processes):
        counts: dict[str, int] = {}
        for f in p.functions:
            name = f.tag or f.code_name or "function"
            counts[name] = counts.get(name, 0) + 1
            label = name if counts[name] == 1 else f"{name}#{counts[name]}"
            out[(p.rank or f"process {pi}", label)] = (p, f)
    return out


def compare_starts(old: StartLog, new: StartLog, old_ref: str = "old",
                   new_ref: str = "new") -> StartComparison:
    a, b = _slots(old), _slots(new)
    pairs: list[tuple[tuple[str, str], tuple[str, str]]] = [(k, k) for k in a if k in b]
    rest_a = [k for k in a if k not in b]
    rest_b = [k for k in b if k not in a]
    if len(rest_a) == 1 and len(rest_b) == 1:
        pairs.append((rest_a[0], rest_b[0]))
        rest_a, rest_b = [], []
    slots = []
    for ka, kb in pairs:
        (pa, fa), (pb, fb) = a[ka], b[kb]
        notes: list[str] = []
        hashes: tuple[HashChange, ...] = ()
        if fa.factors and fb.factors:
            da, db = fa.factors.as_dict(), fb.factors.as_dict()
            hashes = tuple(HashChange(c, da.get(c), db.get(c)) for c in COMPONENTS)
        else:
            notes.append(FACTORS_NOTE + "; compared cache directories and traced files only")
        env_changes: list[EnvChange] = []
        env_changed = any(h.component == "env" and h.changed for h in hashes)
        if fa.env_raw is not None and fb.env_raw is not None:
            env_changes = env_diff(fa.env_raw, fb.env_raw)
            if env_changed and not env_changes:
                notes.append("the env hash changed but the printed raw values are equal: the "
                             "difference is in how vLLM normalises them (explain will say)")
        elif env_changed:
            notes.append("the env hash changed; the raw env factor dicts (DEBUG, vLLM >= 0.14) "
                         "are not in both logs, so which variable is unknown here")
        added, removed = _traced_diff(fa.traced_files, fb.traced_files)
        if bool(fa.traced_files) != bool(fb.traced_files):
            notes.append("traced files are listed in only one of the logs")
            added, removed = [], []
        if any(h.component == "code" and h.changed for h in hashes) and not added \
                and not removed:
            notes.append("the code hash changed with the same traced files: a traced file's "
                         "content changed (explain will say which)")
        if pa.rank != pb.rank and ka != kb:
            notes.append(f"matched {ka[0]} {ka[1]} with {kb[0]} {kb[1]}")
        slots.append(SlotComparison(
            slot=f"{kb[0]} {kb[1]}", old_process=pa.label, new_process=pb.label,
            old_outcome=fa.outcome, new_outcome=fb.outcome, hashes=hashes,
            env_changes=tuple(env_changes), traced_added=tuple(added),
            traced_removed=tuple(removed), old_cache_dir=fa.cache_dir,
            new_cache_dir=fb.cache_dir, old_aot=aot_path(fa)[0], new_aot=aot_path(fb)[0],
            notes=tuple(notes)))
    notes = []
    if not a or not b:
        notes.append("no compiled functions in " + ("either start" if not a and not b else
                                                     (old_ref if not a else new_ref)))
    return StartComparison(old_ref, new_ref, old.model, new.model, old.vllm_version,
                           new.vllm_version, tuple(slots),
                           tuple(f"{k[0]} {k[1]}" for k in rest_a),
                           tuple(f"{k[0]} {k[1]}" for k in rest_b), tuple(notes))
