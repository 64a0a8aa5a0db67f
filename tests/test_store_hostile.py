"""Stores that lie (issue 23, items 3, 5, 6, 9): blobs that are FIFOs or links, a blob missing
in the middle, index objects that are malformed or oversized, a pull killed half way, a file
system too small for what is written. Real ``file://`` stores (and S3 on moto's server on
loopback) filled by ``push`` from the repository's real sample cache; the CLI in a child."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.fleet_support import moto as moto
from tests.fleet_support import s3 as s3
from tests.spying import spy_on
from vllm_cache_tools.fleet import api
from vllm_cache_tools.fleet.remote import MAX_INDEX_BYTES, MAX_INDEX_FILES, Store

SAMPLE = Path(__file__).resolve().parent.parent / "examples" / "sample_cache"
BACKEND = "28fd362d4e"
OTHER = "39ecaca4bf"
STAGING = ("torch_compile_cache", ".vllm-cache-tools", "staging")


def _store(tmp_path: Path, *keys: str) -> tuple[str, Store]:
    url = f"file://{tmp_path}/store"
    api.push(list(keys) or [BACKEND], url, root=SAMPLE)
    return url, Store(url)


def _blobs(store: Store, key: str) -> list[str]:
    e = next(x for x in store.entries() if x.record.key == key)
    return sorted({f.sha256 for f in e.record.files})


def _timed(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    t0 = time.monotonic()
    r = run_cli(*args)
    return r, time.monotonic() - t0


@pytest.mark.parametrize("plant", ["fifo", "link-to-fifo", "link-to-file", "missing",
                                   "wrong-digest"])
def test_a_bad_blob_ends_the_pull_with_one_line_and_nothing_left(tmp_path: Path,
                                                                 plant: str) -> None:
    """A FIFO blob hung pull in open(); a symlink to a file with the blob's bytes (posing as
    /etc/shadow) was followed and placed. Now each is one line, exit 2, well under 10 s, and
    neither the staging folder nor a new root is left; the file outside is unchanged."""
    url, store = _store(tmp_path)
    sha = _blobs(store, BACKEND)[0]
    blob = Path(store.blob_path(sha))
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "shadow"
    secret.write_bytes(blob.read_bytes())
    before = (secret.read_bytes(), secret.stat().st_mtime_ns)
    blob.unlink()
    if plant == "fifo":
        os.mkfifo(blob)
    elif plant == "link-to-fifo":
        os.mkfifo(outside / "fifo")
        blob.symlink_to(outside / "fifo")
    elif plant == "link-to-file":
        blob.symlink_to(secret)
    elif plant == "wrong-digest":
        blob.write_bytes(b"x" + before[0][1:])
    root = tmp_path / "pod"
    r, took = _timed("pull", url, "--root", str(root))
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1 and "nothing placed" in r.stderr, r.stderr
    want = {"fifo": "FIFO", "link-to-fifo": "symlink", "link-to-file": "symlink",
            "missing": "does not have", "wrong-digest": "sha256 differs"}[plant]
    assert want in r.stderr, r.stderr
    assert took < 10
    assert not root.exists()  # no staging, no skeleton of a new root
    assert (secret.read_bytes(), secret.stat().st_mtime_ns) == before


def test_a_linked_blob_folder_is_not_entered(tmp_path: Path) -> None:
    """blobs/<xx> as a link to a folder outside the store: not followed on pull, and
    prune-remote removes nothing through it."""
    url, store = _store(tmp_path)
    sha = _blobs(store, BACKEND)[0]
    sub = Path(store.blob_path(sha)).parent
    outside = tmp_path / "outside"
    sub.rename(outside)
    sub.symlink_to(outside)
    (outside / ("0" * 64)).write_bytes(b"not a blob of this store")  # unreferenced: prunable
    r = run_cli("pull", url, "--root", str(tmp_path / "pod"))
    assert r.returncode == 2 and "symlink" in r.stderr, r.stderr
    r = run_cli("prune-remote", url, "--older-than", "0s", "--grace", "0s", "--yes")
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in outside.iterdir()) == sorted(["0" * 64, sha])


def test_the_first_missing_blob_stops_the_transfer(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """An index of many blobs with one missing in the middle: no blob is opened after it
    (one worker, blobs in name order), where pull went on fetching every other blob."""
    url, store = _store(tmp_path)
    shas = sorted(p.name for p in (tmp_path / "store" / "blobs").glob("*/*"))
    assert len(shas) >= 20  # the backend entry, its linked AOT entry and the snapshots
    middle = shas[len(shas) // 2]
    Path(store.blob_path(middle)).unlink()
    opened = spy_on(monkeypatch, Store, "open_blob")
    with pytest.raises(Exception, match="does not have"):
        api.pull(url, [BACKEND], root=tmp_path / "pod", workers=1, force=True)
    assert [sha for sha, _ in opened] == shas[: len(shas) // 2 + 1]
    assert not (tmp_path / "pod").exists()


@pytest.fixture(params=["file", "s3"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "file":
        yield f"file://{tmp_path}/store"
    else:
        yield str(request.getfixturevalue("s3")) + "/fleet"


def test_a_malformed_index_object_is_named_and_skipped(any_store: str, tmp_path: Path) -> None:
    """One malformed index object made `ls URL` and `pull URL <another key>` exit 2 (every
    pod's initContainer failed). Now: one warning line naming it, the rest lists and pulls,
    and only a pull of that very key fails, with the reason."""
    url = any_store
    api.push([BACKEND, OTHER], url, root=SAMPLE)
    store = Store(url)
    store.put_bytes(store.index_path("backend", OTHER), b'{"format": "vllm-cache-store", ')
    r = run_cli("ls", url)
    assert r.returncode == 0, r.stderr
    assert BACKEND in r.stdout and OTHER not in r.stdout
    warnings = r.stderr.splitlines()
    assert len(warnings) == 1 and f"{OTHER}.json" in warnings[0], r.stderr
    assert "skipped" in warnings[0]
    doc = json.loads(run_cli("ls", url, "--json").stdout)
    assert len(doc["problems"]) == 1 and OTHER in doc["problems"][0]
    root = tmp_path / "pod"
    r = run_cli("pull", url, BACKEND[:6], "--root", str(root), "--force", "--json")
    assert r.returncode == 0, r.stderr
    assert {p["action"] for p in json.loads(r.stdout)["placements"]} == {"placed"}
    assert (root / "torch_compile_cache" / BACKEND).is_dir()
    r = run_cli("pull", url, OTHER, "--root", str(root), "--force")
    assert r.returncode == 2, (r.stdout, r.stderr)
    err = r.stderr.splitlines()[-1]
    assert f"{OTHER}.json" in err and "cannot be pulled" in err, err
    assert not (root / "torch_compile_cache" / OTHER).exists()


def test_oversized_index_objects_are_skipped_unread(tmp_path: Path) -> None:
    """An index over the byte cap, and one listing more files than the file cap: skipped
    quickly and named; the store's other entries pull."""
    url, store = _store(tmp_path, BACKEND, OTHER)
    big = store.index_path("backend", OTHER)
    Path(big).write_bytes(b"[" + b"0," * (MAX_INDEX_BYTES // 2) + b"0]")
    doc = json.loads(Path(store.index_path("backend", BACKEND)).read_text())
    f0 = doc["entry"]["files"][0]
    doc["entry"]["key"] = "0123456789"
    doc["entry"]["path"] = "torch_compile_cache/0123456789"
    doc["entry"]["files"] = [{**f0, "path": f"f{i}"} for i in range(MAX_INDEX_FILES + 1)]
    Path(store.index_path("backend", "0123456789")).write_text(json.dumps(doc))
    t0 = time.monotonic()
    listing = store.listing()
    assert time.monotonic() - t0 < 10
    reasons = {s.key: s.reason for s in listing.skipped}
    assert f"over {MAX_INDEX_BYTES >> 20} MiB" in reasons[OTHER]
    assert f"over the cap of {MAX_INDEX_FILES}" in reasons["0123456789"]
    assert BACKEND in {e.record.key for e in listing.entries}
    assert api.pull(url, [BACKEND], root=tmp_path / "pod", force=True).ok


def _staged(root: Path) -> list[Path]:
    d = root.joinpath(*STAGING)
    return list(d.iterdir()) if d.is_dir() else []


def _pull_child(url: str, root: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import sys; from vllm_cache_tools.cli "
                             "import main; sys.argv[0] = 'vllm-cache'; sys.exit(main())",
                             "pull", url, BACKEND, "--root", str(root), "--force"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_killed_pull_leaves_no_staging(tmp_path: Path, sig: signal.Signals) -> None:
    """A pull stopped after its files are staged (it waits for the entry lock we hold):
    SIGTERM removes its staging folder on the way out; after SIGKILL the next pull removes
    the abandoned folder (its lock is gone) and places the entry."""
    from vllm_cache_tools.maintain.trash import EntryLocks, RootHandle

    url, _ = _store(tmp_path)
    root = tmp_path / "pod"
    (root / "torch_compile_cache").mkdir(parents=True)
    with RootHandle(root) as h:
        trash = h.trash(create=True)
        assert trash is not None and trash.locks_fd is not None
        locks = EntryLocks(trash.locks_fd)
        assert locks.try_lock(f"backend-{BACKEND}")
        child = _pull_child(url, root)
        deadline = time.monotonic() + 60
        while not any(p.rglob("*.py") for p in _staged(root)):
            assert time.monotonic() < deadline and child.poll() is None
            time.sleep(0.1)
        time.sleep(0.5)
        child.send_signal(sig)
        child.wait(20)
        locks.close()
        trash.close()
    assert child.returncode == -sig if sig == signal.SIGKILL else 128 + sig
    assert not (root / "torch_compile_cache" / BACKEND).exists()
    if sig == signal.SIGTERM:
        assert _staged(root) == []
        return
    left = _staged(root)
    assert len(left) == 1
    old = time.time() - 120  # past UNLOCKED_STAGING_S: a run killed two minutes ago
    os.utime(left[0], (old, old))
    r = run_cli("pull", url, BACKEND, "--root", str(root), "--force")
    assert r.returncode == 0, r.stderr
    assert _staged(root) == []
    assert (root / "torch_compile_cache" / BACKEND).is_dir()


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 24 MiB tmpfs (root only)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _used(mnt: Path) -> int:
    st = os.statvfs(mnt)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def test_free_space_is_checked_before_anything_is_written(tmp_path: Path, small_fs: Path
                                                          ) -> None:
    """On a 24 MiB file system with ~12 MiB taken: the entries (~5 MB) plus the 16 MiB margin
    do not fit, so pull and unpack refuse in one line, exit 1, and write nothing (the
    bytes used do not move). With the filler gone, the same pull places."""
    url, _ = _store(tmp_path, BACKEND, OTHER)
    bundle = tmp_path / "b.tar.zst"
    assert run_cli("pack", "--root", str(SAMPLE), BACKEND, OTHER, "-o", str(bundle)
                   ).returncode == 0
    filler = small_fs / "filler"
    filler.write_bytes(b"\0" * (12 << 20))
    root = small_fs / "root"
    used = _used(small_fs)
    for args in (["pull", url, "--root", str(root), "--force"],
                 ["unpack", str(bundle), "--root", str(root), "--force"]):
        r = run_cli(*args)
        assert r.returncode == 1, (args, r.stdout, r.stderr)
        assert r.stderr.count("\n") == 1 and "nothing written" in r.stderr, r.stderr
        assert "free with the margin" in r.stderr
        assert _used(small_fs) == used and not root.exists()
    filler.unlink()
    r = run_cli("pull", url, "--root", str(root), "--force")
    assert r.returncode == 0, r.stderr
    assert (root / "torch_compile_cache" / BACKEND).is_dir()


def test_a_fifo_store_marker_does_not_hang_ls(tmp_path: Path) -> None:
    """The marker is read like a blob: a FIFO there is one line, exit 2, at once."""
    url, _ = _store(tmp_path)
    marker = tmp_path / "store" / "vllm-cache-store.json"
    marker.unlink()
    os.mkfifo(marker)
    r, took = _timed("ls", url)
    assert r.returncode == 2 and "FIFO" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert took < 10
