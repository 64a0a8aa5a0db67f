"""``verify``: is every entry whole and what its name says it is?

Everything is read with the store's safe readers (``scan(deep=True)``): AOT ``model`` pickles
through the restricted, non-executing reader; ``vllm_compile_cache.py`` with
``ast.literal_eval``; nothing from the cache is ever imported or run.

Kinds of problem (``--fix`` removes the entries with the first eight, through the same safe
deletion as ``prune``; ``orphan-tmp`` removes just the leftover file; the rest are reported
only):

- ``empty-model``, ``truncated-model``, ``corrupt-model``: an AOT ``model`` of 0 bytes, cut
  short, or not a pickle;
- ``not-aot-model``: a pickle without the code object and system info torch writes;
- ``missing-model``: a ``rank_*`` folder without ``model``, or an AOT entry without ranks;
- ``orphan-tmp``: a ``*.tmp`` left by a writer that died before its rename;
- ``missing-artifact``: ``vllm_compile_cache.py`` names an artifact that is not there;
- ``no-artifacts``: ``cache_key_factors.json`` but no compiled graph or artifact table;
- ``corrupt``: factors JSON or artifact table unreadable;
- ``key-mismatch``: the recorded factors do not re-hash to the folder name (backend), or the
  AOT entry's recorder manifest names another folder or its parts give another key;
- ``ambiguous-key``: one AOT key under both spellings (``<root>/torch_aot_compile`` and
  ``torch_compile_cache/torch_aot_compile``);
- ``unreadable``: a file or folder we may not read (another user's 0600 ``model`` on a shared
  root): nothing is known about it, so it is never called corrupt and never removed;
- ``symlink``: a symlink inside an entry (never followed);
- ``unloadable``: an AOT artifact vLLM's loader can never load (every start compiles again
  and rewrites it); ``prune --unhittable`` removes such entries.

Notes (reported, never a failure): ``graph-only``, a backend folder holding factors and the
traced graph but no compiled graph (normal with the AOT tree's mega artifact: vLLM loads the
compiled model from the AOT entry, never from this folder); ``key-linked`` and
``key-unproven``, an AOT entry whose key could not be re-derived from its content (linked: a
proven backend entry of the same start reproduces its sources; unproven: nothing does);
``quarantined``, files of an entry vLLM failed to load that the recorder moved aside
(``VLLM_CACHE_TOOLS_GUARD=strict`` or ``quarantine``) so vLLM compiled them again: kept for a
look, never removed by ``verify`` or ``--fix`` (remove the folder when done).

``key-mismatch`` is reported, not fixed: the recipe is vLLM 0.32-0.33's, and an entry written
by another version may be named by another recipe (docs/recipes.md).
"""

from __future__ import annotations

import os
import re
import stat
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from vllm_cache_tools.keys import backend_key, env_hash_from_factors
from vllm_cache_tools.keys.entry_proof import LINKED, MISMATCH, PROVEN, prove_entry
from vllm_cache_tools.layout import COMPILE_CACHE_DIRNAME
from vllm_cache_tools.maintain.evidence import busy_entries, entry_rel_path
from vllm_cache_tools.maintain.trash import entry_tree, open_dir
from vllm_cache_tools.safeio import ident, unlink_at
from vllm_cache_tools.store.locate import CacheRoot, display_path
from vllm_cache_tools.store.quarantine import quarantined
from vllm_cache_tools.store.scan import scan
from vllm_cache_tools.store.types import UNREAD_KINDS, Entry
from vllm_cache_tools.units import fmt_duration

FIXABLE = frozenset({"empty-model", "truncated-model", "corrupt-model", "not-aot-model",
                     "missing-model", "missing-artifact", "no-artifacts", "corrupt"})
"""Kinds that make ``--fix`` remove the whole entry."""
NOTES = frozenset({"graph-only", "key-linked", "key-unproven", "quarantined"})
"""Kinds reported for information: not a failure (exit 0)."""
_SUFFIX = re.compile(r"-\d+$")  # vLLM 0.9.0-0.9.1 "<key>-<n>"


@dataclass(frozen=True)
class VerifyProblem:
    key: str
    layout: str
    path: str
    kind: str
    detail: str

    @property
    def fixable(self) -> bool:
        return self.kind in FIXABLE

    @property
    def note(self) -> bool:
        return self.kind in NOTES


@dataclass(frozen=True)
class VerifyReport:
    root: Path
    root_source: str
    checked: int
    problems: tuple[VerifyProblem, ...]
    entries: tuple[Entry, ...]

    def fixable_entries(self) -> list[Entry]:
        keys = {(p.layout, p.key) for p in self.problems if p.fixable}
        return [e for e in self.entries if (e.layout, e.key) in keys]

    def orphan_tmps(self) -> list[VerifyProblem]:
        """Leftover ``*.tmp`` files of entries that are otherwise not broken (a broken entry
        goes whole)."""
        broken = {(p.layout, p.key) for p in self.problems if p.fixable}
        return [p for p in self.problems
                if p.kind == "orphan-tmp" and (p.layout, p.key) not in broken]

    @property
    def failures(self) -> tuple[VerifyProblem, ...]:
        return tuple(p for p in self.problems if not p.note)


def _model_kind(error: str) -> str:
    if "0 bytes" in error:
        return "empty-model"
    if "missing model" in error:
        return "missing-model"
    if "truncated" in error or "past the end" in error or "STOP" in error:
        return "truncated-model"
    return "corrupt-model"


def check_entry(e: Entry) -> list[VerifyProblem]:
    """Problems of one deep-read entry."""
    out: list[VerifyProblem] = []

    def add(path: object, kind: str, detail: str) -> None:
        out.append(VerifyProblem(e.key, e.layout, display_path(str(path)), kind, detail))

    if e.state == "load-failed":
        # The files may look whole: what failed is vLLM loading them (the recorder's ledger).
        # Not removed by --fix: prune --load-failed is the verb that does.
        add(e.path, "load-failed", e.state_detail)

    for p in e.stats.tmp_files:
        add(p, "orphan-tmp", "temporary file left by a writer that died before its rename")
    for p in e.stats.unreadable:
        add(p, "unreadable", "cannot be read (permission denied or vanished)")
    for p in e.stats.symlinks:
        add(p, "symlink", "symlink inside the entry (not followed)")
    unreadable = {prob.path: prob.detail for prob in e.problems if prob.kind == "unreadable"}
    if e.layout == "aot":
        if not e.aot_ranks:
            add(e.path, "missing-model", e.state_detail or "no rank_*/model")
        for r in e.aot_ranks:
            if r.error is not None:
                if "symlink" in r.error:
                    continue  # already reported as a symlink
                if display_path(r.path) in unreadable:
                    add(r.path, "unreadable", f"{r.error}: not judged (never removed)")
                    continue
                add(r.path, _model_kind(r.error), r.error)
            elif r.info is not None and r.info.unloadable_reason:
                add(r.path, "unloadable", r.info.unloadable_reason)
            elif r.info is not None and r.info.qualname is None and r.info.torch_version is None:
                add(r.path, "not-aot-model", "the pickle holds no code object and no system "
                    "info: not an artifact written by torch/vLLM")
    else:
        for prob in e.problems:
            if prob.kind == "corrupt":
                add(prob.path, "corrupt", prob.detail)
            elif prob.kind == "unreadable":
                add(prob.path, "unreadable", f"{prob.detail}: not judged (never removed)")
        if not e.prefix_dirs:
            add(e.path, "no-artifacts", e.state_detail or "no rank/prefix folders")
        for pd in e.prefix_dirs:
            for art in pd.missing_artifacts:
                add(pd.path / art, "missing-artifact",
                    f"named in vllm_compile_cache.py but missing ({pd.rank}/{pd.prefix})")
            if pd.factors is not None and not pd.has_graph and pd.compiled is None:
                add(pd.path, "no-artifacts", "cache_key_factors.json but no compiled graph or "
                    "artifacts (interrupted compile)")
        if e.state == "unloadable":
            add(e.path, "graph-only", e.state_detail)
        out += _key_mismatches(e)
    return out


def _key_mismatches(e: Entry) -> list[VerifyProblem]:
    seen: set[str] = set()
    out = []
    want = _SUFFIX.sub("", e.key)
    for pd in e.prefix_dirs:
        f = pd.factors
        if f is None or f.env is None or not (f.config_hash and f.code_hash and f.compiler_hash):
            continue
        key = backend_key([env_hash_from_factors(f.env), f.config_hash, f.code_hash,
                           f.compiler_hash])
        if key != want and key not in seen:
            seen.add(key)
            out.append(VerifyProblem(
                e.key, e.layout, display_path(pd.path / "cache_key_factors.json"),
                "key-mismatch", f"recorded factors re-hash to {key}, the folder is {want} "
                "(recipe of vLLM 0.32-0.33; another version may name folders differently)"))
    return out


def aot_key_problems(entries: Sequence[Entry]) -> list[VerifyProblem]:
    """AOT entries whose key is not re-derived from their content (:mod:`..keys.entry_proof`:
    their recorder manifest, or a backend entry of the same start in this root), and keys
    present under both of vLLM's AOT spellings (which of the two a start loads depends on
    its vLLM release)."""
    out: list[VerifyProblem] = []
    backends = [b for b in entries if b.layout == "backend"]
    places: dict[str, list[Entry]] = {}
    for e in entries:
        if e.layout != "aot":
            continue
        places.setdefault(e.key, []).append(e)
        proof = prove_entry(e, backends)
        if proof.status == PROVEN:
            continue
        kind = {MISMATCH: "key-mismatch", LINKED: "key-linked"}.get(proof.status,
                                                                    "key-unproven")
        out.append(VerifyProblem(e.key, e.layout, display_path(e.path), kind, proof.line()))
    for key, es in places.items():
        if len(es) > 1:
            out.append(VerifyProblem(key, "aot", display_path(es[0].path), "ambiguous-key",
                                     "the same key under both AOT spellings ("
                                     + " and ".join(display_path(x.path) for x in es)
                                     + "): remove the one this vLLM does not read"))
    return out


def verify(root: str | Path | CacheRoot | None = None, *, now: float | None = None,
           busy: Mapping[str, Sequence[int]] | None = None) -> VerifyReport:
    """Check every entry under the root (deep read). Entries that are in use or were
    modified in the last minutes get that noted: a compile in progress looks partial."""
    info = scan(root, deep=True, check_in_use=False, use_index=False)
    now = time.time() if now is None else now
    busy = busy_entries(info.root) if busy is None else busy
    problems: list[VerifyProblem] = []
    for e in info.entries:
        found = check_entry(e)
        note = _activity_note(e, info.root, now, busy)
        if note:
            found = [VerifyProblem(p.key, p.layout, p.path, p.kind, f"{p.detail} ({note})")
                     for p in found]
        problems += found
    # What the scan could not look into is unchecked, not clean: a symlinked
    # torch_compile_cache (nothing checked at all), an entry folder swapped for a symlink,
    # an unreadable folder of the root.
    problems += [VerifyProblem("", "root", p.path, p.kind, p.detail) for p in info.problems
                 if p.kind in UNREAD_KINDS]  # layout root, no key
    problems += aot_key_problems(info.entries)
    problems += quarantine_notes(info.root / COMPILE_CACHE_DIRNAME, now)
    return VerifyReport(info.root, info.root_source, len(info.entries), tuple(problems),
                        info.entries)


def quarantine_notes(compile_cache: Path, now: float) -> list[VerifyProblem]:
    """One note per folder the recorder moved files into at a load failure."""
    out = []
    for q in quarantined(compile_cache):
        age = f", {fmt_duration(now - q.time)} ago" if q.time is not None else ""
        where = q.rank + ("/" + q.prefix if q.prefix else "")
        out.append(VerifyProblem(
            q.key, q.tree, str(q.path), "quarantined",
            f"{', '.join(q.files) or 'nothing'} ({q.size} bytes) of {where or 'the entry'} "
            f"moved aside by the recorder at a load failure{age}: {q.reason}; vLLM compiled "
            "them again (kept for a look: remove the folder when done)"))
    return out


def _activity_note(e: Entry, root: Path, now: float, busy: Mapping[str, Sequence[int]]
                   ) -> str | None:
    tree = entry_tree(e.path, root)
    pids = busy.get(entry_rel_path(tree, e.key)) if tree else None
    if pids:
        return f"in use by pid {', '.join(map(str, pids[:5]))}"
    newest = max([e.stats.newest_mtime or 0.0, *(m / 1e9 for _, m in e.stats.dir_mtimes)])
    if now - newest < 600:
        return f"modified {fmt_duration(now - newest)} ago: may still be being written"
    return None


@dataclass(frozen=True)
class TmpRemoval:
    path: str
    removed: bool
    why: str


def remove_orphan_tmps(root: Path, problems: Sequence[VerifyProblem], *, grace_s: float,
                       uid: int | None, now: float | None = None) -> list[TmpRemoval]:
    """Remove leftover ``*.tmp`` files one by one (not their entries): each is reached from
    the root folder by folder without following a link, must still be a regular ``*.tmp``
    file, older than ``grace_s`` (a writer may still be on it) and, unless ``uid`` is None,
    owned by ``uid``."""
    now = time.time() if now is None else now
    out = []
    real = os.path.realpath(root)
    for p in problems:
        full = os.path.realpath(os.path.dirname(os.path.expanduser(p.path)))
        name = os.path.basename(p.path)
        rel = os.path.relpath(full, real)
        if rel.startswith("..") or os.path.isabs(rel) or not name.endswith(".tmp"):
            out.append(TmpRemoval(p.path, False, "not inside the root"))
            continue
        out.append(TmpRemoval(p.path, *_unlink_tmp(real, rel, name, grace_s, uid, now)))
    return out


def _unlink_tmp(root: str, rel: str, name: str, grace_s: float, uid: int | None,
                now: float) -> tuple[bool, str]:
    fds = [os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)]
    try:
        for part in ([] if rel == "." else rel.split(os.sep)):
            fds.append(open_dir(part, fds[-1]))
        s = os.lstat(name, dir_fd=fds[-1])
        if not stat.S_ISREG(s.st_mode):
            return False, "no longer a regular file"
        if now - s.st_mtime < grace_s:
            return False, f"modified {fmt_duration(now - s.st_mtime)} ago (a writer may be on it)"
        if uid is not None and s.st_uid != uid:
            return False, "owned by another user (--all-users to include)"
        if not unlink_at(fds[-1], name, expect=ident(s)):  # swapped since the lstat
            return False, "replaced meanwhile"
        return True, "removed"
    except OSError as exc:
        return False, exc.strerror or str(exc)
    finally:
        for fd in reversed(fds):
            os.close(fd)
