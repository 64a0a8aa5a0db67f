"""What a fleet analysis (``stats``, ``drift``) reads, from one of three places:

* a cache root: its entries, the recorder's manifests beside them, and every host's ledger
  (``torch_compile_cache/.vllm-cache-tools/ledger/<host>.jsonl``: a root shared by many hosts
  holds one ledger per host);
* a folder of collected files: cache roots anywhere below it (a folder holding
  ``torch_compile_cache``), loose ledgers (``*.jsonl``) and loose manifests
  (``vct-manifest.<digest>.json``), e.g. what each pod's sidecar copied to one place;
* a remote store (``s3://...``, ``gs://...``, ``file://...``, see
  :mod:`vllm_cache_tools.fleet.remote`): its entries and the manifests pushed with them (a
  store holds no ledger, so statistics from it are what the files prove).

Nothing here interprets what it gathers; every item that cannot be read becomes a one-line
problem."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_cache_tools.errors import VctError
from vllm_cache_tools.layout import (
    COMPILE_CACHE_DIRNAME,
    LEDGER_DIRNAME,
    STATE_DIRNAME,
    is_manifest_name,
    short_key,
)
from vllm_cache_tools.read.errors import ReadError
from vllm_cache_tools.read.manifest import (
    MAX_MANIFEST_BYTES,
    Manifest,
    manifest_paths,
    read_manifest,
    read_manifests,
)
from vllm_cache_tools.store.entries import checkpoint_of, read_aot_entry, read_backend_entry
from vllm_cache_tools.store.locate import (
    SYMLINKED_COMPILE_CACHE,
    CacheRoot,
    display_path,
    resolve_root,
)
from vllm_cache_tools.store.scan import RootError, check_root, classify

MAX_FOLDER_ITEMS = 2_000_000
"""A collected folder is walked item by item; past this it is not a folder of fleet files."""


class InputError(VctError, ValueError):
    """The source cannot be read at all (one line for users)."""


@dataclass(frozen=True)
class EntryFacts:
    """One cache entry as a fleet analysis needs it."""

    key: str
    layout: str
    """``backend`` or ``aot``."""
    size_bytes: int
    model: str | None
    """The served model (from the recorder's manifest), else the traced model code."""
    created: float | None
    location: str
    """Where it was found (a path or a store URL), for messages."""
    path: Path | None = None
    """The entry folder, when it is on this machine."""
    recorded: bool | None = None
    """It carries a recorder manifest (``vct-manifest.*.json``): a recorder wrote it, here or
    on the host it was packed or pushed from. ``None``: not looked (an entry on this machine:
    :func:`carries_manifests` looks when asked)."""

    def carries_manifests(self) -> bool:
        if self.recorded is not None:
            return self.recorded
        return self.path is not None and \
            next(manifest_paths(self.path, self.layout), None) is not None


@dataclass(frozen=True)
class Inputs:
    """Everything gathered from one source."""

    source: str
    """The source as given (a path shown as ``ls`` shows paths, or the store URL)."""
    kind: str
    """``root``, ``folder`` or ``remote``."""
    ledgers: tuple[Path, ...]
    entries: tuple[EntryFacts, ...]
    """One per key (the same entry collected from two roots counts once)."""
    manifests: tuple[Manifest, ...]
    """Empty unless asked for; one per digest and entry."""
    problems: tuple[str, ...]

    def models(self) -> dict[str, str]:
        """Entry key -> model, from entries and manifests (manifests name entries that are
        gone from the root, too)."""
        out: dict[str, str] = {}
        for m in self.manifests:
            name = checkpoint_of(m.data.get("model"))[0]
            if name and m.key:
                out.setdefault(m.key, name)
        for e in self.entries:
            if e.model:
                out[e.key] = e.model
        return out


def _entry_facts(croot: CacheRoot, problems: list[str]) -> list[EntryFacts]:
    found: list[Any] = []
    out: list[EntryFacts] = []
    for layout, path in classify(croot.compile_cache, found):
        reader = read_aot_entry if layout == "aot" else read_backend_entry
        e = reader(path, deep=False)
        out.append(EntryFacts(e.key, e.layout, e.size_bytes,
                              getattr(e, "checkpoint", None) or e.model, e.created,
                              display_path(e.path), e.path))
    problems += [f"{p.path}: {p.detail}" for p in found if p.kind != "foreign"]
    return out


def _root_manifests(entries: Iterable[EntryFacts], problems: list[str]) -> list[Manifest]:
    out: list[Manifest] = []
    for e in entries:
        if e.path is None:
            continue
        ms, bad = read_manifests(e.path, e.layout)
        out += ms
        problems += bad
    return out


def _ledgers(cc: Path) -> list[Path]:
    d = cc / STATE_DIRNAME / LEDGER_DIRNAME
    try:
        return [d / n for n in sorted(os.listdir(d)) if n.endswith(".jsonl")]
    except OSError:
        return []


def _gather_root(croot: CacheRoot, manifests: bool, problems: list[str]
                 ) -> tuple[list[Path], list[EntryFacts], list[Manifest]]:
    try:
        check_root(croot)
    except RootError as exc:
        raise InputError(str(exc)) from None
    if croot.compile_cache.is_symlink():  # as every verb: neither entries nor ledgers read
        problems.append(f"{display_path(croot.compile_cache)}: {SYMLINKED_COMPILE_CACHE}")
        return [], [], []
    entries = _entry_facts(croot, problems)
    ms = _root_manifests(entries, problems) if manifests else []
    return _ledgers(croot.compile_cache), entries, ms


def is_root(path: Path) -> bool:
    """A vLLM cache root (or its compile cache); a folder that cannot be looked into counts as
    one, so the root check says why it cannot be read."""
    if path.name == COMPILE_CACHE_DIRNAME:
        return True
    try:
        return (path / COMPILE_CACHE_DIRNAME).is_dir()
    except OSError:  # EACCES on the folder itself (pathlib raises it before 3.12)
        return True


def _gather_folder(top: Path, manifests: bool, problems: list[str]
                   ) -> tuple[list[Path], list[EntryFacts], list[Manifest]]:
    ledgers: list[Path] = []
    entries: list[EntryFacts] = []
    found: list[Manifest] = []
    seen = 0
    for dirpath, dirnames, filenames in os.walk(top, onerror=lambda e: problems.append(
            f"cannot list {display_path(e.filename or '?')}: {e.strerror}")):
        seen += len(dirnames) + len(filenames)
        if seen > MAX_FOLDER_ITEMS:
            raise InputError(f"{display_path(top)} holds over {MAX_FOLDER_ITEMS} items: not a "
                             "folder of collected fleet files")
        here = Path(dirpath)
        if COMPILE_CACHE_DIRNAME in dirnames:
            dirnames.remove(COMPILE_CACHE_DIRNAME)
            ls, es, ms = _gather_root(CacheRoot(here, "folder"), manifests, problems)
            ledgers += ls
            entries += es
            found += ms
        dirnames.sort()
        for name in sorted(filenames):
            if name.endswith(".jsonl"):
                ledgers.append(here / name)
            elif manifests and is_manifest_name(name):
                try:
                    found.append(read_manifest(here / name))
                except ReadError as exc:
                    problems.append(str(exc))
    return ledgers, entries, found


def _gather_remote(url: str, manifests: bool, options: Mapping[str, Any] | None,
                   problems: list[str]) -> tuple[list[EntryFacts], list[Manifest]]:
    try:
        from vllm_cache_tools.fleet.errors import FleetError
        from vllm_cache_tools.fleet.remote import Store
    except ImportError:  # pragma: no cover - the fleet package is part of this distribution
        raise InputError("remote stores are not available in this installation") from None
    try:
        store = Store(url, options)
        store.ensure_marker(create=False)
        listing = store.listing()
        found = listing.entries
        problems += [x.warning for x in listing.skipped]
    except FleetError as exc:
        raise InputError(str(exc)) from None
    entries = [EntryFacts(s.record.key, s.record.layout, s.record.size_bytes,
                          s.record.checkpoint or s.record.model, s.pushed_at,
                          f"{url}/{s.record.path}",
                          recorded=any(is_manifest_name(f.path.rsplit("/", 1)[-1])
                                       for f in s.record.files)) for s in found]
    ms: list[Manifest] = []
    if manifests:
        with tempfile.TemporaryDirectory(prefix="vct-drift-") as tmp:
            for s in found:
                for f in s.record.files:
                    name = f.path.rsplit("/", 1)[-1]
                    if not is_manifest_name(name):
                        continue
                    # Read through the manifest reader (its caps and checks), from a copy.
                    local = Path(tmp) / f"{f.sha256}.json"
                    try:
                        local.write_bytes(store.read_blob(f.sha256, MAX_MANIFEST_BYTES))
                        ms.append(read_manifest(local))
                    except (FleetError, ReadError, OSError) as exc:
                        problems.append(f"{url}: manifest of {short_key(s.record.key)}: {exc}")
    return entries, ms


def _unique(entries: Iterable[EntryFacts]) -> tuple[EntryFacts, ...]:
    out: dict[tuple[str, str], EntryFacts] = {}
    for e in entries:
        out.setdefault((e.layout, e.key), e)
    return tuple(out.values())


def _unique_manifests(ms: Iterable[Manifest]) -> tuple[Manifest, ...]:
    out: dict[tuple[str, str, str, str, str], Manifest] = {}
    for m in ms:
        out.setdefault((m.tree, m.key, m.rank, m.prefix, m.digest), m)
    return tuple(out.values())


def gather(source: str | os.PathLike[str] | None = None, *, manifests: bool = False,
           storage_options: Mapping[str, Any] | None = None) -> Inputs:
    """Everything a fleet analysis reads from ``source``: a cache root (default: resolved
    like vLLM), a folder of collected files, or a remote store URL. ``manifests``: read every
    recorder manifest too (``drift``; ``stats`` needs only the entries' models)."""
    problems: list[str] = []
    text = os.fspath(source) if source is not None else None
    if text is not None and "://" in text and not text.startswith("/"):
        entries, ms = _gather_remote(text, manifests, storage_options, problems)
        return Inputs(text, "remote", (), _unique(entries), _unique_manifests(ms),
                      tuple(problems))
    croot = resolve_root(text)
    path = croot.vllm_root
    if text is None or is_root(path) or not path.is_dir():
        ledgers, entries, ms = _gather_root(croot, manifests, problems)
        kind = "root"
    else:
        ledgers, entries, ms = _gather_folder(path, manifests, problems)
        kind = "folder"
        if not (ledgers or entries or ms):
            raise InputError(f"{display_path(path)} is neither a vLLM cache root nor a folder "
                             "with cache roots, ledgers (*.jsonl) or recorder manifests"
                             + (f" ({problems[0]})" if problems else ""))
    return Inputs(display_path(path), kind, tuple(ledgers), _unique(entries),
                  _unique_manifests(ms), tuple(problems))
