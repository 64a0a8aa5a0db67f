"""Is an entry's folder name the key vLLM derives from its own content? Before ``unpack`` and
``pull`` place an entry, and in ``show`` / ``verify``: what is placed is what its name says.

vLLM loads an entry by its folder name only; a folder renamed (or filled with another
start's files) is a false hit waiting to happen. A key is *proven* when vLLM's recipe applied
to what the entry records gives its name exactly (a sha256 preimage: whatever suggested the
parts, matching the name proves them):

- backend: ``sha256(str([env_hash, config_hash, code_hash, compiler_hash]))[:10]`` from every
  ``cache_key_factors.json`` it holds (:func:`prove_backend`);
- AOT (:func:`prove_aot`): ``sha256(str([env_hash, config_hash, *inductor, model_key]))``,
  its parts taken (1) from the recorder's manifest beside the artifact, or (2) from a backend
  entry of the same start (proven itself, and linked to this one by the source proof of
  :mod:`.source_link`), with ``model_key`` re-derived from the artifact's own ``forward``.
  With vLLM's mega AOT artifact the Inductor factors are inside the AOT key and recorded
  nowhere in either tree, only hashed (the backend's ``compiler_hash``): they are taken from
  this host's probe when it has run (``inductor``: the reprs of ``get_inductor_factors()``,
  plain and as patched for AOT), and count only when one of them hashes to the sibling's
  ``compiler_hash`` (so they are the compiling host's).
  Without them the sibling binds the artifact to a proven start by its sources, not its
  name: status ``linked``.

Only ``proven`` is placed by default. A *mismatch* (the recorded parts give another key, or
the recorder's manifest names another folder) is never placed; ``unproven`` only with
``--force``; ``linked`` (an artifact renamed to another key of the same sources passes the
source proof too) only with ``--force`` or under a trusted signature (:attr:`KeyProof.vouched`,
set by :mod:`vllm_cache_tools.fleet.key_proof`), or once the vLLM arguments prove it (their
probe gives this host's Inductor factors). Pure functions over read entries
(:func:`vllm_cache_tools.store.entries.read_entry`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from vllm_cache_tools.keys.recipes import (
    aot_key,
    backend_key,
    compiler_hash,
    env_hash_from_factors,
    model_hash_key,
)
from vllm_cache_tools.layout import short_key
from vllm_cache_tools.store.types import Entry

PROVEN = "proven"
"""The recipe over the entry's recorded parts gives its name."""
LINKED = "linked"
"""AOT, mega artifact: tied by its traced sources to a backend entry whose key is proven; the
Inductor factors inside the AOT key were not at hand to re-derive it. Not a proof of the name
(an artifact renamed to another key of the same sources is linked too): placed only with
``--force`` or under a trusted signature."""
MISMATCH = "mismatch"
"""The recorded parts give another key: refused, even with ``--force``."""
UNPROVEN = "unproven"
"""Nothing in the entry lets the recipe be applied: placed only with ``--force``."""
PLACEABLE = frozenset({PROVEN})
"""Placed without ``--force`` (``linked`` too when :attr:`KeyProof.vouched`)."""


@dataclass(frozen=True)
class KeyProof:
    key: str
    layout: str
    status: str
    """:data:`PROVEN`, :data:`LINKED`, :data:`MISMATCH` or :data:`UNPROVEN`."""
    how: str
    """``factors``, ``manifest``, ``sibling <key>``, or what was missing."""
    derived: str | None = None
    """The key the recipe gave (differs from ``key`` on a mismatch)."""
    env_hash: str | None = None
    config_hash: str | None = None
    compiler_hash: str | None = None
    """Backend: the parts the proof re-derived (an AOT sibling proof takes them)."""
    vouched: str = ""
    """Who vouches for a ``linked`` key in its place: ``the trusted signature of <signer>``
    (the fleet's trust policy); empty otherwise."""

    @property
    def placeable(self) -> bool:
        """Placed without ``--force``: proven, or linked under a trusted signature."""
        return self.status in PLACEABLE or (self.status == LINKED and bool(self.vouched))

    def line(self) -> str:
        """One line for humans."""
        if self.status == MISMATCH:
            return (f"its content gives key {short_key(self.derived or '?')}, not its name "
                    f"{short_key(self.key)} ({self.how})")
        if self.status == PROVEN:
            return f"key proven ({self.how})"
        if self.status == LINKED:
            return f"key linked by sources {self.how}"
        return f"key unproven ({self.how})"


def prove_backend(e: Entry) -> KeyProof:
    """Every ``cache_key_factors.json`` of the entry (one per rank and model part) must give
    its folder name; the folder's ``-N`` suffix (vLLM's duplicate names) is not hashed."""
    name = e.key.split("-", 1)[0]
    seen: set[tuple[str, str, str, str]] = set()
    for p in e.prefix_dirs:
        f = p.factors
        if f is None:
            continue
        if f.env is None or not (f.config_hash and f.code_hash and f.compiler_hash):
            return KeyProof(e.key, "backend", UNPROVEN,
                            f"{p.rank}/{p.prefix}: cache_key_factors.json lacks a part")
        env = env_hash_from_factors(f.env)
        seen.add((env, f.config_hash, f.code_hash, f.compiler_hash))
    if not seen:
        return KeyProof(e.key, "backend", UNPROVEN, "no cache_key_factors.json")
    for parts in sorted(seen):
        k = backend_key(list(parts))
        if k != name:
            return KeyProof(e.key, "backend", MISMATCH, "cache_key_factors.json", k)
    env, cfg, _code, comp = next(iter(seen))
    if len(seen) > 1:
        return KeyProof(e.key, "backend", MISMATCH, "its ranks record different factors",
                        name)
    return KeyProof(e.key, "backend", PROVEN, "factors", name, env, cfg, comp)


def _forward(e: Entry) -> tuple[str, int] | None:
    info = e.aot_info
    if info is None or info.qualname is None or info.firstlineno is None:
        return None
    return info.qualname, info.firstlineno


def _manifest_proof(e: Entry, inductor: Sequence[str]) -> KeyProof | None:
    """From the recorder's manifests: a verdict, or ``None`` when they do not decide."""
    fw = _forward(e)
    for m in e.manifests:
        if m.tree and m.tree != "aot":
            continue
        if m.key and m.key != e.key:
            return KeyProof(e.key, "aot", MISMATCH, "its recorder manifest names that folder",
                            m.key)
        kp = m.data.get("key_parts")
        mf = m.data.get("forward")
        if not isinstance(kp, dict):
            continue
        env, cfg, mk = kp.get("env_hash"), kp.get("config_hash"), kp.get("model_hash_key")
        if not (isinstance(env, str) and isinstance(cfg, str) and isinstance(mk, str)):
            continue
        if isinstance(mf, dict) and fw is not None and (
                mf.get("qualname"), mf.get("firstlineno")) != fw:
            return KeyProof(e.key, "aot", MISMATCH,
                            "the artifact's forward is not the one its manifest records",
                            None)
        ver = (m.data.get("versions") or {}).get("vllm")
        if fw is not None and isinstance(ver, str) and model_hash_key(ver, *fw) != mk:
            return KeyProof(e.key, "aot", MISMATCH, "the artifact's forward does not give "
                            "the model key its manifest records", None)
        reprs = [r for r in (kp.get("inductor_repr"),) if isinstance(r, str)]
        reprs += list(inductor)
        if not kp.get("inductor_in_key"):
            k = aot_key(env, cfg, mk)
            if k == e.key:
                return KeyProof(e.key, "aot", PROVEN, "manifest", k, env, cfg)
            return KeyProof(e.key, "aot", MISMATCH, "its recorder manifest's parts", k)
        for r in reprs:
            if _aot_key(env, cfg, mk, r) == e.key:
                return KeyProof(e.key, "aot", PROVEN, "manifest and Inductor factors",
                                e.key, env, cfg)
    return None


def _aot_key(env: str, cfg: str, mk: str, inductor_repr: str | None) -> str | None:
    try:
        return aot_key(env, cfg, mk, inductor_repr)
    except ValueError:
        return None


def manifest_parts(e: Entry) -> tuple[str | None, str | None]:
    """(env hash, config hash) that the entry's first recorder manifest with key parts
    names (each ``None`` when absent)."""
    for m in e.manifests:
        kp = m.data.get("key_parts")
        if isinstance(kp, dict):
            env, cfg = kp.get("env_hash"), kp.get("config_hash")
            return (env if isinstance(env, str) else None, cfg if isinstance(cfg, str) else None)
    return None, None


def prove_aot(e: Entry, siblings: Iterable[KeyProof], *, versions: Sequence[str] = (),
              inductor: Sequence[str] = ()) -> KeyProof:
    """``siblings``: proofs of backend entries linked to ``e`` by its traced sources (only
    proven ones count); ``versions``: vLLM releases the start may have run (the entry's
    manifests add theirs); ``inductor``: reprs of ``get_inductor_factors()`` from a probe of
    this host (plain and as patched for AOT)."""
    vers = list(dict.fromkeys([*versions, *(
        v for m in e.manifests
        if isinstance(v := (m.data.get("versions") or {}).get("vllm"), str))]
        + ([e.vllm_version] if e.vllm_version else [])))
    by_manifest = _manifest_proof(e, inductor)
    if by_manifest is not None and by_manifest.status in (PROVEN, MISMATCH):
        return by_manifest
    fw = _forward(e)
    m_env, m_cfg = manifest_parts(e)
    linked: KeyProof | None = None
    other: tuple[str, str] | None = None
    for s in siblings:
        if s.status != PROVEN or not (s.env_hash and s.config_hash):
            continue
        if (m_env and m_env != s.env_hash) or (m_cfg and m_cfg != s.config_hash):
            continue  # another start's backend entry (same sources, other env/config)
        if fw is None:
            break
        same_compiler = any(compiler_hash(r) == s.compiler_hash for r in inductor)
        for ver in vers:
            mk = model_hash_key(ver, *fw)
            if aot_key(s.env_hash, s.config_hash, mk) == e.key:
                return KeyProof(e.key, "aot", PROVEN, f"sibling {s.key}", e.key,
                                s.env_hash, s.config_hash)
            for r in inductor if same_compiler else ():
                k = _aot_key(s.env_hash, s.config_hash, mk, r)
                if k == e.key:
                    return KeyProof(e.key, "aot", PROVEN,
                                    f"sibling {s.key} and this host's Inductor factors",
                                    e.key, s.env_hash, s.config_hash)
                if k is not None and other is None:
                    other = (s.key, k)
        if same_compiler and vers:
            # Every part was at hand (this host's Inductor factors are the sibling's, by its
            # compiler hash) and none gave the name: not linked, at most unproven (another
            # vLLM release than the ones tried would give another model key).
            continue
        why = _unlinked(bool(inductor), same_compiler, bool(vers))
        linked = linked or KeyProof(e.key, "aot", LINKED, f"to {s.key}; {why}", None,
                                    s.env_hash, s.config_hash)
    if linked is not None:
        return linked
    if fw is None:
        return KeyProof(e.key, "aot", UNPROVEN, "its model artifact could not be read")
    if other is not None:
        return KeyProof(e.key, "aot", UNPROVEN,
                        f"backend entry {other[0]} of the same sources, with vLLM "
                        f"{', '.join(vers)} and this host's Inductor factors, gives "
                        f"{short_key(other[1])}", other[1])
    if m_env or m_cfg:
        return KeyProof(e.key, "aot", UNPROVEN,
                        "its recorder manifest names the Inductor factors of the key but not "
                        "their exact form, and no backend entry of the same start is here")
    return KeyProof(e.key, "aot", UNPROVEN,
                    "no recorder manifest and no backend entry of the same start to "
                    "derive it from")


def _unlinked(inductor: bool, same_compiler: bool, vers: bool) -> str:
    """Why a linked AOT key was not re-derived from its sibling's parts."""
    if inductor and not same_compiler:
        return "this host's Inductor factors are not the ones it was compiled with"
    if not vers:
        return ("its Inductor factors and vLLM release are not at hand" if not inductor
                else "its vLLM release is not at hand")
    return "its Inductor factors are not at hand"


def same_start(backend: Entry, aot: Entry, *, backend_env_hash: str | None = None) -> bool:
    """Whether what ``aot``'s recorder manifests say of its key parts (when anything) agrees
    with ``backend``'s factors: the source proof alone links every start of the same code.
    ``backend_env_hash``: ``env_hash_from_factors(backend.factors.env)`` when the caller
    has it (one backend entry checked against many AOT entries hashes its env once)."""
    f = backend.factors
    env, cfg = manifest_parts(aot)
    if f is None or not (env or cfg):
        return True
    if cfg and f.config_hash and cfg != f.config_hash:
        return False
    if not env or f.env is None:
        return True
    return env == (backend_env_hash or env_hash_from_factors(f.env))


PROOF_MANIFEST_KEYS = ("key_parts", "forward", "versions")
"""What the proofs here read of a recorder manifest's data (:func:`prove_aot`,
:func:`manifest_parts`, :func:`same_start`); the rest (config, env, the recorded start) is
~45 KB an entry."""


def proof_view(e: Entry) -> Entry:
    """``e`` with its recorder manifests' data cut to :data:`PROOF_MANIFEST_KEYS`: every proof
    here gives the same verdict on it. Unpack's frame workers send their deep reads to the
    parent so (the bench's 100 starts: the parent unpickled 25 MB of them, most of it the
    manifests' small objects)."""
    if not e.manifests:
        return e
    return replace(e, manifests=tuple(
        replace(m, data={k: m.data[k] for k in PROOF_MANIFEST_KEYS if k in m.data})
        for m in e.manifests))


def prove_entry(e: Entry, backends: Iterable[Entry], *, versions: Sequence[str] = (),
                inductor: Sequence[str] = ()) -> KeyProof:
    """The proof of one entry read in full; ``backends``: backend entries (read in full) that
    may be its siblings (each counted when proven, of the same start by its manifests, and
    linked by the source proof)."""
    from vllm_cache_tools.keys.source_link import linked_aot_entries

    if e.layout == "backend":
        return prove_backend(e)
    sibs = []
    for b in backends:
        if b.layout == "backend" and same_start(b, e) and linked_aot_entries(b, [e]):
            p = prove_backend(b)
            if p.status == PROVEN:
                sibs.append(p)
    return prove_aot(e, sibs, versions=versions, inductor=inductor)


__all__ = ["LINKED", "MISMATCH", "PLACEABLE", "PROOF_MANIFEST_KEYS", "PROVEN", "UNPROVEN",
           "KeyProof", "manifest_parts", "proof_view", "prove_aot", "prove_backend",
           "prove_entry", "same_start"]
