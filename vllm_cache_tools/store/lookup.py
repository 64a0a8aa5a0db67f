"""Finding one entry folder from what a user typed: a key, a unique key prefix (like git's short
hashes) or a path inside an entry (:func:`locate_entry`), and its two errors."""

from __future__ import annotations

import bisect
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path

from vllm_cache_tools.errors import UsageError, VctError
from vllm_cache_tools.layout import AOT_DIRNAME, COMPILE_CACHE_DIRNAME
from vllm_cache_tools.store.folders import AOT_KEY, BACKEND_KEY
from vllm_cache_tools.store.locate import (
    SYMLINKED_COMPILE_CACHE,
    CacheRoot,
    display_path,
    resolve_root,
)
from vllm_cache_tools.store.scan import check_root, classify


class EntryNotFound(VctError, LookupError):
    pass


class AmbiguousKey(VctError, LookupError):
    """A key prefix that names more than one entry; the message lists them."""

    def __init__(self, ref: str, candidates: list[tuple[str, Path]]) -> None:
        super().__init__(ref)
        self.ref = ref
        self.candidates = candidates

    def __str__(self) -> str:
        names = {p.name for _, p in self.candidates}
        if len(names) == 1:
            # One key in two places (vLLM 0.11.1-0.16's <root>/torch_aot_compile beside
            # 0.17+'s torch_compile_cache/torch_aot_compile): one line naming both paths.
            where = " and ".join(display_path(p) for _, p in self.candidates)
            return (f"key {self.candidates[0][1].name[:12]} is in {len(self.candidates)} "
                    f"places ({where}): name the folder by its path")
        lines = "\n".join(f"  {layout:8} {p.name}" for layout, p in self.candidates)
        return f"key prefix {self.ref!r} is ambiguous; candidates:\n{lines}"


#: The shortest key prefix a command takes (git's shortest abbreviation): ``rm 0`` must not
#: delete whichever entry happens to be the only one whose key starts with 0.
MIN_KEY_PREFIX = 4


def key_prefix(ref: str) -> str | None:
    """``ref`` as the key prefix it names (keys are hex, written in lower case in folder and
    store names, so ``28FD`` names ``28fd362d4e``), or ``None`` when it is not one. The one
    reading of a typed key, for local entries and store entries alike. A hex prefix shorter
    than :data:`MIN_KEY_PREFIX` is a :class:`UsageError`."""
    if not re.fullmatch(r"[0-9a-fA-F]{1,64}", ref):
        return None
    if len(ref) < MIN_KEY_PREFIX:
        raise UsageError(f"key prefix {ref!r} is too short: give at least {MIN_KEY_PREFIX} "
                         "hex digits")
    return ref.lower()


def locate_entries(refs: Sequence[str],
                   root: str | os.PathLike[str] | CacheRoot | None = None) -> list[Path]:
    """:func:`locate_entry` of each ref, the root's entry folders listed once for all of them
    (``pack`` of 200 keys listed them 200 times: a second of a first pack) and looked up by
    prefix in the sorted names (a scan of the listing per ref was 0.7 s at 720 keys)."""
    croot = root if isinstance(root, CacheRoot) else resolve_root(root)
    names: list[str] | None = None
    items: list[tuple[str, Path]] = []

    def matching(key: str) -> list[tuple[str, Path]]:
        nonlocal names, items
        if names is None:
            check_root(croot)
            items = sorted(classify(croot.compile_cache, []), key=lambda x: x[1].name)
            names = [path.name for _, path in items]
        i = bisect.bisect_left(names, key)
        j = i
        while j < len(names) and names[j].startswith(key):
            j += 1
        return items[i:j]

    return [locate_entry(r, croot, _matching=matching) for r in refs]


def locate_entry(ref: str, root: str | os.PathLike[str] | CacheRoot | None = None, *,
                 _matching: Callable[[str], list[tuple[str, Path]]] | None = None) -> Path:
    """Find an entry folder from a key, a unique key prefix (like git's short hashes) or a
    path (the entry folder or anything inside it)."""
    p = Path(os.path.expanduser(ref))
    # A bare hex name (either case) long enough to be a key prefix is a key even where a file
    # of that name is here; any other name that exists is a path (say, `explain run.log ...`
    # from the log's folder), and so is a hex name too short to be a key prefix.
    is_key = re.fullmatch(rf"[0-9a-fA-F]{{{MIN_KEY_PREFIX},64}}", ref) is not None
    if os.path.lexists(p) and ("/" in ref or ref in (".", "..") or not is_key):
        p = Path(os.path.abspath(p))
        for cand in (p, *p.parents):
            if AOT_KEY.match(cand.name) and cand.parent.name == AOT_DIRNAME:
                return cand
            if BACKEND_KEY.match(cand.name) and cand.parent.name == COMPILE_CACHE_DIRNAME:
                return cand
        raise EntryNotFound(f"{display_path(p)} is not inside a compile-cache entry")
    key = key_prefix(ref)
    if key is None:
        raise EntryNotFound(f"{ref!r} is neither an entry key (hex) nor a path")
    croot = root if isinstance(root, CacheRoot) else resolve_root(root)
    cc = croot.compile_cache
    if _matching is None:
        check_root(croot)
        found = [(layout, path) for layout, path in classify(cc, [])
                 if path.name.startswith(key)]
    else:
        found = _matching(key)
    if not found:
        why = f": {SYMLINKED_COMPILE_CACHE}" if cc.is_symlink() else ""
        raise EntryNotFound(f"no entry matches {ref!r} under {display_path(cc)}{why}")
    exact = [f for f in found if f[1].name == key]
    if len(found) > 1 and len(exact) != 1:
        raise AmbiguousKey(ref, found)
    return (exact or found)[0][1]
