"""A pack compresses each entry into its own zstd frame while the selection runs
(fleet/frames.py): in the read-ahead's forked workers from FRAME_FORK_ENTRIES entries and
FRAME_FORK_CORES cores, else in threads of the packing process, or by the writer from a
selection made without a spool. Every way gives the same bytes, which unpack places; a
worker's failure fails the pack with its reason; and the pieces the pack's speed rests on
(the manifest's encoder, the redaction of a record's files, the secret check of the carried
manifests) keep their rules."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from benchmarks.bench_fleet import entry_dirs
from tests.fresh_process import ran_in_fresh_process
from tests.test_fleet_link_index import SAMPLE, sample_starts
from vllm_cache_tools.fleet import api, bundle, frames, selection
from vllm_cache_tools.fleet.bundle import write_bundle
from vllm_cache_tools.fleet.errors import FleetError
from vllm_cache_tools.fleet.records import EntryRecord, FileRecord
from vllm_cache_tools.fleet.redacted import RECORD_DEPTH, redact_fields, refuse_secret_manifests
from vllm_cache_tools.fleet.selection import LocalFile
from vllm_cache_tools.redaction import redact_value


def _tree_digests(root: Path) -> dict[str, str]:
    cc = root / "torch_compile_cache"
    return {str(p.relative_to(cc)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(cc.rglob("*")) if p.is_file()
            and not any(part.startswith(".vllm-cache") for part in p.parts)}


def test_frames_made_by_forked_workers_threads_or_the_writer_are_the_same_bundle(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    if ran_in_fresh_process(request):
        return
    root = sample_starts(tmp_path, 6)  # 12 entries: past FRAME_FORK_ENTRIES
    keys = [p.name for p in entry_dirs(root)]
    assert len(keys) >= selection.FRAME_FORK_ENTRIES
    # One entry past zstd's job size (8 MiB at level 3: a kernel's source grown by 9 MB of
    # comments): its frame is cut into jobs, the same bytes for any number of zstd threads.
    big = next(entry_dirs(root)[-1].rglob("*.cpp"))
    with big.open("a") as f:
        f.write("".join(f"// line {i} of a long kernel source\n" for i in range(250_000)))
    used: list[int] = []
    modes: set[int] = set()
    use, compressor = frames.FrameSpool.use_processes, frames.compressor

    def spy(self: frames.FrameSpool, pool: Any) -> None:
        used.append(pool._processes)
        use(self, pool)

    def compressor_spy(level: int, threads: int = 1) -> Any:
        modes.add(threads)
        return compressor(level, threads)

    monkeypatch.setattr(frames.FrameSpool, "use_processes", spy)
    monkeypatch.setattr(frames, "compressor", compressor_spy)
    out: dict[str, bytes] = {}
    forked = str(selection.FRAME_FORK_CORES)
    for how, workers in (("threads", "2"), ("forked", forked), ("forked, from the memo", forked)):
        monkeypatch.setenv("VLLM_CACHE_TOOLS_SCAN_WORKERS", workers)
        if how != "forked, from the memo":
            monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / f"xdg-{workers}"))  # cold
        used.clear()
        res = api.pack(keys, tmp_path / f"{len(out)}.tar.zst", root=root)
        assert used == ([] if how == "threads" else [selection.FRAME_FORK_CORES]), how
        assert len(res.entries) == len(keys)
        out[how] = res.path.read_bytes()
    # Without a spool (push's selection, bench_fleet's write row): the writer compresses, with
    # two zstd threads a frame where it counts 8 cores.
    sel = selection.select(root, keys)
    out["writer"] = write_bundle(sel, tmp_path / "w.tar.zst").path.read_bytes()
    monkeypatch.setenv("VLLM_CACHE_TOOLS_SCAN_WORKERS", "8")
    out["writer, 8 cores"] = write_bundle(sel, tmp_path / "w8.tar.zst").path.read_bytes()
    assert len(set(out.values())) == 1, {k: len(v) for k, v in out.items()}
    assert {1, 2} <= modes, modes  # in this process: one zstd thread a frame, and two
    # Frames in a row are one stream to unpack: every file placed as it was.
    api.unpack(tmp_path / "1.tar.zst", root=tmp_path / "placed", force=True)
    assert _tree_digests(tmp_path / "placed") == _tree_digests(root)


def _forked_pack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                 ) -> tuple[Path, list[str], str]:
    """A root of 12 entries packed by forked workers (a cold memo), and the path of its first
    AOT artifact."""
    root = sample_starts(tmp_path, 6)
    monkeypatch.setenv("VLLM_CACHE_TOOLS_SCAN_WORKERS", str(selection.FRAME_FORK_CORES))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    victim = os.fspath(next(p for p in sorted((root / "torch_compile_cache").rglob("model"))))
    return root, [p.name for p in entry_dirs(root)], victim


def test_a_file_a_forked_worker_cannot_read_fails_the_pack_with_its_name(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    if ran_in_fresh_process(request):
        return
    root, keys, victim = _forked_pack(tmp_path, monkeypatch)
    walked = frames.walked_fd

    def failing(path: Any, *a: Any, **k: Any) -> Any:  # inherited by the forked workers
        if os.fspath(path) == victim:
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return walked(path, *a, **k)

    monkeypatch.setattr(frames, "walked_fd", failing)
    out = tmp_path / "b.tar.zst"
    with pytest.raises(FleetError, match=r"cannot read .*/rank_0_0/model: Permission denied"):
        api.pack(keys, out, root=root)
    assert not out.exists() and not any(p.name != "xdg" for p in tmp_path.iterdir()
                                        if p.name.startswith(".b.tar.zst"))


def test_a_file_unreadable_while_a_pack_from_the_memo_writes_fails_it_with_its_name(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In threads, the frames of a pack from the memo go on compressing while the bundle's
    manifest is written: a file that then cannot be read fails the pack with its name, and
    nothing is left."""
    root = sample_starts(tmp_path, 6)
    monkeypatch.setenv("VLLM_CACHE_TOOLS_SCAN_WORKERS", "2")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    keys = [p.name for p in entry_dirs(root)]
    api.pack(keys, tmp_path / "first.tar.zst", root=root)  # the memo knows every entry
    victim = os.fspath(sorted((root / "torch_compile_cache").rglob("model"))[-1])
    walked = frames.walked_fd
    written: list[str] = []
    manifest_bytes = bundle.manifest_bytes

    def failing(path: Any, *a: Any, **k: Any) -> Any:
        if os.fspath(path) == victim:
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return walked(path, *a, **k)

    def manifest_first(*a: Any, **k: Any) -> bytes:
        written.append("manifest")
        return manifest_bytes(*a, **k)

    monkeypatch.setattr(frames, "walked_fd", failing)
    monkeypatch.setattr(bundle, "manifest_bytes", manifest_first)
    out = tmp_path / "b.tar.zst"
    with pytest.raises(FleetError, match=r"cannot read .*/rank_0_0/model: Permission denied"):
        api.pack(keys, out, root=root)
    assert written == ["manifest"] and not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".b.tar.zst")]


def test_a_forked_worker_that_dies_fails_the_pack_instead_of_hanging(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    """A worker killed mid-entry (the OOM killer) is replaced by the pool, which never answers
    its job: the pack looks for that while it waits and stops with the reason."""
    if ran_in_fresh_process(request):
        return
    root, keys, victim = _forked_pack(tmp_path, monkeypatch)
    hashed = frames._hashed

    def dying(z: Any, prefix: str, rel: str, path: str, *a: Any) -> Any:
        if path == victim:
            os.kill(os.getpid(), 9)  # in the forked worker that archives it
        return hashed(z, prefix, rel, path, *a)

    monkeypatch.setattr(frames, "_hashed", dying)
    out = tmp_path / "b.tar.zst"
    with pytest.raises(FleetError, match="worker process ended without answering"):
        api.pack(keys, out, root=root)
    assert not out.exists()


def test_the_secret_check_reads_the_manifest_bytes_the_pack_carried(tmp_path: Path) -> None:
    """A manifest deleted (or replaced) after the pack archived it is checked as archived;
    without those bytes, one that cannot be read stops the pack: never skipped."""
    from vllm_cache_tools.fleet.errors import Refused

    src = next(SAMPLE.rglob("vct-manifest.*.json"))
    data = json.loads(src.read_text())
    data.setdefault("model", {})["model"] = "https://user:hunter2secret@hf.example/m"
    raw = json.dumps(data).encode()
    m = tmp_path / src.name
    rec = FileRecord(f"rank_0_0/{m.name}", len(raw), hashlib.sha256(raw).hexdigest())
    files = [[LocalFile(rec, os.fspath(m))]]  # the file is gone by the check
    with pytest.raises(Refused, match="holds a secret in clear"):
        refuse_secret_manifests([_record(files=(rec,))], files, carried={os.fspath(m): raw})
    with pytest.raises(FleetError, match="cannot read the recorder manifest"):
        refuse_secret_manifests([_record(files=(rec,))], files)


@pytest.mark.parametrize("paths", [
    ["rank_0_0/model", "rank_0_0/backbone/cache_key_factors.json"],
    ["rank_0_0/hf_" + "a1B2" * 8 + "/x.py"],
    ["https://user:hunter2@h.example/m/x", "plain"],
    ["rank_0_0/tokenizer_config.json", "password=hunter2", "sk-" + "x" * 30],
])
def test_a_records_files_are_redacted_by_the_rule(paths: list[str]) -> None:
    """The fast look at a record's list of files (only texts that may hold a secret are
    redacted, once a selection) gives what the rule gives, and redacts what it redacts."""
    files = [{"path": p, "size": i, "sha256": "ab" * 32, "executable": bool(i % 2)}
             for i, p in enumerate(paths)]
    record = {"key": "k" * 10, "files": files}
    seen: dict[Any, Any] = {}
    for _ in range(2):  # the second time from the memo
        assert redact_fields(record, seen, RECORD_DEPTH) == redact_value(None, record,
                                                                           RECORD_DEPTH)


def test_a_carried_manifest_changed_since_its_hash_is_never_checked_in_its_new_form(
        tmp_path: Path) -> None:
    src = next(SAMPLE.rglob("vct-manifest.*.json"))
    m = tmp_path / src.name
    m.write_bytes(src.read_bytes())
    rec = FileRecord(f"rank_0_0/{m.name}", m.stat().st_size,
                     hashlib.sha256(m.read_bytes()).hexdigest())
    entry = _record(files=(rec,))
    refuse_secret_manifests([entry], [[LocalFile(rec, os.fspath(m))]])  # as hashed: checked
    data = json.loads(m.read_text())
    data["note"] = "rewritten after the pack hashed it"
    m.write_text(json.dumps(data))
    with pytest.raises(FleetError, match="changed while it was packed"):
        refuse_secret_manifests([entry], [[LocalFile(rec, os.fspath(m))]])


def test_the_manifests_encoder_writes_json_dumps_bytes_and_escapes_what_is_not_ascii() -> None:
    from vllm_cache_tools.fleet.bundle import manifest_bytes
    from vllm_cache_tools.fleet.records import BundleManifest, manifest_json

    for model in ("plain/model", "модель/ü\u202e\x1b[31m"):
        doc = BundleManifest((_record(model=model),))
        want = (json.dumps(manifest_json(doc), sort_keys=True, separators=(",", ":"))
                + "\n").encode()
        assert manifest_bytes(doc) == want and want.isascii()


def _record(**k: Any) -> EntryRecord:
    return EntryRecord(**{"key": "0" * 10, "layout": "backend", "path": "x", "ranks": (),
                          "prefixes": (), "state": "complete", "state_detail": "",
                          "files": (), **k})



def test_a_second_user_packs_a_shared_root_without_recording_a_use(tmp_path: Path) -> None:
    """On a group-shared root, a pack by a user who does not own the files cannot open them
    with ``O_NOATIME``: where reading them would not move their atime (``relatime``: read
    since their last change), each is opened the careful way and packed, from the memo too,
    and no atime moves; where it would, the pack is refused with the reason, not a trace."""
    import subprocess
    import time

    from tests.multiuser import make_shared_root, other_user, run_as, shared_group, vllm_cache_argv

    flags = os.statvfs(tmp_path).f_flag
    if not flags & getattr(os, "ST_RELATIME", 4096) or flags & getattr(os, "ST_NOATIME", 1024):
        pytest.skip("needs a relatime mount (this machine's root is one)")
    group = shared_group()
    user = other_user(group)
    root = make_shared_root(SAMPLE, tmp_path / "shared", group)
    cc = root / "torch_compile_cache"
    keys = sorted(p.name for p in cc.iterdir() if len(p.name) == 10)  # group-readable files
    out = tmp_path / "out"
    out.mkdir()
    os.chmod(out, 0o777)
    env = {"XDG_CACHE_HOME": str(out / "xdg")}

    def pack(name: str) -> subprocess.CompletedProcess[str]:
        return run_as(user, vllm_cache_argv("pack", "--root", str(root), *keys, "-o",
                                            str(out / name)), env=env)

    refused = pack("refused.tar.zst")
    assert refused.returncode == 1 and "would record a use" in refused.stderr
    assert "Traceback" not in refused.stderr and not (out / "refused.tar.zst").exists()
    time.sleep(1.1)  # then read as their owner: atime past the last change
    files = [p for k in keys for p in (cc / k).rglob("*") if p.is_file()]
    for p in files:
        p.read_bytes()
    atimes = {p: os.stat(p).st_atime_ns for p in files}
    first, again = pack("a.tar.zst"), pack("b.tar.zst")
    assert first.returncode == 0 and again.returncode == 0, first.stderr + again.stderr
    assert (out / "a.tar.zst").read_bytes() == (out / "b.tar.zst").read_bytes()
    assert {p: os.stat(p).st_atime_ns for p in files} == atimes
