"""The one base of every error this package reports to a user (pip's rule: "error handling
happens here, not in the action-handlers"): a one-line message and the exit status the CLI
gives it. ``vllm-cache``'s ``main()`` catches :class:`VctError` once; verbs raise.

Exit statuses: 0 done; 1 a negative answer (problems found, would not hit, refused); 2 usage
or I/O error (bad arguments, a root that cannot be read); 3 an internal error (a bug)."""

from __future__ import annotations


class VctError(Exception):
    """Base: ``str(error)`` is the one-line message, :attr:`exit_code` the CLI's status."""

    exit_code = 2


class UsageError(VctError, ValueError):
    """An argument or expression that cannot be understood (``--filter``, a size, an age)."""


__all__ = ["UsageError", "VctError"]
