"""One cause engine for every verb that decides whether a start will reuse an entry:
``predict``, ``pull --if-hit``, ``unpack --check``, ``warm`` and ``explain --against-current``.

A miss is explained against the closest existing entry (a :class:`Neighbour`: one of the
root's entries, or one a bundle or store carries), item by item, the way ``explain`` names the
difference between two entries:

* with a recorder manifest of that entry, the env variable, the sub-config field, the
  Inductor option or the traced file, old -> new (the manifest's values are redacted by the
  recorder; this start's by the probe);
* without one, what the entry's own files reveal (its env factors, its rank folders, the
  versions and forward position in its AOT artifact, its traced files' paths and copies)
  against this start's full key parts from the probe;
* what neither can itemise stays a cause with both hashes, saying so and naming what would
  settle it.

So a miss never comes with an empty cause list (a cold root says it is one). Pure functions
over records."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vllm_cache_tools.analyze.explain_causes import env_causes
from vllm_cache_tools.analyze.manifest_diff import config_field_causes, inductor_causes
from vllm_cache_tools.keys.hardware import machine_set_config
from vllm_cache_tools.layout import short_key
from vllm_cache_tools.store.types import Cause, Entry, KeyParts

SETTLE_CONFIG = ("start vLLM with the recorder on (VLLM_CACHE_TOOLS_RECORD=1) so the entry's "
                 "manifest names the field, or compare the two starts' DEBUG logs: "
                 "vllm-cache explain --logs OLD.log NEW.log")
SETTLE_COMPILER = ("a recorder manifest of the entry (VLLM_CACHE_TOOLS_RECORD=1) lists every "
                   "Inductor/functorch option it was built with")
SETTLE_CODE = ("after this start, vllm-cache explain OLD NEW compares the two entries' "
               "compile-time sources")
SETTLE_ENV = ("the backend entry of the same start (its cache_key_factors.json: vllm-cache "
              "explain OLD NEW) or a recorder manifest")
_HINT_SKIP = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TORCHINDUCTOR_COMPILE_THREADS")


@dataclass(frozen=True)
class Neighbour:
    """What is known of one existing entry that a start could have reused."""

    key: str
    layout: str
    """``backend`` or ``aot``."""
    evidence: str
    """Where its facts come from, as causes cite it (``backend entry 2aa46c5209``)."""
    key_parts: Mapping[str, str | None] = field(default_factory=dict, hash=False)
    """``env_hash``, ``config_hash``, ``code_hash``, ``compiler_hash``: those known."""
    env: Mapping[str, object] | None = field(default=None, hash=False)
    """The env factors vLLM hashed (``cache_key_factors.json``, else the manifest's)."""
    manifest: Mapping[str, Any] | None = field(default=None, hash=False)
    """The newest recorder manifest's data (``config``, ``inductor``, ``env``,
    ``traced_files``), or None."""
    ranks: tuple[str, ...] = ()
    versions: Mapping[str, str | None] = field(default_factory=dict, hash=False)
    forward: tuple[str, int] | None = None
    traced: Mapping[str, str | None] = field(default_factory=dict, hash=False)
    """Traced file path -> sha256 of its compile-time content (None: not known)."""
    modified: float = 0.0
    traced_complete: bool = False
    """``traced`` is the whole traced set (a recorder manifest's list, an AOT artifact's
    sources), not only the files a graph's comments name: files missing from it were not
    traced."""


def neighbour_of_entry(e: Entry, evidence: str | None = None) -> Neighbour:
    """A root's entry (a deep read: its manifests and traced files are read)."""
    f = e.factors
    m = e.manifests[-1] if e.manifests else None
    data = m.data if m is not None else None
    parts: dict[str, str | None] = {}
    if f is not None:
        parts = {"env_hash": f.env_hash, "config_hash": f.config_hash,
                 "code_hash": f.code_hash, "compiler_hash": f.compiler_hash}
    elif data is not None:
        parts = manifest_key_parts(data)
    env = dict(f.env) if f is not None and f.env is not None else (
        dict(data.get("env") or {}) if data is not None and data.get("env") else None)
    info = e.aot_info
    traced: dict[str, str | None] = {}
    for p in e.prefix_dirs:
        if p.graph is not None:
            traced.update(dict.fromkeys(p.graph.files))
    traced.update(manifest_traced(data))
    versions = {"vllm": e.vllm_version, "torch": e.torch_version}
    forward = (info.qualname, info.firstlineno) if info is not None and info.qualname \
        and info.firstlineno is not None else None
    return Neighbour(e.key, e.layout, evidence or f"{e.layout} entry {short_key(e.key)}",
                     parts, env, data, tuple(e.ranks), versions, forward,
                     {p: d for p, d in traced.items() if p.startswith("/")},
                     e.modified or 0.0, bool(manifest_traced(data)))


def key_parts_of_entry(e: Entry) -> KeyParts:
    """An entry as the "now" side (``warm``: the entry vLLM just wrote, against those it did
    not reuse): its stored factors and its newest manifest's config, Inductor factors and
    traced files."""
    n = neighbour_of_entry(e)
    m = n.manifest or {}
    info = e.aot_info
    return KeyParts(
        vllm_version=e.vllm_version, torch_version=e.torch_version,
        env_factors=n.env, env_hash=n.key_parts.get("env_hash"),
        config_hash=n.key_parts.get("config_hash"),
        config_parts=m.get("config") if isinstance(m.get("config"), Mapping) else None,
        file_digests={p: d for p, d in n.traced.items() if d is not None},
        code_hash=n.key_parts.get("code_hash"), compiler_hash=n.key_parts.get("compiler_hash"),
        compiler_factors=m.get("inductor") if isinstance(m.get("inductor"), Mapping) else None,
        backend_key=e.key if e.layout == "backend" else None,
        aot_key=e.key if e.layout == "aot" else None,
        model_key_inputs=(e.vllm_version or "", info.qualname, info.firstlineno)
        if info is not None and info.qualname and info.firstlineno is not None else None)


def manifest_key_parts(data: Mapping[str, Any]) -> dict[str, str | None]:
    """The key parts a manifest records (an AOT manifest: env and config hashes)."""
    raw = data.get("key_parts")
    kp: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    out: dict[str, str | None] = {
        k: v for k, v in kp.items()
        if k in ("env_hash", "config_hash", "code_hash", "compiler_hash") and isinstance(v, str)}
    if "config_hash" not in out and isinstance(data.get("config_hash"), str):
        out["config_hash"] = data["config_hash"]
    return out


def manifest_traced(data: Mapping[str, Any] | None) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for f in (data or {}).get("traced_files") or []:
        if isinstance(f, Mapping) and isinstance(f.get("path"), str):
            sha = f.get("sha256")
            out[f["path"]] = sha if isinstance(sha, str) else None
    return out


def _score(n: Neighbour, now: KeyParts) -> tuple[int, int, int, float]:
    """Key parts equal, then fewest sub-configs of another hash (a manifest), then a
    manifest at all, then the newest: the entry fewest fields away."""
    kp = n.key_parts
    same = sum(1 for k, v in (("env_hash", now.env_hash), ("config_hash", now.config_hash),
                              ("code_hash", now.code_hash),
                              ("compiler_hash", now.compiler_hash))
               if v is not None and kp.get(k) == v)
    cfg = (n.manifest or {}).get("config")
    subs = -UNKNOWN_SUBS  # no manifest: how far its sub-configs are is unknown
    if isinstance(cfg, Mapping) and now.config_parts:
        subs = -sum(1 for name in set(cfg) | set(now.config_parts)
                    if _part_hash(cfg.get(name)) != _part_hash(now.config_parts.get(name)))
    return same, subs, int(n.manifest is not None), n.modified


UNKNOWN_SUBS = 1 << 20


def _part_hash(part: object) -> object:
    return part.get("hash") if isinstance(part, Mapping) else None


def closest(neighbours: Iterable[Neighbour], now: KeyParts,
            layout: str | None = None) -> Neighbour | None:
    """The entry sharing most key parts with this start (backend entries first: they store
    every part; ``layout``: of that tree only), then fewest fields away, then the newest."""
    ns = [n for n in neighbours if layout is None or n.layout == layout]
    pool = [n for n in ns if n.layout == "backend" and n.key_parts] or ns
    return max(pool, key=lambda n: _score(n, now), default=None)


def miss_causes(neighbours: Sequence[Neighbour], now: KeyParts, *,
                world_size: int | None = None, rank_dir: str | None = None,
                process_env: Mapping[str, str] | None = None,
                wanted: str | None = None, known: Sequence[Cause] = ()) -> list[Cause]:
    """Why this start (``now``: its key parts from the probe) does not reuse any of
    ``neighbours``, against the closest one; never empty. ``wanted``: the key the start
    will look up, when known (a neighbour at that key that lacks this rank says so).
    ``known``: causes the caller found already (the AOT tree's source check): a component
    they itemise gets no "not itemised" cause here."""
    n = closest(neighbours, now)
    if n is None:
        return [Cause("cache", "entries", "none", None, "the cache root",
                      "no entry to reuse (a cold root): the first start compiles")]
    out: list[Cause] = []
    ev = n.evidence
    mev = f"{ev}: recorder manifest vs this start"
    if n.key == wanted and rank_dir and n.ranks and rank_dir not in n.ranks:
        out.append(Cause("rank", rank_dir, "absent", "needed", ev,
                         f"the entry holds {', '.join(n.ranks)} only"))
    out += _env(n, now, ev, mev)
    out += _config(n, now, ev, mev, world_size)
    out += _compiler(n, now, ev, mev, process_env or {})
    out += _code(n, now, ev)
    out += _aot_only(n, now, ev)
    a = closest(neighbours, now, "aot") if n.layout == "backend" else None
    if a is not None:  # what the AOT artifact records (versions, the forward's position)
        out += [c for c in _aot_only(a, now, a.evidence) if not c.detail.startswith(
            "not itemised")]
    itemised = {c.component for c in known}
    named = {(c.component, c.item) for c in known}
    out = [c for c in out if (c.component, c.item) not in named and not (
        c.component in itemised and c.detail.startswith("not itemised"))]
    if not out and not known:
        out.append(_same_parts(n, now, ev, wanted))
    return machine_set_config(
        list({(c.component, c.item, repr(c.old), repr(c.new)): c for c in out}.values()))


def _differs(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and a != b


def _env(n: Neighbour, now: KeyParts, ev: str, mev: str) -> list[Cause]:
    old = n.key_parts.get("env_hash")
    if not _differs(old, now.env_hash) and not (old is None and n.env is not None):
        return []
    if n.env is not None and now.env_factors is not None:
        found = env_causes(dict(n.env), dict(now.env_factors),
                           ev if n.manifest is None or n.layout == "backend" else mev)
        if found or old is None:
            return found
    if old is None:
        return []
    return [Cause("env", "env_hash", old, now.env_hash, ev,
                  "not itemised: this entry's env factors are not recorded here; settle: "
                  + SETTLE_ENV)]


def _config(n: Neighbour, now: KeyParts, ev: str, mev: str,
            world_size: int | None) -> list[Cause]:
    old = n.key_parts.get("config_hash")
    if not _differs(old, now.config_hash):
        return []
    m = n.manifest
    found = config_field_causes(m.get("config") if m else None, now.config_parts, mev)
    if found:
        return found
    # What the entry's own files reveal of the config: one rank folder per worker.
    revealed: list[Cause] = []
    ranks = {r for r in n.ranks if r.startswith("rank_")}
    if world_size is not None and ranks and len(ranks) != world_size:
        revealed.append(Cause("config", "parallel_config.world_size", len(ranks), world_size,
                              f"{ev}: its rank folders vs this start",
                              "tensor x pipeline parallel size differs"))
    why = ("its recorder manifest names no differing field" if m else
           "the entry stores only the config hash (no recorder manifest)")
    return [*revealed, Cause("config", "config_hash", old, now.config_hash, ev,
                             ("also " if revealed else "") + f"not itemised: {why}; settle: "
                             + SETTLE_CONFIG)]


def _compiler(n: Neighbour, now: KeyParts, ev: str, mev: str,
              process_env: Mapping[str, str]) -> list[Cause]:
    old = n.key_parts.get("compiler_hash")
    if not _differs(old, now.compiler_hash):
        return []
    m = n.manifest
    # The backend hashed inside torch's aot_compile functorch patch; the live factors are not.
    found = inductor_causes(m.get("inductor") if m else None, now.compiler_factors, mev,
                            without_functorch=n.layout == "backend")
    for item, x, y in (("torch", n.versions.get("torch"), now.torch_version),):
        if x and y and x != y and not any(c.item == item for c in found):
            found.append(Cause("compiler", item, x, y, ev))
    if found:
        return found
    hints = [f"{k}={v}" for k, v in sorted(process_env.items())
             if k.startswith(("TORCHINDUCTOR_", "TORCH_COMPILE_", "TRITON_"))
             and k not in _HINT_SKIP]
    detail = ("not itemised: torch/triton/device or an Inductor/functorch option differs"
              + (f"; set in this environment: {', '.join(hints)}" if hints else "")
              + "; settle: " + SETTLE_COMPILER)
    return [Cause("compiler", "compiler_hash", old, now.compiler_hash, ev, detail)]


def _code(n: Neighbour, now: KeyParts, ev: str) -> list[Cause]:
    old = n.key_parts.get("code_hash")
    if not _differs(old, now.code_hash):
        return []
    theirs, mine = dict(n.traced), dict(now.file_digests)
    found: list[Cause] = []
    if theirs and mine:
        # A graph's "# File:" comments name only the files with ops in it: a file missing
        # from such a list says nothing.
        paths = set(theirs) | set(mine) if n.traced_complete else set(theirs) & set(mine)
        for p in sorted(paths):
            if p not in mine:
                found.append(Cause("code", p, "traced", "not traced", ev,
                                   "the traced file set or its paths differ (another install "
                                   "prefix?)"))
            elif p not in theirs:
                found.append(Cause("code", p, "not traced", "traced", ev,
                                   "the traced file set or its paths differ (another install "
                                   "prefix?)"))
            elif theirs[p] is not None and theirs[p] != mine[p]:
                found.append(Cause("code", p, f"sha256 {str(theirs[p])[:12]}",
                                   f"sha256 {mine[p][:12]}", ev,
                                   "the file changed since the entry was compiled"))
    if found:
        return found
    why = ("its traced files' contents are not recorded (no recorder manifest)"
           if theirs and not any(theirs.values()) else
           "the traced files are equal by what is recorded" if theirs else
           "the entry does not say which files it traced")
    return [Cause("code", "code_hash", old, now.code_hash, ev,
                  f"not itemised: a traced file's path or content differs; {why}; settle: "
                  + SETTLE_CODE)]


def _aot_only(n: Neighbour, now: KeyParts, ev: str) -> list[Cause]:
    """An AOT entry (its tree stores no env, config or compiler hash): what its artifact
    records, and what stays unknown."""
    if n.layout != "aot":
        return []
    out: list[Cause] = []
    if n.versions.get("vllm") and now.vllm_version and n.versions["vllm"] != now.vllm_version:
        out.append(Cause("vllm", "version", n.versions["vllm"], now.vllm_version, ev))
    if n.versions.get("torch") and now.torch_version and \
            n.versions["torch"] != now.torch_version:
        out.append(Cause("compiler", "torch", n.versions["torch"], now.torch_version, ev))
    mk = now.model_key_inputs
    if n.forward and mk and (n.forward[0], n.forward[1]) != (mk[1], mk[2]):
        out.append(Cause("code", f"{mk[1]} first line" if n.forward[0] == mk[1] else
                         "compiled forward", n.forward[1] if n.forward[0] == mk[1]
                         else n.forward[0], mk[2] if n.forward[0] == mk[1] else mk[1], ev,
                         "forward moved: part of the AOT key (a new AOT folder)"))
    if not out and n.key != now.aot_key and not n.key_parts:
        out.append(Cause("env/config", "aot key", short_key(n.key),
                         short_key(now.aot_key or "?"), ev,
                         "not itemised: the AOT key hashes env and config, which the AOT tree "
                         "does not store; settle: " + SETTLE_ENV))
    return out


def _same_parts(n: Neighbour, now: KeyParts, ev: str, wanted: str | None) -> Cause:
    """Every known part equal, yet no entry at the key: it was removed or never written."""
    if wanted is not None and n.key != wanted:
        return Cause("cache", "entry", "absent", short_key(wanted), ev,
                     f"{short_key(n.key)} has the same key parts as far as recorded, but no "
                     f"entry is at {short_key(wanted)} (removed by prune or rm, or never "
                     "written)")
    return Cause("cache", "entry", short_key(n.key), "not loadable", ev,
                 "the entry at this key holds nothing vLLM can load (see the tree details); "
                 "vLLM compiles again")


__all__ = ["Neighbour", "closest", "key_parts_of_entry", "manifest_key_parts",
           "manifest_traced", "miss_causes", "neighbour_of_entry"]
