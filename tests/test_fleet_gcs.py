"""``gs://`` stores: push / ls / pull of a real TP=2 cache through gcsfs against a real GCS
JSON-API server on loopback (tests/gcs_support.py), and a missing bucket as one line."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_cli
from tests.fleet_support import tree_digests
from tests.gcs_support import gcs as gcs
from tests.gcs_support import gcs_server as gcs_server
from tests.realvllm.harness import ScenarioRun

ANON = ("-o", "token=anon")


def test_gs_push_ls_pull_round_trip(real_tp2: ScenarioRun, gcs: str, tmp_path: Path) -> None:
    key = sorted(p.name for p in real_tp2.compile_cache.iterdir() if len(p.name) == 10)[0]
    res = run_cli("push", "--root", str(real_tp2.vllm_root), key, gcs, *ANON, "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert {e["action"] for e in doc["entries"]} == {"pushed"}
    assert 0 < doc["bytes_uploaded"] < doc["logical_bytes"]  # the ranks' twins stored once
    again = json.loads(run_cli("push", "--root", str(real_tp2.vllm_root), key, gcs, *ANON,
                               "--json").stdout)
    assert {e["action"] for e in again["entries"]} == {"present"}

    listed = run_cli("ls", gcs, "--json")
    assert listed.returncode == 0, listed.stderr
    assert key in {e["key"] for e in json.loads(listed.stdout)["entries"]}

    root = tmp_path / "pod"
    # --force: no vLLM arguments, and this scenario has no recorder: its mega AOT key is
    # only linked by its sources (refused by default: tests/test_key_spoofing.py).
    res = run_cli("pull", gcs, "--root", str(root), *ANON, "--json", "--force")
    assert res.returncode == 0, res.stderr
    pulled = json.loads(res.stdout)
    assert {p["action"] for p in pulled["placements"]} == {"placed"}
    for e in pulled["selected"]:
        assert tree_digests(root / e["path"]) == tree_digests(real_tp2.vllm_root / e["path"])
        assert {p.name for p in (root / e["path"]).iterdir()} >= {"rank_0_0", "rank_1_0"}
    res = run_cli("pull", gcs, "--root", str(root), *ANON, "--json")
    assert {p["action"] for p in json.loads(res.stdout)["placements"]} == {"identical"}
    assert run_cli("verify", "--root", str(root / "torch_compile_cache")).returncode == 0


def test_gs_missing_bucket_is_one_line(gcs: str, tmp_path: Path) -> None:
    res = run_cli("pull", "gs://no-such-bucket-here/x", "--root", str(tmp_path / "r"), *ANON)
    assert res.returncode == 2
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert "gs://no-such-bucket-here/x" in res.stderr
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").rglob("*"))
