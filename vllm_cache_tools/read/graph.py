"""Reader for ``computation_graph.py`` (the Dynamo graph vLLM saves beside a backend entry).

It is generated code and is never imported; we read text only: the ``# File: path:line in fn``
provenance comments that name the traced model files, the submodules the piecewise split made,
and the dtypes/shapes in the ``forward`` signature.

Every pattern is anchored to one line and cannot backtrack across it, so reading costs time
linear in the file (issue 12, item 6: the earlier ``\\s*`` after ``^`` spanned blank lines and
``.+?`` re-scanned the rest of the line from every ``# File:``: 40k newlines took 9.5 s, 300 KB
over a minute). A file past :data:`MAX_BYTES` or :data:`TIME_BUDGET_S` is not judged."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass

from vllm_cache_tools.read.errors import unreadable
from vllm_cache_tools.read.jsontext import beyond_limits
from vllm_cache_tools.read.noatime import read_noatime

# "# File: <path>:<line> in <fn>": the comment to the end of its line, then in it the first
# ":<digits> in <fn>"; the path is what lies before. One comment per line, as Dynamo writes.
_FILE_LINE = re.compile(r"#[ \t]*File:([^\n]*)")
_FILE_TAIL = re.compile(r":(\d+) in ([\w<>.]+)")
# "    submod_1 = self.submod_1(...)" at the start of a line. Searched from its literal (the
# regex engine skips to it), the line start checked by hand: a pattern opening with "^\s*"
# would be tried at every line of a file of blank lines.
_SUBMOD = re.compile(r"(submod_\d+)[ \t]*=[ \t]*self\.(submod_\d+)\(")
MAX_BYTES = 64 * 1024 * 1024
"""Real graphs: ~30 KB per decoder layer (62 KB for a 2-layer Llama)."""
TIME_BUDGET_S = 5.0
"""A backstop: linear patterns read 64 MB well within it."""


@dataclass(frozen=True)
class GraphInfo:
    files: tuple[str, ...]
    """Source files named in ``# File:`` comments, in order of first appearance."""
    functions: tuple[str, ...]
    """``path:function`` pairs, in order of first appearance."""
    submodules: tuple[str, ...]
    lines: int

    @property
    def model_file(self) -> str | None:
        """The model definition file (under ``model_executor/models/``), if any."""
        for f in self.files:
            if "/model_executor/models/" in f:
                return f
        return None


def file_comments(text: str, deadline: float | None = None) -> Iterator[tuple[str, str]]:
    """``(path, function)`` of every ``# File: path:line in fn`` comment, in order."""
    tail = _FILE_TAIL.search
    for n, m in enumerate(_FILE_LINE.finditer(text)):
        rest = m.group(1)
        t = tail(rest)
        if t is not None:
            path = rest[:t.start()].strip()
            if path:
                yield path, t.group(2)
        if deadline is not None and n % 4096 == 4095 and time.monotonic() > deadline:
            raise beyond_limits("computation_graph.py", f"read for over {TIME_BUDGET_S:.0f} s")


def parse_graph(text: str, time_budget_s: float | None = TIME_BUDGET_S) -> GraphInfo:
    deadline = time.monotonic() + time_budget_s if time_budget_s is not None else None
    files: dict[str, None] = {}
    funcs: dict[str, None] = {}
    for path, fn in file_comments(text, deadline):
        files.setdefault(path, None)
        funcs.setdefault(f"{path}:{fn}", None)
    subs = tuple(dict.fromkeys(m.group(1) for m in _SUBMOD.finditer(text)
                               if _at_line_start(text, m.start())))
    return GraphInfo(tuple(files), tuple(funcs), subs, text.count("\n"))


def _at_line_start(text: str, i: int) -> bool:
    """Whether only blanks precede position ``i`` on its line (cost: those blanks)."""
    while i > 0 and text[i - 1] in " \t":
        i -= 1
    return i == 0 or text[i - 1] == "\n"


def read_graph(path: str | os.PathLike[str]) -> GraphInfo:
    try:
        raw = read_noatime(path, MAX_BYTES + 1)
    except OSError as exc:
        raise unreadable("computation_graph.py", exc) from None
    if len(raw) > MAX_BYTES:
        raise beyond_limits("computation_graph.py", f"larger than {MAX_BYTES} bytes")
    return parse_graph(raw.decode("utf-8", errors="replace"))


def model_file_from_head(head: bytes) -> str | None:
    """The first model-definition file named in a ``# File:`` comment, from the start of
    ``computation_graph.py`` (a fast path for listings: stops at the first one)."""
    if b"/model_executor/models/" not in head:
        return None
    for path, _ in file_comments(head.decode("utf-8", "replace"), time.monotonic() + 1.0):
        if "/model_executor/models/" in path:
            return path
    return None
