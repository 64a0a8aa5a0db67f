"""The trash of a group-shared root, seen by a user who did not fill it.

A prune killed mid-way leaves its items in ``.vllm-cache-trash``; the next run of the same
user (or root, or ``--all-users``) finishes them. Another user's run leaves them alone, so its
dry run must not promise to remove them (it did: "a real run removes them first", and the
real run then left them without a word)."""

from __future__ import annotations

import os
from pathlib import Path

from tests.conftest import run_cli
from tests.multiuser import (
    REPO,
    chown_tree,
    make_shared_root,
    run_as,
    shared_users,
    vllm_cache_argv,
)
from tests.trees import age
from vllm_cache_tools.layout import TRASH_DIRNAME

SAMPLE = REPO / "examples" / "sample_cache"
LEFT = "0b8536d36d866b1b841a28380befcdabf957e3ad09449d290196ec83076d5a05.4242.18ed5584d2a13019"


def test_another_users_leftovers_are_named_not_promised(tmp_path: Path) -> None:
    group, (other,) = shared_users()
    root = make_shared_root(SAMPLE, tmp_path / "shared", group)
    age(root, 2)
    trash = root / "torch_compile_cache" / TRASH_DIRNAME
    (trash / LEFT / "rank_0_0").mkdir(parents=True)  # root's killed prune left this
    (trash / LEFT / "rank_0_0" / "model").write_bytes(b"x")
    os.chmod(trash, 0o2775)
    env = {"PYTHONPATH": str(REPO)}

    args = ("prune", "--root", str(root), "--older-than", "100d")
    dry = run_as(other, vllm_cache_argv(*args, "--dry-run"), env=env)
    assert dry.returncode == 0 and "Traceback" not in dry.stderr, dry.stderr
    assert "a real run removes them first" not in dry.stdout, dry.stdout
    assert ("the trash holds 1 item(s) of root from an interrupted run: left for them "
            "(or a run with --all-users)") in dry.stdout, dry.stdout

    real = run_as(other, vllm_cache_argv(*args, "--yes"), env=env)
    assert real.returncode == 0 and "Traceback" not in real.stderr, real.stderr
    assert "1 item(s) of root" in real.stdout, real.stdout
    assert (trash / LEFT / "rank_0_0" / "model").is_file()

    mine = run_cli(*args, "--dry-run", env=env)  # root finishes every user's leftovers
    assert "the trash holds 1 item(s) from an interrupted run; a real run removes them first" \
        in mine.stdout, mine.stdout
    assert "of root" not in mine.stdout


def test_cache_prune_never_moves_aside_a_part_it_cannot_empty(tmp_path: Path) -> None:
    """``prune --cache inductor --all-users`` as vctother in root's group-shared Inductor
    cache, one folder of which is not group-writable: that part stays whole, where it was
    (was: moved to ``.vllm-cache-trash.fxgraph.*``, half removed, counted as deleted)."""
    group, (other,) = shared_users()
    key = "0b8536d36d866b1b841a28380befcdabf957e3ad09449d290196ec83076d5a05"
    base = make_shared_root(SAMPLE / "torch_compile_cache" / "torch_aot_compile" / key,
                            tmp_path / "inductor-src", group)
    ind = base / "inductor_cache"
    locked = ind / "24"  # a kernel folder: its files root's, the folder not group-writable
    locked.chmod(0o2755)
    before = sorted(os.listdir(locked))
    age(ind, 2)
    r = run_as(other, vllm_cache_argv("prune", "--cache", "inductor", "--older-than", "1h",
                                      "--grace", "0", "--all-users", "--yes"),
               # TMPDIR: --all-users also plans the machine's /tmp/torchinductor_* otherwise
               env={"PYTHONPATH": str(REPO), "TORCHINDUCTOR_CACHE_DIR": str(ind),
                    "TMPDIR": str(base)})
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == 0, r.stdout + r.stderr
    assert "/tmp/torchinductor_" not in r.stdout, r.stdout
    assert f"kept {locked}: permission denied: cannot empty 24" in r.stdout, r.stdout
    assert sorted(os.listdir(ind)) == ["24"], r.stdout  # nothing moved aside, the rest gone
    assert sorted(os.listdir(locked)) == before


def test_a_lock_file_another_user_made_names_itself_and_the_fix(tmp_path: Path) -> None:
    """A root made group-writable without setgid: root's prune made the trash's lock file
    0600 in its own group, and vctother's prune stopped with "Permission denied" alone."""
    group, (other,) = shared_users()
    root = make_shared_root(SAMPLE, tmp_path / "shared", group)
    for d, dirs, _ in os.walk(root):
        for n in [d, *(os.path.join(d, x) for x in dirs)]:
            os.chmod(n, os.stat(n).st_mode & ~0o2000)  # group-writable, not setgid
    aot = root / "torch_compile_cache" / "torch_aot_compile"
    (first, second) = sorted(os.listdir(aot))
    chown_tree(aot / second, other.uid)
    env = {"PYTHONPATH": str(REPO)}
    assert run_cli("rm", first, "--root", str(root), "--grace", "0", "--yes",
                   env=env).returncode == 0
    age(root, 2)
    r = run_as(other, vllm_cache_argv("prune", "--root", str(root), "--older-than", "1h",
                                      "--grace", "0", "--yes"), env=env)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert (f"cannot prune {root}: .vllm-cache-trash/locks/entries.lock (owner root, mode "
            "0600) is not writable by you; on a root shared by a group its folders need the "
            "group and the setgid bit (chmod g+ws)") in r.stderr, r.stderr
    assert (aot / second / "rank_0_0" / "model").is_file()
