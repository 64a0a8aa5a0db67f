"""Sizes, ages and durations as users type and read them: ``50G``, ``30d``, ``2.5h``, ISO 8601
times. One place for each rule (sizes are powers of 1024 both ways)."""

from __future__ import annotations

import math
import re
import time
from datetime import datetime, timezone

from vllm_cache_tools.errors import UsageError

_SIZE = re.compile(r"^(?P<n>\d+(?:\.\d+)?)\s*(?P<unit>[kmgtKMGT]?)i?[bB]?$")
_AGE = re.compile(r"^(?P<n>\d+(?:\.\d+)?)\s*(?P<unit>s|m|h|d|w)$")
_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_MAX_SIZE = 2**63
_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
MAX_DURATION_S = 1e12
"""About 31,700 years: a longer duration prints as ``>11574074d`` (not 300 digits of days),
a longer age as ``-`` (no timestamp is that old)."""


def parse_size(text: str) -> int:
    """``50G`` -> bytes (powers of 1024)."""
    m = _SIZE.match(text.strip())
    if not m:
        raise UsageError(f"not a size: {text!r} (use e.g. 500M, 50G)")
    n = float(m["n"]) * _UNITS[m["unit"].lower()]
    if not n < _MAX_SIZE:  # inf (a few hundred digits) has no int; sizes are int64 on disk
        raise UsageError(f"size too large: {text!r} (at most {_MAX_SIZE // 1024**4}T)")
    return int(n)


def format_size(n: int) -> str:
    """Bytes -> ``70.9K`` / ``5.1M`` (powers of 1024, as :func:`parse_size` reads them)."""
    size = float(n)
    for unit in ("B", "K", "M", "G", "T"):
        if size < 1024 or unit == "T":
            return f"{size:.0f}{unit}" if unit == "B" else f"{size:.1f}{unit}"
        size /= 1024
    return f"{n}B"


def parse_age(text: str) -> float:
    """``30d`` -> seconds."""
    m = _AGE.match(text.strip())
    if not m:
        raise UsageError(f"not an age: {text!r} (use e.g. 45m, 12h, 30d, 2w)")
    secs = float(m["n"]) * _AGE_UNITS[m["unit"]]
    if not math.isfinite(secs):  # a few hundred digits: inf ("older-than infd")
        raise UsageError(f"age too large: {text!r}")
    return secs


def fmt_duration(seconds: float) -> str:
    """Seconds -> ``45s`` / ``2.5h`` / ``12d``; ``-`` when not a number (inf, nan), and
    ``>11574074d`` beyond :data:`MAX_DURATION_S`."""
    if not math.isfinite(seconds):
        return "-"
    if seconds > MAX_DURATION_S:
        return f">{MAX_DURATION_S / 86400:.0f}d"
    s = max(0.0, seconds)
    for unit, n in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= n:
            v = s / n
            return f"{v:.0f}{unit}" if v >= 10 or v == int(v) else f"{v:.1f}{unit}"
    return f"{s:.0f}s"


def human_size(n: int | None) -> str:
    return "-" if n is None else format_size(n)


def human_age(t: float | None, now: float | None = None) -> str:
    """A timestamp as ``3h ago``."""
    if t is None or not math.isfinite(t):
        return "-"
    secs = max(0.0, (time.time() if now is None else now) - t)
    if not (math.isfinite(secs) and secs <= MAX_DURATION_S):
        return "-"
    for unit, n in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= n:
            return f"{secs / n:.0f}{unit} ago"
    return f"{secs:.0f}s ago"


def iso(t: float | None) -> str | None:
    """A timestamp as ISO 8601 with its zone (UTC), as every ``--json`` document writes it."""
    if t is None or not math.isfinite(t):
        return None
    try:
        return datetime.fromtimestamp(t, tz=timezone.utc).isoformat(timespec="seconds")
    except (OverflowError, OSError, ValueError):  # beyond the years datetime can hold
        return None


__all__ = ["fmt_duration", "format_size", "human_age", "human_size", "iso", "parse_age",
           "parse_size"]
