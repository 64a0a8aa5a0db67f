"""The backend code hashes of an AOT entry's traced sources under an install prefix
(``keys/source_link.py``): every layout's hash as the recipe gives it, found fast, and the
real sample cache's link proven on a host that lacks the compiling host's install."""

from __future__ import annotations

import itertools
import os
import random
from pathlib import Path

import pytest

from vllm_cache_tools.keys import backend_code_hash
from vllm_cache_tools.keys import source_link as sl
from vllm_cache_tools.read.aot_model import AotModelInfo, InlinedSource
from vllm_cache_tools.store.entries import read_entry

CC = Path(__file__).resolve().parent.parent / "examples" / "sample_cache" / "torch_compile_cache"


def _info(srcs: dict[str, str]) -> AotModelInfo:
    return AotModelInfo(None, None, None, None, None, None, None, None, None, None,
                        tuple(InlinedSource(m, None, None, None, c) for m, c in srcs.items()),
                        None)


def _every_layout(prefix: str, srcs: dict[str, str]) -> set[str]:
    """The recipe applied to each assignment of .py / __init__.py the rules allow."""
    opts = []
    for m in sorted(srcs):
        py, init = sl._module_rel(m)
        opts.append([init] if any(o.startswith(m + ".") for o in srcs) else [py, init])
    return {backend_code_hash({prefix + rel: srcs[m] for m, rel in zip(sorted(srcs), pick,
                                                                         strict=True)})
            for pick in itertools.product(*opts)}


@pytest.mark.parametrize("seed", range(40))
def test_every_layout_hash_equals_the_recipe(seed: int) -> None:
    """Module names chosen to sort around each other ('a.b' beside 'a.b-x', 'a.b0', 'a.b.c',
    'a.B'), so both the shared-prefix walk and its plain fallback are exercised."""
    rng = random.Random(seed)
    names = ["a", "a.b", "a.b-x", "a.b0", "a.b.c", "a.B", "a_b", "z.y", "pkg.sub", "ü.mod"]
    srcs = {m: rng.choice(["", "x = 1\n", "ü = 'é'\n", "\n\n"]) + m
            for m in rng.sample(names, rng.randint(0, 6))}
    prefix = f"/nonexistent-{seed}/site-packages/"
    assert set(sl.sources_code_hashes(_info(srcs), prefix)) == _every_layout(prefix, srcs)


def test_limit_is_kept_and_the_plain_layout_comes_first() -> None:
    srcs = {f"m{i}": f"v = {i}\n" for i in range(10)}
    hashes = sl.sources_code_hashes(_info(srcs), "/nonexistent/", limit=5)
    assert len(hashes) == 5
    assert hashes[0] == backend_code_hash({f"/nonexistent/m{i}.py": f"v = {i}\n"
                                           for i in range(10)})
    assert sl.sources_code_hashes(_info(srcs), "/nonexistent/", limit=0) == []


def test_sample_link_is_proven_where_the_install_is_missing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """On a host without the compiling host's venv (a cache copied or carried in a bundle),
    the 46 traced modules' layouts are not on disk: a module with traced submodules is a
    package, the rest are tried. The sample's backend entry's code hash is reproduced (was: not
    among the 256 layouts tried, so pack and show found no link there)."""
    backend = read_entry(CC / "28fd362d4e", deep=True)
    aots = [read_entry(p, deep=True) for p in sorted((CC / "torch_aot_compile").iterdir())]
    graph = [g for p in backend.prefix_dirs if p.graph for g in p.graph.files]
    assert backend.factors is not None
    isdir = os.path.isdir
    for a in aots:
        assert a.aot_info is not None
        prefix = sl.install_prefix(graph, (s.module for s in a.aot_info.inlined_sources))
        assert prefix is not None
        monkeypatch.setattr(sl.os.path, "isdir", lambda p, pre=prefix: p != pre and isdir(p))
        assert backend.factors.code_hash in sl.sources_code_hashes(a.aot_info, prefix)
        monkeypatch.undo()
