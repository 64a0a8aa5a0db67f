"""Which filesystem a root is on (issue 17 item 4): a mountinfo fixture of an HPC node for the
shared filesystems this machine cannot mount (NFS, Lustre, GPFS, CIFS, FUSE), and real mounts
where this machine allows (the ext4 root; a tmpfs mounted noatime in a private mount
namespace) with ``ls`` and ``verify`` run on a copy of a real vLLM cache."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.realvllm.harness import ScenarioRun, copy_root
from vllm_cache_tools.store.filesystem import (
    filesystem_of,
    mount_of,
    notes_for,
    parse_mountinfo,
)

FIXTURE = Path(__file__).parent / "fixtures" / "mountinfo" / "hpc-node.txt"


def test_parse_mountinfo_fixture() -> None:
    mounts = parse_mountinfo(FIXTURE.read_text())
    assert len(mounts) == 11  # the malformed line is skipped
    by_point = {m.mount_point: m for m in mounts}
    assert by_point["/mnt/team share"].fstype == "cifs"  # \040 unescaped
    assert by_point["/home"].source == "fs01:/export/home"
    assert by_point["/home"].device == (0, 51)
    assert "noatime" in by_point["/tmp"].options


@pytest.mark.parametrize(("path", "dev", "fstype", "family", "point"), [
    ("/home/bob/.cache/vllm", (0, 51), "nfs4", "nfs", "/home"),
    ("/home/alice/.cache/vllm/torch_compile_cache", (0, 51), "nfs4", "nfs",
     "/home/alice/.cache/vllm"),
    ("/lustre/scratch/u/vllm", (0, 52), "lustre", "lustre", "/lustre/scratch"),
    ("/gpfs/projects/llm/cache", (0, 53), "gpfs", "gpfs", "/gpfs/projects"),
    ("/mnt/team share/vllm", (0, 54), "cifs", "cifs", "/mnt/team share"),
    ("/mnt/bucket/vllm", (0, 55), "fuse.gcsfuse", "fuse", "/mnt/bucket"),
    ("/var/cache/vllm", (252, 1), "ext4", None, "/"),
    ("/tmp/vllm", (0, 27), "tmpfs", None, "/tmp"),
])
def test_mount_and_family(path: str, dev: tuple[int, int], fstype: str, family: str | None,
                          point: str) -> None:
    from vllm_cache_tools.store.filesystem import family_of

    m = mount_of(path, dev, parse_mountinfo(FIXTURE.read_text()))
    assert m is not None and (m.fstype, m.mount_point) == (fstype, point)
    assert family_of(m.fstype) == family


def test_notes_say_writers_and_atime() -> None:
    nfs = notes_for("nfs", "nfs4", "relatime")
    assert "vllm#24601" in nfs[0] and "concurrent writers" in nfs[0]
    assert "atime on NFS" in nfs[1]
    assert any("--max-files" in n for n in notes_for("lustre", "lustre", "relatime"))
    assert any("no atime" in n for n in notes_for("fuse", "fuse.gcsfuse", "relatime"))
    assert notes_for(None, "ext4", "relatime") == ()
    assert "noatime" in notes_for(None, "tmpfs", "noatime")[0]


def test_a_real_path_matched_against_an_nfs_mount_table(tmp_path: Path) -> None:
    """The real device of a real folder, in a mount table that says NFS there."""
    st = os.stat(tmp_path)
    table = (f"22 1 {os.major(st.st_dev)}:{os.minor(st.st_dev)} / {tmp_path} rw,relatime "
             "shared:1 - nfs4 server:/export rw,vers=4.2\n")
    assert filesystem_of(tmp_path.parent, mountinfo=table).mount_point is None  # not below
    fs = filesystem_of(tmp_path, mountinfo=table)
    assert (fs.fstype, fs.family, fs.mount_point, fs.source) == (
        "nfs4", "nfs", str(tmp_path), "server:/export")
    assert fs.shared and "vllm#24601" in fs.notes[0]


@pytest.mark.realvllm
def test_ls_and_verify_on_this_machines_filesystem(real_compile: ScenarioRun,
                                                   tmp_path: Path) -> None:
    root = copy_root(real_compile.vllm_root, tmp_path / "root")
    want = filesystem_of(root)
    ls = json.loads(run_cli("ls", "--root", str(root), "--json").stdout)
    assert ls["filesystem"]["type"] == want.fstype
    assert ls["filesystem"]["shared"] is (want.family is not None)
    r = run_cli("verify", "--root", str(root), "--json")
    assert json.loads(r.stdout)["filesystem"] == ls["filesystem"]


def _can_unshare() -> bool:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        return False
    r = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    return r.returncode == 0


@pytest.mark.realvllm
@pytest.mark.skipif(not _can_unshare(), reason="needs root and mount namespaces")
def test_a_noatime_mount_is_reported_by_ls_and_verify(real_compile: ScenarioRun,
                                                      tmp_path: Path) -> None:
    """A real tmpfs mounted noatime in a private mount namespace (gone when it exits)."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    exe = str(Path(sys.executable).parent / "vllm-cache")
    script = (f"mount -t tmpfs -o noatime,size=64m tmpfs {mnt} && "
              f"cp -a {real_compile.vllm_root} {mnt}/root && "
              f"{exe} ls --root {mnt}/root --json > {tmp_path}/ls.json && "
              f"{exe} ls --root {mnt}/root > /dev/null 2> {tmp_path}/ls.err; "
              f"{exe} verify --root {mnt}/root > {tmp_path}/verify.txt; true")
    subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                   check=True)
    fs = json.loads((tmp_path / "ls.json").read_text())["filesystem"]
    assert (fs["type"], fs["atime_mode"], fs["shared"], fs["mount_point"]) == (
        "tmpfs", "noatime", False, str(mnt))
    assert any("noatime" in n for n in fs["notes"])
    assert "note: mounted noatime" in (tmp_path / "ls.err").read_text()
    assert "note: mounted noatime" in (tmp_path / "verify.txt").read_text()
