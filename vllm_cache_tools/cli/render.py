"""Plain aligned tables that fit a terminal by dropping columns, never by wrapping a row or
cutting a key; and the shortest key prefixes that still name one entry (like git's)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from rich.cells import cell_len

from vllm_cache_tools.cli.common import shown_rows, write_table
from vllm_cache_tools.layout import AOT_KEY_SHOWN

GAP = "  "
ELLIPSIS = "…"
MIN_CUT = 10


@dataclass(frozen=True)
class Column:
    header: str
    align: Literal["left", "right"] = "left"
    drop: int | None = None
    """Order in which the column goes when the table is too wide (1 first); ``None``: kept."""
    shrink_to: int | None = None
    """Cells may be cut, keeping their end (model paths and names differ at the end): columns
    are left out only while the table is too wide with this one at most this wide; then it
    takes the room left, down to ``MIN_CUT``. ``None``: never cut."""


AOT_MIN_PREFIX = {64: AOT_KEY_SHOWN}
"""Shortest unique prefix of an AOT key (64 hex), but never shorter than this; backend keys
(10 hex) are shown whole: they are the folder names vLLM logs."""


def shown_keys(keys: Iterable[str]) -> dict[str, str]:
    """Each entry key as every table and line of the CLI shows it (ls, stats, audit, pack,
    push, pull, unpack, warm): whole for backend keys, the shortest prefix among ``keys``
    for AOT keys but at least 12 hex digits; each pastes back into show, rm or explain."""
    return unique_prefixes(keys, AOT_MIN_PREFIX)


def key_column(keys: Iterable[str | None]) -> tuple[dict[str, str], int]:
    """:func:`shown_keys` of the keys given (``None``: an entry without one), and the width
    of their column, for the one-line-per-entry outputs (pack, push, warm, unpack and pull's
    checks and placements)."""
    shown = shown_keys(k for k in keys if k)
    return shown, max(map(len, shown.values()), default=0)


def unique_prefixes(keys: Iterable[str], min_len: dict[int, int]) -> dict[str, str]:
    """Each key -> its shortest prefix that no other key starts with, at least
    ``min_len[len(key)]`` long (the whole key when its length is not in ``min_len``).

    A prefix another key equals exactly is still unique for ``locate_entry`` (exact match wins),
    but a longer key needs one more character than it shares with any other key."""
    ks = sorted(set(keys))
    out: dict[str, str] = {}
    for i, k in enumerate(ks):
        shared = 0
        for j in (i - 1, i + 1):  # in sorted order the longest common prefix is a neighbour's
            if 0 <= j < len(ks):
                o = ks[j]
                n = 0
                while n < min(len(k), len(o)) and k[n] == o[n]:
                    n += 1
                shared = max(shared, n)
        want = max(min_len.get(len(k), len(k)), shared + 1)
        out[k] = k[: min(len(k), want)]
    return out


def _cut(text: str, width: int) -> str:
    if cell_len(text) <= width:
        return text
    tail = text
    while tail and cell_len(ELLIPSIS + tail) > width:
        tail = tail[1:]
    # Whole path components read better ("…/models/tiny-llama"), unless that leaves little.
    cut = tail.find("/")
    if cut > 0 and cell_len(tail) - cut >= width // 2:
        tail = tail[cut:]
    return ELLIPSIS + tail


def fit(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int | None
        ) -> tuple[list[int], list[int]]:
    """Which columns to show (indices) and their widths, for a terminal ``width`` wide
    (``None``: all columns, whole cells)."""
    natural = [max([cell_len(c.header), *(cell_len(r[i]) for r in rows)])
               for i, c in enumerate(columns)]
    keep = list(range(len(columns)))

    def total(idx: list[int], widths: list[int]) -> int:
        return sum(widths[i] for i in idx) + len(GAP) * (len(idx) - 1)

    if width is None:
        return keep, natural
    comfortable = [n if c.shrink_to is None else min(n, c.shrink_to)
                   for c, n in zip(columns, natural, strict=True)]
    for i in sorted((i for i, c in enumerate(columns) if c.drop is not None),
                    key=lambda i: columns[i].drop or 0):
        if total(keep, comfortable) <= width:
            break
        keep.remove(i)
    widths = list(natural)
    excess = total(keep, widths) - width
    for i in keep:
        if excess > 0 and columns[i].shrink_to is not None:
            cut = min(excess, widths[i] - max(MIN_CUT, cell_len(columns[i].header)))
            if cut > 0:
                widths[i] -= cut
                excess -= cut
    return keep, widths


def render(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int | None
           ) -> list[str]:
    """Header and one line per row, aligned, no trailing blanks. With ``width`` the table fits
    it where the kept columns allow; a row is never wrapped onto a second line. Each cell
    is shown as :func:`~vllm_cache_tools.cli.common.shown_rows` shows it (secrets hidden
    before a column cuts a URL, control characters escaped) before it is measured."""
    rows = shown_rows(rows)
    keep, widths = fit(columns, rows, width)

    def line(cells: Sequence[str]) -> str:
        parts = []
        for i in keep:
            text = _cut(cells[i], widths[i])
            pad = " " * (widths[i] - cell_len(text))
            parts.append(pad + text if columns[i].align == "right" else text + pad)
        return GAP.join(parts).rstrip()

    return [line([c.header for c in columns]), *(line(r) for r in rows)]


def print_table(title: str, columns: Sequence[Column], rows: Sequence[Sequence[str]], *,
                wide: bool = False) -> None:
    """``title``, a blank line, then the table on stdout: fitted to the terminal's width
    unless ``wide`` or stdout is no terminal, the header bold on a colour terminal
    (``NO_COLOR`` and ``TERM=dumb`` respected)."""
    import shutil
    import sys

    tty = sys.stdout.isatty()
    width = None if wide or not tty else shutil.get_terminal_size((80, 24)).columns
    lines = render(columns, rows, width)
    write_table(title, lines)
