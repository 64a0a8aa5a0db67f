"""The pack's link proof at scale (fleet/link_proof.py) on starts synthesized from a real
start (benchmarks/bench_fleet.synth_starts: the real entries under new keys, each copy another
config hash, as vLLM and the recorder write it): the answers are those of the pairwise proof
(keys.source_link, keys.entry_proof), pairs are met through the index (not every backend x AOT
pair), and the pack memo keeps one row per entry, read back without a pickle read.

Two real starts: the harness's (no recorder manifests: the proof cannot tell starts of the
same code apart, so every copy links every other) and examples/sample_cache's first start
(with the recorder's manifests: each copy links its own start only)."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks.bench_fleet import entry_dirs, synth_starts
from tests.fresh_process import ran_in_fresh_process, record_forks
from tests.realvllm.harness import ScenarioRun
from vllm_cache_tools.fleet import link_proof, prepared, selection
from vllm_cache_tools.fleet.errors import Refused
from vllm_cache_tools.fleet.link_proof import graph_names, model_file
from vllm_cache_tools.fleet.pack_memo import PackMemo
from vllm_cache_tools.keys.entry_proof import same_start
from vllm_cache_tools.keys.source_link import linked_aot_entries
from vllm_cache_tools.store.entries import read_entry
from vllm_cache_tools.store.types import Entry

STARTS = 8
SAMPLE = Path(__file__).resolve().parent.parent / "examples" / "sample_cache"
SAMPLE_SECOND_START = ("39ecaca4bf", "torch_aot_compile/b6a18428ab0d5ff42c7c72b8fabfec0bc1f"
                       "47e3de967bdff6bb6da79a64fa078")


@pytest.fixture(scope="module", params=["harness", "sample"])
def many(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("many")
    if request.param == "sample":
        return sample_starts(work, STARTS)
    run: ScenarioRun = request.getfixturevalue("real_compile")
    return synth_starts(run.before(1), work / "root", STARTS)


def sample_starts(work: Path, copies: int) -> Path:
    """``copies`` starts synthesized from examples/sample_cache's first start, in ``work``."""
    src = work / "sample"
    shutil.copytree(SAMPLE, src)
    for rel in SAMPLE_SECOND_START:
        shutil.rmtree(src / "torch_compile_cache" / rel)
    return synth_starts(src, work / "root", copies)


def _recorded(root: Path) -> bool:
    return any(root.rglob("vct-manifest.*.json"))


def _pairwise(root: Path) -> set[tuple[str, str]]:
    """(backend key, AOT key) of every pair the proof links, tried one by one."""
    deep = [read_entry(p) for p in entry_dirs(root)]
    backends = [e for e in deep if e.layout == "backend"]
    aots = [e for e in deep if e.layout == "aot"]
    graph = {b.key: [g for p in b.prefix_dirs if p.graph for g in p.graph.files]
             for b in backends}
    return {(b.key, a.key) for b, a in itertools.product(backends, aots)
            if graph_names(graph[b.key], model_file(a)) and same_start(b, a)
            and linked_aot_entries(b, [a])}


def test_the_index_links_what_the_pairwise_proof_links(
        many: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    keys = [p.name for p in entry_dirs(many)]
    calls = 0
    alike = link_proof.started_alike

    def counted(*a: object) -> bool:
        nonlocal calls
        calls += 1
        return alike(*a)  # type: ignore[arg-type]

    monkeypatch.setattr(link_proof, "started_alike", counted)
    sel = selection.select(many, keys)
    got = {(r.key, k) for r in sel.records if r.layout == "backend" for k in r.linked}
    want = _pairwise(many)
    assert got == want
    # With manifests, one AOT entry per start and no cross-start link; without, all alike.
    assert len(want) == (STARTS if _recorded(many) else STARTS * STARTS)
    assert {(k, r.key) for r in sel.records if r.layout == "aot" for k in r.linked} == want
    # Only the pairs of one code hash (and config, where the manifests name it) are met, each
    # once: with manifests STARTS of them, not B x A.
    assert calls == len(want)

    # One row of link facts per entry; a second selection reads no pickle.
    memo = PackMemo(many / "torch_compile_cache")
    assert len(memo.doc.links) == len(keys) == 2 * STARTS
    assert {os.path.realpath(p) for p in entry_dirs(many)} == set(memo.doc.links)

    def boom(*a: object, **k: object) -> None:
        raise AssertionError("read although the memo knows the entry")

    monkeypatch.setattr(link_proof, "read_entry", boom)
    monkeypatch.setattr(prepared, "deep_read", boom)  # where the read-ahead reads
    monkeypatch.setattr(selection, "_hash_files", boom)
    again = selection.select(many, keys)
    assert again.records == sel.records


def test_one_backend_entry_links_its_own_start_only(many: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    want = _pairwise(many)
    backend = sorted(want)[0][0]
    aots = sorted(a for b, a in want if b == backend)
    sel = selection.select(many, [backend])
    assert [(r.layout, r.key) for r in sel.records] == [
        *(("aot", a) for a in aots), ("backend", backend)]
    assert sel.records[-1].linked == tuple(aots)
    assert len(aots) == (1 if _recorded(many) else STARTS)


def test_the_unpack_proof_meets_the_pairs_the_sources_link(
        many: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """keys.key_proof.prove_records indexes the staged backend entries (graph files, code
    hash): each AOT entry's proof is the one the pairwise check of every staged backend entry
    gives, without meeting the pairs one by one."""
    from vllm_cache_tools.fleet.key_proof import prove_records
    from vllm_cache_tools.keys.entry_proof import LINKED, PROVEN, prove_aot, prove_backend
    from vllm_cache_tools.keys.source_link import SourceLinker

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    sel = selection.select(many, [p.name for p in entry_dirs(many)])
    deep = {r.key: read_entry(many / r.path) for r in sel.records}
    backends = [(deep[r.key], prove_backend(deep[r.key])) for r in sel.records
                if r.layout == "backend"]
    versions = sorted({v for r in sel.records if (v := r.versions.get("vllm"))})
    linker = SourceLinker()
    want = {}
    for r in sel.records:
        if r.layout == "aot":
            sibs = [p for b, p in backends if p.status == PROVEN and linker.linked(b, deep[r.key])]
            want[r.key] = prove_aot(deep[r.key], sibs, versions=versions)
    pairs = 0
    linked = SourceLinker.linked

    def counted(self: SourceLinker, b: Entry, a: Entry) -> bool:
        nonlocal pairs
        pairs += 1
        return linked(self, b, a)

    monkeypatch.setattr(SourceLinker, "linked", counted)
    (tmp_path / "empty").mkdir()
    got = prove_records(many, tmp_path / "empty", sel.records)
    assert {k: got[("aot", k)] for k in want} == want
    # Linked to a proven backend entry by its sources (its own key needs the target's
    # Inductor factors, from a probe: not given here), never unproven.
    assert {p.status for p in want.values()} <= {PROVEN, LINKED} and want
    assert pairs == 0  # every staged backend entry met through the index


def test_forked_read_ahead_gives_the_same_records(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  request: pytest.FixtureRequest) -> None:
    """From READ_AHEAD_CORES cores (here forced) the selected entries' pickles are read by
    forked processes: the same records as read in this process."""
    if ran_in_fresh_process(request):
        return
    root = sample_starts(tmp_path, 25)  # 50 entries: past PARALLEL_MIN_ENTRIES
    keys = [p.name for p in entry_dirs(root)]
    forks = record_forks(monkeypatch)
    ahead: list[int] = []  # forks made while the read-ahead ran
    spread = link_proof.spread

    def reading(*a: Any, **k: Any) -> Iterator[Any]:
        before = len(forks)
        yield from spread(*a, **k)
        ahead.append(len(forks) - before)

    monkeypatch.setattr(link_proof, "spread", reading)
    out = {}
    for workers in ("1", str(selection.READ_AHEAD_CORES)):
        monkeypatch.setenv("VLLM_CACHE_TOOLS_SCAN_WORKERS", workers)
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / f"xdg{workers}"))
        out[workers] = selection.select(root, keys)
        assert ahead == ([] if workers == "1" else [1])  # on 1 core: read by this thread
        ahead.clear()
    one, forked = out.values()
    assert forked.records == one.records
    assert forked.files == one.files
    assert all(len(r.linked) == 1 for r in one.records)


def test_forked_read_ahead_hides_and_refuses_secrets_as_this_process(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    """The forked readers reduce each entry where they read it (its record, its redaction,
    its recorder manifests' secret check: fleet/prepared.py): a secret in an entry's env
    factors is hidden in its record, and one in a recorder manifest refuses the pack, as when
    this process reads them."""
    if ran_in_fresh_process(request):
        return
    root = sample_starts(tmp_path, 25)
    keys = [p.name for p in entry_dirs(root)]
    secret = "hunter2hunter2hunter2"
    backend = next(p for p in entry_dirs(root) if len(p.name) == 10)
    factors = next(backend.rglob("cache_key_factors.json"))
    d = json.loads(factors.read_text())
    d["env"]["VLLM_USAGE_SOURCE"] = f"https://user:{secret}@example.com/x"
    factors.write_text(json.dumps(d))
    forks = record_forks(monkeypatch)
    out = {}
    for workers in ("1", str(selection.READ_AHEAD_CORES)):
        monkeypatch.setenv("VLLM_CACHE_TOOLS_SCAN_WORKERS", workers)
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / f"xdg{workers}"))
        forks.clear()
        out[workers] = selection.select(root, keys)
        assert ("fork" in forks) == (workers != "1")  # the read-ahead forked, or not
    one, forked = out.values()
    assert forked.records == one.records and forked.clean == one.clean
    assert secret not in repr(one.records)
    hidden = [r for r in one.records if r.key == backend.name]
    assert hidden and "<redacted" in hidden[0].env_factors["VLLM_USAGE_SOURCE"]
    assert sum(not c for c in one.clean) == 1
    # A recorder manifest holding one: refused, the same words from both.
    aot = next(p for p in entry_dirs(root) if len(p.name) == 64)
    manifest = next(aot.rglob("vct-manifest.*.json"))
    m = json.loads(manifest.read_text())
    m["model"]["model"] = f"https://user:{secret}@example.com/m"
    manifest.write_text(json.dumps(m))
    said = []
    for workers in ("1", str(selection.READ_AHEAD_CORES)):
        monkeypatch.setenv("VLLM_CACHE_TOOLS_SCAN_WORKERS", workers)
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / f"xdg-m{workers}"))
        with pytest.raises(Refused) as exc:
            selection.select(root, keys)
        said.append(str(exc.value))
    assert said[0] == said[1] and "holds a secret in clear (in model.model" in said[0]
    assert secret not in said[0]


def test_unpack_proves_the_staged_entries_in_forked_readers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    """unpack's key proof reads the staged entries by forked processes once the extraction's
    threads are gone: the same placements and proofs as read in this process; an entry whose
    read fails is unproven (said so) while the others are still proven."""
    if ran_in_fresh_process(request):
        return
    from vllm_cache_tools.fleet import api
    from vllm_cache_tools.fleet.bundle_read import read_manifest
    from vllm_cache_tools.fleet.key_proof import prove_records
    from vllm_cache_tools.keys.entry_proof import UNPROVEN
    from vllm_cache_tools.store import parallel_read

    root = sample_starts(tmp_path, 25)  # 50 entries: past PARALLEL_MIN_ENTRIES
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    bundle = tmp_path / "b.tar.zst"
    api.pack([p.name for p in entry_dirs(root)], bundle, root=root)
    forks = record_forks(monkeypatch)
    out = {}
    for workers in ("1", "2"):
        monkeypatch.setenv("VLLM_CACHE_TOOLS_SCAN_WORKERS", workers)
        forks.clear()
        res = api.unpack(bundle, root=tmp_path / f"u{workers}", force=True)
        assert ("fork" in forks) == (workers != "1")  # the read-ahead forked, or not
        out[workers] = sorted((p.key, p.action, p.proof, p.detail) for p in res.placements)
    assert out["1"] == out["2"] and len(out["1"]) == 50
    assert {action for _, action, _, _ in out["2"]} == {"placed"}

    # A read that fails in a forked reader: that record alone is unproven.
    staged = tmp_path / "u2"
    recs = read_manifest(bundle).entries  # placed at the paths they were staged at
    victim = next(r for r in recs if r.layout == "backend")
    read_backend = parallel_read.read_backend_entry

    def failing(path: Path, **k: Any) -> Entry:
        if path.name == victim.key:
            raise PermissionError(13, "Permission denied", str(path))
        return read_backend(path, **k)

    monkeypatch.setattr(parallel_read, "read_backend_entry", failing)
    forks.clear()
    (tmp_path / "empty").mkdir()
    proofs = prove_records(staged, tmp_path / "empty", recs)
    assert forks == ["fork"]
    assert proofs[("backend", victim.key)].status == UNPROVEN
    assert "could not be read" in proofs[("backend", victim.key)].line()
    others = [p for (layout, k), p in proofs.items() if layout == "backend" and k != victim.key]
    assert others and all(p.status != UNPROVEN for p in others)

    # A staged folder that cannot even be looked at (EIO): that record alone is unproven.
    aot = next(r for r in recs if r.layout == "aot")
    lstat = os.lstat

    def failing_lstat(path: Any, *a: Any, **k: Any) -> os.stat_result:
        if os.fspath(path).endswith(aot.key):
            raise OSError(5, "Input/output error", os.fspath(path))
        return lstat(path, *a, **k)

    monkeypatch.setattr(os, "lstat", failing_lstat)
    proofs = prove_records(staged, tmp_path / "empty", recs)
    assert "could not be read" in proofs[("aot", aot.key)].line()
    assert proofs[("backend", victim.key)].status == UNPROVEN  # still failing its read
    assert all(p.status != UNPROVEN for (layout, k), p in proofs.items()
               if layout == "backend" and k != victim.key)


def _ends_at_sigterm(_: int) -> bool:
    return (signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
            and signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, ()))


def test_forked_readers_end_at_sigterm_under_unpacks_handler(
        request: pytest.FixtureRequest) -> None:
    """unpack runs under ``terminate_as_exit`` (SIGTERM raises SystemExit); its forked readers
    must still end at the pool's SIGTERM: with the handler inherited, a worker hung in its
    exit and the pool's ``terminate`` waited for it forever (a full run hung so)."""
    if ran_in_fresh_process(request):
        return
    from vllm_cache_tools.fleet.transfer import terminate_as_exit
    from vllm_cache_tools.store import parallel_read

    with terminate_as_exit():
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
        got = list(parallel_read.spread(_ends_at_sigterm, list(range(64)), 2))
        assert signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, ())
    assert got == [True] * 64
