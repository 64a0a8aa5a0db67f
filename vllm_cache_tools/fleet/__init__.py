"""Fleets: warm once, ship the cache to every node.

Public API (typed; the same records the CLI prints)::

    from vllm_cache_tools.fleet import pack, unpack, push, pull, warm
    b = pack(["28fd362d4e"], "start.tar.zst", root="/cache")       # PackResult
    r = unpack("start.tar.zst", root="/pod-cache",
               vllm_args=["/models/m", "--max-model-len", "4096"])  # UnpackResult
    r.ok, r.check.verdict, r.check.causes, r.placements
    push(["28fd362d4e"], "s3://bucket/vllm", root="/cache")          # PushResult
    pull("s3://bucket/vllm", root="/pod-cache", vllm_args=[...], if_hit=True)  # PullResult
    policy = load_policy("/etc/vllm-cache/allowed_signers")         # TrustPolicy
    pack(["28fd362d4e"], "s.tar.zst", root="/cache", sign="/keys/ci")  # signed
    unpack("s.tar.zst", root="/pod-cache", trust=policy)             # Refused unless trusted
    warm(["/models/m", "--max-model-len", "4096"], root="/cache")    # WarmResult

Modules: :mod:`.records` (what a bundle or store says about an entry), :mod:`.selection`
(which entries go, linked by proof), :mod:`.bundle` (the .tar.zst format), :mod:`.place`
(staging and atomic placing under the entry lock), :mod:`.checks` (compatibility,
relocation, the hit check via predict), :mod:`.remote` (fsspec stores), :mod:`.remote_ops`
(push, download, prune-remote), :mod:`.trust` (signatures: :mod:`.sshsig`,
:mod:`.allowed_signers`, :mod:`.store_trust`; :mod:`.provenance`, :mod:`.placed`),
:mod:`.warm`, :mod:`.api` (the verbs), :mod:`.views` (``--json``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "pack": "api", "unpack": "api", "push": "api", "pull": "api", "PackResult": "api",
    "UnpackResult": "api", "PullResult": "api", "warm": "warm", "WarmResult": "warm",
    "WarmedEntry": "warm", "PushResult": "remote_ops", "PushedEntry": "remote_ops",
    "StoreEntry": "remote", "StorePrune": "remote_ops", "prune_store": "remote_ops",
    "HitCheck": "checks", "Finding": "checks", "Placement": "place",
    "BundleManifest": "records", "EntryRecord": "records", "FileRecord": "records",
    "SourceRecord": "records", "FleetError": "errors", "BundleError": "errors",
    "StoreError": "errors", "Refused": "errors", "TrustPolicy": "trust",
    "SignatureCheck": "trust", "load_policy": "trust",
}

if TYPE_CHECKING:
    from vllm_cache_tools.fleet.api import (
        PackResult,
        PullResult,
        UnpackResult,
        pack,
        pull,
        push,
        unpack,
    )
    from vllm_cache_tools.fleet.checks import Finding, HitCheck
    from vllm_cache_tools.fleet.errors import BundleError, FleetError, Refused, StoreError
    from vllm_cache_tools.fleet.place import Placement
    from vllm_cache_tools.fleet.records import (
        BundleManifest,
        EntryRecord,
        FileRecord,
        SourceRecord,
    )
    from vllm_cache_tools.fleet.remote import StoreEntry
    from vllm_cache_tools.fleet.remote_ops import (
        PushedEntry,
        PushResult,
        StorePrune,
        prune_store,
    )
    from vllm_cache_tools.fleet.trust import SignatureCheck, TrustPolicy, load_policy
    from vllm_cache_tools.fleet.warm import WarmedEntry, WarmResult, warm


def __getattr__(name: str) -> Any:
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'vllm_cache_tools.fleet' has no attribute {name!r}")
    return getattr(importlib.import_module(f"vllm_cache_tools.fleet.{mod}"), name)


__all__ = ["BundleError", "BundleManifest", "EntryRecord", "FileRecord", "Finding", "FleetError",
    "HitCheck", "PackResult", "Placement", "PullResult", "PushResult", "PushedEntry", "Refused",
    "SignatureCheck", "SourceRecord", "StoreEntry", "StoreError", "StorePrune", "TrustPolicy",
    "UnpackResult", "WarmResult", "WarmedEntry", "load_policy", "pack", "prune_store", "pull",
    "push", "unpack", "warm"]
