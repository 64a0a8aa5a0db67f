"""``vllm-cache drift``: what splits one model's cache across a fleet's starts.

For each model, every factor the recorder wrote down (env variables, config fields, Inductor
options, traced-file locations and contents, versions, hardware, the host) that takes more than
one value across its starts; how many entries each one split the cache into; whether it is per
host (IPs, host names, devices), per run (ids, ports, seeds, timestamps) or per install (paths,
versions), with the concrete fix; ranked by the bytes and compile seconds it wasted.

Starts come from the ledgers (one per start id, else per process, with the manifests their
events name; the lowest rank's manifest of each tree describes the start); manifests no event
names are starts of their own (their first writer). Without ledgers, each manifest's first
writer is a start (``basis == "manifests"``): a later start that recorded the very same
factors shares that manifest and is not counted.

Whether a factor is in vLLM's key is taken from what the recorder proves, never guessed from
names: env variables outside vLLM's env factors (the recorder keeps every ``VLLM_*`` variable
of the process, declared or not) and the host name are outside it; a config field that changed
while its sub-config's hash did not is outside it; a factor whose values shared an entry is
outside that tree's key. Such a factor splits nothing (``entries`` 1, ``in_key`` false): it is
listed because a difference vLLM cannot see is what ``audit`` calls a possible false hit.

A factor in the key with k values forces at least k entries: ``entries`` is that number (k,
or fewer when the ledgers show fewer entries). Its waste is what the starts with any other than
its most common value cost: the entries only they used (bytes) and their compile seconds. A
start that differs in two such factors is counted in both.

Memory is bounded (issue 23): the ledgers are read into starts a part at a time when they
hold more than :data:`~.drift_starts.MAX_STARTS` starts (partitioned by start on disk,
:class:`~vllm_cache_tools.read.ledger_spill.Spill`: exact); only manifests present in the
source are remembered as named; starts that recorded the same manifests share one copy of
their factors. At most :data:`MAX_ROWS` starts are compared (the first read; the others are
counted and said to be left out) and each factor lists its :data:`MAX_VALUES` most common
values (the rest summed up as ``<N other values>``). Every limit reached is one line in
``caps``."""

from __future__ import annotations

import ipaddress
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vllm_cache_tools import redaction
from vllm_cache_tools.analyze.drift_starts import (
    Start,
    starts_from_ledgers,
    starts_from_manifests,
)
from vllm_cache_tools.analyze.inputs import Inputs, gather
from vllm_cache_tools.layout import RUNTIME_FIELDS
from vllm_cache_tools.read.manifest import Manifest
from vllm_cache_tools.store.entries import checkpoint_of

UNSET = "<unset>"
MAX_VALUE_CHARS = 160
PROCESS_ENV_FIELD = "process_env"
"""Manifest field (recorder): every ``VLLM_*`` variable of the process, redacted."""
UNHASHED_FIELDS_FIELD = "unhashed_fields"
"""Manifest field (recorder): per sub-config, the fields its ``compute_hash`` leaves out."""

PER_HOST, PER_RUN, PER_INSTALL, SETTING = "per host", "per run", "per install", "setting"

MAX_ROWS = 50_000
"""Starts with a manifest compared (every factor is judged over every start: time grows with
both); past it starts are counted, not compared, and the report says how many."""
MAX_VALUES = 1_000
"""Values listed per factor (most common first); the rest as one ``<N other values>``."""


@dataclass(frozen=True)
class Factor:
    """One factor that took more than one value across a model's starts."""

    component: str
    """``env``, ``config``, ``inductor``, ``functorch``, ``hardware``, ``versions``,
    ``traced_files``, ``traced_file``, ``code`` or ``host``."""
    item: str
    """The variable, ``<sub_config>.<field>``, option, package or path."""
    values: Mapping[str, int] = field(hash=False)
    """Value (as shown, secrets redacted; ``<unset>`` when absent) -> starts with it."""
    entries: int
    """Entries this factor alone forces (1: it splits nothing)."""
    entries_by_tree: Mapping[str, int] = field(hash=False)
    in_key: bool
    kind: str
    """``per host``, ``per run``, ``per install`` or ``setting``."""
    fix: str
    wasted_bytes: int
    wasted_seconds: float
    wasted_starts: int
    """Starts with another value than the most common one (the ones that paid)."""


@dataclass(frozen=True)
class ModelDrift:
    model: str
    starts: int
    entries: int
    """Distinct entries (both trees) its starts used."""
    size_bytes: int
    """Of those entries still in the source."""
    factors: tuple[Factor, ...]


@dataclass(frozen=True)
class DriftReport:
    source: str
    kind: str
    basis: str
    """``ledger`` (starts from the ledgers) or ``manifests`` (each manifest's first writer)."""
    models: tuple[ModelDrift, ...]
    problems: tuple[str, ...]
    caps: tuple[str, ...] = ()
    """One line per limit reached (ledgers read in parts, starts not compared, values
    summed up), so nothing is cut without saying so."""


# ---- factors of one start -------------------------------------------------------------------

def _show(name: str, value: Any) -> str:
    v = redaction.redact_value(name, value)
    text = v if isinstance(v, str) else json.dumps(v, sort_keys=True, default=repr)
    return text if len(text) <= MAX_VALUE_CHARS else text[:MAX_VALUE_CHARS - 3] + "..."


def _location(paths: Sequence[str]) -> str | None:
    """Where the traced files live: their common folder up to ``site-packages`` (or
    ``dist-packages``) when they are installed there, else their common folder."""
    if not paths:
        return None
    for marker in ("/site-packages/", "/dist-packages/"):
        cut = {p[:p.index(marker) + len(marker) - 1] for p in paths if marker in p}
        if len(cut) == 1:
            return cut.pop()
    try:
        return os.path.commonpath(list(paths))
    except ValueError:
        return None


Key = tuple[str, str]
"""(component, item)"""


def _flatten(ms: Sequence[Manifest]) -> tuple[dict[Key, str], dict[str, str | None],
                                              set[Key], set[str]]:
    """(factor -> shown value, sub-config -> its hash, factors known to be outside vLLM's key,
    components recorded) of one start, from its manifests (one per tree; the AOT one's values
    win: a warm start has only that one, and the backend's is written after compiling)."""
    out: dict[Key, str] = {}
    hashes: dict[str, str | None] = {}
    outside: set[Key] = set()
    recorded: set[str] = {"host"}
    for m in sorted(ms, key=lambda m: m.tree != "backend"):
        d = m.data
        recorded |= {"config", "env", "versions"}
        for name, part in (m.config or {}).items():
            if not isinstance(part, Mapping):
                continue
            hashes[name] = part.get("hash") if isinstance(part.get("hash"), str) else None
            fields = part.get("fields")
            if isinstance(fields, Mapping):
                for k, v in fields.items():
                    item = f"{name}.{k}"
                    if item not in RUNTIME_FIELDS and not item.endswith(".rank"):
                        out["config", item] = _show(str(k), v)
        unhashed = d.get(UNHASHED_FIELDS_FIELD)
        if isinstance(unhashed, Mapping):
            for name, fields in unhashed.items():
                if isinstance(fields, list):
                    outside |= {("config", f"{name}.{f}") for f in fields if isinstance(f, str)}
        env = m.env
        for k, v in env.items():
            out["env", str(k)] = _show(str(k), v)
        proc = d.get(PROCESS_ENV_FIELD)
        if isinstance(proc, Mapping):
            for k, v in proc.items():
                if str(k) not in env:
                    out["env", str(k)] = _show(str(k), v)
                    outside.add(("env", str(k)))
        versions = d.get("versions")
        if isinstance(versions, Mapping):
            for k, v in versions.items():
                out["versions", str(k)] = _show(str(k), v)
        ind = m.inductor or {}
        for comp, part in (("inductor", "inductor_config"), ("functorch", "functorch_config")):
            opts = ind.get(part)
            if isinstance(opts, Mapping):
                recorded.add(comp)
                for k, v in opts.items():
                    out[comp, str(k)] = _show(str(k), v)
        if ind.get("system") is not None:
            recorded.add("hardware")
            out["hardware", "inductor system"] = _show("system", ind.get("system"))
        if ind.get("torch_key") is not None:
            out["versions", "torch build (torch_key)"] = _show("torch_key", ind["torch_key"])
        fwd = d.get("forward")
        if isinstance(fwd, Mapping):
            recorded.add("code")
            for k in ("qualname", "firstlineno", "file"):
                if fwd.get(k) is not None:
                    out["code", f"forward.{k}"] = _show(k, fwd.get(k))
        traced = [f for f in d.get("traced_files") or [] if isinstance(f, Mapping)
                  and isinstance(f.get("path"), str)]
        where = _location([f["path"] for f in traced])
        if where is not None:
            recorded |= {"traced_files", "traced_file"}
            out["traced_files", "location"] = _show("location", where)
            for f in traced:
                rel = f["path"][len(where):].lstrip("/") if f["path"].startswith(where) \
                    else f["path"]
                out["traced_file", rel] = _show("sha256", (f.get("sha256") or "?")[:12])
    return out, hashes, outside, recorded


# ---- classes and fixes ----------------------------------------------------------------------

_HOST_WORDS = frozenset({"host", "hostname", "ip", "addr", "address", "node", "nic", "ifname",
                         "interface", "numa", "bind", "device", "devices", "visible", "pod",
                         "gpu", "cpus"})
_RUN_WORDS = frozenset({"id", "ids", "uuid", "run", "job", "session", "port", "seed", "time",
                        "timestamp", "stamp", "index", "indices", "bundle", "worker", "pid",
                        "nonce", "instance", "replica", "engine", "rank"})
_INSTALL_WORDS = frozenset({"path", "dir", "home", "root", "prefix", "venv", "version"})
_HEX_ID = re.compile(r"^[0-9a-fA-F-]{16,}$")


def _is_ip(v: str) -> bool:
    try:
        ipaddress.ip_address(v.strip('"'))
        return True
    except ValueError:
        return False


def kind_of(component: str, item: str, values: Sequence[str], starts: int) -> str:
    """Per host, per run, per install or a setting, from what the factor is, its name and its
    values (the first rule that applies)."""
    if component in ("host", "hardware"):
        return PER_HOST
    if component in ("versions", "traced_files", "traced_file") or item == "forward.file":
        return PER_INSTALL
    real = [v for v in values if v != UNSET]
    if real and all(_is_ip(v) for v in real):
        return PER_HOST
    if real and all(v.strip('"').startswith(("/", "~")) for v in real):
        return PER_INSTALL
    words = set(redaction.name_words(item.rsplit(".", 1)[-1] if component == "config"
                                     else item))
    if words & _HOST_WORDS:
        return PER_HOST
    if words & _RUN_WORDS:
        return PER_RUN
    if words & _INSTALL_WORDS:
        return PER_INSTALL
    if real and all(_HEX_ID.match(v.strip('"')) for v in real):
        return PER_RUN
    if len(values) == starts >= 3:
        return PER_RUN  # a new value on every start
    return SETTING


def fix_for(component: str, item: str, kind: str, in_key: bool) -> str:
    if not in_key:
        what = "the host name" if component == "host" else f"`{item}`"
        return (f"none needed for the cache: vLLM does not hash {what}, so it splits nothing "
                "(if it changes what the compiled code does, a hit can be stale: see "
                "`vllm-cache audit`)")
    if component == "env":
        where = {PER_HOST: "in the pod spec or host profile, the same on every host",
                 PER_RUN: "once for the deployment, not per start or per engine",
                 PER_INSTALL: "to one value on every install"}.get(kind, "everywhere")
        if kind == SETTING:
            return (f"keep one value of {item} unless the difference is meant (it is in "
                    "vLLM's env hash)")
        return f"set {item} to one value {where} (it is in vLLM's env hash)"
    if component == "config":
        if item.startswith("additional_config."):
            if kind == SETTING:
                return (f"keep one value of `{item}` unless the difference is meant "
                        "(additional_config is hashed whole)")
            return (f"drop `{item}` (additional_config is hashed whole: a "
                    f"{kind.replace(' ', '-')} value "
                    "there makes new entries again and again; pass it outside "
                    "additional_config)")
        if kind == SETTING:
            return (f"keep one value of `{item}` unless the difference is meant (it is in "
                    "vLLM's config hash)")
        return f"pass one value of `{item}` on every start (it is in vLLM's config hash)"
    if component in ("inductor", "functorch"):
        return (f"set the {component} option `{item}` to one value everywhere (e.g. unset "
                f"TORCHINDUCTOR_{item.upper().replace('.', '_')} where it differs)")
    if component == "traced_files":
        return ("install vLLM at one path on every host (one venv path / container layout): "
                "the traced files' paths are in the backend key")
    if component == "traced_file":
        return f"deploy one vLLM build everywhere: the traced source `{item}` differs"
    if component == "versions":
        return f"pin one {item} version across the fleet"
    if component == "hardware":
        return ("keep one cache per hardware kind: compiled code is not shared across "
                "devices (a shared root just holds both)")
    if component == "code":
        return "deploy one vLLM build everywhere: the compiled model code differs"
    return f"use one value of {item}"


# ---- per model ------------------------------------------------------------------------------

@dataclass
class _Row:
    sid: str
    host: str
    keys: set[tuple[str, str]]
    values: dict[Key, str]
    """Shared by the starts that recorded the same manifests (never changed); the host is
    ``host``."""
    hashes: dict[str, str | None]
    outside: set[Key]
    recorded: set[str]
    """Components this start's manifests record (a warm AOT hit has no traced files)."""
    compile_seconds: float

    def value(self, k: Key) -> str:
        return self.host if k == HOST_NAME else self.values.get(k, UNSET)


HOST_NAME: Key = ("host", "name")


def _in_key(k: Key, rows: Sequence[_Row]) -> bool:
    comp, item = k
    if comp == "host" or any(k in r.outside for r in rows):
        return False
    if comp == "config" and not item.startswith("additional_config."):
        sub = item.split(".", 1)[0]
        seen: dict[str | None, str] = {}
        for r in rows:
            h = r.hashes.get(sub)
            v = r.value(k)
            if h is not None and seen.setdefault(h, v) != v:
                return False  # changed while its sub-config's hash did not
    return True


_TREES = {"code": ("aot",), "traced_files": ("backend",), "traced_file": ("backend",)}
"""Factors only one tree's manifests record are judged by that tree's entries."""


def _factor(k: Key, all_rows: Sequence[_Row], sizes: Mapping[str, int]) -> Factor | None:
    comp, item = k
    rows = [r for r in all_rows if comp in r.recorded]
    per_row = [r.value(k) for r in rows]
    counts: dict[str, int] = {}
    for v in per_row:
        counts[v] = counts.get(v, 0) + 1
    if len(counts) < 2:
        return None
    in_key = _in_key(k, rows)
    by_tree: dict[str, int] = {}
    for tree in _TREES.get(comp, ("aot", "backend")):
        owner: dict[str, str] = {}
        shared = False
        for r, v in zip(rows, per_row, strict=True):
            for t, key in r.keys:
                if t == tree and owner.setdefault(key, v) != v:
                    shared = True
        if not owner:
            continue
        vals = {v for r, v in zip(rows, per_row, strict=True) if any(t == tree for t, _ in r.keys)}
        by_tree[tree] = 1 if shared or not in_key else min(len(vals), len(owner))
    entries = max(by_tree.values(), default=1)
    if entries <= 1:
        in_key = False if by_tree else in_key
    top = max(counts, key=lambda v: (counts[v], -per_row.index(v)))
    shown = dict(sorted(counts.items(), key=lambda kv: -kv[1]))
    if len(shown) > MAX_VALUES:
        listed = list(shown.items())
        rest = listed[MAX_VALUES:]
        shown = dict(listed[:MAX_VALUES])
        shown[f"<{len(rest):,} other values>"] = sum(n for _, n in rest)
    paid = [r for r, v in zip(rows, per_row, strict=True) if v != top]
    kept_keys = {kk for r, v in zip(rows, per_row, strict=True) if v == top for kk in r.keys}
    extra_keys = {kk for r in paid for kk in r.keys} - kept_keys
    split = in_key and entries > 1
    kind = kind_of(comp, item, list(counts), len(rows))
    return Factor(comp, item, shown, entries,
                  by_tree, in_key, kind, fix_for(comp, item, kind, in_key),
                  sum(sizes.get(key, 0) for _, key in extra_keys) if split else 0,
                  round(sum(r.compile_seconds for r in paid), 3) if split else 0.0,
                  len(paid) if split else 0)


def _model_drift(model: str, rows: Sequence[_Row], sizes: Mapping[str, int]) -> ModelDrift:
    keys: set[Key] = {HOST_NAME}
    seen: set[int] = set()
    for r in rows:
        if id(r.values) not in seen:  # one per set of manifests
            seen.add(id(r.values))
            keys |= set(r.values)
    factors = [f for k in sorted(keys) if (f := _factor(k, rows, sizes)) is not None]
    factors.sort(key=lambda f: (not (f.in_key and f.entries > 1), -f.wasted_bytes,
                                -f.wasted_seconds, -f.entries, f.component, f.item))
    used = {k for r in rows for k in r.keys}
    return ModelDrift(model, len(rows), len(used), sum(sizes.get(k, 0) for _, k in used),
                      tuple(factors))


def drift_of(inputs: Inputs, model: str | None = None) -> DriftReport:
    """Drift over gathered inputs (see :func:`drift`)."""
    problems = list(inputs.problems)
    caps: list[str] = []
    by_digest: dict[tuple[str, str, str], Manifest] = {}
    for m in inputs.manifests:
        cur = by_digest.get((m.tree, m.key, m.digest))
        if cur is None or m.rank < cur.rank:
            by_digest[m.tree, m.key, m.digest] = m
    named: set[tuple[str, str, str]] = set()
    rows: dict[str, list[_Row]] = {}
    flat: dict[tuple[tuple[str, str, str], ...], tuple[str, Any]] = {}
    counts = {"missing": 0, "ledger": 0, "left": 0}

    def add(sid: str, st: Start) -> None:
        picks = tuple((t, k, d) for t, (_, k, d) in sorted(st.picks.items())
                      if (t, k, d) in by_digest)
        if not picks:
            counts["missing"] += 1
            return
        got = flat.get(picks)
        if got is None:
            ms = [by_digest[p] for p in picks]
            name = next((n for x in ms if (n := checkpoint_of(x.data.get("model"))[0])),
                        "unknown")
            got = flat[picks] = (name, _flatten(ms))
        name, (values, hashes, outside, recorded) = got
        if model is not None and model not in name:
            return
        if sum(map(len, rows.values())) >= MAX_ROWS:
            counts["left"] += 1
            return
        rows.setdefault(name, []).append(_Row(sid, st.host, st.keys, values, hashes, outside,
                                              recorded, st.compile_seconds))

    if inputs.ledgers:
        for sid, st in starts_from_ledgers(inputs, by_digest, named, problems, caps):
            counts["ledger"] += 1
            add(sid, st)
    basis = "ledger" if counts["ledger"] else "manifests"
    orphans = [m for m in inputs.manifests if (m.tree, m.key, m.digest) not in named]
    for sid, st in starts_from_manifests(orphans).items():
        add(f"manifest:{sid}", st)
    if counts["missing"]:
        problems.append(f"{counts['missing']} start(s) without a readable manifest (written "
                        "before the recorder, or their entries are gone) are not compared")
    if counts["left"]:
        caps.append(f"{counts['left']:,} start(s) with a manifest past the first "
                    f"{MAX_ROWS:,} are not compared (counted here only)")
    sizes = {e.key: e.size_bytes for e in inputs.entries}
    models = [_model_drift(name, rs, sizes) for name, rs in rows.items()]
    models.sort(key=lambda m: (-sum(f.wasted_bytes for f in m.factors), -m.starts, m.model))
    for md in models:
        many = [f for f in md.factors if len(f.values) > MAX_VALUES]
        if many:
            caps.append(f"{md.model}: {len(many)} factor(s) with more than {MAX_VALUES:,} "
                        f"values ({', '.join(f'{f.component} {f.item}' for f in many[:3])}"
                        f"{', ...' if len(many) > 3 else ''}): the most common listed, the "
                        "rest as one '<N other values>'")
    return DriftReport(inputs.source, inputs.kind, basis, tuple(models), tuple(problems),
                       tuple(caps))


def drift(source: str | os.PathLike[str] | None = None, *, model: str | None = None,
          storage_options: Mapping[str, Any] | None = None) -> DriftReport:
    """What splits each model's cache across the starts recorded in ``source`` (a cache root,
    default: resolved like vLLM; a folder of collected roots, ledgers and manifests; or a
    remote store URL). ``model``: only models whose name contains it.

    Raises :class:`~vllm_cache_tools.analyze.inputs.InputError` when the source cannot be
    read."""
    return drift_of(gather(source, manifests=True, storage_options=storage_options), model)
