"""Signatures of a store's entries: the object ``entries/<layout>/<key>.json.sig`` beside each
index object (:func:`.trust.sig_path`), written and read through the store's own primitives,
so it travels wherever the index object does. Read capped, in a ``file://`` store as a
regular file reached without following links, like an index object."""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from vllm_cache_tools import safeio
from vllm_cache_tools.fleet.errors import StoreError
from vllm_cache_tools.fleet.remote import DEFAULT_WORKERS, Store, StoreEntry, store_error
from vllm_cache_tools.fleet.sshsig import MAX_SIGNATURE_BYTES
from vllm_cache_tools.fleet.trust import SignatureCheck, TrustPolicy, check, sig_path


def read_signature(store: Store, entry: StoreEntry) -> bytes | None:
    """The armored signature of ``entry``'s index object, or ``None`` when it has none
    (one over :data:`MAX_SIGNATURE_BYTES` is read as that many bytes and fails to parse)."""
    path = sig_path(store.index_path(entry.record.layout, entry.record.key))
    if not store.local:
        fs = getattr(store, "fs", None)
        if fs is None:  # a store without fsspec underneath: its own capped-less read
            data = store.cat_if_exists(path)
            return None if data is None else data[:MAX_SIGNATURE_BYTES + 1]
        try:  # a ranged read: a store serving a huge object costs 16 KiB, not its size
            return bytes(fs.cat_file(path, start=0, end=MAX_SIGNATURE_BYTES + 1))
        except FileNotFoundError:
            return None
        except Exception as exc:
            raise store_error(exc, store.url, "reading a signature", store.endpoint) from None
    rel = path[len(store.base) + 1:]
    parent, _, name = rel.rpartition("/")
    try:
        dfd = safeio.open_dirs(store.base, parent)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StoreError(f"{store.url}: {parent}: {exc.strerror or exc}") from None
    try:
        return safeio.read_regular(name, MAX_SIGNATURE_BYTES, dir_fd=dfd)
    except FileNotFoundError:
        return None
    except OSError as exc:  # a link, a FIFO, over the cap: a signature that is no signature
        return f"unreadable signature object ({exc.strerror or exc})".encode()
    finally:
        os.close(dfd)


def judge_entries(store: Store, entries: Sequence[StoreEntry], policy: TrustPolicy | None,
                  workers: int = DEFAULT_WORKERS) -> dict[tuple[str, str], SignatureCheck]:
    """Each entry's signature judged against ``policy`` (``workers`` reads at a time),
    by ``(layout, key)``."""
    def one(e: StoreEntry) -> SignatureCheck:
        if not e.index_sha512:  # a store whose reader kept no digest: nothing to check
            return SignatureCheck("invalid", reason="bad signature: the index object's "
                                                    "digest is not known")
        return check(read_signature(store, e), e.index_sha512, policy)

    with ThreadPoolExecutor(max(1, min(workers, len(entries) or 1))) as pool:
        got = list(pool.map(one, entries))
    return {(e.record.layout, e.record.key): g for e, g in zip(entries, got, strict=True)}


__all__ = ["judge_entries", "read_signature"]
