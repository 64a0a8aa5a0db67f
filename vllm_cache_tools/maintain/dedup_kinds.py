"""Which cache files ``vllm-cache dedup`` may hard-link, and why (the writers we read).

Only files whose writers never modify them in place are linked (a write through one name
would change every name). How we know, per kind (read in vLLM 0.32/0.33 and torch 2.13):

* ``aot-model`` (``torch_aot_compile/<key>/rank_*/model``): vLLM ``compilation/decorators.py``
  saves to ``<path>.<pid>.tmp`` then ``os.replace`` (a recompile after a load failure replaces
  the name, it does not write into the inode).
* ``backend-meta`` (``cache_key_factors.json``, ``computation_graph.py``, ``transformed_code.py``
  of a backend entry): ``compilation/backends.py`` (``VllmBackend.__call__``) and
  ``compilation/wrapper.py`` write them with ``open(path, "w")`` only ``if not
  os.path.exists(path)``: written once, never again. The write itself is in place, so a file
  younger than the grace period (possibly still being written) is never linked.
* ``inductor`` (below an ``inductor_cache/`` folder): ``torch/_inductor/codecache.py``
  ``write_atomic`` (a ``.<pid>.<tid>.tmp`` name, then rename) writes the generated ``.py`` /
  ``.cpp`` sources, FX-graph and AOTAutograd entries (``autograd_cache.py`` calls it too);
  compiled ``.so`` files are built by ``_worker_compile_cpp`` only when missing, under a
  ``FileLock``.
* ``triton`` (below ``triton_cache/``): ``triton/runtime/cache.py`` ``FileCacheManager.put``
  writes ``tmp.pid_*`` then ``os.replace``.

Never linked: ``vllm_compile_cache.py`` (``CompilerManager.save_to_file`` rewrites it in place
with ``open(path, "w")`` whenever a compile adds a graph), lock files (``*.lock``, anything under
``locks/``: ``FileLock`` opens them ``O_RDWR|O_CREAT|O_TRUNC``), temporary and hidden names
(``.*``, ``*.tmp``; our own ``.vllm-cache-tools`` with the recorder's appended ledger, and
``.vllm-cache-trash``), compiler build folders (``*_CxxBuild``), ``*.error`` files, empty files
(nothing to save), and any file of a kind not listed above.

Shared objects: glibc's ``dlopen`` returns an already loaded library when a new path names the
same ``(st_dev, st_ino)``, so two linked ``.so`` names loaded by one process would become one
library. ``.so`` files are therefore linked only to the same path in a sibling rank folder of
the same entry (each rank is its own process).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from vllm_cache_tools.layout import AOT_DIRNAME, COMPILE_CACHE_DIRNAME

_RANK = re.compile(r"^rank_\d+_\d+$")
_BACKEND_META = frozenset({"cache_key_factors.json", "computation_graph.py",
                           "transformed_code.py"})


def file_kind(parts: Sequence[str]) -> tuple[str | None, str]:
    """``(kind, "")`` for a file (path components below the vLLM root) that may be linked,
    else ``(None, why not)``. The kinds and the writers they rest on: module docstring."""
    name = parts[-1]
    if any(p.startswith(".") for p in parts):
        return None, "temporary or tool file (hidden name)"
    if name.endswith(".tmp"):
        return None, "temporary file"
    if name.endswith(".lock") or "locks" in parts[:-1]:
        return None, "lock file (opened with O_TRUNC by FileLock)"
    if name == "vllm_compile_cache.py":
        return None, "rewritten in place by vLLM (CompilerManager.save_to_file)"
    if any(p.endswith("_CxxBuild") for p in parts) or name.endswith(".error"):
        return None, "compiler scratch or error file"
    if "inductor_cache" in parts[:-1]:
        return "inductor", ""
    if "triton_cache" in parts[:-1]:
        return "triton", ""
    if name == "model" and len(parts) >= 4 and _RANK.match(parts[-2]) and AOT_DIRNAME in parts:
        return "aot-model", ""
    if name in _BACKEND_META and parts[0] == COMPILE_CACHE_DIRNAME and len(parts) >= 5:
        return "backend-meta", ""
    return None, "not a file kind whose writers were read (left alone)"


def entry_of(parts: Sequence[str]) -> tuple[str, str]:
    """``(layout, key)`` of the entry holding a file, as prune's per-entry locks name it."""
    if parts[0] == COMPILE_CACHE_DIRNAME and len(parts) > 2 and parts[1] == AOT_DIRNAME:
        return "aot", parts[2]
    if parts[0] == AOT_DIRNAME:
        return "aot", parts[1]
    return "backend", parts[1]


def entry_rel(parts: Sequence[str]) -> str:
    """The entry folder relative to the root (how :func:`busy_entries` names it)."""
    n = 3 if parts[0] == COMPILE_CACHE_DIRNAME and parts[1] == AOT_DIRNAME else 2
    return "/".join(parts[:n])


def so_peer_key(parts: Sequence[str]) -> tuple[str, ...] | None:
    """For a shared object: the entry plus its path below the rank folder (rank siblings
    share it); ``None`` (never linked) when it is not below a rank folder."""
    for i, p in enumerate(parts):
        if _RANK.match(p):
            return (*entry_of(parts), *parts[i + 1:])
    return None
