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
from typing import Any, get_args

from vllm_cache_tools.errors import UsageError
from vllm_cache_tools.store.types import Entry, Layout, State
from vllm_cache_tools.units import parse_age, parse_size

Predicate = Callable[[Entry], bool]


_COND = re.compile(r"^\s*(?P<field>[a-z_]+)\s*(?P<op>!=|!~|>=|<=|=|~|>|<)\s*(?P<value>.*?)\s*$")
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
_CLOSED_FIELDS: dict[str, tuple[str, ...]] = {
    "layout": get_args(Layout),
    "state": get_args(State),
}
"""Text fields with a fixed set of values: ``=``/``!=`` against any other value is a typo
(``state=compleet`` listed nothing, exit 0), refused with the values it could be."""
_NUM_FIELDS: dict[str, Callable[[Entry], float]] = {
    "size": lambda e: e.size_bytes,
    "disk": lambda e: e.disk_bytes,
    "files": lambda e: e.stats.files,
}


def _compare(op: str, a: float, b: float) -> bool:
    return {"=": a == b, "!=": a != b, ">": a > b, "<": a < b, ">=": a >= b,
            "<=": a <= b}[op]


def parse_filter(expr: str, now: float | None = None) -> Predicate:
    now = time.time() if now is None else now
    preds: list[Predicate] = []
    for part in [p for p in expr.split(",") if p.strip()]:
        m = _COND.match(part)
        if not m:
            raise UsageError(f"cannot parse filter condition {part.strip()!r} "
                             "(expected FIELD OP VALUE, e.g. state!=complete)")
        field, op, value = m["field"], m["op"], m["value"]
        if field in _STR_FIELDS:
            if op not in ("=", "!=", "~", "!~"):
                raise UsageError(f"{field} is text: use =, !=, ~ or !~")
            allowed = _CLOSED_FIELDS.get(field)
            if allowed is not None and op in ("=", "!=") and value not in allowed:
                raise UsageError(f"unknown {field} {value!r} in --filter "
                                 f"(one of: {', '.join(allowed)})")
            preds.append(_text_pred(_STR_FIELDS[field], op, value))
        elif field in _NUM_FIELDS:
            if op in ("~", "!~"):
                raise UsageError(f"{field} is a number: use =, !=, >, <, >=, <=")
            num = parse_size(value) if field != "files" else _int(value)
            preds.append(_num_pred(_NUM_FIELDS[field], op, num))
        elif field in ("age", "mage"):
            if op in ("~", "!~"):
                raise UsageError(f"{field} is an age: use >, <, >=, <=")
            secs = parse_age(value)

            def age_pred(e: Entry, f: str = field, o: str = op, s: float = secs) -> bool:
                t = e.last_used if f == "age" else e.modified
                return t is not None and _compare(o, now - t, s)

            preds.append(age_pred)
        else:
            known = ", ".join([*_STR_FIELDS, *_NUM_FIELDS, "age", "mage"])
            raise UsageError(f"unknown filter field {field!r} (known: {known})")
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
        raise UsageError(f"not a number: {text!r}") from None


SORT_KEYS: dict[str, Callable[[Entry], Any]] = {
    "size": lambda e: -e.size_bytes,
    "modified": lambda e: -(e.modified or 0),
    "last-used": lambda e: -(e.last_used or 0),
    "key": lambda e: (e.layout, e.key),
}


def sort_entries(entries: list[Entry] | tuple[Entry, ...], by: str) -> list[Entry]:
    if by not in SORT_KEYS:
        raise UsageError(f"unknown sort key {by!r} (use {', '.join(SORT_KEYS)})")
    return sorted(entries, key=SORT_KEYS[by])
