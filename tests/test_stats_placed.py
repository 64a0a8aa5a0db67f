"""``stats`` tells entries placed by ``unpack`` (their recorder manifests travel with them)
from entries written with the recorder off (issue 25 item 3: both were "written with the
recorder off"). Real caches: the "keep" scenario's root after its first start (ledger of that
start only) receives the second start's entries from a bundle."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.realvllm.harness import SCENARIOS, copy_root, run_scenario
from vllm_cache_tools import scan
from vllm_cache_tools.layout import is_manifest_name

pytestmark = pytest.mark.realvllm


def test_unpacked_entries_are_placed_not_unrecorded(tmp_path: Path) -> None:
    run = run_scenario(SCENARIOS["keep"])
    two = copy_root(run.before(2), tmp_path / "two")  # starts 0 and 1
    one = copy_root(run.before(1), tmp_path / "one")  # start 0 (and its ledger) only
    new = sorted({e.key for e in scan(two, check_in_use=False).entries}
                 - {e.key for e in scan(one, check_in_use=False).entries})
    assert len(new) == 2
    bundle = tmp_path / "b.tar.zst"
    assert run_cli("pack", *new, "--root", str(two), "-o", str(bundle)).returncode == 0
    r = run_cli("unpack", str(bundle), "--root", str(one), "--force")
    assert r.returncode == 0, r.stdout + r.stderr

    d = json.loads(run_cli("stats", str(one), "--json").stdout)
    assert d["basis"] == "ledger" and d["entries"] == 4
    assert (d["placed_entries"], d["untracked_entries"]) == (2, 0)
    out = run_cli("stats", str(one)).stdout
    assert "2 placed by unpack/pull (recorder manifests came with them" in out
    assert "recorder off" not in out

    # Without its manifests an entry nobody recorded is what it was before.
    entry = next(e for e in scan(one, check_in_use=False).entries if e.key == new[0])
    for m in entry.path.rglob("*"):
        if is_manifest_name(m.name):
            m.unlink()
    d = json.loads(run_cli("stats", str(one), "--json").stdout)
    assert (d["placed_entries"], d["untracked_entries"]) == (1, 1)
    assert "1 written with the recorder off" in run_cli("stats", str(one)).stdout
