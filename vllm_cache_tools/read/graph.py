"""Reader for ``computation_graph.py`` (the Dynamo graph vLLM saves beside a backend entry).

It is generated code and is never imported; we read text only: the ``# File: path:line in fn``
provenance comments that name the traced model files, the submodules the piecewise split made,
and the dtypes/shapes in the ``forward`` signature."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from vllm_cache_tools.read.errors import ReadError, unreadable
from vllm_cache_tools.read.noatime import read_noatime

_FILE_COMMENT = re.compile(r"#\s*File:\s*(?P<path>.+?):(?P<line>\d+) in (?P<fn>[\w<>.]+)")
_SUBMOD = re.compile(r"^\s*(submod_\d+)\s*=\s*self\.(submod_\d+)\(", re.M)
MAX_BYTES = 256 * 1024 * 1024


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


def parse_graph(text: str) -> GraphInfo:
    files: dict[str, None] = {}
    funcs: dict[str, None] = {}
    for m in _FILE_COMMENT.finditer(text):
        files.setdefault(m["path"].strip(), None)
        funcs.setdefault(f"{m['path'].strip()}:{m['fn']}", None)
    subs = tuple(dict.fromkeys(m.group(1) for m in _SUBMOD.finditer(text)))
    return GraphInfo(tuple(files), tuple(funcs), subs, text.count("\n"))


def read_graph(path: str | os.PathLike[str]) -> GraphInfo:
    try:
        if os.path.getsize(path) > MAX_BYTES:
            raise ReadError("computation_graph.py is implausibly large")
        return parse_graph(read_noatime(path).decode("utf-8", errors="replace"))
    except OSError as exc:
        raise unreadable("computation_graph.py", exc) from None


def model_file_from_head(head: bytes) -> str | None:
    """The first model-definition file named in a ``# File:`` comment, from the start of
    ``computation_graph.py`` (a fast path for listings: no regex over the whole file)."""
    i = head.find(b"/model_executor/models/")
    while i >= 0:
        start = head.rfind(b"# File:", 0, i)
        nl = head.rfind(b"\n", 0, i)
        if start > nl:
            m = _FILE_COMMENT.match(head[start:head.find(b"\n", i)].decode("utf-8", "replace"))
            if m:
                return m["path"].strip()
        i = head.find(b"/model_executor/models/", i + 1)
    return None
