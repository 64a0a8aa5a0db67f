"""Find the cache root the way vLLM does, and the places where we keep our own state."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from vllm_cache_tools.layout import AOT_DIRNAME, COMPILE_CACHE_DIRNAME


@dataclass(frozen=True)
class CacheRoot:
    """A resolved vLLM cache root and where the answer came from."""

    vllm_root: Path
    """``$VLLM_CACHE_ROOT`` (or its default): the folder holding ``torch_compile_cache``."""
    source: str
    """``--root``, ``VLLM_CACHE_ROOT``, ``XDG_CACHE_HOME`` or ``default``."""

    @property
    def compile_cache(self) -> Path:
        return self.vllm_root / COMPILE_CACHE_DIRNAME


def default_vllm_cache_root(env: Mapping[str, str] | None = None) -> tuple[Path, str]:
    """Mirror ``vllm.envs.get_default_cache_root`` + ``VLLM_CACHE_ROOT`` (all versions with a
    compile cache): ``VLLM_CACHE_ROOT``, else ``$XDG_CACHE_HOME/vllm``, else ``~/.cache/vllm``.
    vLLM expands ``~`` in ``VLLM_CACHE_ROOT``."""
    env = os.environ if env is None else env
    if env.get("VLLM_CACHE_ROOT"):
        return Path(os.path.expanduser(env["VLLM_CACHE_ROOT"])), "VLLM_CACHE_ROOT"
    if env.get("XDG_CACHE_HOME"):
        return Path(env["XDG_CACHE_HOME"]) / "vllm", "XDG_CACHE_HOME"
    return Path(os.path.expanduser("~/.cache")) / "vllm", "default"


def resolve_root(root: str | os.PathLike[str] | None = None,
                 env: Mapping[str, str] | None = None) -> CacheRoot:
    """Resolve the cache root. ``root`` (``--root``) may name either the vLLM cache root or its
    ``torch_compile_cache`` folder; both are accepted so users can paste either path."""
    if root is not None:
        p = Path(os.path.expanduser(os.fspath(root)))
        if p.name == COMPILE_CACHE_DIRNAME:
            p = p.parent
        return CacheRoot(p, "--root")
    p, source = default_vllm_cache_root(env)
    return CacheRoot(p, source)


def state_dir() -> Path:
    """Where vllm-cache-tools keeps its own state (ledger, index): never inside vLLM's root."""
    return Path(platformdirs.user_state_dir("vllm-cache-tools", appauthor=False))


def user_cache_dir() -> Path:
    return Path(platformdirs.user_cache_dir("vllm-cache-tools", appauthor=False))


SYMLINKED_COMPILE_CACHE = (f"{COMPILE_CACHE_DIRNAME} is a symlink (not followed; pass its "
                           "target as --root)")
"""What every verb says of a root whose ``torch_compile_cache`` is a symlink (ls, verify,
audit, explain, show, rm, prune...): nothing behind it is read or removed."""


def display_path(p: str | os.PathLike[str]) -> str:
    """A path for messages and JSON: non-UTF-8 bytes shown as ``\\xNN`` instead of failing to
    print."""
    return os.fsencode(p).decode("utf-8", errors="backslashreplace")


def not_a_cache_root(root: CacheRoot, verb: str | None) -> str | None:
    """Why ``root`` does not look like a vLLM cache root (neither a ``torch_compile_cache``
    nor an old ``torch_aot_compile`` folder in it), or ``None``: the one wording of ``prune``'s
    refusal and of ``ls --root`` on such a folder (it listed nothing, exit 0). ``verb`` names
    what ``--force`` would do anyway (``None`` where the verb has no ``--force``)."""
    real = os.path.realpath(root.vllm_root)
    if any(os.path.isdir(os.path.join(real, n)) and not os.path.islink(os.path.join(real, n))
           for n in (COMPILE_CACHE_DIRNAME, AOT_DIRNAME)):
        return None
    if os.path.islink(os.path.join(real, COMPILE_CACHE_DIRNAME)):
        # was: "no torch_compile_cache folder", where one is seen
        return f"{display_path(root.vllm_root)}: {SYMLINKED_COMPILE_CACHE}"
    force = f"; pass --force to {verb} it anyway" if verb else ""
    return (f"{display_path(root.vllm_root)} does not look like a vLLM cache root "
            f"(no {COMPILE_CACHE_DIRNAME} folder{force})")
