"""Open cache files for reading without updating their access time.

``ls`` and ``prune`` use atime as evidence of when vLLM last loaded an entry; our own reads
must not count as use. ``O_NOATIME`` is allowed only for the file's owner (or with
CAP_FOWNER); elsewhere we fall back to a plain open."""

from __future__ import annotations

import os
from typing import BinaryIO

_NOATIME = getattr(os, "O_NOATIME", 0)


def open_noatime(path: str | os.PathLike[str], buffering: int = -1) -> BinaryIO:
    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags | _NOATIME)
    except PermissionError:
        fd = os.open(path, flags)
    return os.fdopen(fd, "rb", buffering=buffering)


def read_noatime(path: str | os.PathLike[str], limit: int = -1) -> bytes:
    with open_noatime(path) as f:
        return f.read(limit)
