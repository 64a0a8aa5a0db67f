"""What every transfer into a cache root (``unpack``, ``pull``) does before and around its
writes: the target file system must hold everything it is about to write, plus a margin,
before the first byte is written (a bundle that would fill the disk is refused, not
half-extracted: issue 23); and a SIGTERM (a pod stopped, ``timeout``) ends it as an
exception, so its staging folder is removed on the way out like on any other failure."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from vllm_cache_tools.fleet.errors import Refused
from vllm_cache_tools.store.locate import display_path
from vllm_cache_tools.units import human_size

MIN_MARGIN_BYTES = 16 << 20
"""Left free beyond what is written: folders, the recorder's ledger, vLLM's own next
writes; a full file system breaks every writer on it."""
MARGIN_FRACTION = 50
"""Plus one fiftieth (2 %) of what is written, for larger transfers."""
MIN_MARGIN_INODES = 256


def _existing(path: Path) -> Path:
    """``path`` or its nearest existing ancestor (a new root is made on that file system)."""
    p = path
    while not os.path.lexists(p) and p != p.parent:
        p = p.parent
    return p


def check_free_space(target: Path, nbytes: int, files: int, what: str) -> None:
    """Raise :class:`Refused` (one line, nothing written) unless the file system of
    ``target`` has room for ``nbytes`` in ``files`` files: each file may take up to one
    block more than its size, plus the margin. Inodes too, where the file system counts
    them."""
    where = _existing(target)
    try:
        st = os.statvfs(where)
    except OSError:
        return  # no answer (a FUSE mount without statfs): the writes themselves will say
    block = st.f_frsize or st.f_bsize or 4096
    need = nbytes + files * block + max(MIN_MARGIN_BYTES, nbytes // MARGIN_FRACTION)
    free = st.f_bavail * block
    if free < need:
        raise Refused(f"{what}: {human_size(nbytes)} in {files} files needs "
                      f"{human_size(need)} free with the margin, and the file system of "
                      f"{display_path(where)} has {human_size(free)}: nothing written")
    need_inodes = files + max(MIN_MARGIN_INODES, files // MARGIN_FRACTION)
    if st.f_files and st.f_favail < need_inodes:
        raise Refused(f"{what}: {files} files need {need_inodes} free inodes with the "
                      f"margin, and the file system of {display_path(where)} has "
                      f"{st.f_favail}: nothing written")


@contextmanager
def terminate_as_exit() -> Iterator[None]:
    """While the body runs, SIGTERM raises ``SystemExit(143)`` in the main thread (the
    default action would end the process at once, leaving its staging folder behind);
    the previous handler comes back after. Nothing changes outside the main thread or when
    the process already handles or ignores SIGTERM."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL):
        yield
        return

    def on_term(signum: int, _frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


__all__ = ["MIN_MARGIN_BYTES", "check_free_space", "terminate_as_exit"]
