"""``oci://`` stores against a real OCI registry on loopback (Debian's docker-registry, CNCF
distribution 2.8; tests/oci_support.py), with skopeo as the independent client: push, ls URL,
pull (bytes identical), a tag that pins what was pushed, skopeo copy to another repository
then pull from there, prune-remote, basic auth from a docker config, and pull --if-hit with
the real vLLM of the harness."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.fleet_support import tree_digests
from tests.oci_support import PASSWORD, USER, Registry, _needs, docker_config
from tests.oci_support import auth_registry as auth_registry
from tests.oci_support import registry as registry
from tests.oci_support import token_registry as token_registry
from tests.realvllm.harness import (
    ScenarioRun,
    model_lock,
    restore_pristine_sources,
    start_env,
    venv_python,
)
from vllm_cache_tools.fleet.errors import StoreError
from vllm_cache_tools.fleet.oci import ANN, ARTIFACT_ENTRY, OciFileSystem
from vllm_cache_tools.fleet.remote import Store

SAMPLE = Path(__file__).resolve().parent.parent / "examples" / "sample_cache"


@pytest.fixture
def sample(tmp_path: Path) -> Path:
    root = tmp_path / "sample"
    shutil.copytree(SAMPLE, root)
    return root


def _keys(root: Path) -> dict[str, str]:
    doc = json.loads(run_cli("ls", "--root", str(root), "--json").stdout)
    return {e["key"]: e["layout"] for e in doc["entries"]}


def _skopeo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["skopeo", *args], capture_output=True, text=True, timeout=120)


def _same_entries(pulled: dict[str, object], src: Path, dst: Path) -> None:
    selected = pulled["selected"]
    assert isinstance(selected, list) and selected
    for e in selected:
        assert tree_digests(dst / e["path"]) == tree_digests(src / e["path"]), e["key"]


def test_push_ls_pull_round_trip(registry: Registry, sample: Path, tmp_path: Path) -> None:
    keys = _keys(sample)
    url = registry.url("fleet/round-trip") + ":v1"
    res = run_cli("push", "--root", str(sample), *keys, url, "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert {e["action"] for e in doc["entries"]} == {"pushed"}
    assert doc["blobs_uploaded"] > 0 and doc["bytes_uploaded"] <= doc["logical_bytes"]
    human = run_cli("push", "--root", str(sample), *keys, url)
    assert human.returncode == 0, human.stderr
    assert "present" in human.stdout and " 0 uploaded" in human.stdout
    assert f"tag v1: an index of these {len(keys)} entries" in human.stdout

    # ls URL, with the pinning tag and without (the repository's entry tags): the same
    # schema and entries as a local ls.
    for u in (url, registry.url("fleet/round-trip")):
        listed = json.loads(run_cli("ls", u, "--json").stdout)
        assert listed["schema"] == "vllm-cache-tools/ls/1" or listed["schema"].startswith(
            "vllm-cache-tools/ls/")
        assert {e["key"]: e["layout"] for e in listed["entries"]} == keys
    table = run_cli("ls", url)
    assert table.returncode == 0 and "(pushed)" in table.stdout

    root = tmp_path / "pod"
    # --force: without the vLLM arguments the sample's mega AOT key is only linked by its
    # sources (refused by default: tests/test_key_spoofing.py).
    res = run_cli("pull", url, "--root", str(root), "--json", "--force")
    assert res.returncode == 0, res.stderr
    pulled = json.loads(res.stdout)
    assert {p["action"] for p in pulled["placements"]} == {"placed"}
    _same_entries(pulled, sample, root)
    again = json.loads(run_cli("pull", url, "--root", str(root), "--json").stdout)
    assert {p["action"] for p in again["placements"]} == {"identical"}

    # prune-remote never removes what a tag pins: the tag v1 lists every entry, so the
    # plan keeps them all and says why, by age as by size, with or without the tag in the URL.
    plain = registry.url("fleet/round-trip")
    for u in (plain, url):
        for policy in (["--older-than", "0s"], ["--max-size", "0"]):
            res = run_cli("prune-remote", u, *policy, "--yes", "--json")
            assert res.returncode == 0, res.stderr
            doc = json.loads(res.stdout)
            assert doc["removed"] == [] and doc["kept"] == len(keys)
            assert {p["key"]: p["tags"] for p in doc["pinned"]} == {k: ["v1"] for k in keys}
    dry = run_cli("prune-remote", plain, "--older-than", "0s")
    assert dry.returncode == 0 and "would remove 0 entries" in dry.stdout
    assert f"kept {len(keys)} entries a tag pins" in dry.stdout
    assert dry.stdout.count("pinned by v1") == len(keys)
    assert len(json.loads(run_cli("ls", plain, "--json").stdout)["entries"]) == len(keys)
    # A second pin of one entry; the tag v1 deleted (as skopeo delete does: the index's
    # manifest by digest): that entry stays, the others go.
    one = next(k for k, layout in keys.items() if layout == "backend")
    assert run_cli("push", "--root", str(sample), one, plain + ":keep-me").returncode == 0
    _delete_tag(registry, "fleet/round-trip", "v1")
    res = run_cli("prune-remote", plain, "--older-than", "0s", "--json")
    pinned = {p["key"]: p["tags"] for p in json.loads(res.stdout)["pinned"]}
    linked = set(pinned) - {one}  # push takes an entry's linked entry along
    assert pinned == {k: ["keep-me"] for k in {one} | linked}
    _delete_tag(registry, "fleet/round-trip", "keep-me")

    # Unpinned: a dry run changes nothing; then the entries' manifests go (their blobs
    # are the registry's garbage collector's to reclaim: a registry cannot list blobs).
    dry = run_cli("prune-remote", plain, "--older-than", "0s")
    assert dry.returncode == 0 and f"would remove {len(keys)} entries" in dry.stdout
    assert "garbage collection" in dry.stdout
    assert len(json.loads(run_cli("ls", plain, "--json").stdout)["entries"]) == len(keys)
    res = run_cli("prune-remote", plain, "--older-than", "0s", "--yes", "--json")
    assert res.returncode == 0, res.stderr
    assert set(json.loads(res.stdout)["removed"]) == set(keys)
    ls = run_cli("ls", plain)
    assert ls.returncode == 0 and "No entries" in ls.stdout
    store = Store(plain)
    assert not store.exists(store.index_path("aot", next(iter(keys))))


def _delete_tag(registry: Registry, repo: str, tag: str) -> None:
    """Delete a tag as ``skopeo delete`` does (its manifest, by digest), with plain HTTP."""
    import requests

    api = f"http://{registry.host}/v2/{repo}/manifests/"
    head = requests.head(api + tag, timeout=10, headers={
        "Accept": "application/vnd.oci.image.index.v1+json"})
    assert head.status_code == 200, head.status_code
    res = requests.delete(api + head.headers["Docker-Content-Digest"], timeout=10)
    assert res.status_code == 202, res.text


def test_skopeo_sees_and_copies_the_artifacts(registry: Registry, sample: Path,
                                              tmp_path: Path) -> None:
    _needs("skopeo")
    keys = _keys(sample)
    aot = next(k for k, layout in keys.items() if layout == "aot")
    url = registry.url("fleet/src") + ":model-v2"
    assert run_cli("push", "--root", str(sample), *keys, url).returncode == 0
    # An object beside an index object (a detached signature): written through the Store,
    # it goes into the tag's index at the next push and travels with a copy of the tag.
    store = Store(url)
    sig = store.index_path("aot", aot) + ".sig"
    store.put_bytes(sig, b"-----BEGIN SSH SIGNATURE-----\n")
    assert run_cli("push", "--root", str(sample), *keys, url).returncode == 0

    raw = _skopeo("inspect", "--raw", "--tls-verify=false",
                  f"docker://{registry.host}/fleet/src:model-v2")
    assert raw.returncode == 0, raw.stderr
    index = json.loads(raw.stdout)
    assert index["mediaType"] == "application/vnd.oci.image.index.v1+json"
    paths = {m["annotations"][ANN + "path"] for m in index["manifests"]}
    assert {f"entries/{layout}/{k}.json" for k, layout in keys.items()} < paths
    assert sig.split("/fleet/src/", 1)[1] in paths
    entry = _skopeo("inspect", "--raw", "--tls-verify=false",
                    f"docker://{registry.host}/fleet/src:aot-{aot}")
    m = json.loads(entry.stdout)
    assert m["artifactType"] == ARTIFACT_ENTRY
    assert m["annotations"][ANN + "key"] == aot
    assert m["annotations"][ANN + "vllm"] and m["annotations"][ANN + "torch"]
    # Our sha256 digests are the OCI digests of the layers.
    idx = json.loads(store.cat(store.index_path("aot", aot)))
    assert {f"sha256:{f['sha256']}" for f in idx["entry"]["files"]} <= {
        x["digest"] for x in m["layers"]}

    cp = _skopeo("copy", "--all", "--src-tls-verify=false", "--dest-tls-verify=false",
                 f"docker://{registry.host}/fleet/src:model-v2",
                 f"docker://{registry.host}/mirror/copy:model-v2")
    assert cp.returncode == 0, cp.stderr
    mirror = registry.url("mirror/copy") + ":model-v2"
    root = tmp_path / "pod"
    res = run_cli("pull", mirror, "--root", str(root), "--json", "--force")  # linked AOT
    assert res.returncode == 0, res.stderr
    pulled = json.loads(res.stdout)
    assert {p["key"] for p in pulled["placements"] if p["action"] == "placed"} == set(keys)
    _same_entries(pulled, sample, root)
    copied = Store(mirror)
    assert copied.cat(copied.index_path("aot", aot) + ".sig").startswith(b"-----BEGIN SSH")


def test_basic_auth_from_the_standard_files(auth_registry: Registry, sample: Path,
                                            tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                            ) -> None:
    monkeypatch.delenv("REGISTRY_AUTH_FILE", raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-config"))
    keys = [k for k, layout in _keys(sample).items() if layout == "backend"][:1]
    url = auth_registry.url("team/caches") + ":prod"
    outputs: list[str] = []

    def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        r = run_cli(*args, env=env)
        outputs.extend((r.stdout, r.stderr))
        return r

    res = cli("push", "--root", str(sample), *keys, url)
    assert res.returncode == 2, res.stdout
    assert "asks for credentials and none are set" in res.stderr
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr

    bad = {"DOCKER_CONFIG": str(docker_config(tmp_path / "bad", auth_registry.host,
                                              password="wrong").parent)}
    res = cli("ls", url, env=bad)
    assert res.returncode == 2 and "refused the credentials" in res.stderr

    good = {"DOCKER_CONFIG": str(docker_config(tmp_path / "docker", auth_registry.host).parent)}
    res = cli("push", "--root", str(sample), *keys, url, "--json", env=good)
    assert res.returncode == 0, res.stderr
    res = cli("ls", url, "--json", env=good)
    assert res.returncode == 0 and len(json.loads(res.stdout)["entries"]) == 2  # + linked
    podman = {"REGISTRY_AUTH_FILE": str(docker_config(tmp_path / "podman",
                                                      auth_registry.host))}
    res = cli("pull", url, "--root", str(tmp_path / "pod"), "--force", env=podman)
    assert res.returncode == 0, res.stderr
    res = cli("prune-remote", url, "--older-than", "0s", env=podman)
    assert res.returncode == 0, res.stderr
    assert not [o for o in outputs if PASSWORD in o or USER + ":" in o]


def test_plain_http_only_for_loopback_unless_asked() -> None:
    assert OciFileSystem("oci://registry.example:5000/a/b").scheme == "https"
    assert OciFileSystem("oci://registry.example/a", {"plain_http": "true"}).scheme == "http"
    for host in ("127.0.0.1:5000", "localhost:5000", "[::1]:5000", "127.0.0.9"):
        assert OciFileSystem(f"oci://{host}/a").scheme == "http", host
    for bad, why in (("oci://registry.example", "REPOSITORY"),
                     ("oci://u:secret@registry.example/a", "not in the URL"),
                     ("oci://registry.example/Caps", "not an OCI repository name"),
                     ("oci://registry.example/a:-x", "not an OCI tag"),
                     ("oci://registry.example/a?x=1", "not an OCI repository name")):
        with pytest.raises(StoreError, match=why) as exc:
            Store(bad)
        assert "secret" not in str(exc.value)
    with pytest.raises(StoreError, match="unknown option"):
        Store("oci://registry.example/a", {"anon": True})


def test_prune_refuses_when_it_cannot_read_every_pin(registry: Registry, sample: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """More candidate pin tags than prune-remote reads: which entries they pin is not known,
    so nothing is removed (one line)."""
    from vllm_cache_tools.fleet import oci
    from vllm_cache_tools.fleet.remote_ops import prune_store

    key = next(k for k, layout in _keys(sample).items() if layout == "backend")
    url = registry.url("fleet/many-pins")
    for tag in ("a", "b"):
        assert run_cli("push", "--root", str(sample), key, f"{url}:{tag}").returncode == 0
    monkeypatch.setattr(oci, "MAX_PIN_TAGS", 1)
    with pytest.raises(StoreError, match="2 tags might pin entries"):
        prune_store(url, older_than_s=0)
    assert len(Store(url).listing().entries) == 2  # the entry and its linked AOT entry


def test_every_verb_that_takes_a_url_takes_the_same_options(registry: Registry,
                                                            sample: Path,
                                                            tmp_path: Path) -> None:
    """push, pull, ls URL, stats URL and prune-remote: -o plain_http=true works with each,
    an unknown option is the same one-line refusal (exit 2) from each."""
    key = next(k for k, layout in _keys(sample).items() if layout == "backend")
    url = registry.url("fleet/options")
    verbs = {
        "push": ["push", "--root", str(sample), key, url],
        # --force: the sample's AOT entry (pushed beside its backend entry) is only linked
        # without vLLM arguments; what is tested here is the option, not the key proof.
        "pull": ["pull", url, "--root", str(tmp_path / "pod"), "--force"],
        "ls": ["ls", url],
        "stats": ["stats", url],
        "prune-remote": ["prune-remote", url, "--older-than", "1000d"],
    }
    for verb, args in verbs.items():
        res = run_cli(*args, "-o", "plain_http=true")
        assert res.returncode == 0, (verb, res.stderr)
        res = run_cli(*args, "-o", "bogus=1")
        assert res.returncode == 2, (verb, res.stdout)
        assert "unknown option(s) for an oci:// store: bogus (known: plain_http=true)" in \
            res.stderr, (verb, res.stderr)
        assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr, verb
    listed = run_cli("ls", url, "-o", "plain_http=true", "--json")
    assert [e["key"] for e in json.loads(listed.stdout)["entries"]]
    local = run_cli("ls", "--root", str(sample), "-o", "plain_http=true")
    assert local.returncode == 2 and "give its URL" in local.stderr


def test_unreachable_registry_is_one_line(tmp_path: Path) -> None:
    from tests.fleet_support import free_port

    res = run_cli("ls", f"oci://127.0.0.1:{free_port()}/x")
    assert res.returncode == 2
    assert "cannot reach" in res.stderr and res.stderr.count("\n") == 1


@pytest.mark.realvllm
def test_pull_if_hit_from_a_registry(registry: Registry, real_compile: ScenarioRun,
                                     tmp_path: Path) -> None:
    """A pod's init step: ``pull --if-hit`` of a real start's entries from the registry into
    an empty root, decided by the real vLLM of the harness (the start that then loads them
    without compiling is proven for the same pull from S3 in test_fleet_realvllm.py)."""
    start = real_compile.scenario.starts[0]
    src = real_compile.before(1)
    keys = sorted(_keys(src))
    url = registry.url("fleet/if-hit") + ":tiny-llama"
    assert run_cli("push", "--root", str(src), *keys, url).returncode == 0
    aot = next(k for k, layout in _keys(src).items() if layout == "aot")
    root = tmp_path / "pod-root"
    with model_lock():
        restore_pristine_sources()
        res = run_cli("pull", url, "--root", str(root), "--if-hit", "--python",
                      str(venv_python()), "--usage", "llm", "--json", "--",
                      *start.serve_args(), env=start_env(root, start), inherit=False)
    assert res.returncode == 0, (res.stdout[-2000:], res.stderr)
    doc = json.loads(res.stdout)
    assert doc["check"]["verdict"] == "hit" and doc["check"]["predicted"]["aot"] == aot
    placed = {p["key"] for p in doc["placements"] if p["action"] == "placed"}
    assert aot in placed
    _same_entries({"selected": [e for e in doc["selected"] if e["key"] in placed]}, src, root)


def test_bearer_token_challenge(token_registry: Registry, sample: Path, tmp_path: Path,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A registry that answers 401 with ``Bearer realm=...``: the credentials go to the
    token service (plain HTTP allowed: it is on loopback), the token to the registry."""
    monkeypatch.delenv("REGISTRY_AUTH_FILE", raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "none"))
    key = next(k for k, layout in _keys(sample).items() if layout == "backend")
    url = token_registry.url("team/tokens") + ":v1"
    res = run_cli("ls", url)
    assert res.returncode == 2 and "asks for credentials and none are set" in res.stderr
    env = {"DOCKER_CONFIG": str(docker_config(tmp_path / "docker", token_registry.host).parent)}
    res = run_cli("push", "--root", str(sample), key, url, env=env)
    assert res.returncode == 0, res.stderr
    res = run_cli("pull", url, "--root", str(tmp_path / "pod"), "--json", "--force",
                  env=env)  # the sample's AOT key is only linked without vLLM arguments
    assert res.returncode == 0, res.stderr
    assert {p["action"] for p in json.loads(res.stdout)["placements"]} == {"placed"}
    assert PASSWORD not in res.stdout + res.stderr


class _Hostile:
    """A loopback HTTP server playing a hostile registry: ``hang`` accepts and never
    answers; ``tags`` answers every tag-list page with 1000 new tags and a next link."""

    def __init__(self, mode: str) -> None:
        import http.server
        import socket
        import threading

        self.stop_event = threading.Event()
        if mode == "hang":
            self.sock = socket.socket()
            self.sock.bind(("127.0.0.1", 0))
            self.sock.listen(8)
            self.port = self.sock.getsockname()[1]
            self.server = None
            return

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                from urllib.parse import parse_qs, urlsplit

                last = int((parse_qs(urlsplit(self.path).query).get("last") or ["0"])[0])
                body = json.dumps({"name": "x", "tags": [
                    f"t{i}" for i in range(last + 1, last + 1001)]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Link", f'</v2/x/tags/list?n=1000&last={last + 1000}>; '
                                 'rel="next"')
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        else:
            self.sock.close()


def test_a_registry_that_hangs_is_an_error_in_bounded_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from vllm_cache_tools.fleet import oci

    monkeypatch.setattr(oci, "TIMEOUT", (1.0, 1.0))
    server = _Hostile("hang")
    try:
        t0 = time.monotonic()
        with pytest.raises(StoreError, match="did not answer within 1 s"):
            Store(f"oci://127.0.0.1:{server.port}/x").listing()
        assert time.monotonic() - t0 < 10
    finally:
        server.close()


def test_an_endless_tag_list_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm_cache_tools.fleet import oci

    monkeypatch.setattr(oci, "MAX_TAGS", 5000)
    server = _Hostile("tags")
    try:
        with pytest.raises(StoreError, match="over 5000 tags"):
            Store(f"oci://127.0.0.1:{server.port}/x").listing()
    finally:
        server.close()
