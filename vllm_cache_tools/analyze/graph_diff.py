"""Diff two ``computation_graph.py`` files with the noise taken out (the seed article's
section 4.1, automated): object addresses and generated names that only renumber are
normalised, then a unified diff plus a summary (ops added/removed, tensor shapes changed)."""

from __future__ import annotations

import difflib
import re
from collections import Counter
from dataclasses import dataclass

_ADDR = re.compile(r"0x[0-9a-fA-F]{6,}")
_GEN = re.compile(r"\b([A-Za-z_]+?)_(\d+)\b")
_OP = re.compile(r"\btorch\.ops\.[A-Za-z0-9_.]+|\btorch\.[a-z_][A-Za-z0-9_]*(?=\()|"
                 r"\boperator\.[a-z_]+")
_SHAPE = re.compile(r'"([a-z0-9]+\[[^\]"]*\])"')
# Every pattern above is linear (no nested or overlapping repeats; checked against hostile
# text in tests/test_total_readers.py). difflib is not: it is given at most this many lines.
MAX_DIFF_LINES = 250_000
"""Per side (real graphs: ~30 lines per KB; 250k lines is an ~8 MB graph)."""


def normalise(text: str) -> str:
    """Addresses -> ``0x?``; ``getitem_12``-style names renumbered by first appearance, per
    stem, so a graph that only renumbers its temporaries compares equal."""
    text = _ADDR.sub("0x?", text)
    seen: dict[str, dict[str, int]] = {}

    def renum(m: re.Match[str]) -> str:
        stem, num = m.group(1), m.group(2)
        table = seen.setdefault(stem, {})
        if num not in table:
            table[num] = len(table)
        return f"{stem}_{table[num]}"

    return _GEN.sub(renum, text)


@dataclass(frozen=True)
class GraphDiff:
    identical: bool
    diff: str
    ops_added: dict[str, int]
    ops_removed: dict[str, int]
    shapes_added: tuple[str, ...]
    shapes_removed: tuple[str, ...]


def diff_graphs(old: str, new: str, old_name: str = "old", new_name: str = "new",
                context: int = 3) -> GraphDiff:
    a, b = normalise(old), normalise(new)
    lines = max(a.count("\n"), b.count("\n"))
    if a == b:
        diff = ""
    elif lines > MAX_DIFF_LINES:
        diff = (f"(no line diff: {lines} lines, more than {MAX_DIFF_LINES}; the summary below "
                f"still compares the whole graphs)\n")
    else:
        diff = "".join(difflib.unified_diff(a.splitlines(keepends=True),
                                            b.splitlines(keepends=True),
                                            fromfile=old_name, tofile=new_name, n=context))
    oa, ob = Counter(_OP.findall(old)), Counter(_OP.findall(new))
    sa, sb = set(_SHAPE.findall(old)), set(_SHAPE.findall(new))
    return GraphDiff(
        identical=a == b,
        diff=diff,
        ops_added={k: ob[k] - oa[k] for k in sorted(ob) if ob[k] > oa[k]},
        ops_removed={k: oa[k] - ob[k] for k in sorted(oa) if oa[k] > ob[k]},
        shapes_added=tuple(sorted(sb - sa)),
        shapes_removed=tuple(sorted(sa - sb)),
    )
