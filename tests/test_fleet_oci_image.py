"""``pack --format oci-image``: an OCI image whose filesystem is a cache root (Kubernetes
``ImageVolume``), proven with the standard tools: skopeo pushes the layout to a real registry
(Debian's docker-registry on loopback) and copies it back to an ``oci:`` layout, the layer is
unpacked as a runtime unpacks it, ``vllm-cache verify`` checks the result and ``ssh-keygen -Y
verify`` its signature; the layer itself is a bundle ``unpack --trust`` places. The YAML
recipes of docs/kubernetes.md parse."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import zstandard

from tests.conftest import run_cli
from tests.fleet_support import tree_digests
from tests.oci_support import Registry, _needs
from tests.oci_support import registry as registry

SAMPLE = Path(__file__).resolve().parent.parent / "examples" / "sample_cache"
DOCS = Path(__file__).resolve().parent.parent / "docs"


def _keys(root: Path) -> dict[str, str]:
    doc = json.loads(run_cli("ls", "--root", str(root), "--json").stdout)
    return {e["key"]: e["path"] for e in doc["entries"]}


def _skopeo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["skopeo", *args], capture_output=True, text=True, timeout=120)


def _blob(layout: Path, digest: str) -> Path:
    return layout / "blobs" / "sha256" / digest.removeprefix("sha256:")


def _unpack_layer(layout: Path, into: Path) -> dict[str, object]:
    """What a runtime does with the image: index -> manifest -> the layer, decompressed as
    its media type says and untarred (tarfile's ``data`` filter: no links out, no devices)."""
    index = json.loads((layout / "index.json").read_text())
    manifest = json.loads(_blob(layout, index["manifests"][0]["digest"]).read_text())
    (layer,) = manifest["layers"]
    assert layer["mediaType"] == "application/vnd.oci.image.layer.v1.tar+zstd"
    into.mkdir()
    with _blob(layout, layer["digest"]).open("rb") as f, \
            zstandard.ZstdDecompressor().stream_reader(f) as z, \
            tarfile.open(fileobj=z, mode="r|") as tar:
        tar.extractall(into, filter="data")
    return dict(manifest)


def test_image_layout_through_a_registry_is_a_cache_root(registry: Registry,
                                                         tmp_path: Path) -> None:
    _needs("skopeo", "ssh-keygen")
    sample = tmp_path / "sample"
    shutil.copytree(SAMPLE, sample)
    keys = _keys(sample)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "ci")],
                   check=True)
    allowed = tmp_path / "allowed_signers"
    allowed.write_text('ci@example.com namespaces="vllm-cache" ' + " ".join(
        (tmp_path / "ci.pub").read_text().split()[:2]) + "\n")

    image = tmp_path / "image"
    res = run_cli("pack", "--root", str(sample), *keys, "--format", "oci-image", "-o",
                  str(image), "--sign", str(tmp_path / "ci"), "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)["oci_image"]
    assert json.loads((image / "oci-layout").read_text()) == {"imageLayoutVersion": "1.0.0"}
    assert _blob(image, doc["layer_digest"]).is_file()

    ref = f"docker://{registry.host}/caches/tiny-llama:v1"
    cp = _skopeo("copy", "--dest-tls-verify=false", f"oci:{image}", ref)
    assert cp.returncode == 0, cp.stderr
    raw = _skopeo("inspect", "--raw", "--tls-verify=false", ref)
    assert raw.returncode == 0, raw.stderr
    assert raw.stdout.encode() == _blob(image, doc["manifest_digest"]).read_bytes()
    seen = json.loads(_skopeo("inspect", "--tls-verify=false", ref).stdout)
    assert seen["Os"] == "linux" and seen["Layers"] == [doc["layer_digest"]]

    back = tmp_path / "back"
    cp = _skopeo("copy", "--src-tls-verify=false", ref, f"oci:{back}:v1")
    assert cp.returncode == 0, cp.stderr
    mounted = tmp_path / "mounted"
    manifest = _unpack_layer(back, mounted)
    assert manifest["annotations"]["io.github.vllm-cache-tools.keys"]  # type: ignore[index]
    for path in keys.values():
        rel = Path(path).relative_to(sample)
        assert tree_digests(mounted / rel) == tree_digests(sample / rel), rel
    res = run_cli("verify", "--root", str(mounted), "--json")
    assert res.returncode == 0, res.stdout
    checked = json.loads(res.stdout)
    assert checked["checked"] == len(keys)
    assert not [p for p in checked["problems"] if not p.get("note")]
    # The signature travels in the image: the mounted copy checks with OpenSSH alone.
    with (mounted / "vllm-cache-bundle.json").open("rb") as f:
        ok = subprocess.run(["ssh-keygen", "-Y", "verify", "-f", str(allowed), "-I",
                             "ci@example.com", "-n", "vllm-cache", "-s",
                             str(mounted / "vllm-cache-bundle.json.sig")], stdin=f,
                            capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    # The layer blob is a bundle: unpack --trust places it (copy-on-first-write's tool).
    res = run_cli("unpack", str(_blob(back, doc["layer_digest"])), "--root",
                  str(tmp_path / "pod"), "--trust", str(allowed), "--json")
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr
    assert {p["action"] for p in json.loads(res.stdout)["placements"]} == {"placed"}


def test_image_layout_is_deterministic_and_refuses_bad_targets(tmp_path: Path) -> None:
    sample = tmp_path / "sample"
    shutil.copytree(SAMPLE, sample)
    keys = list(_keys(sample))
    digests = []
    for name in ("a", "b"):
        res = run_cli("pack", "--root", str(sample), *keys, "--format", "oci-image", "-o",
                      str(tmp_path / name), "--json")
        assert res.returncode == 0, res.stderr
        digests.append(json.loads(res.stdout)["oci_image"]["manifest_digest"])
    assert digests[0] == digests[1]
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("keep")
    for out, why in ((tmp_path / "a", "not an empty folder"),
                     (tmp_path / "taken", "not an empty folder"),
                     (Path("-"), "give -o DIR")):
        res = run_cli("pack", "--root", str(sample), *keys, "--format", "oci-image", "-o",
                      str(out))
        assert res.returncode == 2, res.stdout
        assert why in res.stderr and res.stderr.count("\n") == 1, res.stderr
    assert (tmp_path / "taken" / "x").read_text() == "keep"
    res = run_cli("pack", "--root", str(sample), *keys, "--format", "zip", "-o",
                  str(tmp_path / "z"))
    assert res.returncode == 2 and "bundle or oci-image" in res.stderr


def test_kubernetes_recipes_parse() -> None:
    """Every YAML block of docs/kubernetes.md is valid YAML with the fields the recipes
    rely on (an initContainer running pull --if-hit --trust; an image volume)."""
    import yaml
    text = (DOCS / "kubernetes.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", text, re.S)
    assert len(blocks) >= 2
    docs = [d for b in blocks for d in yaml.safe_load_all(b) if d]
    kinds = {d["kind"] for d in docs}
    assert "Pod" in kinds or "Deployment" in kinds

    def pod_specs() -> list[dict[str, object]]:
        out = []
        for d in docs:
            if d["kind"] == "Pod":
                out.append(d["spec"])
            elif d["kind"] == "Deployment":
                out.append(d["spec"]["template"]["spec"])
        return out

    specs = pod_specs()
    inits = [c for s in specs for c in s.get("initContainers", [])]  # type: ignore[attr-defined]
    cmd = [" ".join(c.get("command", []) + c.get("args", [])) for c in inits]
    assert any("pull" in c and "--if-hit" in c and "--trust" in c and "oci://" in c
               for c in cmd), cmd
    vols = [v for s in specs for v in s.get("volumes", [])]  # type: ignore[attr-defined]
    assert any("image" in v and v["image"].get("reference") for v in vols), vols
