from __future__ import annotations

from vllm_cache_tools.errors import VctError


class ReadError(VctError, ValueError):
    """An artifact could not be read; the message is one line meant for users.

    Raised as is, it means the bytes were read and found broken (``corrupt``)."""


class UnreadableError(ReadError, OSError):
    """The artifact could not be read at all (permission denied, vanished, not a regular file,
    or reading it would leave a trace we must not leave). Nothing is known about its content:
    the entry is ``unknown``, never ``corrupt``, and no policy deletes it for being broken.

    Also an :class:`OSError`, so callers that only handle I/O errors keep working."""


def unreadable(what: str, exc: OSError) -> UnreadableError:
    """The one-line :class:`UnreadableError` for an I/O failure reading ``what``."""
    if isinstance(exc, UnreadableError):
        return exc
    return UnreadableError(f"cannot read {what}: {exc.strerror or exc}")
