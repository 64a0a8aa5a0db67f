"""A memo of the live probe's answers, sound the way a build cache is.

The probe (:mod:`vllm_cache_tools.live.probe`) spends 6-9 s importing vLLM and torch to
compute a handful of hashes. Its answer is a function of its request (vLLM arguments, usage,
rank), the process environment, the working directory, the interpreter, the machine, and the
files it read. The first five form the memo key (:func:`memo_key`; of the environment, the
variables that count: :func:`env_role`; ``PATH`` as where the tools resolve, checked at
:func:`load`); the files are listed by
the probe itself (every file it opened or imported a module from, every folder it listed,
each with mtime, size and inode, absent ones included) and re-checked on every use
(:func:`stale_dependency`), so editing a vLLM or torch source, a model's ``config.json``,
installing a package or adding a module anywhere on ``sys.path`` makes the next predict run
the probe again. Answers of probes that used the network (a hub model id resolved online) are
never kept. ``VLLM_CACHE_TOOLS_PROBE_MEMO=0`` turns the memo off.

Standard library only: the probe loads this file by path in the user's vLLM environment to
memoize its Inductor child the same way (:func:`load` / :func:`save` take the folder).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import shutil
import socket
import stat
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

MEMO_VERSION = 2
KEEP = 64  # answers kept (newest used first); each is ~1 MB of JSON
IGNORABLE_ENV = frozenset({
    # shell and login bookkeeping
    "_", "PWD", "OLDPWD", "SHLVL", "PS1", "PS2", "PROMPT_COMMAND", "HISTFILE", "HISTSIZE",
    "HISTFILESIZE", "HISTCONTROL", "MAIL", "MAILCHECK", "SSH_CLIENT", "SSH_CONNECTION",
    "SSH_TTY", "SSH_AUTH_SOCK", "SSH_AGENT_PID", "GPG_AGENT_INFO", "DBUS_SESSION_BUS_ADDRESS",
    "XDG_SESSION_ID", "XDG_SESSION_TYPE", "XDG_SESSION_CLASS", "XDG_SEAT", "XDG_VTNR",
    "MOTD_SHOWN", "LESSOPEN", "LESSCLOSE", "LS_COLORS", "EDITOR", "VISUAL", "PAGER",
    # terminals and multiplexers
    "TERM", "COLORTERM", "TERM_PROGRAM", "TERM_PROGRAM_VERSION", "TERM_SESSION_ID",
    "WINDOWID", "COLUMNS", "LINES", "TMUX", "TMUX_PANE", "STY", "WINDOW", "VTE_VERSION",
    "KONSOLE_VERSION", "ITERM_SESSION_ID", "WT_SESSION", "WT_PROFILE_ID",
    "VSCODE_GIT_IPC_HANDLE", "VSCODE_INJECTION", "DISPLAY", "WAYLAND_DISPLAY",
    # CI systems
    "CI", "CONTINUOUS_INTEGRATION", "BUILD_ID", "BUILD_NUMBER", "BUILD_URL", "JOB_NAME",
    "JENKINS_URL", "JENKINS_HOME", "EXECUTOR_NUMBER", "NODE_NAME", "WORKSPACE",
    "GITLAB_CI", "CIRCLECI", "TRAVIS", "BUILDKITE", "TF_BUILD", "TEAMCITY_VERSION",
})
"""Variables that are no input of vLLM's, torch's or Triton's decisions: the shell's, the
terminal's and CI systems' bookkeeping (with :data:`IGNORABLE_PREFIXES`). A memo or standby
outlives a change of one of them, unless the probe saw code read it (then it counts: the
probe records it, :func:`changed_reads`), or code that is not a known scanner walk the whole
environment. Everything else counts, by value, except ``PATH`` (:data:`PATH_VAR`) and the
cache root (:data:`ROOT_VAR`)."""
IGNORABLE_PREFIXES = ("GITHUB_", "GITLAB_", "CI_", "RUNNER_", "BUILDKITE_", "CIRCLE_",
                      "TRAVIS_", "JENKINS_", "TEAMCITY_", "SYSTEM_", "AGENT_", "BUILD_",
                      "SSH_", "TMUX_", "KITTY_", "ALACRITTY_", "ITERM_", "VSCODE_",
                      "LC_TERMINAL")
PATH_VAR = "PATH"
ROOT_VAR = "VLLM_CACHE_ROOT"
"""vLLM's cache root: no factor of any key (``envs.compile_factors`` ignores it), so an answer
made for one root serves another; what the probe read inside the root is left out of its
dependencies (the probe's ``_outside_root``)."""
TOOLS = ("cc", "c++", "gcc", "g++", "clang", "clang++", "nvcc", "ptxas", "cuobjdump",
         "fatbinary", "nvlink", "ninja", "ld", "as", "hipcc", "lscpu", "nvidia-smi",
         "rocminfo", "numactl", "file", "ldconfig", "uname", "git")
"""What ``PATH`` means to vLLM, Inductor and Triton: the compilers and tools they look up by
name (Triton builds its driver helpers with ``cc``/``gcc``/``clang``; Inductor's C++ and
CUDA builds; vLLM's platform probes; ``platform.architecture()`` runs ``file``). ``PATH``
counts as where each resolves (file identity), not as its string: the probe records that
for these and for every program it saw started by name, and a memo whose tool resolves
elsewhere now is not used (:func:`tool_changes`)."""


def env_role(name: str) -> str:
    """"ignorable", "path", "root" or "counted" (pure: the classification, by name)."""
    if not isinstance(name, str):  # os.environb's keys: counted, fail safe
        return "counted"
    if name == PATH_VAR:
        return "path"
    if name == ROOT_VAR:
        return "root"
    if name in IGNORABLE_ENV or name.startswith(IGNORABLE_PREFIXES):
        return "ignorable"
    return "counted"


def counted_env(env: Mapping[str, str]) -> dict[str, str]:
    """The variables whose value keys an answer (see :func:`env_role`)."""
    return {k: v for k, v in sorted(env.items()) if env_role(k) == "counted"}


def value_digest(value: str | None) -> str | None:
    """A short digest of a variable's value, so that a memo can say a read variable changed
    without holding its value."""
    return None if value is None else hashlib.sha256(value.encode()).hexdigest()[:16]


def resolve_tools(names: Iterable[str], path: str | None) -> dict[str, list[Any] | None]:
    """Where each tool name resolves on ``path`` (``shutil.which``), with the file's
    identity: ``{name: [realpath, mtime_ns, size, inode] | None}``."""
    out: dict[str, list[Any] | None] = {}
    for name in sorted(set(names)):
        found = shutil.which(name, path=path if path is not None else os.defpath)
        if found is None:
            out[name] = None
            continue
        real = os.path.realpath(found)
        try:
            st = os.stat(real)
        except OSError:
            out[name] = None
            continue
        out[name] = [real, st.st_mtime_ns, st.st_size, st.st_ino]
    return out


def tool_changes(recorded: Mapping[str, Any], env: Mapping[str, str]) -> str | None:
    """The first tool whose resolution on ``env``'s ``PATH`` differs from ``recorded``."""
    now = resolve_tools(recorded, env.get(PATH_VAR))
    for name in sorted(recorded):
        if now.get(name) != recorded[name]:
            return name
    return None


def changed_reads(reads: Mapping[str, Any], env: Mapping[str, str], walked: bool = False
                  ) -> str | None:
    """The first ignorable variable the probe saw read whose value differs in ``env`` (by
    digest), or None. ``walked``: unknown code walked the whole environment, so an ignorable
    variable set now that was not then counts too."""
    for name in sorted(reads):
        if value_digest(env.get(name)) != reads[name]:
            return name
    if walked:
        return next((k for k in sorted(env) if env_role(k) == "ignorable" and k not in reads),
                    None)
    return None


DISABLE_VAR = "VLLM_CACHE_TOOLS_PROBE_MEMO"


def enabled(environ: Mapping[str, str]) -> bool:
    return environ.get(DISABLE_VAR, "1").strip().lower() not in ("0", "false", "no", "off")


def _read(path: str, limit: int = 1 << 16) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", "replace")
    except OSError:
        return None


def hardware() -> dict[str, Any]:
    """What of the machine can reach a cache-key input: CPU model and ISA flags (Inductor
    and vLLM's CPU platform pick kernels and defaults from them), CPU count and this
    process's affinity (vLLM's CPU platform sets thread counts from it), memory size, GPU
    models and driver (``CacheBase.get_system()``; vLLM's defaults by device). The host name
    is left out on purpose: containers get a new one at each start."""
    cpu: dict[str, str] = {}
    for line in (_read("/proc/cpuinfo", 1 << 20) or "").splitlines():
        k, _, v = line.partition(":")
        k = k.strip()
        if k in ("model name", "flags", "vendor_id", "cpu family", "model") and k not in cpu:
            cpu[k] = v.strip()
    mem = next((ln for ln in (_read("/proc/meminfo") or "").splitlines()
                if ln.startswith("MemTotal:")), None)
    gpus: dict[str, str | None] = {}
    for pattern_root, leaf in (("/proc/driver/nvidia/gpus", "information"),
                               ("/sys/class/kfd/kfd/topology/nodes", "name")):
        with contextlib.suppress(OSError):
            for d in sorted(os.listdir(pattern_root)):
                gpus[f"{pattern_root}/{d}"] = _read(f"{pattern_root}/{d}/{leaf}")
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {"machine": platform.machine(), "system": platform.system(),
            "release": platform.release(), "cpu": cpu, "cpu_count": os.cpu_count(),
            "affinity": affinity, "memory": mem, "gpus": gpus,
            "nvidia_driver": _read("/proc/driver/nvidia/version")}


def _file_id(path: str) -> list[Any]:
    try:
        st = os.stat(path)
    except OSError:
        return [path, None]
    return [path, os.path.realpath(path), st.st_mtime_ns, st.st_size, st.st_ino]


def memo_key(request: Mapping[str, Any], env: Mapping[str, str], python: str,
             probe_source: bytes, cwd: str | None = None,
             machine: Mapping[str, Any] | None = None, classify: bool = True) -> str:
    """sha256 over everything the probe's answer depends on besides the files it reads: the
    counted variables by value, not the ignorable ones, ``PATH`` or the cache root
    (:func:`env_role`). ``PATH`` is checked at :func:`load` as where :data:`TOOLS` and the
    programs the probe started resolve (the probe records them in its ``deps["tools"]``),
    so that the message names the tool."""
    exe = Path(python)
    venv_cfg = exe.parent.parent / "pyvenv.cfg"
    inputs = {
        "memo_version": MEMO_VERSION,
        "probe": hashlib.sha256(probe_source).hexdigest(),
        "request": dict(request),
        # classify=False: every variable by value (the Inductor child's memo: torch's config
        # modules read the environment at import, unwatched; CI among what they read).
        "env": counted_env(env) if classify else dict(sorted(env.items())),
        "path_kept_out": "checked at load: deps['tools']",
        "cwd": cwd if cwd is not None else os.getcwd(),
        "python": _file_id(str(exe)), "pyvenv": _file_id(str(venv_cfg)),
        "machine": dict(machine) if machine is not None else hardware(),
        "host_name_kept_out": True,
    }
    blob = json.dumps(inputs, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()


def stale_dependency(deps: Mapping[str, Any]) -> str | None:
    """The first recorded file or folder whose stat differs now (or that appeared or went),
    or None when all match."""
    for kind in ("files", "dirs"):
        for folder, rows in (deps.get(kind) or {}).items():
            for row in rows:
                path: str = os.path.join(folder, row[0])
                try:
                    st = os.stat(path)
                except OSError:
                    if row[1] is not None:
                        return path
                    continue
                if row[1] is None:
                    return path
                size = None if kind == "dirs" else st.st_size
                if [st.st_mtime_ns, size, st.st_ino] != list(row[1:4]):
                    return path
    return None


def load(key: str, directory: Path, env: Mapping[str, str] | None = None
         ) -> tuple[dict[str, Any] | None, str]:
    """The memoized answer for ``key`` if every file it depended on is unchanged (and, given
    the environment ``env`` it is asked for, every ignorable variable the probe saw read
    has its value and every tool it started by name resolves to the same file), else None;
    with a reason for the caller's report (names only, never values). One key may hold
    several answers (:func:`variant`: a read ignorable variable's value, a tool's place):
    the newest that fits answers; the newest one's reason is told when none does."""
    candidates = [directory / f"{key}.json"]
    with contextlib.suppress(OSError):
        found = [(p.stat().st_mtime_ns, p) for p in directory.glob(f"{key}.*.json")]
        candidates = [p for _, p in sorted(found, reverse=True)] + candidates
    first: str | None = None
    for path in candidates:
        answer, why = _load_one(path, env)
        if answer is not None:
            return answer, why
        if first is None or first == "no memo for these inputs":
            first = why
    return None, first or "no memo for these inputs"


def _load_one(path: Path, env: Mapping[str, str] | None) -> tuple[dict[str, Any] | None, str]:
    try:
        doc = json.loads(_read_regular(path).decode("utf-8"))
        answer, deps = doc["answer"], doc["deps"]
        if doc.get("memo_version") != MEMO_VERSION or not isinstance(answer, dict):
            return None, "memo from another version"
    except FileNotFoundError:
        return None, "no memo for these inputs"
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None, "memo unreadable"
    try:
        changed = stale_dependency(deps)
    except (AttributeError, TypeError, ValueError, IndexError):
        return None, "memo unreadable"
    if changed is not None:
        return None, f"memo stale: {changed} changed"
    if env is not None:
        try:
            var = changed_reads(deps.get("env_read") or {}, env,
                                bool(deps.get("env_walked")))
            tool = tool_changes(deps.get("tools") or {}, env)
        except (AttributeError, TypeError, ValueError):
            return None, "memo unreadable"
        if var is not None:
            walkers = deps.get("env_walked")
            how = (f"{', '.join(map(str, walkers[:3]))} walked the environment"
                   if isinstance(walkers, list) and walkers else "the probe read it")
            return None, f"memo stale: {var} differs and {how}"
        if tool is not None:
            return None, f"memo stale: PATH finds another {tool}"
    _touch(path)  # newest-used first when pruning
    return answer, "memo hit"


def variant(deps: Mapping[str, Any]) -> str:
    """What tells apart answers of one key: the digests of the ignorable variables the probe
    read and where the tools it started resolved (checked against the environment at
    :func:`load`)."""
    blob = json.dumps([deps.get("env_read") or {}, deps.get("tools") or {}], sort_keys=True,
                      default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


MEMO_CAP = 64 << 20
"""A memo is a few hundred KB (mostly the dependency list); anything bigger is not ours."""


def _read_regular(path: Path) -> bytes:
    """The memo file, if it is a regular file (a planted FIFO or device is refused without
    blocking, a symlink is not followed); capped. Raises OSError."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(0, f"{path} is not a regular file")
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(MEMO_CAP + 1)
        if len(data) > MEMO_CAP:
            raise OSError(0, f"{path} is over {MEMO_CAP} bytes")
        return data
    finally:
        os.close(fd)


def _touch(path: Path) -> None:
    """utime through an fd opened without following a link (never a link's target)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                os.utime(fd)
        finally:
            os.close(fd)


def save(key: str, answer: Mapping[str, Any], deps: Mapping[str, Any], directory: Path,
         keep: int = KEEP) -> str:
    """Keep ``answer`` (atomically: a reader sees the old file, the new one, or none).
    Returns what was done, for the caller's report; never raises for a full or read-only
    cache folder (the memo is an optimisation)."""
    if deps.get("network"):
        return "not kept: the probe used the network (" + ", ".join(deps["network"]) + ")"
    if deps.get("unstable"):
        return f"not kept: {deps['unstable'][0]} changed while the probe ran"
    d = directory
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=d)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"memo_version": MEMO_VERSION, "host": socket.gethostname(),
                       "answer": answer, "deps": deps}, f)
        os.replace(tmp, d / f"{key}.{variant(deps)}.json")
    except OSError as exc:
        with contextlib.suppress(OSError, UnboundLocalError):
            os.unlink(tmp)
        return f"not kept: {exc.strerror or exc}"
    _trim(d, keep)
    return "kept"


def _trim(d: Path, keep: int) -> None:
    try:
        files = [(p.stat().st_mtime, p) for p in d.glob("*.json")]
    except OSError:
        return
    for _, p in sorted(files, reverse=True)[keep:]:
        with contextlib.suppress(OSError):
            p.unlink()


__all__ = ["DISABLE_VAR", "IGNORABLE_ENV", "IGNORABLE_PREFIXES", "PATH_VAR", "ROOT_VAR",
           "TOOLS", "changed_reads", "counted_env", "enabled", "env_role", "hardware", "load",
           "memo_key", "resolve_tools", "save", "stale_dependency", "tool_changes",
           "value_digest"]
