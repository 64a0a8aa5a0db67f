"""Issue 23 items 1 and 2, played for real (tests/tempdir_attacks.py): a second uid plants
links and folders in a folder everyone can write in, with ``fs.protected_symlinks=0``;
``vllm-cache`` runs as root and as another user. Nothing outside the intended folders may
change, no plan may reach outside them, and every skipped or refused name is said."""

from __future__ import annotations

import os

import pytest

from tests import tempdir_attacks as attacks

pytestmark = pytest.mark.hostile


@pytest.mark.parametrize("as_user", [False, True], ids=["root", "user"])
@pytest.mark.parametrize("name", sorted(attacks.ATTACKS))
def test_attack(name: str, as_user: bool) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root for a second uid and fs.protected_symlinks")
    out = attacks.play(name, as_user)
    assert out.changed == 0, out
    assert out.planned_outside == 0, out
    assert out.said, out


@pytest.mark.parametrize("as_user", [False, True], ids=["root", "user"])
def test_real_folders_in_the_shared_folder_are_still_pruned(as_user: bool) -> None:
    """The check lets real caches through: the runner's own real Inductor folder (0755, as
    torch makes it) and, for root with --all-users, another user's own folder (theirs by
    name and owner) are pruned as before, below the folder listed."""
    if os.geteuid() != 0:
        pytest.skip("needs root for a second uid")
    with attacks.symlinks_unprotected():
        s = attacks.make_scene(as_user)
        try:
            mine = attacks._real_inductor(s, f"torchinductor_{s.runner_name}", s.runner)
            theirs = attacks._real_inductor(s, f"torchinductor_{s.attacker.name}", s.attacker)
            r = s.run(*attacks.PRUNE, "--all-users", "--json")
            assert r.returncode in (0, 1), r.stderr
            assert "skipped (not safe" not in r.stdout + r.stderr
            assert list(mine.iterdir()) == []
            # Root may remove another user's parts; a user is refused by the file modes.
            assert (list(theirs.iterdir()) == []) == (not as_user)
        finally:
            attacks.drop_scene(s)
