"""The C library's functions the package calls directly, found in one place: Linux calls that
Python's ``os`` module does not wrap (``renameat2``, ``syncfs``, ``sync_file_range``,
``fallocate``, ``prctl``). Each caller falls back where a function is missing (another OS, an
old libc)."""

from __future__ import annotations

import contextlib
import ctypes
import functools
from typing import Any


@functools.cache
def _libc() -> ctypes.CDLL | None:
    with contextlib.suppress(OSError):
        return ctypes.CDLL(None, use_errno=True)
    return None


@functools.cache
def libc_fn(name: str, argtypes: tuple[Any, ...] | None = None,
            restype: Any = ctypes.c_int) -> Any:
    """libc's ``name`` with these argument and result types (``argtypes=None``: Python's
    default conversions), or ``None`` where there is none. Each signature gets its own
    function object (``CDLL[name]``), so one caller's types never change another's."""
    lib = _libc()
    if lib is None:
        return None
    try:
        fn = lib[name]
    except AttributeError:
        return None
    if argtypes is not None:
        fn.argtypes = list(argtypes)
    fn.restype = restype
    return fn


def errno_now() -> int:
    """The ``errno`` of the last call made through :func:`libc_fn` on this thread."""
    return ctypes.get_errno()


__all__ = ["errno_now", "libc_fn"]
