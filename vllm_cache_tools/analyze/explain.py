"""Why did vLLM recompile? Compare two entries (either tree) or two logged starts and name the
exact causes, most specific first, with the evidence for each; what cannot be itemised is
listed as unexplained, with what would settle it. Pure functions over what the store and the
log reader read; no guessing.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vllm_cache_tools.analyze.explain_causes import (
    args_causes,
    config_line_causes,
    env_causes,
    forward_causes,
    parse_engine_config,
    source_causes,
    system_causes,
)
from vllm_cache_tools.analyze.manifest_diff import (
    compiler_causes,
    config_causes,
    pick_pair,
)
from vllm_cache_tools.errors import VctError
from vllm_cache_tools.keys.hardware import hardware_detail, machine_set_config
from vllm_cache_tools.keys.source_link import linked_aot_entries
from vllm_cache_tools.layout import short_key
from vllm_cache_tools.read.aot_model import AotModelInfo
from vllm_cache_tools.read.manifest import LedgerEvent, Manifest
from vllm_cache_tools.store.types import Cause, Entry
from vllm_cache_tools.store.usage import start_of


@dataclass(frozen=True)
class Unexplained:
    component: str
    detail: str
    needs: str
    """What evidence would settle it."""


@dataclass(frozen=True)
class Explanation:
    old: str
    new: str
    same_key: bool
    causes: tuple[Cause, ...] = ()
    unexplained: tuple[Unexplained, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def headline(self) -> str:
        """The whole change in one line: every cause (the first two named, the rest counted)
        and, when some differences stayed unexplained, that the explanation is partial."""
        if self.same_key and not self.causes and not self.unexplained:
            return "same key: vLLM would reuse this entry"
        if self.same_key and self.causes and all(c.component == UNHASHED
                                                 for c in self.causes):
            named = "; ".join(f"{c.item} {show_value(c.old)} -> {show_value(c.new)}"
                              for c in self.causes[:HEADLINE_CAUSES])
            more = len(self.causes) - HEADLINE_CAUSES
            return (f"same key: vLLM cannot see this change ({named}"
                    + (f"; +{more} more" if more > 0 else "") + ")")
        gaps = _gaps(self.unexplained)
        if not self.causes:
            return f"recompiled; {gaps}" if gaps else "recompiled"
        named = " and ".join(cause_phrase(c) for c in self.causes[:HEADLINE_CAUSES])
        more = len(self.causes) - HEADLINE_CAUSES
        head = f"recompiled because {named}" + (f" (+{more} more)" if more > 0 else "")
        return f"{head}; partial: {gaps}" if gaps else head


HEADLINE_CAUSES = 2
UNHASHED = "unhashed"
"""Cause component: a recorded factor that differs between starts vLLM gave one key."""
_LABEL = {"code": "source"}
_HASHED = ("env", "config", "code", "compiler")


def show_value(v: object) -> str:
    """One rendering of a cause's values, for the headline, the detail lines and predict:
    text as it is unless it would read as another type, hides blanks or holds the arrow (then
    quoted)."""
    if isinstance(v, str):
        if not v or v != v.strip() or "\n" in v or " -> " in v or _literal_like(v):
            return repr(v)
        return v
    return repr(v) if isinstance(v, (list, tuple, dict)) else str(v)


def _literal_like(text: str) -> bool:
    """Whether ``text`` would read back as a non-string literal (through the bounded literal
    reader: a value shown here can be anything a user put in an env var or a config)."""
    from vllm_cache_tools.read.errors import ReadError
    from vllm_cache_tools.read.pyliteral import parse_literal

    try:
        return not isinstance(parse_literal(text), (str, bytes))
    except ReadError:
        return False


def cause_phrase(c: Cause) -> str:
    what = f"{_LABEL.get(c.component, c.component)} {c.item}"
    if c.component == "code" and c.old == "compile-time copy":
        return f"{what} changed"
    return f"{what} changed {show_value(c.old)} -> {show_value(c.new)}"


def _gaps(unexplained: Sequence[Unexplained]) -> str:
    """What stayed unexplained, in a few words ("config/code hashes differ, unexplained")."""
    comps = list(dict.fromkeys(u.component for u in unexplained))
    hashes = [c for c in comps if c in _HASHED]
    bits = []
    if hashes:
        bits.append("/".join(hashes) + (" hashes differ" if len(hashes) > 1 else
                                        " hash differs") + ", unexplained")
    bits += [f"{u.component}: {u.detail}" for u in unexplained if u.component not in _HASHED]
    return "; ".join(dict.fromkeys(bits))


# --- entries -------------------------------------------------------------------------------

def _linked_aot(e: Entry, aots: Sequence[Entry]) -> AotModelInfo | None:
    keys = linked_aot_entries(e, aots)
    infos = [a.aot_info for a in aots if a.key in keys and a.aot_info is not None]
    return infos[0] if infos else None


def _unread(e: Entry, name: str) -> str:
    """Why entry ``e``'s ``name`` gave no evidence: the reader's own error when the file is
    there but could not be read (say, permission denied), else that it is missing."""
    said = [p.detail for p in e.problems if p.kind == "unreadable" and name in p.detail]
    key = short_key(e.key)
    return f"{key}: {said[0]}" if said else f"{key} has no readable {name}"


def explain_entries(a: Entry, b: Entry, others: Iterable[Entry] = ()) -> Explanation:
    """Why ``b`` is not ``a``. Entries must be deep reads; ``others`` (deep reads of the other
    entries of the root) let a backend entry borrow the proven sources of its AOT sibling."""
    aots = [e for e in [a, b, *others] if e.layout == "aot"]
    causes: list[Cause] = []
    unexplained: list[Unexplained] = []
    notes: list[str] = []
    same = a.key == b.key and a.layout == b.layout
    pair = pick_pair(a.manifests, b.manifests)
    if pair is not None:
        notes.append(f"recorder manifests {pair[0].digest} and {pair[1].digest} "
                     f"({pair[1].rank}{'/' + pair[1].prefix if pair[1].prefix else ''})")
    if a.layout == "backend" and b.layout == "backend":
        fa, fb = a.factors, b.factors
        if fa is None or fb is None:
            unexplained.append(Unexplained("all", _unread(a if fa is None else b,
                                                          "cache_key_factors.json"),
                                           "a recorder manifest or the start's log"))
        else:
            ev = "cache_key_factors.json"
            causes += env_causes(fa.env or {}, fb.env or {}, ev)
            # Proving which AOT entry holds each side's sources re-hashes every candidate:
            # do it once, and only when the code or compiler hash needs it.
            ia = ib = None
            if fa.code_hash != fb.code_hash or fa.compiler_hash != fb.compiler_hash:
                ia, ib = _linked_aot(a, aots), _linked_aot(b, aots)
            if fa.code_hash != fb.code_hash:
                if ia is not None and ib is not None:
                    found = source_causes(ia, ib, "compile-time sources of the AOT entries "
                                          "proven to match each code hash")
                    causes += found
                    if not found:
                        unexplained.append(Unexplained("code", "code hash changed but the "
                                                       "traced sources are equal",
                                                       "the traced file list (a log)"))
                else:
                    unexplained.append(Unexplained(
                        "code",
                        f"code hash {(fa.code_hash or '')[:12]} -> {(fb.code_hash or '')[:12]}",
                        "the AOT entries of both starts (their pickled sources) or logs"))
            if fa.compiler_hash != fb.compiler_hash:
                sys_c = system_causes(ia, ib, "AOT system_info") if ia and ib else []
                if not sys_c and pair is not None:
                    sys_c = compiler_causes(*pair)
                causes += sys_c
                if not sys_c:
                    unexplained.append(Unexplained(
                        "compiler", f"compiler hash {fa.compiler_hash} -> {fb.compiler_hash}"
                        " (torch, device and triton are equal: an Inductor/functorch option, "
                        "e.g. a TORCHINDUCTOR_* variable)",
                        "a recorder manifest or live hashing (predict) on one side"))
            cfg_c = config_causes(*pair) if pair is not None and \
                fa.config_hash != fb.config_hash else []
            causes += cfg_c
            if fa.config_hash != fb.config_hash and not cfg_c:
                unexplained.append(Unexplained(
                    "config", f"config hash {fa.config_hash} -> {fb.config_hash}",
                    "enable the recorder to itemise, or compare the starts' logs "
                    "(explain --logs)"))
    elif a.layout == "aot" and b.layout == "aot":
        ia, ib = a.aot_info, b.aot_info
        if ia is None or ib is None:
            unexplained.append(Unexplained("all", _unread(a if ia is None else b, "model"),
                                           "an intact artifact"))
        else:
            ev = "AOT model"
            causes += forward_causes(ia, ib, ev)
            causes += system_causes(ia, ib, ev)
            causes += source_causes(ia, ib, ev)
            if pair is not None and not same:
                causes += env_causes(pair[0].env, pair[1].env, "recorder manifests")
                causes += config_causes(*pair)
                if not any(c.component == "compiler" for c in causes):
                    causes += compiler_causes(*pair)
            if not same and not causes:
                unexplained.append(Unexplained(
                    "env/config", "the AOT key hashes env and config, which the AOT tree does "
                    "not store", "the backend entries of both starts, their logs, or "
                    "the recorder's manifests"))
            elif not same and not any(c.component in ("env", "config") for c in causes):
                notes.append("env and config are not stored in the AOT tree; causes above "
                             "may not be the only ones")
    else:
        unexplained.append(Unexplained("layout", f"{a.layout} vs {b.layout}",
                                       "compare entries of the same tree"))
    if same and not causes:
        causes += unhashed_causes(a)
    if same and not causes:
        notes.append("same key")
    causes.sort(key=_rank)
    return Explanation(a.key, b.key, same, tuple(machine_set_config(causes)), tuple(unexplained),
                       tuple(notes))


_ORDER = ("env", "config", "code", "compiler", "model")


def unhashed_causes(e: Entry) -> list[Cause]:
    """What the starts that reused ``e`` recorded differently (the oldest and the newest
    manifest of one rank/prefix): factors vLLM's key does not see."""
    from vllm_cache_tools.analyze.audit import manifest_changes, verdict

    groups: dict[tuple[str, str], list[Manifest]] = {}
    for m in e.manifests:
        groups.setdefault((m.rank, m.prefix), []).append(m)
    ms = max(groups.values(), key=len, default=[])
    if len(ms) < 2:
        return []
    first, last = ms[0], ms[-1]
    causes = [Cause(UNHASHED, item, old, new, "recorder manifests of starts that reused "
                    "this entry", verdict(item, first, last))
              for item, old, new in manifest_changes(first, last)]
    return sorted(causes, key=lambda c: c.detail != "possible false hit")


def _rank(c: Cause) -> int:
    """Most specific first: what the user set (env, config), then code, then the toolchain."""
    return _ORDER.index(c.component) if c.component in _ORDER else len(_ORDER)


def latest_pair(entries: Sequence[Entry]) -> tuple[Entry, Entry, str] | None:
    """For ``explain`` without arguments: the most recently created backend entry (else AOT
    entry) and the newest earlier entry of the same tree and model, with the reason chosen."""
    for layout in ("backend", "aot"):
        same = sorted((e for e in entries if e.layout == layout and e.created is not None),
                      key=lambda e: e.created or 0.0)
        if not same:
            continue
        new = same[-1]
        earlier = [e for e in same[:-1] if e.model == new.model]
        if earlier:
            old = earlier[-1]
            return old, new, (f"newest {layout} entry {short_key(new.key)} (created last) against "
                              f"the newest earlier one of the same model ({new.model})")
    return None


def against_current(entry: Entry, prediction: Any) -> Explanation:
    """Why this environment, now, would miss (or hit) ``entry``: live hashing (predict) on
    one side, the entry's stored factors, files and newest recorder manifest on the other,
    through the cause engine every deciding verb uses (:mod:`.miss_causes`); what it cannot
    itemise is listed as unexplained, with what would settle it."""
    from vllm_cache_tools.analyze.miss_causes import miss_causes, neighbour_of_entry

    kp = prediction.key_parts
    key = kp.backend_key if entry.layout == "backend" else kp.aot_key
    same = key == entry.key
    causes: list[Cause] = []
    unexplained: list[Unexplained] = []
    readable = entry.factors is not None if entry.layout == "backend" else \
        entry.aot_info is not None
    if not readable:
        unexplained.append(Unexplained("all", _unread(entry, "cache_key_factors.json" if
                                                      entry.layout == "backend" else "model"),
                                       "an intact entry"))
    else:
        # The AOT loader's source check: the artifact at the same key may still be refused.
        known = [c for c in prediction.reasons if c.component in ("code", "compiler")] \
            if entry.layout == "aot" else []
        probe = getattr(prediction, "probe", None) or {}
        found = [] if same else miss_causes([neighbour_of_entry(entry, f"{entry.layout} entry "
                                                f"{short_key(entry.key)} vs live hashing")],
                            kp, world_size=probe.get("world_size"), wanted=key, known=known)
        for c in [*known, *found]:
            if c.detail.startswith(("not itemised", "also not itemised")):
                settle = c.detail.split("; settle: ", 1)
                unexplained.append(Unexplained(
                    c.component, f"{c.item} {show_value(c.old)} -> {show_value(c.new)}",
                    settle[1] if len(settle) > 1 else c.detail))
            else:
                causes.append(c)
    return Explanation(entry.key, key or "(unknown)", same and not causes,
                       tuple(sorted(_unique(causes), key=_rank)), tuple(unexplained))


# --- logs ----------------------------------------------------------------------------------

def explain_logs(old: Any, new: Any, old_ref: str, new_ref: str,
                 code_causes: Callable[[str, str], list[Cause]] | None = None
                 ) -> Explanation:
    """Two logged starts (``read.logs.StartLog``). Config fields come from each start's engine
    config line and its ``non-default args:`` line (which also names ``additional_config``);
    ``code_causes(old_dir, new_dir)``, when given, itemises a code change from the cache
    entries the logs name (their pickled sources)."""
    from vllm_cache_tools.analyze.log_summary import compare_starts
    from vllm_cache_tools.read.logs import env_value

    cmp = compare_starts(old, new, old_ref, new_ref)
    causes: list[Cause] = []
    unexplained: list[Unexplained] = []
    ev = "vLLM log"
    same = True
    for s in cmp.slots:
        changed = set(s.changed_components)
        same_dir = (s.old_cache_dir == s.new_cache_dir and s.old_cache_dir is not None) or (
            s.old_aot == s.new_aot and s.old_aot is not None)
        same = same and not changed and same_dir
        if not s.hashes and not same_dir:
            # Different entries and no factor hashes on one side: nothing here can say why.
            hits = [r for r, o in (("old", s.old_outcome), ("new", s.new_outcome))
                    if o == "hit"]
            unexplained.append(
                Unexplained("key", f"the {hits[0]} start loaded its entry from the cache: "
                            "vLLM logs the key factors only when it compiles",
                            "the log of the start that compiled that entry, or the two "
                            "entries (explain A B)") if hits else
                Unexplained("key", "the key factor hashes are not in both logs",
                            "DEBUG logs (VLLM_LOGGING_LEVEL=DEBUG) of vLLM >= 0.14"))
        for e in s.env_changes:
            causes.append(Cause("env", e.name, None if e.old is None else env_value(e.old),
                                None if e.new is None else env_value(e.new),
                                ev + " (Compile env factors)",
                                hardware_detail("env", e.name) or ""))
        for f in s.traced_added:
            causes.append(Cause("code", f, "not traced", "traced", ev + " (Traced files)"))
        for f in s.traced_removed:
            causes.append(Cause("code", f, "traced", "not traced", ev + " (Traced files)"))
        if "code" in changed and not s.traced_added and not s.traced_removed:
            found = (code_causes(s.old_cache_dir, s.new_cache_dir)
                     if code_causes and s.old_cache_dir and s.new_cache_dir else [])
            causes += found
            if not found:
                unexplained.append(Unexplained(
                    "code", "code hash changed with the same traced files: a traced file's "
                    "content changed", "the cache entries the logs name (explain A B)"))
        if s.old_aot and s.new_aot and s.old_aot != s.new_aot and code_causes:
            causes += [c for c in code_causes(s.old_aot, s.new_aot)
                       if c.item.endswith("first line")]
        if "compiler" in changed:
            unexplained.append(Unexplained("compiler", "compiler hash changed",
                                           "a recorder manifest or predict on one side"))
        if "env" in changed and not s.env_changes:
            unexplained.append(Unexplained("env", "env hash changed; raw env factors not "
                                           "in both logs", "DEBUG logs of vLLM >= 0.14"))
        if "config" in changed:
            found = []
            if old.engine_config is not None and new.engine_config is not None:
                found = config_line_causes(parse_engine_config(old.engine_config),
                                           parse_engine_config(new.engine_config),
                                           ev + " (engine config line)")
            named = {c.item for c in found}
            found += [c for c in args_causes(old.args, new.args, ev + " (non-default args)")
                      if c.item not in named]
            causes += found
            if not found:
                unexplained.append(Unexplained(
                    "config", "config hash changed; the logged engine config and arguments "
                    "are equal", "a recorder manifest (the field is in neither of vLLM's "
                    "config lines)"))
    causes = sorted(_unique(causes), key=_rank)
    notes = list(cmp.notes)
    for _, f in new.functions:
        if f.load_failure is not None:
            notes.append(f"the new start found the AOT artifact {f.load_failure.path} but could "
                         f"not load it ({f.load_failure.reason}); it compiled again and "
                         "overwrote it in the same folder (same AOT key)")
    return Explanation(old_ref, new_ref, same and not causes, tuple(causes),
                       tuple(dict.fromkeys(unexplained)), tuple(notes))


def _unique(causes: Iterable[Cause]) -> list[Cause]:
    """Causes without repeats (ranks repeat them; values may be lists or dicts), a config
    field the platform set from the machine marked so (:func:`.hardware.machine_set_config`)."""
    seen: dict[str, Cause] = {}
    for c in causes:
        seen.setdefault(repr((c.component, c.item, c.old, c.new, c.evidence)), c)
    return machine_set_config(list(seen.values()))


def same_start_backends(events: Iterable[LedgerEvent], aot_key: str) -> set[str]:
    """Keys of the backend entries that the starts which used AOT entry ``aot_key`` used too,
    from the recorder's ledger (a start: one host and start id, or one process where the
    recorder wrote no start id; events with neither are no evidence)."""
    evs = list(events)
    starts = {start_of(e) for e in evs if e.tree == "aot" and e.key == aot_key} - {None}
    return {e.key for e in evs if e.tree == "backend" and start_of(e) in starts}


class MixedTrees(VctError, ValueError):
    """``explain`` of a backend entry and an AOT entry: their keys hash different factors, so
    no cause list can say why one is not the other (it printed no headline, exit 1)."""


def mixed_trees_message(a: Entry, b: Entry, events: Iterable[LedgerEvent] = ()) -> str:
    """One line for :class:`MixedTrees`: which side is which, and, when the recorder's ledger
    pairs the AOT side with its start's backend entry, the comparison that would answer."""
    back, aot = (a, b) if a.layout == "backend" else (b, a)
    msg = (f"{short_key(a.key)} is {'a backend' if a is back else 'an AOT'} entry and "
           f"{short_key(b.key)} {'a backend' if b is back else 'an AOT'} entry: explain "
           "compares two entries of one tree (two backend keys, or two AOT keys)")
    sibling = sorted(same_start_backends(events, aot.key) - {back.key})
    if len(sibling) == 1:
        pair = (back.key, sibling[0]) if a is back else (sibling[0], back.key)
        msg += (f"; the backend entry of {short_key(aot.key)}'s start is {sibling[0]} "
                f"(recorder ledger): vllm-cache explain {pair[0]} {pair[1]}")
    return msg


_NOT_STORED = "env and config are not stored in the AOT tree"


def with_backend_siblings(x: Explanation, siblings: tuple[Sequence[Entry], Sequence[Entry]],
                          others: Iterable[Entry] = (), proof: str = "recorder ledger",
                          root_arg: str = "") -> Explanation:
    """An explanation of two AOT entries (whose tree stores no env or config) completed by
    their backend siblings: with exactly one on each side (deep reads), their env and config
    causes, as ``explain`` of the two backend entries names them; else what would settle it
    names the candidates and the command that compares them (``root_arg``: its ``--root``
    option, if any)."""
    sa, sb = siblings
    if len(sa) == 1 and len(sb) == 1 and sa[0].key != sb[0].key:
        bx = explain_entries(sa[0], sb[0], others)
        if any(u.component == "all" for u in bx.unexplained):
            return x  # a sibling's factors could not be read: they settle nothing
        moved = [c for c in bx.causes if c.component in ("env", "config")]
        gaps = [u for u in bx.unexplained if u.component in ("env", "config")]
        unexplained = [u for u in x.unexplained if u.component != "env/config"]
        # Equal env and config leave the change unexplained only where nothing else (the
        # compiler, the code) explains it; beside such a cause they confirm it is the one.
        if not moved and not gaps and not x.causes:
            unexplained += [Unexplained(
                "env/config", f"the backend entries of the same starts ({sa[0].key} -> "
                f"{sb[0].key}) have equal env and config", "the starts' logs")]
        notes = [n for n in x.notes if not n.startswith(_NOT_STORED)]
        notes.append(f"env and config from the backend entries of the same starts, "
                     f"{sa[0].key} -> {sb[0].key} ({proof})")
        return Explanation(x.old, x.new, x.same_key,
                           tuple(sorted(_unique([*x.causes, *moved]), key=_rank)),
                           tuple([*unexplained, *gaps]), tuple(notes))
    keys = sorted({e.key for e in (*sa, *sb)})
    if not keys:
        return x
    pair = ((sa[0].key, sb[0].key) if len(sa) == 1 == len(sb) else
            (keys[0], keys[1]) if len(keys) == 2 else ("OLD", "NEW"))
    cmd = f"vllm-cache explain {pair[0]} {pair[1]}{root_arg}"
    which = "" if len(sa) == 1 == len(sb) else ", which start each is from is not recorded"
    here = (f"the backend entries of both starts (here, by the {proof}: {', '.join(keys)}"
            f"{which}; compare them: {cmd})")
    return Explanation(x.old, x.new, x.same_key, x.causes, tuple(
        Unexplained(u.component, u.detail, here + ", their logs, or the recorder's manifests")
        if u.component == "env/config" else u for u in x.unexplained), x.notes)


def explain(a: str | os.PathLike[str], b: str | os.PathLike[str],
            root: str | os.PathLike[str] | None = None) -> Explanation:
    """Why vLLM compiled entry ``b`` instead of reusing entry ``a`` (either tree; keys,
    unique key prefixes looked up under ``root`` (default: resolved like vLLM), or entry
    folders, possibly of two roots). Both are read whole; the AOT entries of their roots are
    the evidence for code changes. Raises ``EntryNotFound``, ``AmbiguousKey`` or
    ``RootError`` (:mod:`vllm_cache_tools.store.scan`), :class:`MixedTrees` for one entry
    of each tree. What ``vllm-cache explain A B`` prints,
    as data (values unredacted: the CLI hides secrets when it renders)."""
    # The one function here that reads the store: the rest stays pure.
    from vllm_cache_tools.read.manifest import read_ledger
    from vllm_cache_tools.store.entries import read_entry
    from vllm_cache_tools.store.locate import display_path
    from vllm_cache_tools.store.lookup import locate_entry
    from vllm_cache_tools.store.scan import RootError, scan

    pa, pb = locate_entry(os.fspath(a), root), locate_entry(os.fspath(b), root)
    ea, eb = read_entry(pa), read_entry(pb)
    if ea.layout != eb.layout:
        aot_path = pa if ea.layout == "aot" else pb
        raise MixedTrees(mixed_trees_message(ea, eb, read_ledger(aot_path.parent.parent)[0]))
    others = []
    backends: dict[Path, list[Path]] = {}
    # Each side's own root: an entry of another root needs its own AOT sibling to itemise a
    # code change.
    roots = dict.fromkeys(p.parent if e.layout == "backend" else p.parent.parent
                          for p, e in ((pa, ea), (pb, eb)))
    for r in roots:
        try:
            found = scan(r, check_in_use=False).entries
        except RootError:
            continue
        others += [read_entry(e.path) for e in found
                   if e.layout == "aot" and e.path not in (ea.path, eb.path)]
        backends[r] = [e.path for e in found if e.layout == "backend"]
    x = explain_entries(ea, eb, others)
    if ea.layout == eb.layout == "aot" and not x.same_key and \
            not any(c.component in ("env", "config") for c in x.causes):
        # The AOT tree stores no env or config; the backend entries of the same starts do.
        sides = []
        for p in (pa, pb):
            cc = p.parent.parent
            events, _ = read_ledger(cc)
            keys = same_start_backends(events, p.name)
            sides.append([read_entry(q) for q in backends.get(cc, []) if q.name in keys])
        proof = "recorder ledger"
        if not sides[0] and not sides[1]:
            # No ledger: the backend entries whose code hash the AOT entries' sources
            # reproduce (several when both starts traced the same sources).
            proof = "traced sources they share"
            deep = [read_entry(q) for cc in dict.fromkeys((pa.parent.parent, pb.parent.parent))
                    for q in backends.get(cc, [])[:MAX_SIBLING_READS]]
            sides = [[d for d in deep if e.key in linked_aot_entries(d, [e])]
                     for e in (ea, eb)]
        x = with_backend_siblings(x, (sides[0], sides[1]), others, proof,
                                  f" --root {display_path(pa.parents[2])}")
    return x


MAX_SIBLING_READS = 64
"""Backend entries read per root to find an AOT entry's siblings by their traced sources."""
