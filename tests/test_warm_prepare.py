"""``warm`` does the next pack's reads (:func:`vllm_cache_tools.fleet.warm.prepare_pack`): on
the shipped sample (real vLLM entries), the entries it prepares are packed without a pickle
read or a file hashed, with the records of a cold pack; an entry a pack would refuse is not
prepared, and the refusal does not fail warm. The real warm (vLLM compiling) is checked in
``tests/test_warm_truth.py``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from vllm_cache_tools.fleet import link_proof, prepared, selection
from vllm_cache_tools.fleet.errors import Refused
from vllm_cache_tools.fleet.warm import WarmedEntry, prepare_pack
from vllm_cache_tools.store.locate import resolve_root
from vllm_cache_tools.store.scan import scan

SAMPLE = Path(__file__).resolve().parent.parent / "examples" / "sample_cache"
AOT = "0b8536d36d866b1b841a28380befcdabf957e3ad09449d290196ec83076d5a05"


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    shutil.copytree(SAMPLE, r, symlinks=True)
    return r


def _written(root: Path, *keys: str, state: str | None = None) -> list[WarmedEntry]:
    return [WarmedEntry(e.key, e.layout, state or e.state, str(e.path), True)
            for e in scan(root, check_in_use=False).entries if e.key in keys]


def _boom(*a: object, **k: object) -> None:
    raise AssertionError("read although warm prepared the entry")


def test_a_prepared_entry_packs_without_reading(root: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    ready = prepare_pack(resolve_root(root), _written(root, AOT))
    assert AOT in ready and len(ready) == 2, ready  # the AOT entry and its start's backend
    with monkeypatch.context() as m:
        m.setattr(link_proof, "read_entry", _boom)
        m.setattr(prepared, "deep_read", _boom)
        m.setattr(selection, "_hash_files", _boom)
        sel = selection.select(root, [AOT])
    assert {r.key for r in sel.records} == set(ready)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "no-memo"))
    assert selection.select(root, [AOT]).records == sel.records


def test_an_entry_a_pack_refuses_is_not_prepared(root: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    croot = resolve_root(root)
    assert prepare_pack(croot, _written(root, AOT, state="partial")) == ()
    # Broken after vLLM wrote it (truncated): the selection refuses it; warm goes on, and
    # nothing of it is kept (the pack reads it again and says why).
    model = root / "torch_compile_cache" / "torch_aot_compile" / AOT / "rank_0_0" / "model"
    model.write_bytes(model.read_bytes()[:1000])
    assert prepare_pack(croot, _written(root, AOT)) == ()
    with pytest.raises(Refused, match="corrupt"):
        selection.select(root, [AOT])
