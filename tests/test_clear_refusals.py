"""Issue 25 item 6: inputs that used to give a silent empty result, a raw exception or a
misleading message each get one clear line and a non-zero exit: an unknown filter value, a
folder that is no cache root, explain of one entry of each tree, an archive of another kind,
a store URL that is a file, a scheme that is no store, an S3 endpoint nobody listens on."""

from __future__ import annotations

import socket
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.fleet_support import NO_IMDS
from tests.realvllm.harness import SCENARIOS, ScenarioRun, copy_root, run_scenario
from vllm_cache_tools import scan


def _one_line(r: subprocess.CompletedProcess[str], code: int = 2) -> str:
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and r.stderr.count("\n") == 1, r.stderr
    return r.stderr


@pytest.fixture(scope="module")
def keep_run() -> ScenarioRun:
    return run_scenario(SCENARIOS["keep"])


def test_unknown_filter_value_is_refused(tmp_path: Path) -> None:
    err = _one_line(run_cli("ls", "--filter", "state=compleet", "--root", str(tmp_path)))
    assert "unknown state 'compleet' in --filter (one of: complete, partial, corrupt" in err
    err = _one_line(run_cli("ls", "--filter", "layout!=aott", "--root", str(tmp_path)))
    assert "unknown layout 'aott'" in err and "backend, aot" in err
    # ~ (contains) is free text: a part of a value is no typo.
    r = run_cli("ls", "--filter", "state~compl", "--root", str(tmp_path / "nope"))
    assert r.returncode == 2 and "does not exist" in r.stderr


def test_ls_refuses_a_folder_that_is_no_cache_root(tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    err = _one_line(run_cli("ls", "--root", str(tmp_path)))
    assert "does not look like a vLLM cache root (no torch_compile_cache folder)" in err
    # prune refuses the same folder in the same words (one wording, one function).
    perr = _one_line(run_cli("prune", "--keep", "1", "--root", str(tmp_path)))
    assert err.split("error: ", 1)[1].split(")")[0] in perr
    # A cache root whose compile cache is still empty is no typo: listed as empty.
    (tmp_path / "torch_compile_cache").mkdir()
    r = run_cli("ls", "--root", str(tmp_path))
    assert r.returncode == 0 and "No compile-cache entries" in r.stdout


def test_explain_of_one_entry_of_each_tree(keep_run: ScenarioRun) -> None:
    info = scan(keep_run.vllm_root, check_in_use=False)
    backend = next(e for e in info.entries if e.layout == "backend")
    aot = next(e for e in info.entries if e.layout == "aot")
    err = _one_line(run_cli("explain", backend.key, aot.key, "--root",
                            str(keep_run.vllm_root)))
    assert f"{backend.key} is a backend entry and {aot.key[:12]} an AOT entry" in err
    assert "explain compares two entries of one tree" in err
    r = run_cli("explain", aot.key, backend.key, "--root", str(keep_run.vllm_root), "--json")
    assert r.returncode == 2 and r.stdout == ""


def test_explain_mixed_pair_names_the_sibling_from_the_ledger(keep_run: ScenarioRun) -> None:
    """Starts 0 and 1 compiled different entries: the AOT entry of start 1 is paired, by the
    recorder's ledger, with start 1's backend entry, which the message offers to compare."""
    def keys(i: int) -> tuple[str, str]:
        log = keep_run.log(i)
        b = log.split("Using cache directory: ", 1)[1].split("/rank_")[0].rsplit("/", 1)[1]
        a = log.split("saved AOT compiled function to ", 1)[1].split("/rank_")[0]
        return b, a.rsplit("/", 1)[1]

    (b0, _), (b1, a1) = keys(0), keys(1)
    err = _one_line(run_cli("explain", b0, a1, "--root", str(keep_run.vllm_root)))
    assert f"the backend entry of {a1[:12]}'s start is {b1} (recorder ledger): " \
           f"vllm-cache explain {b0} {b1}" in err


def _tar(path: Path, mode: str, src: Path) -> Path:
    with tarfile.open(path, mode) as t:
        t.add(src, arcname=src.name)
    return path


def test_unpack_names_the_archive_kind(tmp_path: Path) -> None:
    f = tmp_path / "a.txt"
    f.write_text("x")
    for name, mode, kind in (("x.tar.gz", "w:gz", "a gzip file"),
                             ("x.tar.xz", "w:xz", "an xz file"),
                             ("x.tar", "w", "an uncompressed tar")):
        err = _one_line(run_cli("unpack", str(_tar(tmp_path / name, mode, f)), "--check"))
        assert f"not a zstd bundle ({kind}; bundles are made by `vllm-cache pack`)" in err
    (tmp_path / "empty.tar.zst").write_bytes(b"")
    assert "not a zstd bundle (empty;" in _one_line(
        run_cli("unpack", str(tmp_path / "empty.tar.zst"), "--check"))
    # A zstd file that is cut stays what it is: a damaged bundle, not another kind.
    (tmp_path / "cut.tar.zst").write_bytes(b"\x28\xb5\x2f\xfd\x00\x00")
    assert "truncated or corrupt bundle" in _one_line(
        run_cli("unpack", str(tmp_path / "cut.tar.zst"), "--check"))


def test_store_urls_refused_in_one_line(keep_run: ScenarioRun, tmp_path: Path) -> None:
    root = copy_root(keep_run.vllm_root, tmp_path / "root")
    key = next(e.key for e in scan(root, check_in_use=False).entries if e.layout == "backend")
    f = tmp_path / "afile"
    f.write_text("not a store")
    err = _one_line(run_cli("push", key, f"file://{f}", "--root", str(root)))
    assert f"{f} is a file, not a store folder" in err and "NotADirectoryError" not in err
    err = _one_line(run_cli("push", key, f"file://{f}/sub", "--root", str(root)))
    assert "a file, not a folder, is in the store's path" in err
    err = _one_line(run_cli("ls", "http://127.0.0.1:1/store"))
    assert ("http:// is not a store vllm-cache can use (s3://, gs://, oci://registry/repo or "
            "file:///path") in err
    assert "?" not in err.split("error: ", 1)[1]


def test_unreachable_s3_endpoint_is_not_called_missing_credentials(tmp_path: Path) -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "",
           "AWS_SECRET_ACCESS_KEY": "", "AWS_CONFIG_FILE": str(tmp_path / "none"),
           "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"), "HOME": str(tmp_path), **NO_IMDS}
    err = _one_line(run_cli("ls", "s3://bucket/p", env=env))
    assert f"cannot reach the endpoint http://127.0.0.1:{port} (Connection refused)" in err
    # The same with credentials: botocore connects and fails (it retried for ~14 s before).
    env.update(AWS_ACCESS_KEY_ID="a", AWS_SECRET_ACCESS_KEY="b")
    err = _one_line(run_cli("ls", "s3://bucket/p", env=env))
    assert "cannot reach the store" in err and "credentials" not in err
