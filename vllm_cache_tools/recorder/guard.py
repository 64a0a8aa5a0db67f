"""The wrong-hit guard (issue 29, item 3): at each hit, in either tree (an AOT ``model``
about to be loaded, or a backend folder whose ``vllm_compile_cache.py`` vLLM is about to read),
this start's manifest against the manifest of the start that compiled the entry
(:func:`vllm_cache_tools.keys.wrong_hit.guarded_differences`, over the curated list of
:mod:`vllm_cache_tools.keys.guard_fields`).

``VLLM_CACHE_TOOLS_GUARD``: ``warn`` (default): a WARNING line in vLLM's log, the hit's ledger
event carries a ``guard`` note, and vLLM loads as usual. ``strict``: the same, and this
process compiles afresh instead of loading: the recorder does not call vLLM's AOT loader (a
backend hit: it passes ``disable_cache=True`` to vLLM's ``initialize_cache``) and sets
``VLLM_DISABLE_COMPILE_CACHE=1`` in this process before vLLM compiles, so neither tree is read
or written by this start (the entry compiled for the other settings stays as it is; this start
pays a full compile every time until the field enters the key). ``off``: no comparison.
``quarantine`` may follow the mode (``warn,quarantine``; ``strict`` implies it): an entry
vLLM fails to load in the backend tree is moved aside (:mod:`.quarantine`).

Standard library only; never raises into vLLM (the hooks catch)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vllm_cache_tools import safeio
from vllm_cache_tools.keys import guard_fields
from vllm_cache_tools.keys.wrong_hit import GuardDifference, compiled_by
from vllm_cache_tools.keys.wrong_hit import guarded_differences as _differences
from vllm_cache_tools.layout import is_manifest_name
from vllm_cache_tools.recorder import metrics, quarantine

MODE_ENV = quarantine.MODE_ENV  # one variable: the mode and the quarantine flag
MODES = ("off", "warn", "strict")
DEFAULT_MODE = "warn"
MANIFEST_CAP = 16 << 20
"""A manifest is tens of KB; a larger file in an entry folder is not the recorder's."""
DISABLE_ENV = "VLLM_DISABLE_COMPILE_CACHE"
"""vLLM's own switch, read (lazily) by its AOT loader and saver and by the backend's
``is_compile_cache_enabled``."""


def mode(environ: Mapping[str, str] | None = None) -> str:
    """The guard's mode; an unknown value is ``warn`` (the guard never fails a start). The
    variable may carry ``quarantine`` beside the mode (``warn,quarantine``: :mod:`.quarantine`);
    with several modes, the first of ``MODES`` among them counts."""
    found = quarantine.words(environ)
    return next((m for m in MODES if m in found), DEFAULT_MODE)


@dataclass(frozen=True)
class Verdict:
    mode: str
    tree: str
    key: str
    rank: str
    differences: tuple[GuardDifference, ...]
    entry_manifest: str | None
    """The digest of the manifest the entry was compiled under."""

    @property
    def recompile(self) -> bool:
        return self.mode == "strict"

    def note(self) -> dict[str, Any]:
        """The ``guard`` field of this start's ledger event."""
        return {"mode": self.mode, "action": "recompiled" if self.recompile else "loaded",
                "rules": guard_fields.RULES_VERSION, "entry_manifest": self.entry_manifest,
                "differences": [{"item": d.item, "entry": d.entry, "start": d.start}
                                for d in self.differences]}  # values as recorded: redacted

    def message(self) -> str:
        diffs = "; ".join(f"{d.item}: entry {d.entry!r}, this start {d.start!r} ({d.why})"
                          for d in self.differences)
        then = ("compiling afresh for this start instead (VLLM_CACHE_TOOLS_GUARD=strict: "
                f"{DISABLE_ENV}=1 in this process)" if self.recompile else
                "loading it anyway (VLLM_CACHE_TOOLS_GUARD=warn; =strict compiles afresh)")
        return (f"vllm-cache-tools GUARD: POSSIBLE WRONG HIT: {self.tree} entry {self.key} "
                f"({self.rank}) was compiled for other settings that vLLM's key does not "
                f"see: {diffs}; {then}")


def _read(entry_dir: str, name: str) -> dict[str, Any] | None:
    try:
        data = json.loads(safeio.read_regular(os.path.join(entry_dir, name), cap=MANIFEST_CAP))
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def entry_manifests(entry_dir: str) -> list[dict[str, Any]]:
    """Every recorder manifest in one entry folder (a ``rank_i_j`` folder), each read like
    every cache read (a regular file only, capped); unreadable ones are skipped."""
    try:
        names = sorted(n for n in os.listdir(entry_dir) if is_manifest_name(n))
    except OSError:
        return []
    return [m for n in names if (m := _read(entry_dir, n)) is not None]


def compiling_manifest(entry_dir: str, artifact: str) -> Mapping[str, Any] | None:
    """The manifest of the start that compiled ``artifact``, reading as few manifests as
    it can: a compiling start writes its manifest before it compiles and saves the artifact
    (:mod:`.hooks`: after vLLM's load attempt), and a manifest is never rewritten; so the
    newest manifests at or before the artifact's mtime are read first, newest first, up to
    the first written by a compiling start (one read, where the folder holds many manifests
    of starts that hit). Then the rest, should clocks or a copy have mixed the order."""
    try:
        with os.scandir(entry_dir) as it:
            found = [(e.stat(follow_symlinks=False).st_mtime_ns, e.name) for e in it
                     if is_manifest_name(e.name) and e.is_file(follow_symlinks=False)]
        made = os.stat(artifact, follow_symlinks=False).st_mtime_ns
    except OSError:
        return None
    found.sort(reverse=True)
    order = [n for t, n in found if t <= made] + [n for t, n in found if t > made]
    for name in order:
        m = _read(entry_dir, name)
        if m is not None and (chosen := compiled_by([m])) is not None:
            return chosen
    return None


def check(start: Mapping[str, Any], artifact: str, tree: str, key: str, rank: str,
          environ: Mapping[str, str] | None = None) -> Verdict | None:
    """The guard's verdict for this start (its manifest ``start``) about to load
    ``artifact`` (an AOT ``model`` file or a backend ``vllm_compile_cache.py``; its folder
    holds the manifests); ``None`` when the
    guard is off, the entry's compiling start is unknown, or nothing on the list differs."""
    m = mode(environ)
    if m == "off":
        return None
    entry = compiling_manifest(os.path.dirname(artifact), artifact)
    if entry is None:
        return None
    diffs = _differences(entry, start)
    if not diffs:
        return None
    digest = entry.get("digest")
    return Verdict(m, tree, key, rank, diffs, digest if isinstance(digest, str) else None)


def announce(verdict: Verdict, logger: Any) -> None:
    """The loud line in vLLM's log (its own logger, so it carries vLLM's prefix and process
    tag), and the metric."""
    if logger is not None:
        logger.warning("%s", verdict.message())
    else:
        sys.stderr.write(f"WARNING {verdict.message()}\n")
    count_guard_warning(verdict)


def count_guard_warning(verdict: Verdict) -> None:
    """``vllm_compile_cache_guard_warnings_total{tree}`` on vLLM's own /metrics (the recorder's
    metrics module; nothing when metrics are off)."""
    metrics.count("guard_warnings", verdict.tree)


def compile_afresh() -> None:
    """Turn vLLM's compile cache off in this process, before vLLM compiles: its AOT loader
    and saver and its backend (``is_compile_cache_enabled``) read ``envs`` lazily; when vLLM
    has started caching ``envs`` (``enable_envs_cache``) that cache is cleared."""
    os.environ[DISABLE_ENV] = "1"
    envs = sys.modules.get("vllm.envs")
    getter = getattr(envs, "__getattr__", None) if envs is not None else None
    clear = getattr(getter, "cache_clear", None)
    if callable(clear):
        clear()
