"""The pack memo (fleet/pack_memo.py) on a real cache (tests/realvllm harness root): a pack of
unchanged entries reads no pickle and hashes no file, and gives the same bytes; a changed file
is read and hashed again."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.realvllm.harness import ScenarioRun
from vllm_cache_tools.fleet import api, frames, link_proof, prepared, selection
from vllm_cache_tools.fleet.bundle import read_manifest
from vllm_cache_tools.fleet.pack_memo import memo_path

BACKEND_KEY_LEN = 10


def _backend_keys(root: Path) -> list[str]:
    cc = root / "torch_compile_cache"
    return sorted(p.name for p in cc.iterdir() if len(p.name) == BACKEND_KEY_LEN)


@pytest.fixture()
def root(real_compile: ScenarioRun, tmp_path: Path) -> Path:
    out = tmp_path / "root"
    shutil.copytree(real_compile.vllm_root, out, symlinks=True)
    return out


def _no_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*a: object, **k: object) -> None:
        raise AssertionError("read although the memo knows the entry")

    monkeypatch.setattr(link_proof, "read_entry", boom)
    monkeypatch.setattr(selection, "_hash_files", boom)
    monkeypatch.setattr(frames, "_hashed", boom)  # the pack hashes as it compresses


def test_unchanged_entries_come_from_the_memo_with_the_same_bytes(
        root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = _backend_keys(root)[0]
    cold = api.pack([key], tmp_path / "cold.tar.zst", root=root)
    assert memo_path(root / "torch_compile_cache").is_file()
    m = read_manifest(cold.path)
    assert {e.layout for e in m.entries} == {"backend", "aot"}  # linked by the proof
    with monkeypatch.context() as mp:
        _no_reads(mp)
        warm = api.pack([key], tmp_path / "warm.tar.zst", root=root)
    assert warm.path.read_bytes() == cold.path.read_bytes()
    assert warm.entries == cold.entries  # linked keys included


def test_a_changed_file_is_hashed_again(root: Path, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    key = _backend_keys(root)[0]
    api.pack([key], tmp_path / "one.tar.zst", root=root)
    entry = root / "torch_compile_cache" / key
    victim = next(p for p in sorted(entry.rglob("*")) if p.is_file() and p.suffix == ".py")
    tmp = victim.with_name(victim.name + ".new")  # replaced by rename, as Inductor does
    tmp.write_bytes(victim.read_bytes() + b"\n# changed\n")
    os.replace(tmp, victim)
    again = api.pack([key], tmp_path / "two.tar.zst", root=root)
    rel = victim.relative_to(entry).as_posix()
    rec = next(e for e in again.entries if e.key == key)
    assert next(f for f in rec.files if f.path == rel).size == victim.stat().st_size
    # The same bundle as a pack without any memo.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "fresh"))
    fresh = api.pack([key], tmp_path / "three.tar.zst", root=root)
    assert fresh.path.read_bytes() == again.path.read_bytes()


def test_an_unreadable_memo_is_ignored(root: Path, tmp_path: Path) -> None:
    key = _backend_keys(root)[0]
    first = api.pack([key], tmp_path / "a.tar.zst", root=root)
    memo_path(root / "torch_compile_cache").write_bytes(b"\x93not a memo")
    second = api.pack([key], tmp_path / "b.tar.zst", root=root)
    assert second.path.read_bytes() == first.path.read_bytes()


def test_a_root_path_that_is_not_utf8_packs_without_a_memo(tmp_path: Path) -> None:
    """msgpack holds no undecodable path: the memo is not written and pack works (was:
    'internal error: UnicodeEncodeError', exit 3)."""
    from tests.conftest import run_cli

    sample = Path(__file__).resolve().parent.parent / "examples" / "sample_cache"
    root = Path(os.fsdecode(bytes(tmp_path) + b"/r\xffoot"))
    shutil.copytree(sample, root, symlinks=True)
    out = tmp_path / "b.tar.zst"
    for again in ((), ("--force",)):  # the second run replaces the first bundle
        r = run_cli("pack", "28fd", "--root", os.fsdecode(root), "-o", str(out), *again)
        assert r.returncode == 0, r.stderr
        assert out.stat().st_size > 0


@pytest.fixture()
def sample(tmp_path: Path) -> Path:
    """The shipped real cache (vLLM's files and the recorder's manifests)."""
    out = tmp_path / "sample"
    shutil.copytree(Path(__file__).parent.parent / "examples" / "sample_cache", out,
                    symlinks=True)
    return out


def test_entries_found_clean_are_not_redacted_again_until_a_file_changes(
        sample: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm_cache_tools.fleet import redacted
    from vllm_cache_tools.fleet.errors import Refused

    key = "0b8536d36d86"
    cold = api.pack([key], tmp_path / "cold.tar.zst", root=sample)
    assert {e.layout for e in cold.entries} == {"backend", "aot"}

    def boom(*a: object, **k: object) -> None:
        raise AssertionError("redacted or read again although the memo found it clean")

    with monkeypatch.context() as mp:  # the memo answers: no record redacted, no manifest read
        _no_reads(mp)
        mp.setattr(selection, "redacted_record", boom)
        mp.setattr(redacted, "manifest_from_bytes", boom)
        warm = api.pack([key], tmp_path / "warm.tar.zst", root=sample)
    assert warm.path.read_bytes() == cold.path.read_bytes()
    # A manifest rewritten with a secret in clear (by an older recorder, by hand): the entry's
    # fingerprint changed, so the memo's mark no longer holds and the pack refuses it.
    manifest = next((sample / "torch_compile_cache" / "torch_aot_compile").glob(
        f"{key}*/rank_0_0/vct-manifest.*.json"))
    data = json.loads(manifest.read_text())
    data.setdefault("model", {})["model"] = "https://user:hunter2secret@hf.example/m"
    tmp = manifest.with_name(manifest.name + ".new")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, manifest)
    with pytest.raises(Refused, match="holds a secret in clear"):
        api.pack([key], tmp_path / "refused.tar.zst", root=sample)
    assert not (tmp_path / "refused.tar.zst").exists()


def test_the_memo_keeps_each_recorded_value_once_and_forgets_the_unnamed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The records' ``recorded`` values (the recorder's config and Inductor fields, most of a
    record and the same for one host's starts) are kept once each in the memo; the records
    read back are the ones written (the same bundle); values no record names any more go."""
    from benchmarks.bench_fleet import entry_dirs
    from tests.test_fleet_link_index import sample_starts
    from vllm_cache_tools.fleet.pack_memo import _DECODE, _DECODE_ENTRY

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    root = sample_starts(tmp_path, 4)
    keys = [p.name for p in entry_dirs(root)]
    cold = api.pack(keys, tmp_path / "cold.tar.zst", root=root)
    path = memo_path(root / "torch_compile_cache")

    def named() -> tuple[list[str], set[str]]:
        doc = _DECODE(path.read_bytes())
        refs = [h for raw in doc.entries.values() for h in _DECODE_ENTRY(raw)[3].values()]
        return refs, set(doc.values)

    refs, values = named()
    assert set(refs) == values and len(values) < len(refs) / 2, (len(values), len(refs))
    with monkeypatch.context() as mp:
        _no_reads(mp)
        warm = api.pack(keys, tmp_path / "warm.tar.zst", root=root)
    assert warm.path.read_bytes() == cold.path.read_bytes()
    assert [e.recorded for e in warm.entries] == [e.recorded for e in cold.entries]
    assert all(e.recorded for e in cold.entries)
    # Entries gone, the others' recorder config changed: the old config's value is named by
    # no record any more, and goes.
    old = {_DECODE_ENTRY(raw)[3].get("config")
           for raw in _DECODE(path.read_bytes()).entries.values()} - {None}
    for p in entry_dirs(root)[:2]:
        shutil.rmtree(p)
    for manifest in root.rglob("vct-manifest.*.json"):
        data = json.loads(manifest.read_text())
        data["config"]["changed_for_the_test"] = 1
        manifest.write_text(json.dumps(data))
    api.pack([p.name for p in entry_dirs(root)], tmp_path / "third.tar.zst", root=root)
    refs, values = named()
    assert set(refs) == values and old and not old & values


def test_the_manifest_of_clean_records_is_the_one_full_redaction_writes(sample: Path) -> None:
    from dataclasses import replace

    from vllm_cache_tools.fleet.bundle import manifest_bytes, selection_manifest
    from vllm_cache_tools.fleet.redacted import RECORD_DEPTH, redacted_record

    sel = selection.select(sample, ["0b8536d36d86"])
    assert len(sel.clean) == len(sel.records) == 2 and all(sel.clean)
    m = selection_manifest(sel)
    assert manifest_bytes(m, sel.clean) == manifest_bytes(m)
    # A secret elsewhere in the document (the packing host's facts) is still hidden.
    leaky = replace(m, packed_on={**m.packed_on, "hostname": "https://u:hunter2secret@h.x/m"})
    assert b"hunter2secret" not in manifest_bytes(leaky, sel.clean)
    assert manifest_bytes(leaky, sel.clean) == manifest_bytes(leaky)
    # A record holding a secret is redacted (so never taken as clean).
    rec = replace(sel.records[0], model="https://user:hunter2secret@hf.example/m")
    red = redacted_record(rec, {}, RECORD_DEPTH)
    assert red is not rec and "hunter2secret" not in (red.model or "")
    m2 = replace(m, entries=(rec, *m.entries[1:]))
    assert b"hunter2secret" not in manifest_bytes(m2, (False, True))


def test_a_manifest_replaced_between_its_read_and_its_hash_is_checked_as_hashed(
        sample: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The secret check takes the deep read's verdict on a manifest only where the bytes it
    read are the ones hashed: here the read sees a clean manifest, then the file is
    replaced by one holding a password before it is hashed, so the bytes carried are the new
    ones and the check must read them."""
    import threading

    from vllm_cache_tools.fleet.errors import FleetError
    from vllm_cache_tools.fleet.frames import FrameSpool

    key = "0b8536d36d86"
    manifest = next((sample / "torch_compile_cache" / "torch_aot_compile").glob(
        f"{key}*/rank_0_0/vct-manifest.*.json"))
    entry = manifest.parent.parent
    read = threading.Event()
    full, frame = link_proof.EntryFacts.full, FrameSpool._frame
    deep_read = prepared.deep_read

    def read_then_replace(layout: str, p: Path) -> object:  # read where it is reduced
        e = deep_read(layout, p)
        if Path(p).resolve() == entry.resolve() and not read.is_set():
            replace_manifest()
        return e

    def replace_manifest() -> None:
        data = json.loads(manifest.read_text())
        data.setdefault("model", {})["model"] = "https://user:hunter2secret@hf.example/m"
        tmp = manifest.with_name(manifest.name + ".new")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, manifest)
        read.set()

    def full_then_replace(self: link_proof.EntryFacts, p: str) -> object:
        e = full(self, p)
        if Path(p) == entry.resolve() and not read.is_set():
            replace_manifest()
        return e

    def hash_after_the_read(self: FrameSpool, prefix: str, walked: selection.Walked,
                            known: object) -> object:
        if any(path == str(manifest) for _, path, _, _ in walked):
            assert read.wait(30)
        return frame(self, prefix, walked, known)  # type: ignore[arg-type]

    monkeypatch.setattr(link_proof.EntryFacts, "full", full_then_replace)
    monkeypatch.setattr(prepared, "deep_read", read_then_replace)
    monkeypatch.setattr(FrameSpool, "_frame", hash_after_the_read)
    with pytest.raises(FleetError, match=r"secret in clear|changed while"):
        api.pack([key], tmp_path / "b.tar.zst", root=sample)
    assert not (tmp_path / "b.tar.zst").exists()
