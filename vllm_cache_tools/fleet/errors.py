"""Errors of the fleet verbs, each with the exit status the CLI gives it (issue 14: 0 done or
would hit, 1 refused or would not hit, 2 usage or I/O error). Every message is one line."""

from __future__ import annotations

from vllm_cache_tools.errors import VctError


class FleetError(VctError):
    """Base: a one-line message and the CLI's exit status."""

    exit_code = 2


class BundleError(FleetError):
    """A bundle that cannot be trusted or read: truncated, tampered (a digest differs), an
    unknown format version, a member that would land outside its entry or is not a plain
    file."""


class StoreError(FleetError):
    """A remote store that cannot be used: unreachable, missing credentials, a listed blob
    that is missing, a missing fsspec backend (e.g. ``s3fs`` for ``s3://``)."""


class BadIndex(StoreError):
    """One index object of a store that cannot be used (not JSON, not an index object, over
    the caps, a symlink or FIFO, named for another entry): that entry is named and skipped;
    the rest of the store lists and pulls. Raised only when that entry itself is asked for."""


class Refused(FleetError):
    """Nothing was placed: the cache would not hit on this host, or an entry of the same key
    with other content is already there (``--force`` places anyway where that is safe)."""

    exit_code = 1


__all__ = ["BadIndex", "BundleError", "FleetError", "Refused", "StoreError"]
