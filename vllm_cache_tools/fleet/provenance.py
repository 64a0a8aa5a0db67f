"""Provenance: who built what is shipped, when, with what, from which serve arguments. Written
into the signed part (a signed bundle's manifest, every store index object), so a signature
vouches for it and a changed byte of it breaks the signature.

Reused from what every record already carries: each entry's vLLM / torch / Triton / Python /
CUDA versions and device (:class:`.records.EntryRecord`), the packing host's CPU model, ISA
flags and GPUs (``packed_on``). Added here: host name, user, time (UTC), this tool's version,
and the serve arguments of the recorder's newest manifest among the entries (already redacted
by the recorder; redacted again, by the one rule of :mod:`vllm_cache_tools.redaction`)."""

from __future__ import annotations

import getpass
import os
import socket
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from vllm_cache_tools import __version__
from vllm_cache_tools.fleet.records import EntryRecord
from vllm_cache_tools.layout import is_manifest_name
from vllm_cache_tools.read.errors import ReadError
from vllm_cache_tools.read.manifest import read_manifest
from vllm_cache_tools.redaction import redact_argv, redact_value


def _user() -> str | None:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry for the uid (a container)
        return str(os.getuid())


def _versions(records: Sequence[EntryRecord]) -> dict[str, Any]:
    """Each version the entries name: one string where they agree, else the sorted list."""
    out: dict[str, Any] = {}
    for k in ("vllm", "torch", "triton", "python", "cuda"):
        vals = sorted({v for r in records if (v := r.versions.get(k))})
        out[k] = vals[0] if len(vals) == 1 else (vals or None)
    return out


def serve_args(manifests: Sequence[Mapping[str, Any]]) -> list[str] | None:
    """The redacted command line of the newest recorder manifest that has one."""
    best: tuple[float, list[str]] | None = None
    for m in manifests:
        argv = m.get("command_line")
        created = m.get("created")
        if isinstance(argv, list) and all(isinstance(a, str) for a in argv):
            t = float(created) if isinstance(created, (int, float)) else 0.0
            if best is None or t > best[0]:
                best = (t, argv)
    return redact_argv(best[1]) if best else None


def read_recorder_manifests(paths: Sequence[os.PathLike[str] | str]) -> list[dict[str, Any]]:
    """The recorder manifests among ``paths`` that read as such (others skipped), through the
    one manifest reader (:func:`vllm_cache_tools.read.manifest.read_manifest`)."""
    out = []
    for p in paths:
        if not is_manifest_name(os.path.basename(p)):
            continue
        try:
            out.append(read_manifest(Path(p)).data)
        except (OSError, ReadError):
            continue
    return out


def provenance(records: Sequence[EntryRecord], packed_on: Mapping[str, Any],
               manifests: Sequence[Mapping[str, Any]] = (), now: float | None = None
               ) -> dict[str, Any]:
    """The provenance document (JSON-ready, redacted)."""
    got = packed_on.get("cpu")
    cpu: Mapping[str, Any] = got if isinstance(got, dict) else {}
    devices = sorted({d for r in records if (d := r.hardware.get("device_type"))})
    gpus = sorted({g for r in records if (g := r.hardware.get("gpu_name"))}) or list(
        packed_on.get("gpus") or [])
    t = time.time() if now is None else now
    doc = {
        "host": socket.gethostname(), "user": _user(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t)),
        "tool": f"vllm-cache-tools {__version__}",
        "versions": _versions(records),
        "hardware": {"devices": devices, "gpus": gpus,
                     "cpu_model": cpu.get("model"), "cpu_isa": list(cpu.get("isa") or []),
                     "machine": cpu.get("machine")},
        "serve_args": serve_args(manifests),
    }
    return dict(redact_value(None, doc))


def _one(v: Any) -> str:
    return "/".join(map(str, v)) if isinstance(v, list) else str(v)


def provenance_line(p: Mapping[str, Any]) -> str:
    """One line for a person: ``user@host at TIME, vLLM X / torch Y, <device>, <tool>``."""
    v = p.get("versions") if isinstance(p.get("versions"), dict) else {}
    hw = p.get("hardware") if isinstance(p.get("hardware"), dict) else {}
    parts = [f"{p.get('user') or '?'}@{p.get('host') or '?'} at {p.get('time') or '?'}"]
    vs = ", ".join(f"{k} {_one(v[k])}" for k in ("vllm", "torch", "triton", "cuda")
                   if isinstance(v, dict) and v.get(k))
    if vs:
        parts.append(vs)
    if isinstance(hw, dict):
        dev = (", ".join(hw.get("gpus") or []) or
               " ".join(x for x in (hw.get("cpu_model"), "+".join(hw.get("cpu_isa") or []))
                        if x))
        if dev:
            parts.append(dev)
    if p.get("tool"):
        parts.append(str(p["tool"]))
    return "; ".join(parts)


__all__ = ["provenance", "provenance_line", "read_recorder_manifests", "serve_args"]
