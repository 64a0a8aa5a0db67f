"""The multi-user test support (tests/multiuser.py) itself works: a second uid runs commands
and this package's CLI, and a shared root copy keeps file modes."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from tests.multiuser import (
    make_shared_root,
    other_user,
    require_root,
    run_as,
    shared_group,
    third_user,
    vllm_cache_argv,
)

SAMPLE = Path(__file__).resolve().parent.parent / "examples" / "sample_cache"


def test_other_user_runs_commands() -> None:
    require_root()
    group = shared_group()
    user = other_user(group)
    assert user.uid != 0 and third_user(group).uid not in (0, user.uid)
    r = run_as(user, ["id", "-u"])
    assert r.returncode == 0, r.stderr
    assert int(r.stdout) == user.uid
    groups = run_as(user, ["id", "-G"]).stdout.split()
    assert str(group.gid) in groups and "0" not in groups


def test_other_user_runs_the_cli_on_a_shared_root(tmp_path: Path) -> None:
    require_root()
    group = shared_group()
    user = other_user(group)
    root = make_shared_root(SAMPLE, tmp_path / "shared", group)
    st = root.stat()
    assert st.st_gid == group.gid and st.st_mode & stat.S_ISGID and st.st_mode & 0o070 == 0o070
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            src = SAMPLE / Path(dirpath).relative_to(root) / f
            if not src.is_symlink():
                assert stat.S_IMODE(os.lstat(Path(dirpath) / f).st_mode) == \
                    stat.S_IMODE(src.lstat().st_mode)
    r = run_as(user, vllm_cache_argv("ls", "--root", str(root)))
    assert r.returncode in (0, 1), r.stderr
    assert "Traceback" not in r.stderr
