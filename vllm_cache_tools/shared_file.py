"""An unnamed temporary file that a process and the processes it forks append to, each piece
at an offset of its own (one counter in shared memory), read back by offset: the pack's frames
(:mod:`.fleet.frames`), the frame readers' answers (:mod:`.fleet.frame_read`) and every forked
reader's answers (:mod:`.store.parallel_read`) go through one, so that what crosses a pool's
pipe stays small (a worker blocked sending a large answer into a full pipe, while it holds the
pipe's lock, makes ``Pool.terminate`` wait forever)."""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import tempfile
from typing import Any

from vllm_cache_tools.libc import libc_fn


class SharedAppendFile:
    """Created without a name in ``directory`` (the system's temporary folder when ``None``:
    no link there is followed) before the workers are forked; closed by :meth:`close`."""

    def __init__(self, directory: str | None = None) -> None:
        self.directory = directory
        self._file = tempfile.TemporaryFile(dir=directory)  # noqa: SIM115  # close()
        # Under the fork context where there is one: its lock's semaphore is unlinked at
        # once, no resource tracker process is started for it.
        ctx = multiprocessing.get_context(
            "fork" if "fork" in multiprocessing.get_all_start_methods() else None)
        self._end = ctx.Value("q", 0)

    def fileno(self) -> int:
        return self._file.fileno()

    def append(self, b: bytes | bytearray | memoryview) -> tuple[int, int]:
        """Write ``b`` at an offset no other writer takes; its ``(offset, length)``. Raises
        ``OSError`` (a full disk)."""
        with self._end.get_lock():
            off = self._end.value
            self._end.value += len(b)
        fd, done, view = self._file.fileno(), 0, memoryview(b)
        while done < len(view):
            done += os.pwrite(fd, view[done:], off + done)
        return off, len(view)

    def read(self, off: int, n: int) -> bytes:
        """The ``n`` bytes at ``off`` (fewer only where the file was cut short)."""
        parts = []
        while n > 0:
            b = os.pread(self._file.fileno(), n, off)
            if not b:
                break
            parts.append(b)
            off += len(b)
            n -= len(b)
        return b"".join(parts)

    def release(self, off: int, n: int) -> None:
        """Give back the space of ``n`` bytes at ``off``, read and no longer needed (a hole
        punched, ``fallocate(2)``), so that a long run's answers do not pile up in a
        temporary folder that may be memory; where the call is missing, nothing happens."""
        fn = _fallocate()
        if fn is not None and n > 0:
            fn(self._file.fileno(), _PUNCH_HOLE | _KEEP_SIZE, off, n)

    def close(self) -> None:
        self._file.close()


_PUNCH_HOLE = 0x02
_KEEP_SIZE = 0x01
def _fallocate() -> Any:
    """libc's ``fallocate`` with its argument types, or ``None`` (not Linux)."""
    return libc_fn("fallocate", (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64))


__all__ = ["SharedAppendFile"]
