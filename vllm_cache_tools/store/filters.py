"""``--filter`` and ``--sort`` for entry listings: small pure functions over :class:`Entry`.

Filter grammar: comma-separated conditions, all of which must hold::

    FIELD OP VALUE      OP is one of  =  !=  ~ (contains)  !~  >  <  >=  <=

String fields: key, layout, state, model, hardware, torch, vllm, rank, prefix, path.
Number fields: size, disk, files (sizes take K/M/G/T suffixes, powers of 1024).
Age fields: age (since last use), mage (since last modification); values like 30m, 12h, 7d.
Example: ``layout=aot,size>1M,age>7d``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from vllm_cache_tools.store.types import Entry

Predicate = Callable[[Entry], bool]


class QueryError(ValueError):
    """A ``--filter``/``--sort`` expression that cannot be understood."""


_COND = re.compile(r"^\s*(?P<field>[a-z_]+)\s*(?P<op>!=|!~|>=|<=|=|~|>|<)\s*(?P<value>.*?)\s*$")
_SIZE = re.compile(r"^(?P<n>\d+(?:\.\d+)?)\s*(?P<unit>[kmgtKMGT]?)i?[bB]?$")
_AGE = re.compile(r"^(?P<n>\d+(?:\.\d+)?)\s*(?P<unit>s|m|h|d|w)$")
_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}

_STR_FIELDS: dict[str, Callable[[Entry], Any]] = {
    "key": lambda e: e.key,
    "layout": lambda e: e.layout,
    "state": lambda e: e.state,
    "model": lambda e: e.model or "",
    "hardware": lambda e: e.hardware or "",
    "torch": lambda e: e.torch_version or "",
    "vllm": lambda e: e.vllm_version or "",
    "rank": lambda e: " ".join(e.ranks),
    "prefix": lambda e: " ".join(e.prefixes),
    "path": lambda e: str(e.path),
}
_NUM_FIELDS: dict[str, Callable[[Entry], float]] = {
    "size": lambda e: e.size_bytes,
    "disk": lambda e: e.disk_bytes,
    "files": lambda e: e.stats.files,
}


def parse_size(text: str) -> int:
    """``50G`` -> bytes (powers of 1024)."""
    m = _SIZE.match(text.strip())
    if not m:
        raise QueryError(f"not a size: {text!r} (use e.g. 500M, 50G)")
    return int(float(m["n"]) * _UNITS[m["unit"].lower()])


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
        raise QueryError(f"not an age: {text!r} (use e.g. 45m, 12h, 30d, 2w)")
    return float(m["n"]) * _AGE_UNITS[m["unit"]]


def _compare(op: str, a: float, b: float) -> bool:
    return {"=": a == b, "!=": a != b, ">": a > b, "<": a < b, ">=": a >= b,
            "<=": a <= b}[op]


def parse_filter(expr: str, now: float | None = None) -> Predicate:
    now = time.time() if now is None else now
    preds: list[Predicate] = []
    for part in [p for p in expr.split(",") if p.strip()]:
        m = _COND.match(part)
        if not m:
            raise QueryError(f"cannot parse filter condition {part.strip()!r} "
                             "(expected FIELD OP VALUE, e.g. state!=complete)")
        field, op, value = m["field"], m["op"], m["value"]
        if field in _STR_FIELDS:
            if op not in ("=", "!=", "~", "!~"):
                raise QueryError(f"{field} is text: use =, !=, ~ or !~")
            preds.append(_text_pred(_STR_FIELDS[field], op, value))
        elif field in _NUM_FIELDS:
            if op in ("~", "!~"):
                raise QueryError(f"{field} is a number: use =, !=, >, <, >=, <=")
            num = parse_size(value) if field != "files" else _int(value)
            preds.append(_num_pred(_NUM_FIELDS[field], op, num))
        elif field in ("age", "mage"):
            if op in ("~", "!~"):
                raise QueryError(f"{field} is an age: use >, <, >=, <=")
            secs = parse_age(value)

            def age_pred(e: Entry, f: str = field, o: str = op, s: float = secs) -> bool:
                t = e.last_used if f == "age" else e.modified
                return t is not None and _compare(o, now - t, s)

            preds.append(age_pred)
        else:
            known = ", ".join([*_STR_FIELDS, *_NUM_FIELDS, "age", "mage"])
            raise QueryError(f"unknown filter field {field!r} (known: {known})")
    return lambda e: all(p(e) for p in preds)


def _text_pred(get: Callable[[Entry], Any], op: str, value: str) -> Predicate:
    neg = op.startswith("!")
    if op in ("=", "!="):
        return lambda e: (get(e) == value) != neg
    return lambda e: (value in get(e)) != neg


def _num_pred(get: Callable[[Entry], float], op: str, num: float) -> Predicate:
    return lambda e: _compare(op, get(e), num)


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise QueryError(f"not a number: {text!r}") from None


SORT_KEYS: dict[str, Callable[[Entry], Any]] = {
    "size": lambda e: -e.size_bytes,
    "modified": lambda e: -(e.modified or 0),
    "last-used": lambda e: -(e.last_used or 0),
    "key": lambda e: (e.layout, e.key),
}


def sort_entries(entries: list[Entry] | tuple[Entry, ...], by: str) -> list[Entry]:
    if by not in SORT_KEYS:
        raise QueryError(f"unknown sort key {by!r} (use {', '.join(SORT_KEYS)})")
    return sorted(entries, key=SORT_KEYS[by])
