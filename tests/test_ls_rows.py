"""``ls --json`` rows kept in the listing index (store/summary.py): spliced rows are the bytes a
row built afresh would be, and an entry changed after indexing shows its new figures."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

import msgspec
import pytest

from tests.conftest import REPO, run_cli
from vllm_cache_tools import scan
from vllm_cache_tools.redaction import dumps
from vllm_cache_tools.store.listing_index import Record, index_path
from vllm_cache_tools.store.locate import resolve_root
from vllm_cache_tools.store.summary import (
    DYNAMIC,
    entry_summary,
    static_row,
    summary_text,
)
from vllm_cache_tools.store.types import Entry

SAMPLE = REPO / "examples" / "sample_cache"
AOT = ("torch_compile_cache/torch_aot_compile/"
       "b6a18428ab0d5ff42c7c72b8fabfec0bc1f47e3de967bdff6bb6da79a64fa078")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    dst = tmp_path / "root"
    shutil.copytree(SAMPLE, dst, symlinks=True)
    return dst


def _rows(entries: list[Entry]) -> str:
    return dumps([entry_summary(e) for e in entries], separators=(",", ":"))[1:-1]


def _kept(entries: list[Entry]) -> list[Entry]:
    return [replace(e, listing=static_row(e)) for e in entries]


def test_spliced_rows_are_the_rows_built_afresh(root: Path) -> None:
    entries = list(scan(root, use_index=False, check_in_use=False).entries)
    assert len(entries) == 4
    e = entries[0]
    assert static_row(e).count("\0") == len(DYNAMIC)
    url = "https://bob:hunter2hunter2@example.com/m"
    variants = [
        entries,
        # Secrets in kept fields (hidden when the row is kept) and in fields that are not
        # (hidden when it is written), alone or in one batch with clean rows.
        [replace(e, model=url), *entries[1:]],
        [replace(e, checkpoint="hf_" + "a" * 34, checkpoint_detail="token=abc123abc123abc")],
        [replace(e, state="in-use", state_detail=f"open by pid 1 {url}"), *entries],
        [replace(e, path=Path("/srv/api_token=s3cr3ts3cr3ts3cr3t/x") / e.key), *entries],
        [replace(e, last_used=1.5e9, last_used_source="ledger", hits=3, misses=1)],
        [replace(e, last_used=None, last_used_source=None, created=None, modified=None)],
        # Not ASCII, quotes and escapes, a name that is not UTF-8.
        [replace(e, model='modèle "x"\\\n', path=Path(os.fsdecode(b"/r/\xff")) / e.key)],
    ]
    for entries_ in variants:
        assert summary_text(_kept(entries_)) == _rows(entries_)
        # Some rows kept, some not (entries read afresh beside indexed ones).
        mixed = [*_kept(entries_[:1]), *entries_[1:]]
        assert summary_text(mixed) == _rows(entries_)
    assert summary_text([]) == _rows([]) == ""


def test_a_row_holding_a_placeholder_or_a_secret_is_not_kept(root: Path) -> None:
    """Nor one with a value the secrets rules hide: its digest depends on this user's
    redaction key, which may change while the index record does not."""
    e = scan(root, use_index=False, check_in_use=False).entries[0]
    for odd in (replace(e, model="\x00vct-dynamic-0\x00"),
                replace(e, model="https://bob:hunter2hunter2@example.com/m"),
                replace(e, checkpoint_detail="token=abc123abc123abc")):
        assert static_row(odd) == ""
        assert summary_text([odd]) == _rows([odd])
    assert static_row(e) != ""


def _ls(root: Path, *extra: str, env: dict[str, str] | None = None) -> str:
    r = run_cli("ls", "--json", "--root", str(root), *extra, env=env)
    assert r.returncode == 0, r.stderr
    return r.stdout


def _fresh(root: Path, tmp_path: Path) -> str:
    """A first listing (no index): every entry read from its files."""
    d = tmp_path / f"fresh-{len(list(tmp_path.iterdir()))}"
    return _ls(root, env={"XDG_CACHE_HOME": str(d)})


def test_indexed_listing_writes_the_bytes_of_a_first_listing(root: Path,
                                                              tmp_path: Path) -> None:
    first = _ls(root)
    idx = index_path(resolve_root(root).compile_cache)
    doc = msgspec.msgpack.decode(idx.read_bytes())
    records = [msgspec.msgpack.decode(msgspec.msgpack.encode(r), type=Record)
               for r in doc[2].values()]
    assert records and all(r.listing.count("\0") == len(DYNAMIC) for r in records)
    assert _ls(root) == first == _fresh(root, tmp_path)
    assert _ls(root, "--rescan") == first
    assert _ls(root) == first


def test_changes_after_indexing_show_on_the_next_listing(root: Path, tmp_path: Path) -> None:
    _ls(root)
    aot = root / AOT

    def entry(text: str) -> dict[str, object]:
        return next(e for e in json.loads(text)["entries"] if e["key"] == aot.name)

    before = entry(_ls(root))
    # A file added in a watched folder (a new kernel bucket: inductor_cache's mtime moves).
    (aot / "inductor_cache" / "zz").mkdir()
    (aot / "inductor_cache" / "zz" / "czz.py").write_bytes(b"x" * 1000)
    added = _ls(root)
    assert entry(added)["files"] == before["files"] + 1  # type: ignore[operator]
    assert entry(added)["size_bytes"] == before["size_bytes"] + 1000  # type: ignore[operator]
    assert added == _fresh(root, tmp_path)
    # A key file grown in place (its folder's mtime does not move; its size does).
    with open(aot / "rank_0_0" / "model", "ab") as f:
        f.write(b"\0" * 10)
    grown = _ls(root)
    assert entry(grown)["size_bytes"] == entry(added)["size_bytes"] + 10  # type: ignore[operator]
    assert grown == _fresh(root, tmp_path)
    # A file removed from a watched folder.
    shutil.rmtree(aot / "inductor_cache" / "zz")
    removed = _ls(root)
    assert entry(removed)["files"] == before["files"]
    assert removed == _fresh(root, tmp_path)


def test_a_rescan_that_finds_new_sizes_keeps_a_row_with_them(root: Path,
                                                             tmp_path: Path) -> None:
    """A file grown inside a kernel bucket (same names everywhere: ``reuse`` keeps the
    record with the walk's sizes): the kept row is rebuilt with them."""
    _ls(root)
    kernel = next((root / AOT / "inductor_cache").rglob("*.so"))
    size = kernel.stat().st_size
    with open(kernel, "ab") as f:
        f.write(b"\0" * 77)
    assert _ls(root) == _ls(root)  # the index does not watch buckets: not seen yet
    rescan = _ls(root, "--rescan")
    after = _ls(root)
    assert after == rescan == _fresh(root, tmp_path)
    row = next(e for e in json.loads(after)["entries"] if e["key"] == (root / AOT).name)
    assert kernel.stat().st_size == size + 77
    assert row["size_bytes"] == next(
        e for e in json.loads(_fresh(root, tmp_path))["entries"]
        if e["key"] == row["key"])["size_bytes"]
