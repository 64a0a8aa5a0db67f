"""After prune / rm, the recorder's source snapshots that no manifest names any more are
swept; referenced, young, or possibly-referenced ones never are. A real root made by vLLM with
the recorder on (its last start traced an edited llama.py, so one snapshot belongs to that
start's entries only)."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.realvllm.harness import SCENARIOS, ScenarioRun, copy_root, run_scenario
from vllm_cache_tools.layout import SOURCES_DIRNAME, STATE_DIRNAME
from vllm_cache_tools.maintain import snapshot_sweep as snapshots
from vllm_cache_tools.read.manifest import manifest_paths, read_manifest

pytestmark = pytest.mark.realvllm


@pytest.fixture(scope="module")
def rec() -> ScenarioRun:
    return run_scenario(SCENARIOS["recorder"])


def _refs_by_entry(cc: Path) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for parent, layout in ((cc, "backend"), (cc / "torch_aot_compile", "aot")):
        for d in parent.iterdir():
            if d.name.startswith(".") or d.name == "torch_aot_compile" or not d.is_dir():
                continue
            refs = out.setdefault((layout, d.name), set())
            for p in manifest_paths(d, layout):
                refs |= {f["sha256"] for f in read_manifest(p).data.get("traced_files") or []
                         if f.get("sha256")}
    return out


def _snaps(cc: Path) -> set[str]:
    return {p.name for p in (cc / STATE_DIRNAME / SOURCES_DIRNAME).iterdir()}


def _aged_copy(rec: ScenarioRun, dst: Path) -> Path:
    """A copy of the root whose snapshots are a day old (a freshly made scenario's are
    minutes old, and the sweep never touches snapshots younger than ten minutes)."""
    root = copy_root(rec.vllm_root, dst)
    day_ago = time.time() - 86400
    for p in (root / "torch_compile_cache" / STATE_DIRNAME / SOURCES_DIRNAME).iterdir():
        os.utime(p, (day_ago, day_ago))
    return root


def test_rm_sweeps_exactly_the_orphaned_snapshots(rec: ScenarioRun, tmp_path: Path) -> None:
    root = _aged_copy(rec, tmp_path / "root")
    cc = root / "torch_compile_cache"
    before = _snaps(cc)
    by_entry = _refs_by_entry(cc)
    assert before and set().union(*by_entry.values()) >= before  # nothing orphaned yet
    swept = snapshots.sweep_snapshots(cc)
    assert swept.removed == () and swept.kept_referenced == len(before)
    # The entries whose manifests name a snapshot no other entry's manifest names.
    only: dict[tuple[str, str], set[str]] = {}
    for ent, refs in by_entry.items():
        others = set().union(*(r for e, r in by_entry.items() if e != ent))
        if refs - others:
            only[ent] = refs - others
    assert only, "the edited start's snapshot should belong to its entries only"
    owners = {e for e, r in by_entry.items() if r & set().union(*only.values())}
    orphans = set().union(*(by_entry[e] for e in owners)) - set().union(
        *(r for e, r in by_entry.items() if e not in owners))
    keys = [k for _, k in sorted(owners)]
    r = run_cli("rm", "--root", str(root), "--yes", "--grace", "0s", "--json", *keys)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert sorted(rep["deleted"]) == sorted(keys)
    assert set(rep["snapshots"]["removed"]) == orphans
    assert rep["snapshots"]["freed_bytes"] > 0 and rep["snapshots"]["stopped"] is None
    assert _snaps(cc) == before - orphans
    assert not [p for p in (cc / STATE_DIRNAME / SOURCES_DIRNAME).iterdir()
                if p.name.startswith(".sweep")]
    # Every snapshot a remaining manifest names is still there.
    assert set().union(*_refs_by_entry(cc).values()) <= _snaps(cc)


def test_sweep_keeps_young_restores_late_named_and_stops_on_bad_manifest(
        rec: ScenarioRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _aged_copy(rec, tmp_path / "root")
    cc = root / "torch_compile_cache"
    src = cc / STATE_DIRNAME / SOURCES_DIRNAME
    one_entry = next(d for d in cc.iterdir() if len(d.name) == 10)
    manifest = next(manifest_paths(one_entry, "backend"))
    data = json.loads(manifest.read_text())
    named = {f["sha256"] for f in data["traced_files"]}
    orphan_a, orphan_b = "a" * 64, "b" * 64
    for n in (orphan_a, orphan_b):
        (src / n).write_text(f"# orphan {n[0]}\n")
        os.utime(src / n, (1, 1))  # old
    young = "c" * 64
    (src / young).write_text("# young\n")
    # A recorder writes a manifest naming orphan_b right after the sweep's first pass.
    real = snapshots.referenced
    calls = []

    def first_pass_then_recorder(cc_: Path, newer_than: float | None = None
                                 ) -> tuple[set[str], str | None]:
        out = real(cc_, newer_than)
        if not calls:
            late = {**data, "traced_files": [{"path": "/x.py", "sha256": orphan_b}],
                    "digest": "feedfeedfeedfeed"}
            (manifest.parent / "vct-manifest.feedfeedfeedfeed.json").write_text(
                json.dumps(late))
        calls.append(newer_than)
        return out

    monkeypatch.setattr(snapshots, "referenced", first_pass_then_recorder)
    sw = snapshots.sweep_snapshots(cc)
    assert calls[0] is None and calls[1] is not None
    assert sw.removed == (orphan_a,) and sw.restored == (orphan_b,)
    assert sw.kept_young == 1 and (src / young).exists() and (src / orphan_b).exists()
    assert all((src / n).exists() for n in named)
    assert not list(src.glob(".sweep-*"))
    # A recorder reusing an old snapshot touches it (recorder/write.py): even when that
    # happens after the sweep listed it, the quarantine re-check puts it back.
    orphan_d = "d" * 64
    (src / orphan_d).write_text("# orphan d\n")
    os.utime(src / orphan_d, (1, 1))

    def listed_then_reused(cc_: Path, newer_than: float | None = None
                           ) -> tuple[set[str], str | None]:
        out = real(cc_, newer_than)
        if newer_than is None:
            from vllm_cache_tools.recorder.write import _place

            fd = os.open(src, os.O_RDONLY | os.O_DIRECTORY)
            _place(fd, orphan_d, b"# orphan d\n", touch=True)
            os.close(fd)
        return out

    monkeypatch.setattr(snapshots, "referenced", listed_then_reused)
    sw = snapshots.sweep_snapshots(cc)
    assert orphan_d in sw.restored and orphan_d not in sw.removed
    assert (src / orphan_d).exists()
    monkeypatch.setattr(snapshots, "referenced", real)
    # What an interrupted sweep left in quarantine (its process gone) is put back first.
    left = src / f".sweep-{socket.gethostname()}-999999999-{int(time.time())}"
    left.mkdir()
    keep = next(iter(named))
    os.rename(src / keep, left / keep)
    snapshots.sweep_snapshots(cc)
    assert (src / keep).exists() and not left.exists()
    monkeypatch.setattr(snapshots, "referenced", real)
    (manifest.parent / "vct-manifest.0000000000000000.json").write_text("{broken")
    os.utime(src / orphan_b, (1, 1))
    (manifest.parent / "vct-manifest.feedfeedfeedfeed.json").unlink()
    sw = snapshots.sweep_snapshots(cc)
    assert sw.removed == () and sw.stopped and "could not be read" in sw.stopped
    assert (src / orphan_b).exists()
