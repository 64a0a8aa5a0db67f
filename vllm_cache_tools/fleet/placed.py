"""Where a placed entry came from: one small JSON record per entry that ``unpack`` or ``pull``
placed, in our state folder (never in vLLM's entry folders)::

    torch_compile_cache/.vllm-cache-tools/placed/<layout>-<key>.json

It says the bundle or store URL, when, the signature's verdict (signer's principals and key
fingerprint when a trust policy judged it) and the provenance the signed part carried, so
``show`` can say who built an entry long after the pull. Written fd-relative without
following links (:mod:`vllm_cache_tools.safeio`), replaced when the entry is placed again;
read capped. A record whose entry is gone is ignored (nothing reads it without its entry)."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from vllm_cache_tools import safeio
from vllm_cache_tools.layout import COMPILE_CACHE_DIRNAME, STATE_DIRNAME
from vllm_cache_tools.read import jsontext
from vllm_cache_tools.redaction import dumps as redacted_dumps
from vllm_cache_tools.units import iso

PLACED_DIRNAME = "placed"
MAX_RECORD_BYTES = 1 << 20
FORMAT = "vllm-cache-placed"


def record_name(layout: str, key: str) -> str:
    return f"{layout}-{key}.json"


def record_placements(vllm_root: Path, placed: Sequence[tuple[str, str]], *, source: str,
                      signature: Mapping[str, Any] | None,
                      provenance: Mapping[str, Mapping[str, Any]]) -> None:
    """Write the record of each ``(layout, key)`` just placed. ``provenance``: per key.
    Best effort: the entries are in place already; a record that cannot be written is left
    out (``show`` then says nothing of the origin), never an error of the placement."""
    if not placed:
        return
    try:
        dfd = safeio.open_dirs(vllm_root, [COMPILE_CACHE_DIRNAME, STATE_DIRNAME,
                                           PLACED_DIRNAME], create=True, mode=0o755)
    except OSError:
        return
    try:
        now = time.time()
        for layout, key in placed:
            doc = {"format": FORMAT, "layout": layout, "key": key, "source": source,
                   "placed_at": iso(now), "signature": dict(signature or {}) or None,
                   "provenance": dict(provenance.get(key) or {}) or None}
            try:
                safeio.replace_at(dfd, record_name(layout, key),
                                  redacted_dumps(doc, sort_keys=True).encode(), mode=0o644)
            except OSError:
                continue
    finally:
        os.close(dfd)


def read_placement(compile_cache: Path, layout: str, key: str) -> dict[str, Any] | None:
    """The record of an entry placed by ``unpack``/``pull``, or ``None``."""
    try:
        dfd = safeio.open_dirs(compile_cache, [STATE_DIRNAME, PLACED_DIRNAME])
    except OSError:
        return None
    try:
        raw = safeio.read_regular(record_name(layout, key), MAX_RECORD_BYTES, dir_fd=dfd)
        data = jsontext.loads(raw, "placement record")
    except (OSError, ValueError):
        return None
    finally:
        os.close(dfd)
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("key") != key:
        return None
    return data


MAX_LISTED = 100_000
"""Records ``ls`` reads at most (one small file per entry placed)."""


def placed_by_key(compile_cache: Path, keys: Sequence[tuple[str, str]]
                  ) -> dict[str, dict[str, Any]]:
    """For ``ls``: ``key -> {"source", "signer", "signature"}`` of the listed
    ``(layout, key)`` entries that unpack / pull placed (one listing of the records' folder;
    only the listed entries' records are read)."""
    try:
        dfd = safeio.open_dirs(compile_cache, [STATE_DIRNAME, PLACED_DIRNAME])
    except OSError:
        return {}
    try:
        names = set(os.listdir(dfd)[:MAX_LISTED])
    finally:
        os.close(dfd)
    out: dict[str, dict[str, Any]] = {}
    for layout, key in keys:
        if record_name(layout, key) not in names:
            continue
        rec = read_placement(compile_cache, layout, key)
        if rec is None:
            continue
        got = rec.get("signature")
        sig: dict[str, Any] = got if isinstance(got, dict) else {}
        out[key] = {"source": rec.get("source"), "signer": sig.get("signer"),
                    "signature": sig.get("status") or "not checked"}
    return out


def signature_json(check: Any) -> dict[str, Any] | None:
    """A :class:`.trust.SignatureCheck` as JSON (``None`` for none)."""
    if check is None:
        return None
    return {"status": check.status, "signer": check.signer, "fingerprint": check.fingerprint,
            "reason": check.reason or None}


__all__ = ["PLACED_DIRNAME", "placed_by_key", "read_placement", "record_placements",
           "signature_json"]
