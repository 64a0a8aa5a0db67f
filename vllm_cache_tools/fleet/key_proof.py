"""What is placed is what its name says: before ``unpack`` or ``pull`` moves a staged entry into
the root, its key is re-derived from the staged files (:mod:`vllm_cache_tools.keys.entry_proof`),
and its folder must be vLLM's current spelling of the key with no other spelling of that key
in the root. Reading the staged copy (not the record) is the point: the record is what the
bundle or store says, the staged files are what vLLM would load.

``gate`` says, per record, why it may not be placed (or ``None``): a key mismatch always; an
unproven key unless ``--force``; a key only *linked* (an AOT artifact tied by its sources to a
proven backend entry, its name not re-derived: a renamed artifact passes that too) unless
``--force`` or a trusted signature covers it (:data:`TrustHook`: ``unpack``/``pull --trust``)
(the vLLM arguments after ``--`` re-derive it instead: their probe gives the Inductor
factors, and the entry is then proven or not); an old or second spelling always."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from vllm_cache_tools.fleet.records import EntryRecord, FileRecord
from vllm_cache_tools.keys.entry_proof import (
    LINKED,
    MISMATCH,
    PROVEN,
    UNPROVEN,
    KeyProof,
    proof_view,
    prove_aot,
    prove_backend,
)
from vllm_cache_tools.keys.source_link import SourceLinker
from vllm_cache_tools.layout import AOT_DIRNAME, COMPILE_CACHE_DIRNAME
from vllm_cache_tools.store.entries import layout_at, read_entry
from vllm_cache_tools.store.parallel_read import deep_read, read_deep
from vllm_cache_tools.store.types import Entry

TrustHook = Callable[[EntryRecord], str | None]
"""Given a record whose key is only ``linked``, who signed it when a trusted signature covers
it (``unpack``: the bundle's, ``pull``: the entry's index object's), else ``None``."""

CURRENT_AOT_PARENT = f"{COMPILE_CACHE_DIRNAME}/{AOT_DIRNAME}"
"""vLLM 0.17+ keeps the AOT tree inside ``torch_compile_cache``; the 0.11.1-0.16 spelling
(``<root>/torch_aot_compile``) is read but never written."""


def spellings(rec: EntryRecord) -> tuple[str, ...]:
    """Every path a vLLM release may look the record's key up at (relative to the root)."""
    if rec.layout == "backend":
        return (f"{COMPILE_CACHE_DIRNAME}/{rec.key}",)
    return (f"{CURRENT_AOT_PARENT}/{rec.key}", f"{AOT_DIRNAME}/{rec.key}")


def prove_records(staged_root: Path, vllm_root: Path, records: Sequence[EntryRecord], *,
                  inductor: Sequence[str] = (), vllm_version: str | None = None,
                  trust: TrustHook | None = None,
                  read_before: Mapping[str, Entry | None] | None = None
                  ) -> dict[tuple[str, str], KeyProof]:
    """The proof of each record's key from its staged copy (``staged_root / rec.path``).
    An AOT entry's siblings are the staged backend entries and those of its ``linked`` keys
    already in the root, each counted only where the source proof links the two.
    ``inductor`` and ``vllm_version``: this host's, from the hit check's probe (what a mega
    AOT key needs beyond its backend entry). ``trust``: who signed a ``linked`` entry, under
    the trust policy (:attr:`KeyProof.vouched`). ``read_before``: the deep reads of staged copies
    already made (:func:`read_staged`, by the record's path), not read again."""
    out: dict[tuple[str, str], KeyProof] = {}
    staged: dict[str, Entry] = {}
    backends: list[tuple[Entry, KeyProof]] = []
    # The staged copies are read deep at once, by forked processes where this one has no
    # other thread (the safe pickle reader is pure Python: ~10 ms an AOT entry, its result
    # ~1 ms to cross the pipe).
    done = read_before or {}
    paths = [staged_root / rec.path for rec in records]
    read = {i: done[rec.path] for i, rec in enumerate(records) if rec.path in done}
    dirs = [i for i, p in enumerate(paths) if i not in read and _is_folder(p)]
    read.update(zip(dirs, read_deep([(layout_at(paths[i]), paths[i]) for i in dirs]),
                    strict=True))
    for i, rec in enumerate(records):
        e = read.get(i)
        if e is None:
            out[(rec.layout, rec.key)] = KeyProof(rec.key, rec.layout, UNPROVEN,
                                                  "its staged copy could not be read")
            continue
        staged[rec.key] = e
        if rec.layout == "backend":
            p = prove_backend(e)
            out[("backend", rec.key)] = p
            backends.append((e, p))
    versions = sorted({v for r in records if (v := r.versions.get("vllm"))}
                      | ({vllm_version} if vllm_version else set()))
    linker = SourceLinker()
    # The staged backend entries by graph files, then code hash: an AOT entry meets only
    # those its sources can link to (every pair was 129,600 checks at 360 starts).
    index: dict[tuple[str, ...], dict[str, list[int]]] = {}
    for i, (b, _) in enumerate(backends):
        if b.factors is not None and b.factors.code_hash:
            index.setdefault(linker.graph_files(b), {}).setdefault(
                b.factors.code_hash, []).append(i)
    have = {b.key for b, _ in backends}
    for rec in records:
        e = staged.get(rec.key)
        if rec.layout != "aot" or e is None:
            continue
        hits = sorted(i for graph, by_hash in index.items()
                      for h in linker.code_hashes(graph, e) for i in by_hash.get(h, ()))
        sibs = [backends[i][1] for i in hits if backends[i][1].status == PROVEN]
        for k in rec.linked:
            if k not in have and (rb := _read(vllm_root / COMPILE_CACHE_DIRNAME / k)):
                p = prove_backend(rb)
                if p.status == PROVEN and linker.linked(rb, e):
                    sibs.append(p)
        out[("aot", rec.key)] = prove_aot(e, sibs, versions=versions, inductor=inductor)
    if trust is not None:
        for rec in records:
            p = out[(rec.layout, rec.key)]
            if p.status == LINKED and (who := trust(rec)):
                out[(rec.layout, rec.key)] = replace(
                    p, vouched=f"the trusted signature of {who}")
    return out


def read_staged(path: Path) -> Entry | None:
    """The deep read of the staged entry folder at ``path``, as :func:`prove_records` reads
    it, cut to what the proofs need of it (:func:`.entry_proof.proof_view`: it crosses from a
    worker process); ``None`` where it is no folder or cannot be read."""
    e = deep_read(layout_at(path), path) if _is_folder(path) else None
    return None if e is None else proof_view(e)


def _read(path: Path) -> Entry | None:
    try:
        return read_entry(path, deep=True) if _is_folder(path) else None
    except OSError:
        return None


def _is_folder(path: Path) -> bool:
    """A folder, not a link to one; ``False`` where it cannot be looked at (any ``OSError``:
    the record is then unproven, its copy "could not be read")."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def gate(rec: EntryRecord, proof: KeyProof | None, *, force: bool, root_fd: int) -> str | None:
    """Why ``rec`` may not be placed, in one line; ``None`` when it may."""
    current = spellings(rec)[0]
    if rec.path != current:
        return (f"{rec.path} is not where this vLLM keeps the key ({current}): only the "
                "current spelling is placed")
    for other in spellings(rec)[1:]:
        try:
            os.stat(other, dir_fd=root_fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        except OSError:
            pass
        return (f"{other} is already in the root: a second spelling of the key would make "
                "it ambiguous")
    if proof is None:
        return None if force else "key unproven (not checked): --force places it"
    if proof.status == MISMATCH:
        return proof.line()
    if proof.placeable or force:
        return None
    if proof.status == LINKED:
        return f"{proof.line()}: {LINKED_WAYS_OUT}"
    return f"{proof.line()}: --force places it"


LINKED_WAYS_OUT = ("not proven; placed with the vLLM arguments after -- (they re-derive it), a "
                   "trusted signature (--trust or VLLM_CACHE_TOOLS_TRUST), or --force")
"""The refusal of a ``linked`` key names the three ways out."""


def proof_of(proofs: Mapping[tuple[str, str], KeyProof], rec: EntryRecord) -> KeyProof | None:
    return proofs.get((rec.layout, rec.key))


def status_of(proof: KeyProof | None) -> str:
    return proof.status if proof is not None else UNPROVEN


def placed_note(proof: KeyProof | None) -> str:
    """What a human should know about a placed entry's key: nothing when it was proven."""
    if proof is None or proof.status == UNPROVEN:
        return (proof.line() if proof else "key unproven") + ": placed because of --force"
    if proof.status == PROVEN:
        return ""
    return f"{proof.line()}: placed because of " + (proof.vouched or "--force")


def snapshot_named_by_content(x: FileRecord) -> bool:
    """A recorder source snapshot is content-addressed: its name must be the sha256 of what
    was staged (the staging write checked the content against ``x.sha256``)."""
    return x.path.rpartition("/")[2] == x.sha256


__all__ = ["CURRENT_AOT_PARENT", "LINKED_WAYS_OUT", "TrustHook", "gate", "placed_note", "proof_of",
           "prove_records", "snapshot_named_by_content", "spellings", "status_of"]
