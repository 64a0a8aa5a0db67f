"""Where each JIT cache lives: the owner's environment variable, else the owner's default,
resolved the way the owner's code does it (sources cited per kind below).

Nothing here reads a cache; :func:`locate_caches` only names places (existing or not), each
with where the answer came from, so a listing can say ``TRITON_CACHE_DIR`` or ``default``."""

from __future__ import annotations

import getpass
import grp
import os
import pwd
import re
import stat as st
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from vllm_cache_tools.layout import COMPILE_CACHE_DIRNAME
from vllm_cache_tools.store.locate import resolve_root

CacheKind = Literal["vllm", "inductor", "triton", "flashinfer", "deepgemm", "cuda",
                    "vllm-other"]
KINDS: tuple[CacheKind, ...] = ("vllm", "inductor", "triton", "flashinfer", "deepgemm",
                                "cuda", "vllm-other")

UNDERSTOOD: frozenset[CacheKind] = frozenset({"vllm", "inductor", "triton"})
"""Kinds whose layout we read (entries listed; ``prune --cache`` may choose their parts by
policy). The others are listed by size only and pruned only when named with ``--cache``."""

DEEPGEMM_DIRNAME = "deep_gemm"
"""vLLM's own default for DeepGEMM, under its cache root (see :func:`_deepgemm`)."""


@dataclass(frozen=True)
class CacheLocation:
    kind: CacheKind
    path: Path
    """Absolute, as named (a symlink here is not resolved: :attr:`link_target` says where it
    points)."""
    source: str
    """Where the path came from: an environment variable, ``default``, ``vLLM default``,
    ``--root``, or ``other user`` (another user's default found in a shared folder)."""
    user: str | None = None
    """The user whose default this is, when the path is per user."""

    @property
    def link_target(self) -> str | None:
        """Where the path really is when it, or a folder above it, is a symlink."""
        real = os.path.realpath(self.path)
        return real if real != os.path.abspath(self.path) else None


def _abs(p: str) -> Path:
    return Path(os.path.abspath(os.path.expanduser(p)))


def _home(env: Mapping[str, str]) -> Path:
    return _abs(env.get("HOME") or os.path.expanduser("~"))


def current_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid_{os.getuid()}"


def _inductor(env: Mapping[str, str]) -> list[CacheLocation]:
    """torch ``torch/_inductor/runtime/cache_dir_utils.py`` (2.5-2.13): ``cache_dir()`` is
    ``$TORCHINDUCTOR_CACHE_DIR`` made absolute, else ``default_cache_dir()`` =
    ``tempfile.gettempdir()/torchinductor_<user>`` (user name with ``\\/:*?"<>|`` replaced by
    ``_``; ``uid_<n>`` when there is none). vLLM points the variable at its own
    ``inductor_cache/`` folders while it compiles, but Inductor still writes what it builds
    outside a compile there (precompiled headers on CPU, unpacked artifacts: vllm#39718).
    Other users' ``torchinductor_*`` folders in the same temp folder are listed too (owner
    ``other user``); prune leaves them alone without ``--all-users``."""
    user = current_user()
    tmp = Path(tempfile.gettempdir())
    mine = tmp / ("torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))
    out = []
    if env.get("TORCHINDUCTOR_CACHE_DIR"):
        out.append(CacheLocation("inductor", _abs(env["TORCHINDUCTOR_CACHE_DIR"]),
                                 "TORCHINDUCTOR_CACHE_DIR", user))
    if not out or (os.path.lexists(mine) and out[0].path != mine):
        # With the variable set, the default still holds what ran without it.
        out.append(CacheLocation("inductor", mine, "default", user))
    try:
        names = sorted(n for n in os.listdir(tmp) if n.startswith("torchinductor_"))
    except OSError:
        names = []
    for n in names:
        p = tmp / n
        if any(loc.path == p for loc in out):
            continue
        out.append(CacheLocation("inductor", p, "other user", n.removeprefix("torchinductor_")))
    return out


def _triton(env: Mapping[str, str]) -> list[CacheLocation]:
    """triton ``triton/knobs.py`` (3.3-3.9): ``cache.dir`` is ``$TRITON_CACHE_DIR``, else
    ``get_triton_dir("cache")`` = ``$TRITON_HOME/.triton/cache`` with ``TRITON_HOME``
    defaulting to ``~``. Older Triton: ``$TRITON_CACHE_DIR`` else ``~/.triton/cache``. vLLM
    (compiler_interface.py, 0.32) keeps a caller's ``TRITON_CACHE_DIR`` and otherwise points
    it at the entry's own ``triton_cache/`` (listed with the vLLM entry)."""
    if env.get("TRITON_CACHE_DIR", "").strip():
        return [CacheLocation("triton", _abs(env["TRITON_CACHE_DIR"].strip()),
                              "TRITON_CACHE_DIR", current_user())]
    if env.get("TRITON_HOME"):
        return [CacheLocation("triton", _abs(env["TRITON_HOME"]) / ".triton" / "cache",
                              "TRITON_HOME", current_user())]
    return [CacheLocation("triton", _home(env) / ".triton" / "cache", "default",
                          current_user())]


def _flashinfer(env: Mapping[str, str]) -> list[CacheLocation]:
    """flashinfer ``flashinfer/jit/env.py`` (flashinfer-ai/flashinfer, 0.3+):
    ``FLASHINFER_BASE_DIR = $FLASHINFER_WORKSPACE_BASE`` (default ``Path.home()``), cache
    ``<base>/.cache/flashinfer`` holding ``<archs>/cached_ops``, ``<archs>/generated`` and
    ``cubins`` (``FLASHINFER_CUBIN_DIR`` moves only the cubins)."""
    if env.get("FLASHINFER_WORKSPACE_BASE"):
        return [CacheLocation("flashinfer", _abs(env["FLASHINFER_WORKSPACE_BASE"]) / ".cache"
                              / "flashinfer", "FLASHINFER_WORKSPACE_BASE", current_user())]
    return [CacheLocation("flashinfer", _home(env) / ".cache" / "flashinfer", "default",
                          current_user())]


def _deepgemm(env: Mapping[str, str], vllm_root: Path) -> list[CacheLocation]:
    """DeepGEMM ``csrc/jit/compiler.hpp`` (deepseek-ai/DeepGEMM): ``$DG_JIT_CACHE_DIR``, else
    ``$HOME/.deep_gemm``; kernels in ``cache/kernel.<name>.<hash>/``, builds in ``tmp/``.
    vLLM (``vllm/utils/deep_gemm.py``, 0.32) sets ``DG_JIT_CACHE_DIR`` to
    ``$VLLM_CACHE_ROOT/deep_gemm`` when it is unset, so under vLLM that is the default;
    DeepGEMM's own default is listed as well (used outside vLLM)."""
    if env.get("DG_JIT_CACHE_DIR"):
        return [CacheLocation("deepgemm", _abs(env["DG_JIT_CACHE_DIR"]), "DG_JIT_CACHE_DIR",
                              current_user())]
    return [CacheLocation("deepgemm", vllm_root / DEEPGEMM_DIRNAME, "vLLM default",
                          current_user()),
            CacheLocation("deepgemm", _home(env) / ".deep_gemm", "default", current_user())]


def _cuda(env: Mapping[str, str]) -> list[CacheLocation]:
    """The CUDA driver's JIT ComputeCache (NVIDIA CUDA Programming Guide, "CUDA Environment
    Variables"): ``$CUDA_CACHE_PATH``, default ``~/.nv/ComputeCache`` on Linux."""
    if env.get("CUDA_CACHE_PATH"):
        return [CacheLocation("cuda", _abs(env["CUDA_CACHE_PATH"]), "CUDA_CACHE_PATH",
                              current_user())]
    return [CacheLocation("cuda", _home(env) / ".nv" / "ComputeCache", "default",
                          current_user())]


def locate_caches(root: str | os.PathLike[str] | None = None,
                  env: Mapping[str, str] | None = None,
                  kinds: tuple[CacheKind, ...] = KINDS) -> list[CacheLocation]:
    """Every place a cache of ``kinds`` would be, for this user and environment (the places
    need not exist). ``root``: the vLLM cache root (``--root``; default resolved as vLLM
    does)."""
    env = os.environ if env is None else env
    croot = resolve_root(root, env)
    vroot = Path(os.path.abspath(croot.vllm_root))
    user = current_user()
    found: dict[CacheKind, list[CacheLocation]] = {
        "vllm": [CacheLocation("vllm", vroot / COMPILE_CACHE_DIRNAME, croot.source, user)],
        "inductor": _inductor(env),
        "triton": _triton(env),
        "flashinfer": _flashinfer(env),
        "deepgemm": _deepgemm(env, vroot),
        "cuda": _cuda(env),
        "vllm-other": [CacheLocation("vllm-other", vroot, croot.source, user)],
    }
    return [loc for k in kinds for loc in found[k]]


SYSTEM_DIRS = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib64", "/opt", "/proc", "/run",
               "/sbin", "/srv", "/sys", "/usr", "/var", "/home", "/root", "/mnt", "/media")


def dangerous_reason(path: str | os.PathLike[str], vllm_root: Path | None = None) -> str | None:
    """Why pruning inside ``path`` must be refused, or ``None``."""
    real = os.path.realpath(path)
    home = os.path.realpath(os.path.expanduser("~"))
    if real == "/":
        return "it is /"
    if real == home or home.startswith(real.rstrip("/") + "/"):
        return f"it is your home folder or above it ({home})"
    temps = {os.path.realpath(tempfile.gettempdir()), "/tmp", "/var/tmp", "/dev/shm"}
    if real in temps:
        return "it is a temp folder shared by every program"
    if real in SYSTEM_DIRS:
        return "it is a system folder"
    if vllm_root is not None:
        vr = os.path.realpath(vllm_root)
        if vr == real or vr.startswith(real.rstrip("/") + "/"):
            return f"it holds the vLLM cache root {vr}"
    return None


def _uid_named(user: str | None) -> int | None:
    """The uid a folder name's user part stands for (torch's ``uid_<n>`` when the user had
    no name; ``_`` replaced characters cannot be undone, so such names match nobody)."""
    if not user:
        return None
    try:
        return pwd.getpwnam(user).pw_uid
    except KeyError:
        m = re.fullmatch(r"uid_(\d{1,10})", user)
        return int(m.group(1)) if m else None


def _private_group(gid: int, uid: int) -> bool:
    """The group is its owner's own (a user-private group: only that user in it), so a
    group-writable folder there is writable by its owner alone (what ``umask 002`` makes)."""
    try:
        g = grp.getgrgid(gid)
        pw = pwd.getpwuid(uid)
    except KeyError:
        return False
    return pw.pw_gid == gid and all(m == pw.pw_name for m in g.gr_mem)


def others_can_write(s: os.stat_result, allowed: frozenset[int]) -> str | None:
    """Who besides ``allowed`` (and root) may add or replace names in the folder ``s``."""
    if s.st_uid not in allowed and s.st_uid != 0:
        return f"owned by {owner_of(s.st_uid)}"
    if s.st_mode & st.S_IWOTH:
        return "writable by everyone"
    if s.st_mode & st.S_IWGRP and not _private_group(s.st_gid, s.st_uid):
        return f"writable by group {_group_name(s.st_gid)}"
    return None


@dataclass(frozen=True)
class PlaceCheck:
    """:func:`check_place`'s answer."""

    problem: str | None
    exposed: bool
    """In a folder other users can write in."""
    ident: tuple[int, int] | None = None
    """``(st_dev, st_ino)`` of the folder checked there (``lstat``)."""


def shared_place_problem(loc: CacheLocation, caller: int | None = None) -> str | None:
    """:func:`check_place`'s problem alone."""
    return check_place(loc, caller).problem


def check_place(loc: CacheLocation, caller: int | None = None) -> PlaceCheck:
    """Why ``loc`` must not be read or pruned, when it lies in a folder everyone can write in
    (``/tmp``, ``/var/tmp``, ``$TMPDIR``): there anyone may plant its name (a symlink to
    ``/var/lib``, to a victim's home, a folder of their own). As OpenSSH's StrictModes: it
    must be a real folder (``lstat``, never a link), owned by the user it is named for or by
    the caller, and writable by nobody else (group-writable only through its owner's private
    group, as ``umask 002`` makes it; torch and Triton make their folders with
    ``os.makedirs``' default mode minus the umask). ``problem`` is ``None`` when fine, not
    there, or not in such a folder."""
    why, exposed, s = _check_place(loc, caller)
    return PlaceCheck(why, exposed, (s.st_dev, s.st_ino) if s is not None else None)


def _check_place(loc: CacheLocation, caller: int | None
                 ) -> tuple[str | None, bool, os.stat_result | None]:
    caller = os.geteuid() if caller is None else caller
    path = os.path.abspath(loc.path)
    owner = _uid_named(loc.user)
    allowed = frozenset({caller} | ({owner} if owner is not None else set()))
    try:
        ps = os.stat(os.path.dirname(path))  # followed: $TMPDIR may be the user's own link
    except OSError:
        return None, False, None
    if not ps.st_mode & st.S_IWOTH:
        # Not a folder everyone can write in. A group-shared folder (a team's vLLM root,
        # setgid) is trusted as its group is: safeio's rules cover writing there.
        return None, False, None
    exposed = "writable by everyone"
    try:
        s = os.lstat(path)
    except OSError:
        return None, True, None
    where = f"in {os.path.dirname(path)} ({exposed})"
    if st.S_ISLNK(s.st_mode):
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        return f"a symlink (-> {target}) {where}: not followed", True, s
    if not st.S_ISDIR(s.st_mode):
        return f"not a folder {where}", True, s
    if s.st_uid not in allowed:
        named = loc.user if owner is not None and owner != caller else "you"
        return f"owned by {owner_of(s.st_uid)}, not by {named}, {where}", True, s
    why = others_can_write(s, allowed)
    return (f"{why}, {where}" if why is not None else None), True, s


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return f"gid {gid}"


def owner_of(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"
