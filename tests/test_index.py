"""The listing index: reused only while an entry is unchanged (real caches, real files)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from tests.conftest import run_cli
from tests.realvllm.harness import ScenarioRun, copy_root
from vllm_cache_tools import scan
from vllm_cache_tools.store.listing_index import Record, index_path, unchanged
from vllm_cache_tools.store.locate import resolve_root

pytestmark = pytest.mark.realvllm


def _summary(root: Path, **kw: object) -> dict[str, tuple[object, ...]]:
    info = scan(root, check_in_use=False, **kw)  # type: ignore[arg-type]
    return {e.key: (e.state, e.size_bytes, e.stats.files, e.ranks, e.torch_version, e.model,
                    e.last_used) for e in info.entries}


def _indexed(idx: Path) -> dict[str, object]:
    """The index file's entries (msgpack: [format, version, {path: record}])."""
    return msgspec.msgpack.decode(idx.read_bytes())[2]  # type: ignore[no-any-return]


def test_index_hits_match_a_fresh_walk_and_follow_changes(real_compile: ScenarioRun,
                                                          tmp_path: Path) -> None:
    root = copy_root(real_compile.vllm_root, tmp_path / "root")
    first = _summary(root)
    idx = index_path(resolve_root(root).compile_cache)
    assert idx.exists() and len(_indexed(idx)) == 4
    assert _summary(root) == first == _summary(root, use_index=False)
    # --rescan walks every entry and reuses the rest of its record where the walk found
    # nothing changed (listing_index.reuse): the same entries as reading everything.
    assert _summary(root, use_index=False, refresh_index=True) == first

    # A new kernel bucket (what a later start that loads the entry writes: see
    # tree_stats.is_bucket) changes inductor_cache's mtime, which is watched: re-read.
    aot = next((root / "torch_compile_cache" / "torch_aot_compile").iterdir())
    bucket = aot / "inductor_cache" / "zz"
    bucket.mkdir()
    (bucket / "czz0000.py").write_bytes(b"x" * 100)
    after = _summary(root)
    assert after[aot.name][1] == first[aot.name][1] + 100  # type: ignore[operator]
    assert after[aot.name][2] == first[aot.name][2] + 1
    assert after == _summary(root, use_index=False)

    # A file removed from inside an existing bucket changes only the bucket's mtime, which the
    # index does not compare (no real start did that): --rescan sees it, the index does not.
    victim = next(p for p in (aot / "inductor_cache").rglob("*.so"))
    size = victim.stat().st_size
    victim.unlink()
    assert _summary(root) == after
    fresh = _summary(root, use_index=False, refresh_index=True)
    assert fresh[aot.name][1] == after[aot.name][1] - size  # type: ignore[operator]
    # ... and a --rescan refreshes the index for the next listing.
    assert _summary(root) == fresh

    # A key file rewritten in place (same folder mtime): caught by its size/mtime.
    model = aot / "rank_0_0" / "model"
    data = model.read_bytes()
    model.write_bytes(data[:100])
    assert _summary(root)[aot.name][0] == "corrupt"

    # An entry removed: dropped from the index.
    shutil.rmtree(aot)
    assert aot.name not in _summary(root)
    assert len(_indexed(idx)) == 3


def test_the_check_never_follows_an_entry_swapped_for_a_symlink(real_compile: ScenarioRun,
                                                               tmp_path: Path) -> None:
    """The unchanged-entry check opens the entry folder ``O_PATH`` and never through a symlink:
    a folder swapped for a symlink to the same files after the root was listed is not answered
    from the index (the files behind the link still match the record)."""
    root = copy_root(real_compile.vllm_root, tmp_path / "root")
    scan(root, check_in_use=False)
    path, raw = next(iter(_indexed(index_path(resolve_root(root).compile_cache)).items()))
    rec = msgspec.msgpack.decode(msgspec.msgpack.encode(raw), type=Record)
    assert unchanged(path, rec) is not None
    os.rename(path, path + ".moved")
    os.symlink(os.path.basename(path) + ".moved", path)
    assert unchanged(path + ".moved", rec) is not None  # the same files, and folder mtimes
    assert unchanged(path, rec) is None


def test_last_use_stays_current_through_the_index(real_compile: ScenarioRun,
                                                  tmp_path: Path) -> None:
    root = copy_root(real_compile.vllm_root, tmp_path / "root")
    aot = next((root / "torch_compile_cache" / "torch_aot_compile").iterdir())
    model = aot / "rank_0_0" / "model"
    st = model.stat()
    os.utime(model, ns=(st.st_mtime_ns, st.st_mtime_ns))
    before = _summary(root)[aot.name][6]
    # vLLM loading the entry = a read: atime moves past mtime (set here explicitly).
    os.utime(model, ns=(st.st_mtime_ns + 3600 * 10**9, st.st_mtime_ns))
    after = scan(root, check_in_use=False)
    e = next(x for x in after.entries if x.key == aot.name)
    assert e.last_used_source == "atime" and e.last_used is not None
    assert before is not None and e.last_used > before


def test_unwritable_index_dir_does_not_break_ls(real_compile: ScenarioRun, tmp_path: Path) -> None:
    blocker = tmp_path / "cachehome"
    blocker.write_text("not a folder")
    r = run_cli("ls", "--root", str(real_compile.vllm_root), "--json",
                env={"XDG_CACHE_HOME": str(blocker)})
    assert r.returncode == 0 and len(json.loads(r.stdout)["entries"]) == 4


_FORKED_CHECK = """
import json, sys
from pathlib import Path
from vllm_cache_tools import __version__
from vllm_cache_tools.store import listing_index
from vllm_cache_tools.store.folders import entry_times

cc, paths = Path(sys.argv[1]), [Path(p) for p in sys.argv[2:]]
listing_index.PARALLEL_MIN_LOOKUPS = listing_index.PARALLEL_MIN_WORKERS = 2
idx = listing_index.ListingIndex(cc, __version__)
answers = []
real = listing_index._check_forked

def spy(*a):
    answers.append(real(*a))
    return answers[-1]

listing_index._check_forked = spy
forked = idx.lookup_all(paths, entry_times, workers=2)
one = idx.lookup_all(paths, entry_times, workers=1)
print(json.dumps({"forked_ran": bool(answers) and answers[0] is not None,
                  "same": forked == one, "found": [e is not None for e in forked]}))
"""


def test_forked_checkers_answer_as_one_process(real_compile: ScenarioRun,
                                               tmp_path: Path) -> None:
    """The indexed lookups spread over forked processes (listing_index._check_forked) give the
    entries one process gives, changed ones included. In a fresh process: forking is refused
    where other threads run, as they may in the test process (servers of other tests)."""
    root = copy_root(real_compile.vllm_root, tmp_path / "root")
    scan(root, check_in_use=False)  # writes the index
    cc = resolve_root(root).compile_cache
    paths = sorted(p for d in (cc, cc / "torch_aot_compile") for p in d.iterdir()
                   if p.is_dir() and p.name != "torch_aot_compile")
    (paths[0] / "new-file").write_bytes(b"x")  # one entry changed: not answered
    out = subprocess.run([sys.executable, "-c", _FORKED_CHECK, str(cc), *map(str, paths)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["forked_ran"] and got["same"]  # forked, not checked in this process
    assert got["found"] == [False] + [True] * (len(paths) - 1)
