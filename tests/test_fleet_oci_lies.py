"""A registry that lies (issue 28): a real registry on loopback (Debian's docker-registry) with
a loopback proxy in front that rewrites what it serves (tests/oci_support.py
:class:`LyingRegistry`), and artifacts of others written into the real registry over HTTP.
Each lie: ``pull``, ``pull --if-hit``, ``ls URL`` and ``prune-remote`` give one line and a
non-zero exit where the lie reaches what they read, place nothing, end within the timeout,
and never delete what is not ours."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.conftest import run_cli
from tests.oci_support import LyingRegistry, Registry
from tests.oci_support import registry as registry
from tests.realvllm.harness import (
    ScenarioRun,
    model_lock,
    restore_pristine_sources,
    start_env,
    venv_python,
)
from vllm_cache_tools.fleet.errors import StoreError

SAMPLE = Path(__file__).resolve().parent.parent / "examples" / "sample_cache"


def _keys(root: Path) -> dict[str, str]:
    doc = json.loads(run_cli("ls", "--root", str(root), "--json").stdout)
    return {e["key"]: e["layout"] for e in doc["entries"]}


@pytest.fixture(scope="module")
def pushed(registry: Registry, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The sample's entries pushed once to ``lies/sample`` with the tag ``v1``."""
    src = tmp_path_factory.mktemp("lies") / "sample"
    shutil.copytree(SAMPLE, src)
    res = run_cli("push", "--root", str(src), *_keys(src), registry.url("lies/sample") + ":v1")
    assert res.returncode == 0, res.stderr
    return "lies/sample"


@pytest.fixture
def liar(request: pytest.FixtureRequest, registry: Registry, pushed: str
         ) -> Iterator[LyingRegistry]:
    proxy = LyingRegistry(registry, request.param)
    try:
        yield proxy
    finally:
        proxy.stop()


def _one_line_refusal(res: object, *, seconds: float, t0: float, limit: float = 30.0) -> None:
    assert res.returncode != 0, (res.stdout, res.stderr)  # type: ignore[attr-defined]
    err = res.stderr  # type: ignore[attr-defined]
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert seconds - t0 < limit, seconds - t0


def _nothing_placed(root: Path) -> None:
    if root.exists():
        assert not [p for p in root.rglob("*") if p.is_file()], sorted(root.rglob("*"))


def _tags(registry: Registry, repo: str) -> set[str]:
    r = requests.get(f"http://{registry.host}/v2/{repo}/tags/list", timeout=10)
    return set(r.json().get("tags") or [])


PULL_LIES = {
    "index-sizes": "more bytes than the",
    "index-digests": "sha256 differs from the manifest|more bytes than the|bytes of",
    "config-size": "has other bytes than its descriptor says",
    "blob-bytes": "sha256 differs from the manifest",
    "blob-longer": "more bytes than the",
}
"""What ``pull`` says of each lie (one line, exit 2, nothing placed). Through a tag, the
manifests the lie rewrites are named by digest in the tag's index: ``pull URL:TAG`` refuses
them for :data:`BY_DIGEST` before any index object is read."""
BY_DIGEST = "has other bytes than its digest says"
REWRITES_MANIFESTS = {"index-sizes", "index-digests", "config-size"}
SEEN_BY_LS = {"config-size"}
"""The lies ``ls URL`` and ``prune-remote`` read (the others are in blobs, or in index objects
that agree with their manifests: only a pull, which checks every byte, can see them)."""


@pytest.mark.parametrize("liar", sorted(PULL_LIES), indirect=True)
def test_pull_from_a_lying_registry_places_nothing(liar: LyingRegistry, tmp_path: Path
                                                   ) -> None:
    root = tmp_path / "pod"
    before = _tags(liar.upstream, "lies/sample")
    for tag in ("", ":v1"):
        url = liar.url("lies/sample") + tag
        t0 = time.monotonic()
        res = run_cli("pull", url, "--root", str(root), "--force")
        _one_line_refusal(res, seconds=time.monotonic(), t0=t0)
        why = BY_DIGEST if tag and liar.mode in REWRITES_MANIFESTS else PULL_LIES[liar.mode]
        assert res.returncode == 2 and re.search(why, res.stderr), res.stderr
        _nothing_placed(root)
    url = liar.url("lies/sample")
    for args in (["ls", url], ["prune-remote", url, "--older-than", "1000d", "--yes"]):
        t0 = time.monotonic()
        res = run_cli(*args)
        if liar.mode in SEEN_BY_LS:
            _one_line_refusal(res, seconds=time.monotonic(), t0=t0)
            assert re.search(PULL_LIES[liar.mode], res.stderr), res.stderr
        else:
            assert res.returncode == 0, res.stderr
    assert _tags(liar.upstream, "lies/sample") == before


@pytest.mark.parametrize("liar", ["drip"], indirect=True)
def test_a_blob_that_drips_is_given_up_in_bounded_time(
        liar: LyingRegistry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each byte comes well within the read timeout, so only the rate rule ends it: with a
    1 s timeout (``TIMEOUT[1]``) the pull gives up after ~1 s, not after 2^40 bytes."""
    from vllm_cache_tools.fleet import api, oci

    monkeypatch.setattr(oci, "TIMEOUT", (1.0, 1.0))
    root = tmp_path / "pod"
    t0 = time.monotonic()
    with pytest.raises(StoreError, match=r"came at under 64 KiB/s .*given up"):
        api.pull(liar.url("lies/sample"), root=root, force=True)
    assert time.monotonic() - t0 < 15
    _nothing_placed(root)


@pytest.mark.hostile
@pytest.mark.parametrize("liar", ["drip"], indirect=True)
def test_a_blob_that_drips_cli_default_timeout(liar: LyingRegistry, tmp_path: Path) -> None:
    """The same through the CLI with the default timeout (60 s: a hostile test)."""
    root = tmp_path / "pod"
    t0 = time.monotonic()
    res = run_cli("pull", liar.url("lies/sample"), "--root", str(root), "--force")
    _one_line_refusal(res, seconds=time.monotonic(), t0=t0, limit=120)
    assert "given up" in res.stderr and res.returncode == 2
    _nothing_placed(root)


@pytest.mark.parametrize("liar", ["huge-index", "foreign-tag"], indirect=True)
def test_a_tag_that_is_no_index_of_ours(liar: LyingRegistry, tmp_path: Path) -> None:
    """The URL's tag an endless body, or an image manifest of someone else: pull, ls and
    prune-remote refuse in one line, nothing placed, nothing removed."""
    url = liar.url("lies/sample") + ":v1"
    why = {"huge-index": "over 32 MiB (not read)",
           "foreign-tag": "tag v1 is not an index of vllm-cache entries"}[liar.mode]
    before = _tags(liar.upstream, "lies/sample")
    root = tmp_path / "pod"
    for args in (["pull", url, "--root", str(root), "--force"],
                 ["pull", url, "--root", str(root), "--if-hit", "--", "/models/m"],
                 ["ls", url], ["ls", url, "--json"],
                 ["prune-remote", url, "--older-than", "0s", "--yes"]):
        t0 = time.monotonic()
        res = run_cli(*args)
        _one_line_refusal(res, seconds=time.monotonic(), t0=t0)
        assert why in res.stderr, (args, res.stderr)
    _nothing_placed(root)
    assert _tags(liar.upstream, "lies/sample") == before


def _put_foreign(registry: Registry, repo: str, tag: str, media: str,
                 artifact: str | None) -> str:
    """A manifest of someone else written straight into the real registry (its config and
    one layer uploaded first); its digest."""
    api = f"http://{registry.host}/v2/{repo}"
    descs = []
    for data in (b'{"architecture":"amd64","os":"linux","rootfs":{"type":"layers",'
                 b'"diff_ids":[]}}', b"someone else's layer"):
        sha = hashlib.sha256(data).hexdigest()
        loc = requests.post(f"{api}/blobs/uploads/", timeout=10).headers["Location"]
        sep = "&" if "?" in loc else "?"
        loc = loc if "://" in loc else f"http://{registry.host}{loc}"
        r = requests.put(f"{loc}{sep}digest=sha256:{sha}", data=data, timeout=10)
        assert r.status_code == 201, r.text
        descs.append({"digest": f"sha256:{sha}", "size": len(data)})
    cfg_media = ("application/vnd.docker.container.image.v1+json" if "docker" in media
                 else "application/vnd.oci.image.config.v1+json")
    m: dict[str, object] = {
        "schemaVersion": 2, "mediaType": media,
        "config": {"mediaType": cfg_media, **descs[0]},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", **descs[1]}]}
    if artifact:
        m["artifactType"] = artifact
    body = json.dumps(m).encode()
    r = requests.put(f"{api}/manifests/{tag}", data=body, timeout=10,
                     headers={"Content-Type": media})
    assert r.status_code == 201, r.text
    return "sha256:" + hashlib.sha256(body).hexdigest()


def test_artifacts_of_others_under_our_tag_names(registry: Registry, pushed: str,
                                                 tmp_path: Path) -> None:
    """Tags named as ours (``aot-<key>``, ``backend-<key>``) naming an image manifest
    (docker's, OCI's) or an artifact of another type, and a plain image tag beside them:
    ls URL and pull say so and go on with ours; prune-remote removes only ours, never one
    of theirs."""
    repo = "lies/mixed"
    src = tmp_path / "sample"
    shutil.copytree(SAMPLE, src)
    keys = _keys(src)
    assert run_cli("push", "--root", str(src), *keys, registry.url(repo)).returncode == 0
    foreign = {
        "aot-" + "f" * 64: _put_foreign(
            registry, repo, "aot-" + "f" * 64,
            "application/vnd.docker.distribution.manifest.v2+json", None),
        "backend-ffffffffff": _put_foreign(
            registry, repo, "backend-ffffffffff", "application/vnd.oci.image.manifest.v1+json",
            "application/vnd.example.sbom.v1+json"),
        "latest": _put_foreign(registry, repo, "latest",
                               "application/vnd.oci.image.manifest.v1+json", None),
    }
    url = registry.url(repo)
    res = run_cli("ls", url, "--json")
    assert res.returncode == 0, res.stderr
    assert {e["key"] for e in json.loads(res.stdout)["entries"]} == set(keys)
    assert "f" * 12 in res.stderr or "ffffffffff" in res.stderr, res.stderr
    root = tmp_path / "pod"
    res = run_cli("pull", url, "--root", str(root), "--force", "--json")
    assert res.returncode == 0, res.stderr
    placed = {p["key"] for p in json.loads(res.stdout)["placements"] if p["action"] == "placed"}
    assert placed == set(keys)
    res = run_cli("prune-remote", url, "--older-than", "0s", "--yes", "--json")
    assert res.returncode == 0, res.stderr
    assert set(json.loads(res.stdout)["removed"]) == set(keys)
    left = _tags(registry, repo)
    assert set(foreign) <= left, left
    for tag, digest in foreign.items():
        r = requests.head(f"http://{registry.host}/v2/{repo}/manifests/{tag}", timeout=10,
                          headers={"Accept": "application/vnd.oci.image.manifest.v1+json, "
                                   "application/vnd.docker.distribution.manifest.v2+json"})
        assert r.status_code == 200 and r.headers["Docker-Content-Digest"] == digest, tag


@pytest.mark.realvllm
def test_pull_if_hit_from_a_lying_registry(registry: Registry, real_compile: ScenarioRun,
                                           tmp_path: Path) -> None:
    """``pull --if-hit`` decided by the real vLLM of the harness (a hit), then the blobs
    lie: refused in one line, nothing placed (the first decision probes, the others are
    memoized)."""
    start = real_compile.scenario.starts[0]
    src = real_compile.before(1)
    keys = sorted(_keys(src))
    repo = "lies/if-hit"
    assert run_cli("push", "--root", str(src), *keys, registry.url(repo)).returncode == 0
    for mode in ("blob-bytes", "blob-longer", "index-sizes"):
        liar = LyingRegistry(registry, mode)
        root = tmp_path / mode
        try:
            with model_lock():
                restore_pristine_sources()
                t0 = time.monotonic()
                res = run_cli("pull", liar.url(repo), "--root", str(root), "--if-hit",
                              "--python", str(venv_python()), "--usage", "llm", "--",
                              *start.serve_args(), env=start_env(root, start), inherit=False)
        finally:
            liar.stop()
        _one_line_refusal(res, seconds=time.monotonic(), t0=t0, limit=600)
        assert re.search(PULL_LIES[mode], res.stderr), res.stderr
        assert "nothing placed" in res.stderr, res.stderr
        _nothing_placed(root / "torch_compile_cache")


def test_a_token_service_that_drips(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A registry whose Bearer challenge names a token service that answers one byte per
    0.2 s: given up after ``TIMEOUT[1]`` (1 s here), one line, no secret in it."""
    import http.server
    import threading

    from tests.oci_support import docker_config
    from vllm_cache_tools.fleet import oci
    from vllm_cache_tools.fleet.remote import Store

    monkeypatch.setattr(oci, "TIMEOUT", (1.0, 1.0))
    stop = threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.startswith("/v2/"):
                self.send_response(401)
                self.send_header("WWW-Authenticate", f'Bearer realm="http://127.0.0.1:'
                                 f'{port}/token",service="x",scope="repository:x:pull"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Length", str(1 << 30))
            self.end_headers()
            while not stop.wait(0.2):
                try:
                    self.wfile.write(b" ")
                    self.wfile.flush()
                except OSError:
                    return

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("REGISTRY_AUTH_FILE", str(docker_config(
        tmp_path / "auth", f"127.0.0.1:{port}")))
    try:
        t0 = time.monotonic()
        with pytest.raises(StoreError, match="token answer came at under") as exc:
            Store(f"oci://127.0.0.1:{port}/x").listing()
        assert time.monotonic() - t0 < 15
        assert "pw-" not in str(exc.value)
    finally:
        stop.set()
        server.shutdown()
        server.server_close()


class _HeaderDrip:
    """A loopback server that answers every request by sending its status line and headers
    one byte every ``gap`` seconds, never ending them (each byte well within the read
    timeout, so only a deadline on the whole header block ends the wait)."""

    def __init__(self, gap: float) -> None:
        import http.server
        import threading

        stop = self.stop_event = threading.Event()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Drip: "
                i = 0
                while not stop.wait(gap if i >= len(head) else 0):
                    try:
                        self.wfile.write(head[i:i + 1] if i < len(head) else b"x")
                        self.wfile.flush()
                    except OSError:
                        return
                    i += 1

            do_HEAD = do_GET

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.stop_event.set()
        self.server.shutdown()
        self.server.server_close()


def test_a_registry_that_drips_its_headers(monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path) -> None:
    """Headers one byte per 0.3 s (each byte within the 1 s read timeout set here): the
    answer's headers must all come within the read timeout, so the pull is given up after
    ~1 s, one error, nothing placed (``oci_http``: the real session, a short timeout)."""
    from vllm_cache_tools.fleet import api, oci

    monkeypatch.setattr(oci, "TIMEOUT", (1.0, 1.0))
    drip = _HeaderDrip(0.3)
    root = tmp_path / "pod"
    try:
        t0 = time.monotonic()
        with pytest.raises(StoreError, match=r"did not answer within 1 s"):
            api.pull(f"oci://127.0.0.1:{drip.port}/x", root=root, force=True)
        assert time.monotonic() - t0 < 10
    finally:
        drip.close()
    _nothing_placed(root)


@pytest.mark.hostile
def test_a_registry_that_drips_its_headers_cli(tmp_path: Path) -> None:
    """The same through the CLI with the default read timeout (60 s) and one byte per
    second: one line, exit 2, within twice the timeout."""
    drip = _HeaderDrip(1.0)
    root = tmp_path / "pod"
    try:
        t0 = time.monotonic()
        res = run_cli("pull", f"oci://127.0.0.1:{drip.port}/x", "--root", str(root),
                      "--force")
        _one_line_refusal(res, seconds=time.monotonic(), t0=t0, limit=130)
        assert res.returncode == 2 and "did not answer within 60 s" in res.stderr, res.stderr
    finally:
        drip.close()
    _nothing_placed(root)
