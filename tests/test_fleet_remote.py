"""push / pull / ls / prune-remote against a real S3 server (moto, on loopback) and file://
stores, with the harness's real caches."""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.fleet_support import NO_IMDS, tree_digests
from tests.fleet_support import moto as moto
from tests.fleet_support import s3 as s3
from tests.realvllm.harness import ScenarioRun
from vllm_cache_tools.fleet import api
from vllm_cache_tools.fleet.remote import Store

BK = 10


def _backend_key(run: ScenarioRun) -> str:
    return sorted(p.name for p in run.compile_cache.iterdir() if len(p.name) == BK)[0]


@pytest.fixture(params=["file", "s3"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "file":
        return f"file://{tmp_path}/store"
    return str(request.getfixturevalue("s3")) + "/fleet/prefix"


def test_push_pull_round_trip_dedup_and_ls(real_tp2: ScenarioRun, store_url: str,
                                           tmp_path: Path) -> None:
    key = _backend_key(real_tp2)
    res = run_cli("push", "--root", str(real_tp2.vllm_root), key, store_url, "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["schema"] == "vllm-cache-tools/push/1"
    assert {e["action"] for e in doc["entries"]} == {"pushed"}
    # Two ranks hold many identical files: each is stored once.
    assert doc["bytes_uploaded"] < doc["logical_bytes"]
    again = json.loads(run_cli("push", "--root", str(real_tp2.vllm_root), key, store_url,
                               "--json").stdout)
    assert {e["action"] for e in again["entries"]} == {"present"}
    assert again["blobs_uploaded"] == 0 and again["bytes_uploaded"] == 0

    # ls URL: the same schema and fields as a local ls.
    remote = json.loads(run_cli("ls", store_url, "--json").stdout)
    local = json.loads(run_cli("ls", "--root", str(real_tp2.vllm_root), "--json").stdout)
    assert remote["schema"] == local["schema"]
    assert set(remote["entries"][0]) >= set(local["entries"][0])
    assert {e["key"] for e in remote["entries"]} <= {e["key"] for e in local["entries"]}
    table = run_cli("ls", store_url)
    assert table.returncode == 0 and key in table.stdout and "(pushed)" in table.stdout

    root = tmp_path / "pod"
    # No vLLM arguments: the mega AOT entry's key is only linked by its sources (refused by
    # default, tests/test_key_spoofing.py); --force places it.
    res = run_cli("pull", store_url, "--root", str(root), "--json", "--force")
    assert res.returncode == 0, res.stderr
    pulled = json.loads(res.stdout)
    assert pulled["schema"] == "vllm-cache-tools/pull/2"
    assert {p["action"] for p in pulled["placements"]} == {"placed"}
    for e in pulled["selected"]:
        assert tree_digests(root / e["path"]) == tree_digests(real_tp2.vllm_root / e["path"])
    res = run_cli("pull", store_url, "--root", str(root), "--json")  # nothing to place
    assert res.returncode == 0, res.stdout
    assert {p["action"] for p in json.loads(res.stdout)["placements"]} == {"identical"}


def test_push_resumes_after_lost_blobs(real_compile: ScenarioRun, store_url: str) -> None:
    key = _backend_key(real_compile)
    first = api.push([key], store_url, root=real_compile.vllm_root)
    store = Store(store_url)
    blobs = sorted(p for p in store.fs.find(f"{store.base}/blobs"))
    for p in blobs[:3]:  # an interrupted push / a lost object
        store.fs.rm_file(p)
    again = api.push([key], store_url, root=real_compile.vllm_root)
    assert again.blobs_uploaded == 3
    assert again.blobs_present == first.blobs_uploaded - 3


def _push_child(args: tuple[str, str, str]) -> str:
    key, url, root = args
    r = api.push([key], url, root=root)
    return ",".join(sorted({e.action for e in r.entries}))


def test_concurrent_pushers_leave_a_consistent_store(real_compile: ScenarioRun,
                                                     store_url: str, tmp_path: Path) -> None:
    key = _backend_key(real_compile)
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(3) as pool:
        actions = pool.map(_push_child, [(key, store_url, str(real_compile.vllm_root))] * 3)
    assert all(a in ("pushed", "present", "present,pushed") for a in actions), actions
    store = Store(store_url)
    for e in store.entries():
        for f in e.record.files:
            assert store.exists(store.blob_path(f.sha256))
    root = tmp_path / "root"
    assert api.pull(store_url, root=root, force=True).ok  # its AOT key is only linked


def test_missing_blob_is_one_line_and_nothing_placed(real_compile: ScenarioRun,
                                                     store_url: str, tmp_path: Path) -> None:
    key = _backend_key(real_compile)
    api.push([key], store_url, root=real_compile.vllm_root)
    store = Store(store_url)
    e = next(x for x in store.entries() if x.record.layout == "aot")
    store.fs.rm_file(store.blob_path(e.record.files[-1].sha256))
    root = tmp_path / "root"
    res = run_cli("pull", store_url, "--root", str(root))
    assert res.returncode == 2, res.stdout
    assert "which the store does not have" in res.stderr and "nothing placed" in res.stderr
    assert res.stderr.count("\n") == 1
    assert not root.exists()  # it did not exist: the folders made for staging go again


def test_corrupt_blob_is_refused(real_compile: ScenarioRun, tmp_path: Path) -> None:
    url = f"file://{tmp_path}/store"
    api.push([_backend_key(real_compile)], url, root=real_compile.vllm_root)
    store = Store(url)
    e = next(x for x in store.entries() if x.record.layout == "aot")
    blob = Path(store.blob_path(e.record.files[-1].sha256))
    blob.write_bytes(b"x" + blob.read_bytes()[1:])
    res = run_cli("pull", url, "--root", str(tmp_path / "root"))
    assert res.returncode == 2 and "sha256 differs" in res.stderr, res.stderr
    assert res.stderr.count("\n") == 1


def test_missing_credentials(moto: object, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(NO_IMDS)
    env["AWS_ENDPOINT_URL"] = moto.endpoint  # type: ignore[attr-defined]
    env["AWS_SHARED_CREDENTIALS_FILE"] = str(tmp_path / "none")
    env["AWS_CONFIG_FILE"] = str(tmp_path / "none")
    res = run_cli("pull", "s3://nobucket/x", "--root", str(tmp_path / "r"), env=env,
                  inherit=False)
    assert res.returncode == 2
    assert "no credentials found" in res.stderr and res.stderr.count("\n") == 1
    assert "Traceback" not in res.stderr


def test_s3_without_s3fs_hint() -> None:
    from vllm_cache_tools.fleet.remote import BACKENDS

    assert BACKENDS["s3"] == ("s3fs", "s3")


def test_prune_remote_by_age_and_size(real_compile: ScenarioRun, store_url: str) -> None:
    key = _backend_key(real_compile)
    api.push([key], store_url, root=real_compile.vllm_root)
    dry = run_cli("prune-remote", store_url, "--older-than", "0s", "--grace", "0s", "--json")
    assert dry.returncode == 0, dry.stderr
    d = json.loads(dry.stdout)
    assert d["schema"] == "vllm-cache-tools/prune-remote/1" and d["dry_run"] and d["removed"]
    assert len(Store(store_url).entries()) == len(d["removed"])
    keep = run_cli("prune-remote", store_url, "--max-size", "1T", "--yes", "--json")
    assert json.loads(keep.stdout)["removed"] == []
    res = run_cli("prune-remote", store_url, "--older-than", "0s", "--grace", "0s", "--yes",
                  "--json")
    gone = json.loads(res.stdout)
    assert gone["blobs_removed"] > 0 and Store(store_url).entries() == []
    assert run_cli("prune-remote", store_url).returncode == 2  # no policy: usage error


def test_push_counts_snapshots_in_what_it_covers(tmp_path: Path) -> None:
    """A start recorded with snapshots: the snapshots are uploaded beside the entries, so
    the bytes covered count them too (they did not: "-546K of 7.7M not sent")."""
    from tests.realvllm.harness import SCENARIOS, run_scenario

    # Recorder on: manifests and snapshots (the scenario test_recorder runs anyway).
    run = run_scenario(SCENARIOS["recorder"])
    key = _backend_key(run)
    url = f"file://{tmp_path}/store"
    r = api.push([key], url, root=run.vllm_root)
    sources = run.vllm_root / "torch_compile_cache" / ".vllm-cache-tools" / "sources"
    assert any(sources.iterdir()) and r.blobs_uploaded > 0
    assert 0 < r.bytes_uploaded <= r.logical_bytes
    res = run_cli("push", "--root", str(run.vllm_root), key, f"file://{tmp_path}/store2")
    assert res.returncode == 0, res.stderr
    assert " -" not in res.stdout.splitlines()[-1], res.stdout


def test_push_again_through_another_entry_of_the_same_start(tmp_path: Path) -> None:
    """An AOT entry pushed along with one backend entry of its start, then named itself: the
    same files, only more entries proven linked, so it is there already (was: refused as
    "another version of this entry", exit 1), and the store's index lists every link."""
    import shutil

    root = tmp_path / "root"
    shutil.copytree(Path(__file__).resolve().parent.parent / "examples" / "sample_cache", root)
    url = f"file://{tmp_path}/store"
    first = run_cli("push", "--root", str(root), "28fd", url, "--json")
    assert first.returncode == 0, first.stderr
    at = {e.record.key: e.pushed_at for e in Store(url).entries()}
    # 0b85 is 28fd's own start's AOT entry (b6a1 has the same sources but another start's
    # env hash in its recorder manifest: linked to 39ecaca4bf only).
    again = run_cli("push", "--root", str(root), "0b85", url, "--json")
    assert again.returncode == 0, again.stdout + again.stderr
    actions = {e["key"][:10]: e["action"] for e in json.loads(again.stdout)["entries"]}
    assert set(actions.values()) <= {"present", "pushed"}, actions
    assert actions["28fd362d4e"] == "present"
    aot = [e for e in Store(url).entries() if e.record.key.startswith("0b85")]
    assert aot[0].record.linked == ("28fd362d4e",)
    assert aot[0].pushed_at == at[aot[0].record.key]  # there already: not pushed again


def test_ls_of_a_store_ends_with_its_file_count(tmp_path: Path) -> None:
    """ls URL's last line counts files as ls of a root does (was: entries and size only, the
    file count in --json alone)."""
    sample = Path(__file__).resolve().parent.parent / "examples" / "sample_cache"
    url = f"file://{tmp_path}/store"
    r = run_cli("push", "--root", str(sample), "b6a1", "0b85", url)
    assert r.returncode == 0, r.stderr
    r = run_cli("ls", url)
    assert r.returncode == 0, r.stderr
    files = json.loads(run_cli("ls", url, "--json").stdout)["totals"]["files"]
    assert files == 2 * 44 + 2 * 3  # both AOT entries and the backend entries of their starts
    assert r.stdout.splitlines()[-1] == (
        f"4 entries, 5.3M total, {files} files (LAST USED: when pushed)")
    r = run_cli("ls", url, "--filter", "layout=aot")
    assert r.stdout.splitlines()[-1] == ("2 of 4 entries, 5.0M total, 88 files "
                                         "(LAST USED: when pushed)")


def test_a_file_store_that_does_not_exist_is_an_error(tmp_path: Path) -> None:
    """file:// as s3:// does: no folder there is no store, one line, exit 2 (was: ls 'No
    entries', prune-remote 'would remove 0 entries', drift 'no start', all exit 0)."""
    url = f"file://{tmp_path}/typo"
    for args in (["ls", url], ["prune-remote", url, "--older-than", "1d"], ["drift", url],
                 ["stats", url], ["pull", url, "--root", str(tmp_path / "root")]):
        r = run_cli(*args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert r.stderr.startswith("vllm-cache: error: ") and r.stderr.count("\n") == 1, args
    assert not (tmp_path / "typo").exists()
    (tmp_path / "empty").mkdir()  # an empty folder is an empty store
    r = run_cli("ls", f"file://{tmp_path}/empty")
    assert r.returncode == 0 and "No entries" in r.stdout, r.stderr


def test_pull_of_entries_already_here_downloads_nothing(tmp_path: Path) -> None:
    """A pod with a persistent cache volume pulls on every start: entries already there with
    the same files are not downloaded again (was: the whole entry downloaded, then found
    identical); one changed file makes it a different entry (fetched, then refused)."""
    import shutil

    src = tmp_path / "src"
    shutil.copytree(Path(__file__).resolve().parent.parent / "examples" / "sample_cache", src)
    url = f"file://{tmp_path}/store"
    assert run_cli("push", "--root", str(src), "28fd", url).returncode == 0
    pod = tmp_path / "pod"
    # --force: the sample's AOT key is only linked without the vLLM arguments.
    first = json.loads(run_cli("pull", url, "--root", str(pod), "--json", "--force").stdout)
    assert {p["action"] for p in first["placements"]} == {"placed"}
    assert first["bytes_downloaded"] > 0
    res = run_cli("pull", url, "--root", str(pod), "--json")
    assert res.returncode == 0, res.stderr
    again = json.loads(res.stdout)
    assert again["bytes_downloaded"] == 0
    assert [p["key"] for p in again["placements"]] == [p["key"] for p in first["placements"]]
    assert {p["action"] for p in again["placements"]} == {"identical"}
    assert not list((pod / "torch_compile_cache" / ".vllm-cache-tools" / "staging").iterdir())
    text = run_cli("pull", url, "--root", str(pod))
    assert text.returncode == 0 and "0B downloaded" in text.stdout, text.stdout
    # The same size, other bytes: not the same entry, so it is fetched and never overwritten.
    f = next(p for p in (pod / "torch_compile_cache").rglob("cache_key_factors.json"))
    data = f.read_bytes()
    f.write_bytes(data[:-2] + (b"x" if data[-2:-1] != b"x" else b"y") + data[-1:])
    res = run_cli("pull", url, "--root", str(pod), "--json", "--force")  # not even forced
    assert res.returncode == 1, res.stdout + res.stderr
    doc = json.loads(res.stdout)
    assert doc["bytes_downloaded"] > 0
    assert "refused" in {p["action"] for p in doc["placements"]}
    assert f.read_bytes() != data  # the user's file is left as it was
