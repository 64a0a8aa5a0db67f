from __future__ import annotations


class ReadError(ValueError):
    """An artifact could not be read; the message is one line meant for users."""
