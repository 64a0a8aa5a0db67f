"""A bundle file is unpacked by its frames in forked processes where there are the cores
(fleet/frame_read.py): each worker checks and writes one entry's frame and reads the entry it
wrote for the key proof. It must place exactly what the one-stream reader places, refuse every
way a frame can lie with nothing placed, make every check (trust, free space) before the first
file is written, and stop when a worker dies. The manifest is read by entry (so the frames'
feeders get the GIL) and its file list fast: both must read what the whole-document parser
reads. The cache is the shipped example's first start (a real vLLM start), copied."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import pickle
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest
import zstandard

from benchmarks.bench_fleet import entry_dirs
from tests.fresh_process import ran_in_fresh_process
from tests.test_fleet_link_index import sample_starts
from vllm_cache_tools.fleet import api, bundle_read, frame_read, key_proof
from vllm_cache_tools.fleet.errors import BundleError, FleetError, Refused
from vllm_cache_tools.fleet.records import RecordedJSON, manifest_files
from vllm_cache_tools.fleet.sshsig import NAMESPACE
from vllm_cache_tools.fleet.trust import load_policy
from vllm_cache_tools.read import jsontext


def _tree(root: Path) -> dict[str, str]:
    cc = root / "torch_compile_cache"
    return {str(p.relative_to(cc)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(cc.rglob("*")) if p.is_file()
            and not any(part.startswith(".vllm-cache") for part in p.parts)}


def _packed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest,
            **pack: Any) -> Path | None:
    """A bundle of 12 entries (6 starts), unpacked by frames from here on (4 workers); None
    where the test ran again in a fresh process (and passed there): the caller returns."""
    if ran_in_fresh_process(request):
        return None
    root = sample_starts(tmp_path, 6)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("VLLM_CACHE_TOOLS_SCAN_WORKERS", str(frame_read.FRAME_READ_CORES))
    out = tmp_path / "b.tar.zst"
    api.pack([p.name for p in entry_dirs(root)], out, root=root, **pack)
    return out


def _frames(bundle: Path) -> list[bytes]:
    data = bundle.read_bytes()
    fd = os.open(bundle, os.O_RDONLY)
    try:
        extents = frame_read.frame_extents(fd, len(data))
    finally:
        os.close(fd)
    assert extents is not None and len(extents) >= 3
    return [data[a:a + n] for a, n in extents]


def _unframe(frame: bytes) -> bytes:
    return zstandard.ZstdDecompressor().stream_reader(frame, read_across_frames=True).read()


def _placed_nothing(root: Path) -> bool:
    return not _tree(root) if (root / "torch_compile_cache").exists() else True


def _refused(bundle: Path, root: Path, match: str) -> None:
    with pytest.raises(FleetError, match=match):
        api.unpack(bundle, root=root, force=True)
    assert _placed_nothing(root)
    staging = root / "torch_compile_cache" / ".vllm-cache-tools" / "staging"
    assert not staging.exists() or not any(staging.iterdir())


def test_frames_place_what_the_one_stream_reader_places(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    bundle = _packed(tmp_path, monkeypatch, request)
    if bundle is None:
        return
    workers = frame_read.FRAME_READ_CORES
    framed: list[int] = []
    handed: list[int] = []
    extract, prove = frame_read._extract, key_proof.prove_records

    def spy_extract(*a: Any, **k: Any) -> Any:
        framed.append(a[6])  # the number of workers
        return extract(*a, **k)

    def spy_prove(*a: Any, read_before: Any = None, **k: Any) -> Any:
        handed.append(len(read_before or {}))
        return prove(*a, read_before=read_before, **k)

    monkeypatch.setattr(frame_read, "_extract", spy_extract)
    monkeypatch.setattr(key_proof, "prove_records", spy_prove)
    by_frames = api.unpack(bundle, root=tmp_path / "a", force=True)
    assert framed == [workers]
    assert handed == [len(by_frames.manifest.entries)]  # every entry read by the workers
    monkeypatch.setattr(frame_read, "FRAME_READ_CORES", 1 << 30)
    one_stream = api.unpack(bundle, root=tmp_path / "b", force=True)
    assert framed == [workers] and handed[1] == 0  # the one-stream reader read it all
    assert [(p.key, p.action, p.proof) for p in by_frames.placements] == \
        [(p.key, p.action, p.proof) for p in one_stream.placements]
    assert {p.action for p in by_frames.placements} == {"placed"}
    assert {p.proof for p in by_frames.placements} <= {"proven", "linked"}
    assert _tree(tmp_path / "a") == _tree(tmp_path / "b") == _tree(tmp_path / "root")


def test_frames_are_handed_out_in_order_in_chunks_of_equal_counts() -> None:
    # The bench bundles' shape: 200 entry frames after the manifest's.
    chunks = frame_read.frame_chunks(200, 32, first=1)
    assert chunks == [list(range(j + 1, min(j + 6, 200) + 1)) for j in range(0, 200, 6)]
    for frames, count in ((200, 8), (3, 32), (7, 0), (1, 1)):
        chunks = frame_read.frame_chunks(frames, count, first=1)
        assert [i for c in chunks for i in c] == list(range(1, frames + 1))  # in order, once
        assert all(chunks)
    assert frame_read.frame_chunks(0, 4) == []


def _tampered(frame: bytes) -> bytes:
    """The frame with one byte of its first member's data changed."""
    data = bytearray(_unframe(frame))
    with tarfile.open(fileobj=io.BytesIO(bytes(data)), mode="r:") as tar:
        first = next(m for m in tar.getmembers() if m.size)
    data[first.offset_data] ^= 0xFF
    return zstandard.ZstdCompressor().compress(bytes(data))


def test_every_way_a_frame_lies_places_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    bundle = _packed(tmp_path, monkeypatch, request)
    if bundle is None:
        return
    fr = _frames(bundle)
    end = zstandard.ZstdCompressor().compress(b"\0" * 1024)
    # Members, then one zero block: tar's end for a reader of the one stream.
    ended = zstandard.ZstdCompressor().compress(_unframe(fr[1]) + b"\0" * 512)
    cases = {
        "sha256 differs from the manifest": [fr[0], _tampered(fr[1]), *fr[2:]],
        "listed twice": [fr[0], fr[1], fr[1], *fr[2:]],
        "data after the end of the bundle|truncated or corrupt": [*fr[:-1], end, fr[-1]],
        "truncated: .* listed files missing": [fr[0], *fr[2:]],
        "data after the end of the bundle": [fr[0], ended, *fr[2:]],
        # Not a row of frames alone: the one-stream reader reports it.
        "data after the end|truncated or corrupt": [*fr, b"appended"],
    }
    framed: list[Path] = []
    extract = frame_read._extract

    def spy(*a: Any, **k: Any) -> Any:
        framed.append(a[1])
        return extract(*a, **k)

    monkeypatch.setattr(frame_read, "_extract", spy)
    for i, (match, parts) in enumerate(cases.items()):
        lying = tmp_path / f"lying{i}.tar.zst"
        lying.write_bytes(b"".join(parts))
        _refused(lying, tmp_path / f"r{i}", match)
    assert [p.name for p in framed] == [f"lying{i}.tar.zst" for i in range(5)]


def test_the_checks_come_before_the_first_write(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    """An untrusted signature and a disk without room refuse the bundle before any worker
    writes a file (a worker's write would leave the marker)."""
    if shutil.which("ssh-keygen") is None:
        pytest.skip("ssh-keygen (openssh-client) is not installed")
    keys = {}
    for who in ("alice", "mallory"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", who, "-f",
                        str(tmp_path / who)], check=True)
        keys[who] = " ".join((tmp_path / f"{who}.pub").read_text().split()[:2])
    bundle = _packed(tmp_path, monkeypatch, request, sign=tmp_path / "mallory")
    if bundle is None:
        return
    policy = tmp_path / "allowed_signers"
    policy.write_text(f'alice@example.com namespaces="{NAMESPACE}" {keys["alice"]}\n')
    marker = tmp_path / "written"
    write = frame_read.write_batch

    def marking(*a: Any, **k: Any) -> Any:  # runs in the forked workers
        marker.touch()
        return write(*a, **k)

    monkeypatch.setattr(frame_read, "write_batch", marking)
    with pytest.raises(Refused):
        api.unpack(bundle, root=tmp_path / "u", trust=load_policy(policy))
    assert not marker.exists() and _placed_nothing(tmp_path / "u")

    def no_room(*a: Any, **k: Any) -> None:
        raise Refused("unpacking b.tar.zst: no room: nothing written")

    monkeypatch.setattr(api, "check_free_space", no_room)
    with pytest.raises(Refused, match="no room"):
        api.unpack(bundle, root=tmp_path / "v", force=True)
    assert not marker.exists() and _placed_nothing(tmp_path / "v")
    monkeypatch.undo()


def test_a_frame_reader_that_dies_fails_the_unpack_instead_of_hanging(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    bundle = _packed(tmp_path, monkeypatch, request)
    if bundle is None:
        return
    read = frame_read.read_staged

    def dying(path: Path) -> Any:
        if path.parent.name == "torch_aot_compile":
            os.kill(os.getpid(), 9)  # in the forked worker
        return read(path)

    monkeypatch.setattr(frame_read, "read_staged", dying)
    _refused(bundle, tmp_path / "u", "worker process ended without answering")


def test_the_manifest_read_by_entry_and_its_file_list_read_what_the_whole_parse_reads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    root = sample_starts(tmp_path, 2)
    out = tmp_path / "b.tar.zst"
    api.pack([p.name for p in entry_dirs(root)], out, root=root)
    with tarfile.open(fileobj=io.BytesIO(_unframe(_frames(out)[0])), mode="r:") as tar:
        f = tar.extractfile(tar.getmembers()[0])
        assert f is not None
        raw = f.read()
    whole = jsontext.loads(raw, "m", max_containers=None)
    assert bundle_read._loads_by_entry(raw) == whole
    m = bundle_read.parse_manifest(raw, out)
    listed = manifest_files(raw)
    assert listed is not None and dict(listed.files) == bundle_read.expected_files(m)
    assert listed.entries == tuple((e.path, len(e.files)) for e in m.entries)
    # The same bounds: an entry's values are two levels deeper than the document's others.
    deepest = jsontext.MAX_DEPTH
    for n, ok in ((deepest - 3, True), (deepest - 2, False)):
        doc = b'{"entries": [{"files": ' + b"[" * n + b"]" * n + b"}]}"
        for parse in (bundle_read._loads_by_entry, lambda d: jsontext.loads(d, "m")):
            if ok:
                parse(doc)
            else:
                with pytest.raises(ValueError, match="nested more than"):
                    parse(doc)
    # An entry's recorded object is parsed when used (a miss's causes), under its own bound.
    for n, ok in ((deepest - 4, True), (deepest - 3, False)):
        doc = (b'{"entries": [{"recorded": {"a": ' + b"[" * n + b"]" * n + b"}}]}")
        with pytest.raises(ValueError, match="nested more than") if not ok else \
                contextlib.nullcontext():
            jsontext.loads(doc, "m")
        lazy = bundle_read._loads_by_entry(doc)
        assert lazy is not None
        recorded = lazy["entries"][0]["recorded"]
        assert isinstance(recorded, RecordedJSON)
        assert pickle.loads(pickle.dumps(recorded)).raw == recorded.raw
        if ok:
            assert dict(recorded) == json.loads(doc)["entries"][0]["recorded"]
        else:
            with pytest.raises(BundleError, match=r"recorded: .*nested more than"):
                dict(recorded)
    # What msgspec cannot split goes to the whole-document parser, which reads it as before.
    for text in (b'{"entries": [NaN]}', b'\xef\xbb\xbf{"entries": []}',
                 b'{"entries": ["\\ud800"]}', b'{"entries": [[]]}'):
        assert bundle_read._loads_by_entry(text) is None
        assert manifest_files(text) is None


def test_a_fifo_is_left_to_the_one_stream_reader(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    """A named pipe is looked at, never opened, by the frame reader: opening it twice would
    lose what its writer sent (the second open then waited for a writer forever)."""
    bundle = _packed(tmp_path, monkeypatch, request)
    if bundle is None:
        return
    fifo = tmp_path / "b.fifo"
    os.mkfifo(fifo)
    writer = subprocess.Popen(["sh", "-c", f"cat '{bundle}' > '{fifo}'"])
    try:
        got = api.unpack(fifo, root=tmp_path / "u", force=True)
    finally:
        writer.wait(timeout=60)
    assert {p.action for p in got.placements} == {"placed"}
    assert _tree(tmp_path / "u") == _tree(tmp_path / "root")


def test_write_behind_where_the_workers_leave_cores_idle(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    """The frame workers start each file's writeback on the 16-core device (8 workers: the
    disk writes while they decompress), not on 2 cores (2 workers: the CPU it costs there
    made unpack slower); the benches' setting overrides either way."""
    from vllm_cache_tools.fleet import frame_read

    assert frame_read.WRITE_BEHIND is None
    assert frame_read.write_behind(16, 8)
    assert not frame_read.write_behind(2, 2)
    assert not frame_read.write_behind(8, 8)
    assert frame_read.write_behind(4, 1)
    monkeypatch.setattr(frame_read, "WRITE_BEHIND", True)
    assert frame_read.write_behind(2, 2)
    monkeypatch.setattr(frame_read, "WRITE_BEHIND", False)
    assert not frame_read.write_behind(16, 8)


def test_write_behind_is_only_a_hint(tmp_path: Path) -> None:
    """``place.start_writeback`` (the frame workers' write-behind) on a staged file starts its
    writeback; on what has no pages to write (a pipe, /dev/null) it does nothing, no error:
    the one flush before the renames is what makes the data durable."""
    from vllm_cache_tools.fleet.place import start_writeback

    f = tmp_path / "f"
    fd = os.open(f, os.O_CREAT | os.O_WRONLY)
    try:
        os.write(fd, b"x" * (1 << 20))
        start_writeback(fd)
    finally:
        os.close(fd)
    assert f.stat().st_size == 1 << 20
    r, w = os.pipe()
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        for x in (w, null):
            start_writeback(x)
    finally:
        for x in (r, w, null):
            os.close(x)
