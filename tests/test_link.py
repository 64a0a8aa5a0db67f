"""Linking the two trees by proof (re-hashing an AOT entry's pickled sources with the backend
code-hash recipe), on real caches."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.realvllm.harness import SCENARIOS, run_scenario
from vllm_cache_tools import read_entry, scan
from vllm_cache_tools.keys.source_link import SourceLinker, linked_aot_entries

pytestmark = pytest.mark.realvllm


def test_edited_source_links_to_the_overwritten_aot_entry() -> None:
    run = run_scenario(SCENARIOS["variants"])
    deep = [read_entry(e.path) for e in scan(run.vllm_root, check_in_use=False).entries]
    aots = [e for e in deep if e.layout == "aot"]
    backend_of = {}
    for i in range(len(run.scenario.starts)):
        log = run.log(i)
        key = log.split("Using cache directory: ", 1)[1].split("/rank_")[0].rsplit("/", 1)[1]
        aot = log.split("saved AOT compiled function to ", 1)[1].split("/rank_")[0]
        backend_of[i] = (key, aot.rsplit("/", 1)[1])
    links = {b.key: set(linked_aot_entries(b, aots)) for b in deep if b.layout == "backend"}
    # Start 3 (comment appended to llama.py) recompiled into start 0's AOT folder (same key,
    # overwritten model): its backend entry's code hash is reproduced by that AOT entry's
    # sources, and start 0's backend entry (pristine sources) no longer is.
    b3, a3 = backend_of[3]
    b0, a0 = backend_of[0]
    assert a3 == a0 and links[b3] == {a3}
    assert a0 not in links[b0]
    # Starts 1 and 2 (config / Inductor changes) kept the pristine sources: same code hash.
    for i in (1, 2):
        b, a = backend_of[i]
        assert a in links[b] and a in links[b0]
    # Start 4 (a line inserted above forward): its own AOT entry only.
    b4, a4 = backend_of[4]
    assert links[b4] == {a4}
    r = run_cli("show", b3, "--root", str(run.vllm_root), "--json")
    assert json.loads(r.stdout)["same_sources_aot"] == [a3]
    # The pairwise linker of unpack's and pack's proofs (each AOT entry's sources hashed
    # once, whatever the number of backend entries) gives the same links, asked twice.
    linker = SourceLinker()
    for _ in range(2):
        assert {b.key: {a.key for a in aots if linker.linked(b, a)}
                for b in deep if b.layout == "backend"} == links


def test_a_module_missing_from_the_local_prefix_is_tried_both_ways(tmp_path: Path) -> None:
    """The install prefix exists here but lacks a traced module (a venv being installed,
    another vLLM version at the same path): that module's layout is tried both ways (was:
    taken for ``<name>.py``, so a package's ``__init__.py`` never reproduced the code hash and
    ``show`` said "none in this root" while the JSON of a later run listed the AOT entries)."""
    from vllm_cache_tools.keys import backend_code_hash
    from vllm_cache_tools.keys.source_link import sources_code_hashes
    from vllm_cache_tools.read.aot_model import AotModelInfo, InlinedSource

    prefix = f"{tmp_path}/"
    (tmp_path / "present.py").write_text("x = 1\n")
    (tmp_path / "here").mkdir()
    (tmp_path / "here" / "__init__.py").write_text("z = 3\n")
    srcs = {"present": "x = 1\n", "here": "z = 3\n", "pkg.sub": "y = 2\n"}
    info = AotModelInfo(None, None, None, None, None, None, None, None, None, None,
                        tuple(InlinedSource(m, None, None, None, c) for m, c in srcs.items()),
                        None)
    package = backend_code_hash({prefix + "present.py": "x = 1\n",
                                 prefix + "here/__init__.py": "z = 3\n",
                                 prefix + "pkg/sub/__init__.py": "y = 2\n"})
    plain = backend_code_hash({prefix + "present.py": "x = 1\n",
                               prefix + "here/__init__.py": "z = 3\n",
                               prefix + "pkg/sub.py": "y = 2\n"})
    hashes = sources_code_hashes(info, prefix)
    assert package in hashes and plain in hashes and len(hashes) == 2  # the rest as found
