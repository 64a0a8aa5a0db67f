"""Bundles that lie about their keys, made from a real bundle (packed from a real vLLM cache)
by rewriting its tar: every size and sha256 stays right, only names change. Used by
tests/test_key_spoofing.py and benchmarks/hostile_keys.py.

Each spoof is ``edit(manifest_doc, members) -> members`` over the bundle's manifest (a dict,
edited in place) and its ``(TarInfo, bytes)`` members after the manifest."""

from __future__ import annotations

import copy
import hashlib
import io
import json
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import zstandard

Members = list[tuple[tarfile.TarInfo, bytes]]
Edit = Callable[[dict[str, Any], Members], Members]
CC = "torch_compile_cache"
AOT_PARENT = f"{CC}/torch_aot_compile"


def rewrite(src: Path, dst: Path, edit: Edit) -> Path:
    """``src`` re-packed with ``edit`` applied (the manifest first, as pack writes it)."""
    with open(src, "rb") as f, zstandard.ZstdDecompressor().stream_reader(f) as z, \
            tarfile.open(fileobj=z, mode="r|") as tar:
        items: Members = []
        for m in tar:
            fo = tar.extractfile(m) if m.isreg() else None
            items.append((m, fo.read() if fo is not None else b""))
    head, data = items[0]
    doc = json.loads(data)
    rest = edit(doc, items[1:])
    new = json.dumps(doc).encode()
    head.size = len(new)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as out:
        for m, b in [(head, new), *rest]:
            m.size = len(b) if m.isreg() else 0
            out.addfile(m, io.BytesIO(b) if m.isreg() else None)
    dst.write_bytes(zstandard.ZstdCompressor().compress(buf.getvalue()))
    return dst


def _entry(doc: dict[str, Any], layout: str) -> dict[str, Any]:
    return next(e for e in doc["entries"] if e["layout"] == layout)


def _move(members: Members, old: str, new: str) -> Members:
    for m, _ in members:
        if m.name == old or m.name.startswith(old + "/"):
            m.name = new + m.name[len(old):]
            m.pax_headers.pop("path", None)  # a long name read from a PAX header
    return members


def rename(layout: str, new_key: str) -> Edit:
    """The entry of ``layout`` under another key (its files untouched)."""
    def edit(doc: dict[str, Any], members: Members) -> Members:
        e = _entry(doc, layout)
        old_path = e["path"]
        parent = old_path.rpartition("/")[0]
        for other in doc["entries"]:
            other["linked"] = [new_key if k == e["key"] else k for k in other["linked"]]
        e["key"], e["path"] = new_key, f"{parent}/{new_key}"
        return _move(members, old_path, e["path"])
    return edit


def strip_manifests(layout: str) -> Edit:
    """The recorder's manifests of the entry of ``layout`` left out (files and records)."""
    def edit(doc: dict[str, Any], members: Members) -> Members:
        e = _entry(doc, layout)
        drop = {f"{e['path']}/{f['path']}" for f in e["files"] if "vct-manifest." in f["path"]}
        e["files"] = [f for f in e["files"] if "vct-manifest." not in f["path"]]
        return [(m, b) for m, b in members if m.name not in drop]
    return edit


def only(layout: str) -> Edit:
    """Only the entry of ``layout`` (its sibling left out)."""
    def edit(doc: dict[str, Any], members: Members) -> Members:
        keep = _entry(doc, layout)
        gone = [e["path"] for e in doc["entries"] if e is not keep]
        doc["entries"] = [keep]
        keep["linked"] = []
        return [(m, b) for m, b in members
                if not any(m.name == g or m.name.startswith(g + "/") for g in gone)]
    return edit


def old_spelling() -> Edit:
    """The AOT entry at vLLM 0.11.1-0.16's ``<root>/torch_aot_compile/<key>``."""
    def edit(doc: dict[str, Any], members: Members) -> Members:
        e = _entry(doc, "aot")
        old = e["path"]
        e["path"] = f"torch_aot_compile/{e['key']}"
        return _move(members, old, e["path"])
    return edit


def misnamed_snapshot() -> Edit:
    """A recorder source snapshot whose name is not its content's sha256 (the content and
    the listed digest agree, so only the name lies): the first snapshot's content under the
    second one's name."""
    def edit(doc: dict[str, Any], members: Members) -> Members:
        a, b = doc["extras"][0], doc["extras"][1]
        content = next(d for m, d in members if m.name == a["path"])
        out = [(m, d) for m, d in members if m.name != b["path"]]
        info = copy.copy(next(m for m, _ in members if m.name == b["path"]))
        out.append((info, content))
        b["size"], b["sha256"] = len(content), hashlib.sha256(content).hexdigest()
        return out
    return edit


def rename_in_store(store: Path, layout: str, old: str, new: str) -> None:
    """A ``file://`` store's entry under another key: its index object moved and edited
    (the blobs, content-addressed, untouched), the other entries' links following it."""
    src = store / "entries" / layout / f"{old}.json"
    doc = json.loads(src.read_text())
    parent = doc["entry"]["path"].rpartition("/")[0]
    doc["entry"]["key"], doc["entry"]["path"] = new, f"{parent}/{new}"
    (store / "entries" / layout / f"{new}.json").write_text(json.dumps(doc))
    src.unlink()
    for p in (store / "entries").rglob("*.json"):
        d = json.loads(p.read_text())
        if old in d["entry"].get("linked", []):
            d["entry"]["linked"] = [new if k == old else k for k in d["entry"]["linked"]]
            p.write_text(json.dumps(d))


def chain(*edits: Edit) -> Edit:
    def edit(doc: dict[str, Any], members: Members) -> Members:
        for e in edits:
            members = e(doc, members)
        return members
    return edit


__all__ = ["AOT_PARENT", "chain", "misnamed_snapshot", "old_spelling", "only", "rename",
           "rename_in_store", "rewrite", "strip_manifests"]
