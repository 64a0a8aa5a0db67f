"""unpack's key-proof reads in worker processes (fleet/staged_read.py), forced on for a small
real bundle: the same placements and proofs as the reads in process, the pool really used,
and a bad bundle still places nothing and leaves no process behind."""

from __future__ import annotations

import multiprocessing
import os
import signal
from pathlib import Path

import pytest
import zstandard

from tests.fresh_process import ran_in_fresh_process
from tests.realvllm.harness import ScenarioRun
from vllm_cache_tools.fleet import api, staged_read
from vllm_cache_tools.fleet.bundle import read_manifest
from vllm_cache_tools.fleet.errors import BundleError
from vllm_cache_tools.fleet.key_proof import read_staged

BACKEND_KEY_LEN = 10


@pytest.fixture(scope="module")
def bundle(real_compile: ScenarioRun, tmp_path_factory: pytest.TempPathFactory) -> Path:
    key = sorted(p.name for p in real_compile.compile_cache.iterdir()
                 if len(p.name) == BACKEND_KEY_LEN)[0]
    out = tmp_path_factory.mktemp("bundle") / "start.tar.zst"
    api.pack([key], out, root=real_compile.vllm_root)
    return out


@pytest.fixture
def pooled(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Workers even for a small bundle on a small machine; counts the entries they read."""
    monkeypatch.setattr(staged_read, "BYTES_PER_WORKER", 1)
    monkeypatch.setattr(staged_read, "BUSY_CORES", 0)
    monkeypatch.setenv("VLLM_CACHE_TOOLS_SCAN_WORKERS", "2")
    read: list[int] = []
    entries = staged_read.StagedReader.entries

    def counted(self: staged_read.StagedReader, records: object) -> object:
        got = entries(self, records)  # type: ignore[arg-type]
        read.append(len(got))
        return got

    monkeypatch.setattr(staged_read.StagedReader, "entries", counted)
    return read


def _summary(r: api.UnpackResult) -> list[tuple[str, str, str, str]]:
    return sorted((p.key, p.action, p.proof, p.detail) for p in r.placements)


def test_pooled_reads_give_the_same_placements(bundle: Path, tmp_path: Path, pooled: list[int],
                                               monkeypatch: pytest.MonkeyPatch,
                                               request: pytest.FixtureRequest) -> None:
    if ran_in_fresh_process(request):
        return
    with_pool = api.unpack(bundle, root=tmp_path / "a", force=True)
    manifest = read_manifest(bundle)
    assert pooled == [len(manifest.entries)]  # every entry was read by a worker
    assert multiprocessing.active_children() == []
    monkeypatch.setattr(staged_read, "BUSY_CORES", 64)  # no workers: the proof reads
    in_process = api.unpack(bundle, root=tmp_path / "b", force=True)
    assert pooled[1:] == [0]
    assert with_pool.ok and _summary(with_pool) == _summary(in_process)
    assert {p.action for p in with_pool.placements} == {"placed"}
    assert {p.proof for p in with_pool.placements} >= {"proven"}


def test_worker_reads_equal_the_proofs_own(real_compile: ScenarioRun, bundle: Path,
                                          request: pytest.FixtureRequest) -> None:
    if ran_in_fresh_process(request):
        return
    recs = read_manifest(bundle).entries
    with staged_read.StagedReader(1 << 30, workers=2) as reader:
        assert reader.pool is not None
        for r in recs:
            reader.entry_done(real_compile.vllm_root, r)
        got = reader.entries(recs)
    assert got == {r.path: read_staged(real_compile.vllm_root / r.path) for r in recs}
    assert all(e is not None for e in got.values())


def test_tampered_bundle_with_workers_places_nothing(bundle: Path, tmp_path: Path,
                                                     pooled: list[int]) -> None:
    raw = bytearray(zstandard.ZstdDecompressor().decompress(bundle.read_bytes(),
                                                            max_output_size=1 << 30))
    at = raw.rfind(b"def ")  # a byte inside a member's data, late in the archive
    assert at > 0
    raw[at] ^= 1
    bad = tmp_path / "bad.tar.zst"
    bad.write_bytes(zstandard.ZstdCompressor().compress(bytes(raw)))
    root = tmp_path / "root"
    with pytest.raises(BundleError, match="sha256 differs"):
        api.unpack(bad, root=root, force=True)
    cc = root / "torch_compile_cache"
    assert not cc.is_dir() or [p.name for p in cc.iterdir() if not p.name.startswith(".")] == []
    assert multiprocessing.active_children() == []


def _killed(path: str) -> None:
    os.kill(os.getpid(), signal.SIGKILL)  # the OOM killer, say: the pool never answers


def test_a_killed_worker_is_not_waited_for(bundle: Path, tmp_path: Path, pooled: list[int],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(staged_read, "WAIT_S", 1.0)
    monkeypatch.setattr(staged_read, "_read", _killed)  # before the fork: the workers have it
    r = api.unpack(bundle, root=tmp_path / "root", force=True)
    assert pooled == [0]  # no worker answered: the proof read every entry itself
    assert r.ok and {p.action for p in r.placements} == {"placed"}
    assert multiprocessing.active_children() == []
