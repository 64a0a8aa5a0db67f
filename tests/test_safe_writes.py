"""The recorder's writes in a shared or hostile cache root (issue 12 item 2) and the entry
lock's mode (item 7): names planted by another user are never written through, folders that
are symlinks are never entered, and nothing outside the root changes."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import stat
from pathlib import Path

import pytest

from tests.multiuser import (
    make_shared_root,
    other_user,
    python_argv,
    require_root,
    run_as,
    shared_group,
)
from tests.victims import changed, make_victim, tree_state
from vllm_cache_tools import safeio
from vllm_cache_tools.layout import LEDGER_DIRNAME, SOURCES_DIRNAME, STATE_DIRNAME
from vllm_cache_tools.maintain.trash import EntryLocks, RootHandle
from vllm_cache_tools.read.manifest import read_ledger
from vllm_cache_tools.recorder import write

pytestmark = pytest.mark.hostile

SAMPLE = Path(__file__).resolve().parent.parent / "examples" / "sample_cache"
HOST = socket.gethostname()


@pytest.fixture()
def cc(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    shutil.copytree(SAMPLE, root, symlinks=True)
    return root / "torch_compile_cache"


@pytest.fixture()
def victim(tmp_path: Path) -> Path:
    return make_victim(tmp_path / "victim")


def _event(i: int = 0) -> dict[str, object]:
    return {"v": 1, "time": 1.0 + i, "event": "hit", "tree": "aot", "key": "k", "host": HOST}


def test_planted_ledger_symlink_is_not_appended_to(cc: Path, victim: Path) -> None:
    ledger = cc / STATE_DIRNAME / LEDGER_DIRNAME
    (ledger / f"{HOST}.jsonl").unlink(missing_ok=True)
    (ledger / f"{HOST}.jsonl").symlink_to(victim / "notes")
    before = tree_state(victim)
    write.append_event(str(cc), _event())
    assert changed(before, tree_state(victim)) == []
    own = ledger / f"{HOST}.{os.geteuid()}.jsonl"
    assert json.loads(own.read_text())["event"] == "hit"
    events, _ = read_ledger(cc)
    assert any(e.host == HOST and e.time == 1.0 for e in events)


def test_planted_hardlink_and_fifo_ledgers_are_not_written(cc: Path, tmp_path: Path) -> None:
    ledger = cc / STATE_DIRNAME / LEDGER_DIRNAME
    target = tmp_path / "hard"
    target.write_text("someone's file\n")
    (ledger / f"{HOST}.jsonl").unlink(missing_ok=True)
    os.link(target, ledger / f"{HOST}.jsonl")
    write.append_event(str(cc), _event())
    assert target.read_text() == "someone's file\n"
    (ledger / f"{HOST}.{os.geteuid()}.jsonl").unlink()
    (ledger / f"{HOST}.jsonl").unlink()
    os.mkfifo(ledger / f"{HOST}.jsonl")
    write.append_event(str(cc), _event(1))  # must not block on the FIFO
    assert (ledger / f"{HOST}.{os.geteuid()}.jsonl").read_text().count("\n") == 1


def test_planted_tmp_symlink_is_not_truncated(cc: Path, victim: Path, tmp_path: Path) -> None:
    src = tmp_path / "llama.py"
    src.write_text("print('traced source')\n")
    sha = __import__("hashlib").sha256(src.read_bytes()).hexdigest()
    sources = cc / STATE_DIRNAME / SOURCES_DIRNAME
    # The old writer's temporary name was predictable: <sha>.<pid>.tmp
    (sources / f"{sha}.{os.getpid()}.tmp").symlink_to(victim / "notes")
    before = tree_state(victim)
    rec = write.snapshot_file(str(cc), str(src))
    assert rec["sha256"] == sha and rec["snapshot"] is True
    assert (sources / sha).read_bytes() == src.read_bytes()
    assert changed(before, tree_state(victim)) == []


def test_planted_snapshot_symlink_is_not_touched(cc: Path, victim: Path,
                                                 tmp_path: Path) -> None:
    src = tmp_path / "llama.py"
    src.write_text("print('another traced source')\n")
    sha = __import__("hashlib").sha256(src.read_bytes()).hexdigest()
    sources = cc / STATE_DIRNAME / SOURCES_DIRNAME
    (sources / sha).symlink_to(victim / "notes")  # reuse would utime the target
    before = tree_state(victim)
    write.snapshot_file(str(cc), str(src))
    assert changed(before, tree_state(victim)) == []


@pytest.mark.parametrize("which", [STATE_DIRNAME, f"{STATE_DIRNAME}/{LEDGER_DIRNAME}",
                                   f"{STATE_DIRNAME}/{SOURCES_DIRNAME}"])
def test_symlinked_state_folders_are_not_entered(cc: Path, victim: Path, tmp_path: Path,
                                                 which: str) -> None:
    p = cc / which
    shutil.rmtree(p)
    p.symlink_to(victim / (which.split("/")[-1] if "/" in which else ""))
    src = tmp_path / "x.py"
    src.write_text("x = 1\n")
    before = tree_state(victim)
    for call in (lambda: write.append_event(str(cc), _event()),
                 lambda: write.snapshot_file(str(cc), str(src))):
        with contextlib.suppress(OSError):  # the hooks turn this into one warning line
            call()
    assert changed(before, tree_state(victim)) == []


def test_manifest_in_a_symlinked_entry_folder_is_not_written(cc: Path, victim: Path) -> None:
    (cc / "aaaaaaaaaa").symlink_to(victim)
    before = tree_state(victim)
    with pytest.raises(OSError):
        write.write_manifest(str(cc / "aaaaaaaaaa" / "rank_0_0" / "backbone"),
                             {"schema": 1, "x": 1}, base=str(cc))
    with pytest.raises(OSError):
        write.write_manifest(str(cc / "aaaaaaaaaa"), {"schema": 1, "x": 2})
    assert changed(before, tree_state(victim)) == []


def test_manifest_is_placed_once_and_never_replaced(cc: Path) -> None:
    d = cc / "newentry" / "rank_0_0"
    d.mkdir(parents=True)
    digest, created = write.write_manifest(str(d), {"schema": 1, "a": 1}, base=str(cc))
    assert created
    again = write.write_manifest(str(d), {"schema": 1, "a": 1}, base=str(cc))
    assert again == (digest, False)
    names = os.listdir(d)
    assert names == [f"vct-manifest.{digest}.json"], names  # no temporary left


def test_safeio_refuses_foreign_unshared_folders(tmp_path: Path) -> None:
    require_root()
    user = other_user()
    d = tmp_path / "theirs"
    d.mkdir(mode=0o755)
    os.chown(d, user.uid, user.gid)
    fd = safeio.open_dirs(tmp_path, "theirs")
    try:
        with pytest.raises(safeio.UnsafeTree):
            safeio.check_writable_folder(fd)
        os.chmod(d, 0o2775)
        safeio.check_writable_folder(fd)  # group-shared: accepted for new files
        os.chmod(d, 0o2777)
        with pytest.raises(safeio.UnsafeTree):
            safeio.check_writable_folder(fd)  # writable by everyone, not sticky
    finally:
        os.close(fd)


# ---- as another user on a group-shared root -------------------------------------------------

_APPEND = """
import sys
from vllm_cache_tools.recorder import write
write.append_event(sys.argv[1], {"v": 1, "time": 5.0, "event": "miss", "tree": "aot",
                                 "key": "k", "host": sys.argv[2]})
"""


def test_shared_root_ledgers_stay_per_user(tmp_path: Path) -> None:
    require_root()
    group = shared_group()
    user = other_user(group)
    root = make_shared_root(SAMPLE, tmp_path / "shared", group)
    cc = root / "torch_compile_cache"
    ledger = cc / STATE_DIRNAME / LEDGER_DIRNAME
    for p in ledger.iterdir():
        p.unlink()
    # The other user writes first: its file, in the group-shared folder.
    r = run_as(user, python_argv(_APPEND, str(cc), HOST))
    assert r.returncode == 0, r.stderr
    theirs = ledger / f"{HOST}.jsonl"
    assert theirs.stat().st_uid == user.uid
    before = theirs.read_bytes()
    # Root, then: never appends to the other user's file.
    write.append_event(str(cc), _event())
    assert theirs.read_bytes() == before
    mine = ledger / f"{HOST}.0.jsonl"
    assert mine.stat().st_uid == 0 and mine.stat().st_gid == group.gid
    events, problems = read_ledger(cc)
    assert sorted(e.event for e in events) == ["hit", "miss"] and not problems
    # And the other user planting a link where root's file goes changes nothing outside.
    mine.unlink()
    victim = make_victim(tmp_path / "victim")
    run_as(user, ["ln", "-s", str(victim / "notes"), str(mine)])
    state = tree_state(victim)
    with pytest.raises(OSError, match="not ours"):  # both names taken: not kept, one warning
        write.append_event(str(cc), _event(2))
    assert changed(state, tree_state(victim)) == []


# ---- the entry lock's mode (item 7) ---------------------------------------------------------

def _lock_mode(root: Path) -> int:
    with RootHandle(root) as h:
        t = h.trash(create=True)
        assert t is not None and t.locks_fd is not None
        locks = EntryLocks(t.locks_fd)
        try:
            return stat.S_IMODE(os.fstat(locks.fd).st_mode)
        finally:
            locks.close()
            t.close()


def test_entry_lock_is_never_world_writable(tmp_path: Path) -> None:
    root = tmp_path / "root"
    shutil.copytree(SAMPLE, root, symlinks=True)
    assert _lock_mode(root) & 0o077 == 0  # a private root: only the owner


def test_entry_lock_is_group_writable_in_a_shared_root(tmp_path: Path) -> None:
    require_root()
    group = shared_group()
    root = make_shared_root(SAMPLE, tmp_path / "shared", group)
    mode = _lock_mode(root)
    assert mode & 0o060 == 0o060 and not mode & 0o007
    lock = root / "torch_compile_cache" / ".vllm-cache-trash" / "locks" / "entries.lock"
    assert lock.stat().st_gid == group.gid


def test_old_world_writable_lock_is_repaired(tmp_path: Path) -> None:
    root = tmp_path / "root"
    shutil.copytree(SAMPLE, root, symlinks=True)
    locks = root / "torch_compile_cache" / ".vllm-cache-trash" / "locks"
    locks.mkdir(parents=True)
    (locks / "entries.lock").touch()
    os.chmod(locks / "entries.lock", 0o666)
    assert _lock_mode(root) & 0o007 == 0


def test_planted_lock_symlink_is_refused(tmp_path: Path, victim: Path) -> None:
    root = tmp_path / "root"
    shutil.copytree(SAMPLE, root, symlinks=True)
    locks = root / "torch_compile_cache" / ".vllm-cache-trash" / "locks"
    locks.mkdir(parents=True)
    (locks / "entries.lock").symlink_to(victim / "notes")
    before = tree_state(victim)
    with pytest.raises(OSError):
        _lock_mode(root)
    assert changed(before, tree_state(victim)) == []


def test_state_folders_made_in_a_shared_root_stay_shared(tmp_path: Path) -> None:
    """Root (umask 022) records first: the folders it makes take the shared folder's mode, so
    the next member of the group can record too (in its own ledger file)."""
    require_root()
    group = shared_group()
    user = other_user(group)
    root = make_shared_root(SAMPLE, tmp_path / "shared", group)
    cc = root / "torch_compile_cache"
    shutil.rmtree(cc / STATE_DIRNAME)
    old = os.umask(0o022)
    try:
        write.append_event(str(cc), _event())
    finally:
        os.umask(old)
    for d in (cc / STATE_DIRNAME, cc / STATE_DIRNAME / LEDGER_DIRNAME):
        s = d.stat()
        assert s.st_gid == group.gid and s.st_mode & 0o2070 == 0o2070, oct(s.st_mode)
    r = run_as(user, python_argv(_APPEND, str(cc), HOST))
    assert r.returncode == 0, r.stderr
    events, problems = read_ledger(cc)
    assert len(events) == 2 and not problems
    assert (cc / STATE_DIRNAME / LEDGER_DIRNAME / f"{HOST}.{user.uid}.jsonl").exists()


# ---- safeio.NamedOutput: files at a path a user names (issue 23 item 2) ---------------------

def _names(d: Path) -> set[str]:
    return {p.name for p in d.iterdir()}


def test_named_output_new_file_whole_or_nothing(tmp_path: Path) -> None:
    with safeio.NamedOutput(tmp_path / "out.bin") as out:
        out.write(b"abc")
        assert _names(tmp_path) != {"out.bin"}  # only the random name while being written
    assert (tmp_path / "out.bin").read_bytes() == b"abc" and _names(tmp_path) == {"out.bin"}
    with pytest.raises(RuntimeError), safeio.NamedOutput(tmp_path / "b.bin") as out:
        out.write(b"half")
        raise RuntimeError("failed half-way")
    assert _names(tmp_path) == {"out.bin"}  # nothing left behind


@pytest.mark.parametrize("kind", ["symlink", "file", "hardlink", "fifo", "dangling"])
def test_named_output_never_writes_through_a_taken_name(kind: str, tmp_path: Path) -> None:
    victim = make_victim(tmp_path / "victim")
    before = tree_state(victim)
    name = tmp_path / "out"
    if kind == "symlink":
        name.symlink_to(victim / "notes")
    elif kind == "dangling":
        name.symlink_to(victim / "new-file")
    elif kind == "hardlink":
        os.link(victim / "notes", name)
    elif kind == "fifo":
        os.mkfifo(name)
    else:
        name.write_bytes(b"someone's")
    for atomic in (True, False):
        with pytest.raises(safeio.OutputExists, match="--force replaces it"):
            safeio.NamedOutput(name, atomic=atomic)
    with safeio.NamedOutput(name, force=True) as out:
        out.write(b"mine")
    assert not name.is_symlink() and name.read_bytes() == b"mine"
    assert changed(before, tree_state(victim)) == []
    assert _names(tmp_path) == {"victim", "out"}


def test_named_output_log_appears_at_once_and_is_kept(tmp_path: Path) -> None:
    log = tmp_path / "warm.log"
    out = safeio.NamedOutput(log, atomic=False)
    assert log.exists() and log.read_bytes() == b""  # followable while it grows
    out.write(b"line 1\nline 2\n")
    assert out.read_back(7) == b"line 2\n"
    out.abort()  # a failed run's log is kept
    assert log.read_bytes() == b"line 1\nline 2\n" and _names(tmp_path) == {"warm.log"}
    with pytest.raises(safeio.OutputExists):
        safeio.NamedOutput.refuse_taken(log)
    safeio.NamedOutput.refuse_taken(log, force=True)
