"""The ``filesystem`` block of ``ls --json`` and ``verify --json``: what the root is on and
what that means (:mod:`vllm_cache_tools.store.filesystem`)."""

from __future__ import annotations

from vllm_cache_tools.store.filesystem import FilesystemInfo


def filesystem_json(fs: FilesystemInfo) -> dict[str, object]:
    return {"type": fs.fstype, "family": fs.family, "shared": fs.shared,
            "mount_point": fs.mount_point, "source": fs.source, "atime_mode": fs.atime,
            "notes": list(fs.notes)}
