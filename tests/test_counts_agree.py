"""One count of an entry's files and bytes across verbs (issue 25 item 5: one bundle was "127
files, 3.8M" in pack, "104 files, 3.1M" then "3.8M would be placed" in unpack --check, 161
files in ls, 6.2M in push). On a real root written with the recorder on: pack, unpack --check,
unpack, push, ls of the store, pull and ls of both roots count the same entries, files and
bytes, and the recorder snapshots that travel with them apart; push's blobs are the
deduplicated contents of exactly those files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli
from tests.realvllm.harness import SCENARIOS, copy_root, run_scenario

pytestmark = pytest.mark.realvllm


def _json(*args: str) -> dict[str, Any]:
    r = run_cli(*args, "--json")
    assert r.returncode == 0, (args, r.stderr)
    return json.loads(r.stdout)  # type: ignore[no-any-return]


def _ls(target: str, *args: str) -> tuple[int, int, int]:
    d = _json("ls", target, *args) if "://" in target else _json("ls", "--root", target, *args)
    es = d["entries"]
    return len(es), sum(e["files"] for e in es), sum(e["size_bytes"] for e in es)


def test_one_bundle_counts_the_same_in_every_verb(tmp_path: Path) -> None:
    run = run_scenario(SCENARIOS["keep"])
    src = copy_root(run.before(1), tmp_path / "src")  # the first start's two entries
    n, files, size = _ls(str(src))
    assert n == 2 and files > 0
    keys = [e["key"] for e in _json("ls", "--root", str(src))["entries"]]
    bundle = tmp_path / "b.tar.zst"

    packed = _json("pack", *keys, "--root", str(src), "-o", str(bundle))["footprint"]
    assert (packed["entries"], packed["files"], packed["size_bytes"]) == (n, files, size)
    assert packed["snapshot_files"] > 0  # the recorder's source snapshots go along
    checked = _json("unpack", str(bundle), "--check", "--root", str(tmp_path / "dst"))
    assert checked["footprint"] == packed
    r = run_cli("unpack", str(bundle), "--check", "--root", str(tmp_path / "dst"))
    head = r.stdout.splitlines()[0]
    shown = f"2 entries, {{}} total, {files} files (+ {packed['snapshot_files']} recorder " \
            "snapshot files"
    assert shown.split("{}")[0] in head and shown.split("{}")[1] in head, head
    assert "would be)" not in r.stdout.replace("all of the above would be)", "")
    (tmp_path / "dst" / "torch_compile_cache").mkdir(parents=True)
    assert _json("unpack", str(bundle), "--root", str(tmp_path / "dst"))["footprint"] == packed
    assert _ls(str(tmp_path / "dst")) == (n, files, size)

    url = f"file://{tmp_path / 'store'}"
    (tmp_path / "store").mkdir()
    pushed = _json("push", *keys, url, "--root", str(src))
    assert pushed["footprint"] == packed
    assert pushed["logical_bytes"] == packed["size_bytes"] + packed["snapshot_bytes"]
    assert pushed["bytes_uploaded"] <= pushed["logical_bytes"]
    assert pushed["blobs_uploaded"] <= packed["files"] + packed["snapshot_files"]
    assert _ls(url) == (n, files, size)
    (tmp_path / "pulled" / "torch_compile_cache").mkdir(parents=True)
    pulled = _json("pull", url, "--root", str(tmp_path / "pulled"))
    assert pulled["footprint"] == packed
    assert _ls(str(tmp_path / "pulled")) == (n, files, size)
    st = _json("stats", str(tmp_path / "pulled"))
    assert (st["entries"], st["size_bytes"]) == (n, size)
