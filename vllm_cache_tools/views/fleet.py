"""The ``--json`` documents of the fleet verbs (schema ids in :mod:`vllm_cache_tools.views.payloads`
``SCHEMAS``: ``pack``, ``unpack``, ``push``, ``pull``, ``warm``, ``prune-remote``)."""

from __future__ import annotations

from typing import Any

from vllm_cache_tools.fleet.api import PackResult, PullResult, UnpackResult
from vllm_cache_tools.fleet.checks import HitCheck
from vllm_cache_tools.fleet.place import Placement
from vllm_cache_tools.fleet.placed import signature_json
from vllm_cache_tools.fleet.records import EntryRecord, Footprint
from vllm_cache_tools.fleet.remote_ops import PushResult, StorePrune
from vllm_cache_tools.store.locate import display_path
from vllm_cache_tools.views.payloads import with_schema


def record_summary(r: EntryRecord) -> dict[str, Any]:
    return {"key": r.key, "layout": r.layout, "path": r.path, "ranks": list(r.ranks),
            "prefixes": list(r.prefixes), "state": r.state, "files": len(r.files),
            "size_bytes": r.size_bytes, "model": r.model, "checkpoint": r.checkpoint,
            "versions": dict(r.versions), "hardware": dict(r.hardware),
            "linked": list(r.linked)}


def check_json(c: HitCheck | None) -> dict[str, Any] | None:
    if c is None:
        return None
    return {"verdict": c.verdict, "would_hit": c.would_hit, "environment": c.environment,
            "predicted": dict(c.predicted), "used": list(c.used),
            "seconds": round(c.seconds, 3),
            "findings": [{"check": f.check, "verdict": f.verdict, "key": f.key,
                          "detail": f.detail} for f in c.findings],
            "causes": [{"component": x.component, "item": x.item, "old": x.old, "new": x.new,
                        "evidence": x.evidence, "detail": x.detail} for x in c.causes]}


def placement_json(p: Placement) -> dict[str, Any]:
    return {"key": p.key, "layout": p.layout, "path": p.path, "action": p.action,
            "detail": p.detail or None, "key_proof": p.proof or None}


def footprint_json(fp: Footprint | None) -> dict[str, int] | None:
    """Entries, their files and bytes (file sizes), and the recorder snapshots that go along:
    the one count every fleet verb shows (:class:`~vllm_cache_tools.fleet.records.Footprint`;
    ``ls --json`` entries sum to the same files and bytes)."""
    if fp is None:
        return None
    return {"entries": fp.entries, "files": fp.files, "size_bytes": fp.size_bytes,
            "snapshot_files": fp.snapshot_files, "snapshot_bytes": fp.snapshot_bytes}


def pack_document(r: PackResult) -> dict[str, Any]:
    return with_schema("pack", {
        "path": display_path(r.path), "sha256": r.sha256, "size_bytes": r.size_bytes,
        "signed_by_key": r.signer,
        "oci_image": None if r.image is None else {
            "manifest_digest": r.image.manifest_digest, "layer_digest": r.image.layer_digest,
            "diff_id": r.image.diff_id, "architecture": r.image.architecture},
        "raw_bytes": r.raw_bytes, "files": r.files, "seconds": round(r.seconds, 3),
        "footprint": footprint_json(r.footprint),
        "entries": [record_summary(e) for e in r.entries]})


def unpack_document(r: UnpackResult) -> dict[str, Any]:
    return with_schema("unpack", {
        "bundle": display_path(r.bundle), "root": display_path(r.root), "ok": r.ok,
        "checked_only": r.checked_only, "refused": r.refused,
        "format_version": r.manifest.format_version, "created_by": r.manifest.created_by,
        "packed_on": dict(r.manifest.packed_on),
        "footprint": footprint_json(r.manifest.footprint),
        "entries": [record_summary(e) for e in r.manifest.entries],
        "check": check_json(r.check),
        "placements": [placement_json(p) for p in r.placements],
        "signature": signature_json(r.signature),
        "provenance": dict(r.manifest.provenance) or None,
        "seconds": round(r.seconds, 3)})


def push_document(r: PushResult) -> dict[str, Any]:
    return with_schema("push", {
        "url": r.url, "entries": [{"key": e.key, "layout": e.layout, "action": e.action,
                                   "detail": e.detail or None} for e in r.entries],
        "blobs_uploaded": r.blobs_uploaded, "blobs_present": r.blobs_present,
        "bytes_uploaded": r.bytes_uploaded, "logical_bytes": r.logical_bytes,
        "footprint": footprint_json(r.footprint), "seconds": round(r.seconds, 3)})


def pull_document(r: PullResult) -> dict[str, Any]:
    return with_schema("pull", {
        "url": r.url, "root": display_path(r.root), "ok": r.ok,
        "checked_only": r.checked_only, "refused": r.refused,
        "selected": [record_summary(e) for e in r.selected],
        "footprint": footprint_json(r.footprint),
        "check": check_json(r.check),
        "placements": [placement_json(p) for p in r.placements],
        "bytes_downloaded": r.bytes_downloaded, "seconds": round(r.seconds, 3),
        "skipped": list(r.skipped),
        "signatures": None if r.signatures is None else {
            k: signature_json(v) for k, v in r.signatures.items()}})


def prune_remote_document(r: StorePrune) -> dict[str, Any]:
    return with_schema("prune-remote", {
        "url": r.url, "dry_run": r.dry_run, "removed": list(r.removed),
        "blobs_removed": r.blobs_removed, "bytes_freed": r.bytes_freed, "kept": r.kept,
        "skipped": list(r.skipped),
        "pinned": [{"key": k, "tags": list(tags)} for k, tags in r.pinned]})
