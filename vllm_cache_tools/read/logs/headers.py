"""Line headers: the ``LEVEL MM-DD HH:MM:SS [file.py:N]`` header and the process prefixes
(vLLM's, Ray's, with or without ANSI colour) that every log line is split into before its
message is matched (:func:`_parse_line` -> :class:`_Line`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# --------------------------------------------------------------------------------------------
# Line headers

_LEVEL_RE = re.compile(r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d-\d\d \d\d:\d\d:\d\d)"
                       r"(?:[.,]\d+)? \[?([^\s\]]+?:\d+)\] ?")
_PROC_RE = re.compile(r"\((?:([^()]*?) )?pid=(\d{1,10})(?:, ip=([^()\s]+))?\)")
_ANSI_RE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
_TAG_RE = re.compile(r"\[([A-Za-z0-9_.\-]+)\] ")
_RANK_DIR = re.compile(r"rank_\d+_\d+")
_RANK_IN_NAME = re.compile(r"(?:_TP|rank=|TP)(\d+)")


@dataclass
class _Line:
    proc: tuple[str, int | None]
    """(name, pid); ("", None) when there is no process prefix."""
    ip: str | None
    ts: str
    loc: str
    header: str
    """The header text (prefix, level, time, location): equal on every line of one record."""
    msg: str


def _parse_line(text: str) -> _Line | None:
    if "\x1b" in text:
        text = _ANSI_RE.sub("", text)
    m = _LEVEL_RE.search(text)
    if m is None:
        return None
    start = m.start()
    name, pid, ip = "", None, None
    head = text[:start].rstrip()
    if head.endswith(")"):
        i = head.rfind("(")
        pm = _PROC_RE.fullmatch(head, i) if i >= 0 else None
        if pm is not None:
            name, pid, ip = pm.group(1) or "", int(pm.group(2)), pm.group(3)
            start = i
    msg = text[m.end():]
    cr = msg.find("\r")
    if cr >= 0:
        msg = msg[:cr]
    return _Line((name, pid), ip, m.group(1), m.group(2), text[start:m.end()], msg)
