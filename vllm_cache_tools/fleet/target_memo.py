"""A memo of the target environment's facts (:func:`.here.target`): Python, torch, CUDA and
Triton versions and where ``vllm`` is, which a child process in that interpreter reads
without importing torch (0.05-0.17 s of every unpack and pull decision on this machine, most
of it the interpreter's start and ``importlib.metadata``).

The child runs isolated (``-I``: no ``PYTHON*`` variables, no user site, no current folder),
so its answer is a function of the interpreter and of files only: the interpreter binary
(its path and real path are in the memo key, its ``stat`` is checked), ``pyvenv.cfg``,
every ``sys.path`` folder (installing or removing a package or a ``.pth`` file there
changes the folder's mtime), every ``.pth`` file in them (edited in place), and the files
the answer names (``torch/version.py``, the folders of ``torch`` and ``vllm``, the Triton
distribution's metadata folder). The child records their ``stat`` (mtime, size, inode; a
missing one as missing) before it reads them and again after, and its answer is kept only
when the two agree (nothing was being installed). A use re-checks every recorded ``stat``;
any difference, or a new file where one was missing, runs the child again.
``VLLM_CACHE_TOOLS_PROBE_MEMO=0`` turns it off with the probe's memo. GPU names are read on
every use (the driver's list, no process started)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Sequence
from typing import Any

from vllm_cache_tools import safeio
from vllm_cache_tools.live.memo import DISABLE_VAR, enabled
from vllm_cache_tools.read import jsontext
from vllm_cache_tools.store.locate import user_cache_dir

FORMAT = 1
MAX_BYTES = 1 << 20
DIRNAME = "target-memo"

# Runs first in the child: the stat of what the answer can depend on, before it is read.
DEPS_BEFORE = r"""
import os as _o, sys as _y, glob as _g
def _st(p):
    try:
        s = _o.stat(p)
        return [p, s.st_mtime_ns, s.st_size, s.st_ino]
    except OSError:
        return [p, None]
def _base_deps():
    dirs = [p for p in _y.path if p]
    pth = [f for d in dirs for f in sorted(_g.glob(_o.path.join(_g.escape(d), "*.pth")))]
    exe = [_y.executable, _o.path.realpath(_y.executable)]
    return [_st(p) for p in [*exe, _o.path.join(_y.prefix, "pyvenv.cfg"), *dirs, *pth]]
_deps0 = _base_deps()
"""

# Runs last (after the facts are printed): the files the answer names, and whether the
# first stats still hold.
DEPS_AFTER = r"""
def _named():
    res = []
    vf = out.get("torch_source")
    if isinstance(vf, str) and vf.endswith(".py"):
        res += [vf, _o.path.dirname(vf)]
    if _s is not None and _s.origin:
        res.append(_o.path.dirname(_s.origin))
    for n in ("triton", "pytorch-triton", "pytorch-triton-rocm", "pytorch-triton-xpu"):
        try:
            p = getattr(md.distribution(n), "_path", None)
        except Exception:
            continue
        if p is not None:
            res.append(str(p))
            break
    return res
print(json.dumps({"deps": _deps0 + [_st(p) for p in _named()],
                  "stable": _base_deps() == _deps0}))
"""


def _memo_file(exe: str, script: str) -> str:
    """The memo's name: the interpreter as given and as resolved, and the script run."""
    blob = json.dumps([FORMAT, os.path.abspath(exe), os.path.realpath(exe), script])
    return hashlib.sha256(blob.encode()).hexdigest()[:32] + ".json"


def _still(deps: Sequence[Any]) -> bool:
    for row in deps:
        path = row[0]
        try:
            s = os.stat(path)
        except OSError:
            if row[1] is not None:
                return False
            continue
        if row[1] is None or [s.st_mtime_ns, s.st_size, s.st_ino] != list(row[1:4]):
            return False
    return True


def load(exe: str, script: str) -> list[Any] | None:
    """The child's kept output lines (as parsed JSON) when nothing they depend on changed."""
    if not enabled(os.environ):
        return None
    try:
        raw = safeio.read_regular(user_cache_dir() / DIRNAME / _memo_file(exe, script),
                                  MAX_BYTES)
        doc = jsontext.loads(raw, "target memo")
        if doc.get("format") != FORMAT or not isinstance(doc.get("lines"), list):
            return None
        return doc["lines"] if _still(doc["deps"]) else None
    except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError):
        return None


def save(exe: str, script: str, lines: list[Any], deps: dict[str, Any]) -> None:
    """Keep the child's answer when its dependencies held still while it ran (never
    raises: the memo is an optimisation)."""
    if not enabled(os.environ) or deps.get("stable") is not True:
        return
    doc = {"format": FORMAT, "interpreter": exe, "lines": lines, "deps": deps["deps"]}
    with contextlib.suppress(OSError, TypeError, ValueError):
        os.makedirs(user_cache_dir(), exist_ok=True)
        fd = safeio.open_dirs(user_cache_dir(), [DIRNAME], create=True, mode=0o700)
        try:
            safeio.replace_at(fd, _memo_file(exe, script), json.dumps(doc).encode())
        finally:
            os.close(fd)


__all__ = ["DEPS_AFTER", "DEPS_BEFORE", "DISABLE_VAR", "load", "save"]
