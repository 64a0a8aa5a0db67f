"""A blob's second name in a pull (fleet.place.Staging.copy_checked): a hard link where the
file system has them, else a checked copy (some NFS, SMB and FUSE mounts refuse links with
EPERM / ENOTSUP, a full link count with EMLINK): the pull goes on either way."""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path

import pytest

from vllm_cache_tools.fleet.place import Staging
from vllm_cache_tools.fleet.records import FileRecord

DATA = b"compiled kernel bytes\n" * 100


def _rec(path: str) -> FileRecord:
    return FileRecord(path=path, size=len(DATA), sha256=hashlib.sha256(DATA).hexdigest())


def _stage(root: Path) -> tuple[Staging, FileRecord]:
    st = Staging(root)
    first = _rec("a/first.bin")
    st.write_bytes(first.path, DATA, first)
    return st, first


def _staged(st: Staging, rel: str) -> os.stat_result:
    return os.stat(rel, dir_fd=st.fd)


def test_second_name_is_a_link_where_links_work(tmp_path: Path) -> None:
    st, first = _stage(tmp_path / "root")
    with st:
        st.copy_checked("b/second.bin", first.path, first, _rec("b/second.bin"), link=True)
        a, b = _staged(st, first.path), _staged(st, "b/second.bin")
        assert (a.st_ino, a.st_nlink) == (b.st_ino, 2)


@pytest.mark.parametrize("code", [errno.EPERM, errno.EOPNOTSUPP, errno.EMLINK])
def test_a_file_system_without_links_gets_a_copy(tmp_path: Path, code: int,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    st, first = _stage(tmp_path / "root")

    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "link", refuse)  # the refusal such a mount gives
    with st:
        st.copy_checked("b/second.bin", first.path, first, _rec("b/second.bin"), link=True)
        a, b = _staged(st, first.path), _staged(st, "b/second.bin")
        assert a.st_ino != b.st_ino and b.st_size == len(DATA)
        fd = os.open("b/second.bin", os.O_RDONLY, dir_fd=st.fd)
        try:
            assert os.read(fd, len(DATA) + 1) == DATA
        finally:
            os.close(fd)
