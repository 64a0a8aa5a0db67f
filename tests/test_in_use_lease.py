"""An entry held open by a process /proc does not show us is kept.

On a shared box an unprivileged user cannot read another user's ``/proc/PID/fd`` or ``maps``
(nor see a container's processes), so prune saw "not open" and deleted an entry another user's
vLLM had open. The kernel answers for every process through a write lease
(:func:`vllm_cache_tools.store.in_use.held_open_at`); prune plans and re-checks with it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.multiuser import (
    REPO,
    chown_tree,
    make_shared_root,
    popen_as,
    python_argv,
    run_as,
    shared_users,
    vllm_cache_argv,
)
from tests.trees import age
from vllm_cache_tools import scan
from vllm_cache_tools.maintain import execute
from vllm_cache_tools.maintain.execute import execute_plan
from vllm_cache_tools.maintain.plan import Protections, plan_prune
from vllm_cache_tools.maintain.policies import Policies
from vllm_cache_tools.store.in_use import held_open_at

SAMPLE = Path(__file__).resolve().parent.parent / "examples" / "sample_cache"
AOT = "torch_compile_cache/torch_aot_compile"
KEY = "0b8536d36d866b1b841a28380befcdabf957e3ad09449d290196ec83076d5a05"
HELD = "inductor_cache/24/c244b2rga7kqcbbf2xhybporem2yeo55qusvywqyipbcdmkdmkrr.cpp"

# Opens (or maps, then closes) argv[1], says so, and waits to be killed.
_HOLD = ("import mmap, os, sys, time\n"
         "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
         "m = mmap.mmap(fd, 0, prot=mmap.PROT_READ) if sys.argv[2] == 'map' else None\n"
         "if m is not None: os.close(fd)\n"
         "print('ready', flush=True)\n"
         "time.sleep(600)\n")


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    shutil.copytree(SAMPLE, r, symlinks=True)
    age(r, 2)
    return r


def _ready(p: subprocess.Popen[str]) -> subprocess.Popen[str]:
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    return p


@pytest.fixture()
def holder(root: Path) -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for p in procs:
        p.kill()
        p.wait()


@pytest.mark.parametrize("how", ["open", "map"])
def test_held_open_at_sees_an_open_file_and_a_mapping(root: Path, how: str,
                                                      holder: list[subprocess.Popen[str]]
                                                      ) -> None:
    entry = root / AOT / KEY
    assert held_open_at(entry) is None
    holder.append(_ready(subprocess.Popen([sys.executable, "-c", _HOLD, str(entry / HELD), how],
                                          stdout=subprocess.PIPE, text=True)))
    assert held_open_at(entry) == HELD
    parent = os.open(entry.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert held_open_at(KEY, parent) == HELD
    finally:
        os.close(parent)
    p = holder.pop()
    p.kill()
    p.wait()
    assert held_open_at(entry) is None


def test_prune_keeps_an_entry_held_where_proc_shows_nothing(
        root: Path, holder: list[subprocess.Popen[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """/proc is blinded (as for another user's process): the plan, and the re-check right
    before the move (the file opened after planning), still keep the entry."""
    from vllm_cache_tools.store import in_use

    # As for an unprivileged user (or root in a container): /proc may not show every holder.
    monkeypatch.setattr(in_use, "proc_shows_every_process", lambda: False)
    entry = root / AOT / KEY
    info = scan(root, check_in_use=False)
    before = plan_prune(info, Policies(older_than_s=3600), Protections(grace_s=0), busy={})
    assert KEY in [p.key for p in before.entries]
    holder.append(_ready(subprocess.Popen([sys.executable, "-c", _HOLD, str(entry / HELD), "open"],
                                          stdout=subprocess.PIPE, text=True)))
    plan = plan_prune(info, Policies(older_than_s=3600), Protections(grace_s=0), busy={})
    assert KEY not in [p.key for p in plan.entries]
    assert any(s.key == KEY and f"in use: {HELD} is open" in s.reason for s in plan.skipped)
    # prune --yes plans without the lease look (the check before the move still keeps it).
    unseen = plan_prune(info, Policies(older_than_s=3600),
                        Protections(grace_s=0, leases_when_planning=False), busy={})
    assert KEY in [p.key for p in unseen.entries]

    monkeypatch.setattr(execute, "busy_entries", lambda _root: {})
    res = execute_plan(before)
    assert KEY not in res.deleted
    assert any(s.key == KEY and f"in use: {HELD} is open" in s.reason for s in res.skipped)
    assert (entry / HELD).is_file() and (entry / "rank_0_0" / "model").is_file()


def test_prune_as_one_user_keeps_an_entry_another_users_process_holds(tmp_path: Path) -> None:
    """Shared root, entries of vctother; vctthird's process holds one file open. vctother's
    prune cannot see that process in /proc and deleted the entry."""
    group, (owner, third) = shared_users(2)
    shared = make_shared_root(SAMPLE, tmp_path / "shared", group)
    chown_tree(shared, owner.uid)
    age(shared, 2)
    held = shared / AOT / KEY / HELD
    p = _ready(popen_as(third, python_argv(_HOLD, str(held), "open"), stdout=subprocess.PIPE))
    try:
        r = run_as(owner, vllm_cache_argv("prune", "--root", str(shared), "--older-than", "1h",
                                          "--grace", "0", "--yes"),
                   env={"PYTHONPATH": str(REPO)})  # this checkout, wherever it is installed
    finally:
        p.kill()
        p.wait()
    assert "Traceback" not in r.stderr, r.stderr
    assert held.is_file() and (shared / AOT / KEY / "rank_0_0" / "model").is_file(), r.stdout
    assert f"in use: {HELD} is open" in r.stdout
    other = next(k for k in os.listdir(SAMPLE / AOT) if k != KEY)
    assert not (shared / AOT / other).exists(), r.stdout  # the other, unheld entry went


def test_prune_cache_inductor_keeps_a_part_another_users_process_holds(tmp_path: Path) -> None:
    """``prune --cache inductor`` as vctother, whose Inductor cache has a kernel vctthird's
    process holds open: that part stays (was: deleted, /proc showed nothing)."""
    group, (owner, third) = shared_users(2)
    base = make_shared_root(SAMPLE / AOT / KEY, tmp_path / "inductor-src", group)
    ind = base / "inductor_cache"
    chown_tree(ind, owner.uid)
    age(ind, 2)
    held = base / HELD
    # Opened, not mapped: mmap(2) records a use (atime), and the part would not be chosen.
    p = _ready(popen_as(third, python_argv(_HOLD, str(held), "open"), stdout=subprocess.PIPE))
    try:
        r = run_as(owner, vllm_cache_argv("prune", "--cache", "inductor", "--older-than", "1h",
                                          "--grace", "0", "--yes"),
                   env={"PYTHONPATH": str(REPO), "TORCHINDUCTOR_CACHE_DIR": str(ind)})
    finally:
        p.kill()
        p.wait()
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == 0, r.stdout + r.stderr
    assert held.is_file(), r.stdout
    assert f"in use: {Path(HELD).name} is open" in r.stdout
    assert sorted(os.listdir(ind)) == [Path(HELD).parent.name], r.stdout


def test_leases_are_asked_only_where_proc_may_not_show_a_holder(
        root: Path, holder: list[subprocess.Popen[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Root in the host's PID namespace sees every holder in /proc and takes no lease (a lease
    per file cost prune a third of its time); anyone else asks the kernel."""
    from vllm_cache_tools.store import in_use

    host_root = (os.geteuid() == 0
                 and os.readlink("/proc/self/ns/pid") == f"pid:[{0xEFFFFFFC}]")
    assert in_use.proc_shows_every_process() is host_root
    entry = root / AOT / KEY
    holder.append(_ready(subprocess.Popen([sys.executable, "-c", _HOLD, str(entry / HELD), "open"],
                                          stdout=subprocess.PIPE, text=True)))
    monkeypatch.setattr(in_use, "proc_shows_every_process", lambda: True)
    assert in_use.held_unseen(entry) is None
    monkeypatch.setattr(in_use, "proc_shows_every_process", lambda: False)
    assert in_use.held_unseen(entry) == HELD
