"""Layouts of older vLLM releases, rebuilt from their source (docs/recipes.md cites the lines).

These trees are hand-made from the recipes, not produced by those vLLM versions (only 0.32.0
runs here); the real-vLLM tests cover the current layout."""

from __future__ import annotations

from pathlib import Path

from vllm_cache_tools import scan


def _write(p: Path, text: str = "x") -> None:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def test_v0_7_rank_without_dp_and_without_prefix(tmp_path: Path) -> None:
    # v0.7.0 vllm/compilation/backends.py: <key>/rank_{rank}/ with inductor_hash_cache.py,
    # computation_graph.py, transformed_code.py, inductor_cache/, triton_cache/.
    rank = tmp_path / "torch_compile_cache" / "0123456789" / "rank_0"
    _write(rank / "inductor_hash_cache.py", "[(None, 0, 'fhash', '/x/y.py')]")
    _write(rank / "computation_graph.py", "# File: /v/vllm/model_executor/models/opt.py:10 in "
           "forward, code: x\n")
    _write(rank / "transformed_code.py")
    _write(rank / "inductor_cache" / "ab" / "k.so")
    (e,) = scan(tmp_path, check_in_use=False, deep=True).entries
    assert e.layout == "backend" and e.ranks == ("rank_0",) and e.prefixes == ("",)
    assert e.state == "complete" and e.hardware == "CPU"
    assert e.prefix_dirs[0].compiled is not None and len(e.prefix_dirs[0].compiled) == 1


def test_v0_9_suffixed_key_and_v0_11_aot_tree_beside_compile_cache(tmp_path: Path) -> None:
    # v0.9.0 backends.py: a second model compiled in one process gets "<key>-<n>";
    # v0.11.1-0.16: root/torch_aot_compile/<sha256>/rank_{r}_{dp}/model.
    pre = tmp_path / "torch_compile_cache" / "0123456789-1" / "rank_0_0" / "backbone"
    _write(pre / "vllm_compile_cache.py", "{(None, 0, 'inductor'): ('k', '/x.py')}")
    _write(pre / "computation_graph.py")
    aot = tmp_path / "torch_aot_compile" / ("ab" * 32) / "rank_0_0" / "model"
    _write(aot, "")
    info = scan(tmp_path, check_in_use=False)
    by = {e.layout: e for e in info.entries}
    assert by["backend"].key == "0123456789-1" and by["backend"].state == "complete"
    assert by["aot"].key == "ab" * 32 and by["aot"].state == "corrupt"  # empty model
    assert "torch_aot_compile" not in {o.path.name for o in info.others}
