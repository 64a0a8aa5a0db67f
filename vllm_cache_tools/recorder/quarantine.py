"""Moving a broken backend entry's files aside at the load failure (issue 29, item 4).

What vLLM 0.32 does with a damaged entry, measured with real starts (docs/prune.md, "Load
failures"): in the AOT tree it catches the failure ("Compiling model again due to a load
failure"), compiles, and replaces ``model`` in place (``os.replace``), so the next start loads
the fresh one: the failure is paid once and moving anything aside would only turn the next
start's load into a miss. In the backend tree (``VLLM_USE_AOT_COMPILE=0``, or a vLLM without
the AOT tree) it catches nothing: a truncated ``artifact_*`` (``CompilerManager.load``) or a
cut ``vllm_compile_cache.py`` (``initialize_cache``: ``ast.literal_eval``) raises out of the
model's first forward and **the start fails**, at every start, until someone removes the
folder.

With ``VLLM_CACHE_TOOLS_GUARD`` allowing it (:func:`allowed`: ``strict``, or ``quarantine``
beside the mode, e.g. ``warn,quarantine``) the recorder catches that failure, moves the file
vLLM could not load into ``<compile cache>/.vllm-cache-tools/quarantine/<folder>/`` (same
filesystem: a rename; never a removal), and lets vLLM compile that graph (or the whole
prefix, for the table): vLLM then writes the artifact and its table again in the entry's own
folder, so the next start loads it. Without it the recorder only writes the failure to its
ledger and lets vLLM raise as before.

Standard library only (runs inside vLLM); every function may raise ``OSError``."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping, Sequence

from vllm_cache_tools import safeio
from vllm_cache_tools.layout import QUARANTINE_DIRNAME, QUARANTINE_NOTE, STATE_DIRNAME

MODE_ENV = "VLLM_CACHE_TOOLS_GUARD"
FLAG = "quarantine"
"""The word in ``VLLM_CACHE_TOOLS_GUARD`` that allows moving files aside (``strict`` does too:
a strict start never loads what it does not trust)."""
_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def words(environ: Mapping[str, str] | None = None) -> set[str]:
    """The words of ``VLLM_CACHE_TOOLS_GUARD`` (separated by commas, ``+`` or spaces)."""
    raw = (os.environ if environ is None else environ).get(MODE_ENV, "")
    return {w for w in re.split(r"[,+\s]+", raw.strip().lower()) if w}


def allowed(environ: Mapping[str, str] | None = None) -> bool:
    w = words(environ)
    return FLAG in w or "strict" in w


def first_line(exc: BaseException) -> str:
    """``Type: message``, its first line, at most 300 characters (a ledger field)."""
    text = f"{type(exc).__name__}: {exc}".strip().split("\n", 1)[0]
    return text[:300]


def artifact_fault(exc: BaseException) -> bool:
    """Whether a failed load can be the file's fault: not when the machine failed (memory, a
    module that does not import, a device out of memory), where moving a good file aside
    would only cost a compile and fail the same way."""
    if isinstance(exc, (MemoryError, ImportError)):
        return False
    return "OutOfMemory" not in type(exc).__name__


def folder_name(tree: str, key: str, rank: str, prefix: str, now: float | None = None) -> str:
    when = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    # Several graphs of one prefix can fail within a second: each move gets its own folder.
    parts = [tree, key, rank, *([prefix] if prefix else []), when, str(os.getpid()),
             os.urandom(3).hex()]
    return _SAFE.sub("_", "-".join(parts))


def move_aside(compile_cache: str, entry_dir: str, names: Sequence[str], *, tree: str,
               key: str, rank: str, prefix: str, reason: str) -> str | None:
    """Move the files ``names`` of ``entry_dir`` (below ``compile_cache``, no link followed)
    into a new quarantine folder, with ``why.json`` (what, why, when, who); the folder's path,
    or None when none of the names could be moved (missing, or not what it was)."""
    rel = os.path.relpath(os.path.normpath(entry_dir), os.path.normpath(compile_cache))
    if rel == os.pardir or rel.startswith(os.pardir + os.sep) or os.path.isabs(rel):
        raise safeio.UnsafeTree(0, f"{entry_dir} is not under {compile_cache}")
    name = folder_name(tree, key, rank, prefix)
    src = safeio.open_dirs(compile_cache, rel)
    try:
        dst = safeio.open_dirs(compile_cache, [STATE_DIRNAME, QUARANTINE_DIRNAME, name],
                               create=True)
        try:
            safeio.check_writable_folder(dst, name)
            moved = [n for n in names if safeio.rename_at(src, n, dst, n)]
            if not moved:
                return None
            note = {"v": 1, "time": time.time(), "pid": os.getpid(), "tree": tree,
                    "key": key, "rank": rank, "prefix": prefix, "from": rel,
                    "files": moved, "reason": reason}
            safeio.place_at(dst, QUARANTINE_NOTE,
                            (json.dumps(note, indent=1, sort_keys=True) + "\n").encode())
        finally:
            os.close(dst)
    finally:
        os.close(src)
    return os.path.join(compile_cache, STATE_DIRNAME, QUARANTINE_DIRNAME, name)
