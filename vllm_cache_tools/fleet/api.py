"""The fleet verbs as functions: what the CLI calls and prints, returning frozen records.

``pack`` -> :class:`PackResult`, ``unpack`` -> :class:`UnpackResult`, ``push`` ->
:class:`.remote.PushResult`, ``pull`` -> :class:`PullResult`, ``warm`` ->
:class:`.warm.WarmResult`. A refusal (the entries would not hit here, or another entry of
the same key is in place) is a result with ``ok`` false, not an exception, so callers see the
findings and causes; unusable input raises :class:`.errors.FleetError` (one line)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vllm_cache_tools.fleet.checks import HitCheck, hit_check, static_check
from vllm_cache_tools.fleet.errors import FleetError
from vllm_cache_tools.fleet.here import Here, look_here
from vllm_cache_tools.fleet.records import (
    DEFAULT_LEVEL,
    BundleManifest,
    EntryRecord,
    Footprint,
    footprint,
)
from vllm_cache_tools.fleet.remote import DEFAULT_WORKERS, Store
from vllm_cache_tools.fleet.remote_ops import (
    PushResult,
    download,
    download_size,
    match_refs,
    with_linked,
)
from vllm_cache_tools.fleet.remote_ops import push as _push
from vllm_cache_tools.fleet.transfer import check_free_space, terminate_as_exit
from vllm_cache_tools.layout import COMPILE_CACHE_DIRNAME, STATE_DIRNAME
from vllm_cache_tools.safeio import NamedOutput
from vllm_cache_tools.store.locate import CacheRoot, display_path, resolve_root

# The bundle format (zstandard, tarfile), the selection (deep readers, key checks) and
# placing are imported by the verbs that use them: a pod's `pull --if-hit --check` needs
# none of them (a sixth of its imports).
if TYPE_CHECKING:
    from vllm_cache_tools.fleet.oci_image import ImageLayout
    from vllm_cache_tools.fleet.place import Placement
    from vllm_cache_tools.fleet.trust import SignatureCheck, TrustPolicy

BytesProgress = Callable[[int, int], None]


@dataclass(frozen=True)
class PackResult:
    path: Path
    sha256: str
    """Of the bundle file: the same entries give the same bytes."""
    size_bytes: int
    raw_bytes: int
    """What the entries hold uncompressed."""
    entries: tuple[EntryRecord, ...]
    files: int
    seconds: float
    footprint: Footprint | None = None
    """Entries and snapshots packed, counted as every verb counts them."""
    signer: str | None = None
    """The signing key's fingerprint (``--sign``), or ``None``."""
    image: ImageLayout | None = None
    """``image=True``: the OCI image layout written at ``path`` (the bundle is its layer)."""


@dataclass(frozen=True)
class UnpackResult:
    bundle: Path
    root: Path
    manifest: BundleManifest
    check: HitCheck
    placements: tuple[Placement, ...]
    checked_only: bool
    refused: bool
    """The check said it would not hit (and no ``force``): nothing placed."""
    seconds: float
    signature: SignatureCheck | None = None
    """The manifest's signature as judged (a trust policy given: trusted, else refused
    before anything was placed; none given: unchecked or unsigned)."""

    @property
    def ok(self) -> bool:
        return not self.refused and all(p.action != "refused" for p in self.placements)


@dataclass(frozen=True)
class PullResult:
    url: str
    root: Path
    check: HitCheck | None
    placements: tuple[Placement, ...]
    selected: tuple[EntryRecord, ...]
    bytes_downloaded: int
    checked_only: bool
    refused: bool
    seconds: float
    footprint: Footprint | None = None
    """The selected entries and their snapshots, counted as every verb counts them."""
    skipped: tuple[str, ...] = ()
    """One warning line per index object of the store that could not be used (that entry
    is skipped; the others are listed and pulled)."""
    signatures: Mapping[str, SignatureCheck] | None = None
    """With a trust policy: each selected entry's signature as judged, by key (the
    untrusted ones are refused placements, never fetched)."""

    @property
    def ok(self) -> bool:
        return not self.refused and all(p.action != "refused" for p in self.placements)


def pack(refs: Sequence[str], output: str | os.PathLike[str], *,
         root: str | os.PathLike[str] | CacheRoot | None = None, model: str | None = None,
         filter_expr: str | None = None, level: int = DEFAULT_LEVEL,
         progress: BytesProgress | None = None, sync: bool = False,
         force: bool = False, sign: str | os.PathLike[str] | None = None,
         image: bool = False) -> PackResult:
    """Pack the named entries, their linked partners, manifests and snapshots into one
    deterministic ``.tar.zst`` (``sync``: on disk before this returns, fsync). An existing
    ``output`` is refused unless ``force`` (then replaced, never written through). ``sign``:
    an OpenSSH ed25519 private key file; the manifest then carries the provenance and its
    signature follows it (no longer byte-identical between packs: it says when). ``image``:
    ``output`` is a new folder, written as an OCI image layout whose one layer is the bundle
    (:mod:`.oci_image`: the image's filesystem is a cache root)."""
    from vllm_cache_tools.fleet.bundle import write_bundle
    from vllm_cache_tools.fleet.frames import FrameSpool
    from vllm_cache_tools.fleet.selection import select

    t0 = time.perf_counter()
    key = None
    if sign is not None:
        from vllm_cache_tools.fleet.trust import load_signing_key

        key = load_signing_key(sign)  # before any work: a bad key is a usage error
    out = Path(os.fspath(output))
    if image:
        from vllm_cache_tools.fleet import oci_image

        if str(out) == "-":
            raise FleetError("an OCI image layout is a folder: give -o DIR")
        oci_image.new_layout_dir(out)
    elif str(out) != "-":
        try:
            NamedOutput.refuse_taken(out, force)  # before the work; checked again at the end
        except OSError as exc:
            raise FleetError(f"cannot write {out}: {exc.strerror or exc}") from None
    target = oci_image.staging_blob(out) if image else out
    try:
        # The entries are compressed into a spool beside the output while the selection
        # proves and records them (each file read once); the bundle is put together after.
        frames = FrameSpool(None if str(target) == "-" else os.fspath(target.parent), level)
    except OSError as exc:
        raise FleetError(f"cannot write {out}: {exc.strerror or exc}") from None
    with frames:
        try:
            sel = select(root, refs, model=model, filter_expr=filter_expr, frames=frames)
        except OSError as exc:  # a file that vanished mid-walk, a worker lost (WorkerLost)
            raise FleetError(f"cannot pack: {exc.strerror or exc}") from None
        total = sum(f.record.size for fs in sel.files for f in fs) + sum(
            x.record.size for x in sel.extras)
        done = [0]

        def tick(n: int) -> None:
            done[0] += n
            if progress is not None:
                progress(done[0], total)

        try:
            w = write_bundle(sel, target, level, tick, sync=sync, force=force or image,
                             signing_key=key, tar_digest=image, frames=frames)
        except OSError as exc:
            raise FleetError(f"cannot write {out}: {exc.strerror or exc}") from None
    layout = None
    if image:
        assert w.tar_sha256 is not None
        layout = oci_image.finish_layout(out, w.sha256, w.size_bytes, w.tar_sha256,
                                         sel.records)
    return PackResult(out if image else w.path, w.sha256, w.size_bytes, total, sel.records,
                      sum(len(fs) for fs in sel.files) + len(sel.extras),
                      time.perf_counter() - t0,
                      footprint(sel.records, [x.record for x in sel.extras]),
                      key.public_key.fingerprint if key else None, layout)


def _judge(sig: bytes | None, sha512: bytes, policy: TrustPolicy | None, what: str
           ) -> SignatureCheck:
    """The signature judged; with a policy, anything but trusted is refused (exit 1,
    nothing placed) with its reason."""
    from vllm_cache_tools.fleet.errors import Refused
    from vllm_cache_tools.fleet.trust import check

    got = check(sig, sha512, policy)
    if policy is not None and not got.trusted:
        raise Refused(f"{what}: {got.reason}: nothing placed")
    return got


def _check(records: Sequence[EntryRecord], packed_on: Mapping[str, Any],
           vllm_args: Sequence[str] | None, root: str | os.PathLike[str] | None,
           python: str | None, usage: str, here: Here | None = None) -> HitCheck:
    if vllm_args:
        return hit_check(records, packed_on, vllm_args, root, python=python, usage=usage,
                         here=here)
    return static_check(records, packed_on, python, here=here)


@contextmanager
def _new_folders_undone(vllm_root: Path) -> Iterator[list[bool]]:
    """The folders a staging folder is made in (the root the user named may be new): those
    not there before are removed again, deepest first and only while empty, unless the body
    sets ``placed[0]`` (a bad bundle, a refusal or a failed download left a new root's
    skeleton, so a typo'd ``--root`` became a cache root)."""
    from vllm_cache_tools.fleet.place import STAGING_DIRNAME

    state = vllm_root / COMPILE_CACHE_DIRNAME / STATE_DIRNAME
    chain = [vllm_root, state.parent, state, state / STAGING_DIRNAME]
    new = [p for p in chain if not os.path.lexists(p)]
    placed = [False]
    try:
        yield placed
    finally:
        if not placed[0]:
            for p in reversed(new):
                try:
                    os.rmdir(p)
                except OSError:  # not empty (someone else's files), or gone: leave the rest
                    break


def unpack(bundle: str | os.PathLike[str], *, root: str | os.PathLike[str] | None = None,
           vllm_args: Sequence[str] | None = None, force: bool = False,
           check_only: bool = False, python: str | None = None, usage: str = "serve",
           progress: BytesProgress | None = None, trust: TrustPolicy | None = None
           ) -> UnpackResult:
    """Check a bundle (integrity, compatibility, relocation, and with ``vllm_args`` whether
    the next start here would hit) and place its entries atomically. ``trust``: the
    manifest's signature must verify and its key be allowed (:mod:`.trust`), or nothing is
    placed (:class:`.errors.Refused`)."""
    from vllm_cache_tools.fleet.bundle_read import extract, read_head
    from vllm_cache_tools.fleet.key_proof import prove_records
    from vllm_cache_tools.fleet.place import Staging, place_entries

    t0 = time.perf_counter()
    path = Path(os.fspath(bundle))
    croot = resolve_root(root)
    if check_only:
        head = read_head(path)
        m = head.manifest
        judged = _judge(head.signature, head.sha512, trust, str(path))
        check = _check(m.entries, m.packed_on, vllm_args, croot.vllm_root, python, usage)
        return UnpackResult(path, croot.vllm_root, m, check, (), True, False,
                            time.perf_counter() - t0, judged)
    signature: list[SignatureCheck] = []

    def judge(sha512: bytes, sig: bytes | None) -> None:
        signature.append(_judge(sig, sha512, trust, str(path)))

    total = [0]
    done = [0]

    def tick(n: int) -> None:
        done[0] += n
        if progress is not None:
            progress(done[0], total[0])

    # One pass over the bundle: the checks start as soon as its manifest is read and run
    # while the files go to the staging folder (the usual answer is yes); nothing leaves
    # the staging folder before they say so.
    checking: list[Future[HitCheck]] = []
    with ThreadPoolExecutor(1) as pool:

        def room_for(size: int, files: int) -> None:
            # Before the first file is written (the staging folder is made, and empty).
            check_free_space(croot.vllm_root, size, files, f"unpacking {path.name}")
            total[0] = size

        def start_checks(man: BundleManifest) -> None:
            checking.append(pool.submit(_check, man.entries, man.packed_on, vllm_args,
                                        croot.vllm_root, python, usage))

        try:
            with terminate_as_exit(), _new_folders_undone(croot.vllm_root) as kept, \
                    Staging(croot.vllm_root) as st:
                m = extract(path, st, tick, on_manifest=start_checks, on_head=judge,
                            on_sizes=room_for)
                check = checking[0].result()
                # The key proof reads what the extraction did not by forked processes
                # where no thread is left (frame_read's early flush may still run).
                pool.shutdown(wait=True)
                if not check.would_hit and not force:
                    return UnpackResult(path, croot.vllm_root, m, check, (), False, True,
                                        time.perf_counter() - t0, signature[0])
                sig = signature[0]
                proofs = prove_records(st.path, croot.vllm_root, m.entries,
                                       inductor=check.inductor_reprs,
                                       vllm_version=check.vllm_version,
                                       trust=_signed_by({e.key: sig for e in m.entries}),
                                       read_before=st.read)
                placed = place_entries(st, m.entries, m.extras, proofs=proofs, force=force)
                kept[0] = True
                shown = "<stdin>" if str(path) == "/dev/stdin" else str(path.resolve())
                _record(croot.vllm_root, placed, f"bundle {shown}", signature[0],
                        {e.key: m.provenance for e in m.entries})
        except OSError as exc:
            for c in checking:
                c.cancel()
            raise FleetError(f"unpacking into {croot.vllm_root} failed: "
                             f"{exc.strerror or exc}: nothing placed") from None
    return UnpackResult(path, croot.vllm_root, m, check, placed, False, False,
                        time.perf_counter() - t0, signature[0])


def _signed_by(judged: Mapping[str, SignatureCheck | None]
               ) -> Callable[[EntryRecord], str | None]:
    """The trust hook of the key proof (:data:`.key_proof.TrustHook`): who signed an entry,
    by key, where a trust policy judged its signature trusted (an unpack or pull without a
    policy vouches for nothing)."""
    def hook(rec: EntryRecord) -> str | None:
        got = judged.get(rec.key)
        return (got.signer or got.fingerprint or "?") if got is not None and got.trusted \
            else None
    return hook


def _record(vllm_root: Path, placed: Sequence[Placement], source: str,
            signature: SignatureCheck | None, provenance: Mapping[str, Mapping[str, Any]]
            ) -> None:
    """The placement record of each entry placed (:mod:`.placed`)."""
    from vllm_cache_tools.fleet.placed import record_placements, signature_json

    record_placements(vllm_root, [(p.layout, p.key) for p in placed if p.action == "placed"],
                      source=source, signature=signature_json(signature),
                      provenance=provenance)


def push(refs: Sequence[str], url: str, *, root: str | os.PathLike[str] | None = None,
         model: str | None = None, filter_expr: str | None = None, force: bool = False,
         workers: int = DEFAULT_WORKERS, storage_options: Mapping[str, Any] | None = None,
         progress: BytesProgress | None = None,
         sign: str | os.PathLike[str] | None = None) -> PushResult:
    """Push entries to a remote store (see :mod:`.remote`). ``sign``: an OpenSSH ed25519
    private key file; each index object is signed (:mod:`.trust`)."""
    key = None
    if sign is not None:
        from vllm_cache_tools.fleet.trust import load_signing_key

        key = load_signing_key(sign)
    return _push(root, refs, url, model=model, filter_expr=filter_expr, force=force,
                 workers=workers, storage_options=storage_options, progress=progress,
                 signing_key=key)


def pull(url: str, refs: Sequence[str] = (), *, root: str | os.PathLike[str] | None = None,
         vllm_args: Sequence[str] | None = None, if_hit: bool = False, force: bool = False,
         check_only: bool = False, python: str | None = None, usage: str = "serve",
         workers: int = DEFAULT_WORKERS, storage_options: Mapping[str, Any] | None = None,
         progress: BytesProgress | None = None, trust: TrustPolicy | None = None
         ) -> PullResult:
    """Fetch entries from a store into a root, checked like :func:`unpack`. ``if_hit``
    (needs ``vllm_args``): only the entries this host's next start will use, and nothing when
    it would not hit. ``trust``: each selected entry's index object must carry a signature
    that verifies, by a key the policy allows now; the others are refused placements
    (nothing of them fetched) and the rest goes on without them."""
    t0 = time.perf_counter()
    if if_hit and not vllm_args:
        raise FleetError("--if-hit needs the vLLM arguments after --")
    croot = resolve_root(root)
    # This host is looked up (environment probe, memoized predict) while the store's
    # client is imported and its index objects listed: neither needs the other.
    pool = ThreadPoolExecutor(1)
    looking = pool.submit(look_here, vllm_args, croot.vllm_root, python=python, usage=usage)
    try:
        store = Store(url, storage_options)
        # Every index object names the store format and version (read_index checks them):
        # the marker is read only to say why there is nothing (one round trip less).
        listing = store.listing(workers)
        entries = list(listing.entries)
        if not entries and not listing.skipped:
            store.ensure_marker(create=False)
            raise FleetError(f"{store.url}: the store holds no entries")
        here = looking.result()
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    skipped = tuple(x.warning for x in listing.skipped)
    chosen = with_linked(entries, match_refs(entries, refs, listing.skipped) if refs
                         else entries)
    if not chosen:
        raise FleetError(f"{store.url}: no usable entries ({len(skipped)} index objects "
                         f"skipped; the first: {listing.skipped[0].reason})")
    judged: dict[str, SignatureCheck] | None = None
    untrusted: tuple[Placement, ...] = ()
    if trust is not None:
        chosen, judged, untrusted = _trusted_only(store, chosen, trust, croot.vllm_root,
                                                  workers)
        if not chosen:
            return PullResult(store.url, croot.vllm_root, None, untrusted, (), 0, check_only,
                              False, time.perf_counter() - t0, None, skipped, judged)
    packed_on = chosen[0].packed_on
    check = _check([e.record for e in chosen], packed_on, vllm_args, croot.vllm_root,
                   python, usage, here)
    if if_hit and check.verdict == "hit":
        chosen = [e for e in chosen if e.record.key in check.used]
    records = tuple(e.record for e in chosen)
    fp = footprint(records, [x for e in chosen for x in e.extras])
    refused = not check.would_hit and not force
    if check_only or refused or not chosen:
        return PullResult(store.url, croot.vllm_root, check, untrusted, records, 0, check_only,
                          refused and not check_only, time.perf_counter() - t0, fp, skipped,
                          judged)
    from vllm_cache_tools.fleet.key_proof import prove_records
    from vllm_cache_tools.fleet.place import (
        Placement,
        Staging,
        identical_in_place,
        place_entries,
    )

    # Entries already here with the same files (a pod's persistent cache volume) are not
    # downloaded again: checked by sizes, then digests, before any byte moves.
    same = identical_in_place(croot.vllm_root, records)
    kept_same = tuple(Placement(r.key, r.layout, display_path(croot.vllm_root / r.path),
                                "identical", "already there with the same files (not downloaded)")
                      for r in records if r.key in same)
    todo = [e for e in chosen if e.record.key not in same]
    if not todo:
        return PullResult(store.url, croot.vllm_root, check, untrusted + kept_same, records,
                          0, False, False, time.perf_counter() - t0, fp, skipped, judged)
    nbytes, nfiles = download_size(todo)
    check_free_space(croot.vllm_root, nbytes, nfiles, f"pulling from {store.url}")
    try:
        with terminate_as_exit(), _new_folders_undone(croot.vllm_root) as kept, \
                Staging(croot.vllm_root) as st:
            got = download(store, todo, st, workers=workers, progress=progress)
            extras = {x.path: x for e in todo for x in e.extras}
            recs = tuple(e.record for e in todo)
            proofs = prove_records(st.path, croot.vllm_root, recs,
                                   inductor=check.inductor_reprs,
                                   vllm_version=check.vllm_version,
                                   trust=_signed_by(judged or {}))
            placed = place_entries(st, recs, extras.values(), proofs=proofs, force=force)
            kept[0] = True
    except OSError as exc:
        raise FleetError(f"pulling into {croot.vllm_root} failed: {exc.strerror or exc}: "
                         "nothing placed") from None
    by_key = {e.record.key: e for e in todo}
    for p in placed:
        if p.action == "placed":
            _record(croot.vllm_root, [p], store.url,
                    judged.get(p.key) if judged is not None else None,
                    {p.key: by_key[p.key].provenance})
    order = {r.key: i for i, r in enumerate(records)}
    placements = untrusted + tuple(sorted(kept_same + placed,
                                          key=lambda p: order.get(p.key, 0)))
    return PullResult(store.url, croot.vllm_root, check, placements, records, got, False, False,
                      time.perf_counter() - t0, fp, skipped, judged)


def _trusted_only(store: Store, chosen: Sequence[Any], trust: TrustPolicy, vllm_root: Path,
                  workers: int) -> tuple[list[Any], dict[str, SignatureCheck],
                                         tuple[Placement, ...]]:
    """The entries whose signatures the policy trusts; every judgement by key; a refused
    placement (with its reason) for each of the others."""
    from vllm_cache_tools.fleet.place import Placement
    from vllm_cache_tools.fleet.store_trust import judge_entries

    got = judge_entries(store, chosen, trust, workers)
    judged = {k: v for (_, k), v in got.items()}
    keep = [e for e in chosen if got[(e.record.layout, e.record.key)].trusted]
    refused = tuple(Placement(e.record.key, e.record.layout,
                              display_path(vllm_root / e.record.path), "refused",
                              got[(e.record.layout, e.record.key)].reason)
                    for e in chosen if not got[(e.record.layout, e.record.key)].trusted)
    return keep, judged, refused


__all__ = ["PackResult", "PullResult", "UnpackResult", "pack", "pull", "push", "unpack"]
