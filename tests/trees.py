"""Helpers for tests that look at cache trees on disk (prune, rm, verify)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from vllm_cache_tools.layout import TRASH_DIRNAME


def files_of(root: Path) -> dict[str, int]:
    """Every file under the root (trash excluded) -> size."""
    out = {}
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x != TRASH_DIRNAME]
        for f in files:
            p = Path(d) / f
            out[str(p.relative_to(root))] = p.lstat().st_size
    return out


def trash_items(root: Path) -> list[str]:
    t = root / "torch_compile_cache" / TRASH_DIRNAME
    return sorted(x.name for x in t.iterdir() if x.name != "locks") if t.exists() else []


def age(path: Path, days: float) -> None:
    """Set atime and mtime of everything under ``path`` (folders last) ``days`` back."""
    t = time.time() - days * 86400
    for d, _, files in os.walk(path, topdown=False):
        for f in files:
            os.utime(Path(d) / f, (t, t), follow_symlinks=False)
        os.utime(d, (t, t))
