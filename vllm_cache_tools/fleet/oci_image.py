"""``pack --format oci-image -o DIR``: an OCI image layout whose one layer is the bundle, so
the image's filesystem IS a vLLM cache root (for Kubernetes ``ImageVolume`` mounts).

A bundle (:mod:`.bundle`) is a tar of the entries at their paths relative to the vLLM root,
its manifest (and signature) first, compressed with zstd: exactly an OCI layer of media
type ``application/vnd.oci.image.layer.v1.tar+zstd``. The layout written::

    DIR/oci-layout                      {"imageLayoutVersion": "1.0.0"}
    DIR/index.json                      one image manifest, ref name ``latest``
    DIR/blobs/sha256/<bundle sha256>    the layer (the bundle's bytes)
    DIR/blobs/sha256/<config sha256>    the image config: os linux, this host's architecture
                                        (a cache is for the hardware it was built on), the
                                        layer's diff_id (the sha256 of the tar itself)
    DIR/blobs/sha256/<manifest sha256>  the image manifest (annotations: keys, versions)

``skopeo copy oci:DIR docker://HOST/REPO:TAG`` pushes it; a runtime that unpacks it gives a
folder with ``torch_compile_cache/`` and the bundle's manifest (and ``.sig``) at its top, so
``vllm-cache verify --root`` and ``ssh-keygen -Y verify`` check the mounted copy; and the
layer blob is a bundle ``vllm-cache unpack --trust`` takes. The same entries give the same
layout bytes (unsigned; a signature carries the time)."""

from __future__ import annotations

import hashlib
import json
import os
import platform
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_cache_tools.fleet.errors import FleetError
from vllm_cache_tools.fleet.records import EntryRecord

MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar+zstd"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
REF_NAME = "latest"
_ANN = "io.github.vllm-cache-tools."
_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64",
         "ppc64le": "ppc64le", "s390x": "s390x"}


@dataclass(frozen=True)
class ImageLayout:
    path: Path
    manifest_digest: str
    """``sha256:...`` of the image manifest: what a registry names the pushed image by."""
    layer_digest: str
    diff_id: str
    architecture: str


def staging_blob(out_dir: Path) -> Path:
    """Where the bundle is written before it is named by its digest."""
    return out_dir / "blobs" / "sha256" / ".layer.partial"


def new_layout_dir(out_dir: Path) -> None:
    """Make ``out_dir`` (it must not exist, or be an empty folder: an image layout is written
    whole, never merged into another) and its ``blobs/sha256``."""
    try:
        if out_dir.is_symlink() or (out_dir.exists() and (
                not out_dir.is_dir() or any(out_dir.iterdir()))):
            raise FleetError(f"{out_dir}: exists and is not an empty folder (an OCI image "
                             "layout is written into a new folder)")
        (out_dir / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise FleetError(f"cannot write {out_dir}: {exc.strerror or exc}") from None


def _put(blobs: Path, data: bytes) -> dict[str, Any]:
    sha = hashlib.sha256(data).hexdigest()
    with open(blobs / sha, "xb") as f:
        f.write(data)
    return {"digest": f"sha256:{sha}", "size": len(data)}


def _json(doc: Any) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def finish_layout(out_dir: Path, layer_sha256: str, layer_size: int, tar_sha256: str,
                  records: Sequence[EntryRecord]) -> ImageLayout:
    """Name the staged layer by its digest, then write the config, the manifest, the index
    and the ``oci-layout`` marker (last: a layout without it is not one)."""
    blobs = out_dir / "blobs" / "sha256"
    arch = _ARCH.get(platform.machine().lower(), platform.machine().lower() or "amd64")
    try:
        os.replace(staging_blob(out_dir), blobs / layer_sha256)
        config = _put(blobs, _json({
            "architecture": arch, "os": "linux", "config": {},
            "rootfs": {"type": "layers", "diff_ids": [f"sha256:{tar_sha256}"]}}))
        versions: dict[str, str] = {}
        for r in records:
            for k in ("vllm", "torch", "triton", "cuda"):
                if r.versions.get(k):
                    versions.setdefault(k, str(r.versions[k]))
        ann = {_ANN + "keys": ",".join(sorted(f"{r.layout}:{r.key}" for r in records)),
               "org.opencontainers.image.title": "vLLM compile cache root",
               **{_ANN + k: v for k, v in sorted(versions.items())}}
        manifest_bytes = _json({
            "schemaVersion": 2, "mediaType": MEDIA_MANIFEST,
            "config": {"mediaType": MEDIA_CONFIG, **config},
            "layers": [{"mediaType": MEDIA_LAYER, "digest": f"sha256:{layer_sha256}",
                        "size": layer_size}],
            "annotations": ann})
        manifest = _put(blobs, manifest_bytes)
        (out_dir / "index.json").write_bytes(_json({
            "schemaVersion": 2, "mediaType": MEDIA_INDEX,
            "manifests": [{"mediaType": MEDIA_MANIFEST, **manifest,
                           "platform": {"architecture": arch, "os": "linux"},
                           "annotations": {"org.opencontainers.image.ref.name": REF_NAME}}]}))
        (out_dir / "oci-layout").write_bytes(_json({"imageLayoutVersion": "1.0.0"}))
    except OSError as exc:
        raise FleetError(f"cannot write {out_dir}: {exc.strerror or exc}") from None
    return ImageLayout(out_dir, str(manifest["digest"]), f"sha256:{layer_sha256}",
                       f"sha256:{tar_sha256}", arch)


__all__ = ["MEDIA_LAYER", "ImageLayout", "finish_layout", "new_layout_dir", "staging_blob"]
