"""``ls --all-caches`` and ``prune --cache KIND`` (issue 17, item 1): every JIT cache found
where its owner puts it, listed by kind with byte-exact sizes; pruned per kind with the
compile-cache protections; bad input (dangerous folders, unreadable and symlinked folders,
another user's Inductor folder). Triton kernel folders are the real ones an H200 wrote
(tests/fixtures/gpu); Inductor's are what real vLLM starts left (the jit-caches scenario)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli
from tests.realvllm.harness import SCENARIOS, copy_root, run_scenario
from tests.trees import files_of
from vllm_cache_tools.store.caches.kinds import current_user, locate_caches

FIX = Path(__file__).parent / "fixtures" / "gpu"
OLD_KERNEL = "QDNFK3EHFEO43STVK6SOIXAZRUSFFQIRGATEUCJ4A2SFIPZPSYBQ"
NEW_KERNEL = "SYKBGAH6Z6ZL3C67EEXLHBPHX4SGX6IPKI4TZIL32M47SUHSKX7A"


def apparent_size(top: Path) -> int:
    """What ``du -sb --apparent-size`` adds up, minus the folders' own sizes."""
    total = 0
    for d, _, files in os.walk(top):
        total += sum((Path(d) / f).lstat().st_size for f in files)
    return total


def du_files_only(top: Path) -> int:
    """``du -sb`` (apparent sizes) of the tree minus every folder's own size: the same sum
    computed by another program."""
    du = int(subprocess.run(["du", "-sb", "--apparent-size", str(top)], capture_output=True,
                            text=True, check=True).stdout.split()[0])
    dirs = sum(Path(d).lstat().st_size for d, _, _ in os.walk(top))
    return du - dirs


def age_tree(path: Path, days: float) -> None:
    t = time.time() - days * 86400
    for d, dirs, files in os.walk(path):
        for n in (*files, *dirs):
            os.utime(Path(d) / n, (t, t), follow_symlinks=False)
    os.utime(path, (t, t), follow_symlinks=False)


@pytest.fixture()
def host(tmp_path: Path) -> dict[str, str]:
    """A hermetic host: its own HOME, temp folder and vLLM root; no cache variables."""
    for d in ("home", "tmp", "vllm"):
        (tmp_path / d).mkdir()
    return {"PATH": os.environ["PATH"], "HOME": str(tmp_path / "home"),
            "TMPDIR": str(tmp_path / "tmp"), "VLLM_CACHE_ROOT": str(tmp_path / "vllm")}


@pytest.fixture()
def triton_dir(tmp_path: Path) -> Path:
    with tarfile.open(FIX / "h200-triton-cache.tar.gz") as tar:
        tar.extractall(tmp_path / "t", filter="data")
    d = tmp_path / "t" / "triton_cache"
    age_tree(d / OLD_KERNEL, 40)
    age_tree(d / NEW_KERNEL, 1)
    return d


def cli(env: dict[str, str], *args: str, unprivileged: bool = False
        ) -> subprocess.CompletedProcess[str]:
    r = run_cli(*args, env=env, inherit=False, unprivileged=unprivileged)
    assert "Traceback" not in r.stderr, r.stderr
    return r


def listing(env: dict[str, str], *args: str) -> dict[str, Any]:
    r = cli(env, "ls", "--all-caches", "--json", *args)
    assert r.returncode == 0, r.stderr
    doc: dict[str, Any] = json.loads(r.stdout)
    return doc


def caches_of(doc: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [c for c in doc["caches"] if c["cache"] == kind]


# ------------------------------------------------------------------------------------------
# Where each cache is


def test_locations_follow_env_then_default(tmp_path: Path) -> None:
    home = str(tmp_path / "h")
    env = {"HOME": home, "VLLM_CACHE_ROOT": str(tmp_path / "v")}
    got = {(loc.kind, loc.source): str(loc.path) for loc in locate_caches(env=env)}
    assert got[("triton", "default")] == f"{home}/.triton/cache"
    assert got[("flashinfer", "default")] == f"{home}/.cache/flashinfer"
    assert got[("deepgemm", "vLLM default")] == f"{tmp_path}/v/deep_gemm"
    assert got[("deepgemm", "default")] == f"{home}/.deep_gemm"
    assert got[("cuda", "default")] == f"{home}/.nv/ComputeCache"
    assert got[("vllm", "VLLM_CACHE_ROOT")] == f"{tmp_path}/v/torch_compile_cache"
    assert got[("inductor", "default")] == os.path.join(
        tempfile.gettempdir(), "torchinductor_" + current_user())
    env.update(TRITON_CACHE_DIR="/x/t", TORCHINDUCTOR_CACHE_DIR="/x/i",
               FLASHINFER_WORKSPACE_BASE="/x/f", DG_JIT_CACHE_DIR="/x/d",
               CUDA_CACHE_PATH="/x/c")
    by_kind = {loc.kind: (loc.source, str(loc.path)) for loc in locate_caches(env=env)
               if loc.source != "other user" and loc.source != "default"}
    assert by_kind["triton"] == ("TRITON_CACHE_DIR", "/x/t")
    assert by_kind["inductor"] == ("TORCHINDUCTOR_CACHE_DIR", "/x/i")
    assert by_kind["flashinfer"] == ("FLASHINFER_WORKSPACE_BASE", "/x/f/.cache/flashinfer")
    assert by_kind["deepgemm"] == ("DG_JIT_CACHE_DIR", "/x/d")
    assert by_kind["cuda"] == ("CUDA_CACHE_PATH", "/x/c")
    env2 = {"HOME": home, "TRITON_HOME": "/th"}
    tri = [loc for loc in locate_caches(env=env2) if loc.kind == "triton"]
    assert [(t.source, str(t.path)) for t in tri] == [("TRITON_HOME", "/th/.triton/cache")]


# ------------------------------------------------------------------------------------------
# Listing


def test_triton_kernel_folders_listed_with_metadata_and_exact_sizes(
        host: dict[str, str], triton_dir: Path) -> None:
    env = {**host, "TRITON_CACHE_DIR": str(triton_dir)}
    doc = listing(env)
    assert doc["schema"] == "vllm-cache-tools/ls-all-caches/1"
    assert {c["cache"] for c in doc["caches"]} == {
        "vllm", "inductor", "triton", "flashinfer", "deepgemm", "cuda", "vllm-other"}
    (tri,) = caches_of(doc, "triton")
    assert tri["source"] == "TRITON_CACHE_DIR" and tri["exists"] and tri["understood"]
    assert tri["size_bytes"] == apparent_size(triton_dir) == du_files_only(triton_dir)
    assert tri["files"] == sum(len(f) for _, _, f in os.walk(triton_dir))
    kernels = {e["name"]: e for e in doc["entries"] if e["cache"] == "triton"}
    assert set(kernels) == {p.name for p in triton_dir.iterdir()}
    k = kernels[OLD_KERNEL]
    assert k["path"] == str(triton_dir / OLD_KERNEL)
    assert k["kernels"] == ["triton_poi_fused_add_gelu_mul_0"]
    assert (k["target"], k["triton_version"]) == ("cuda sm_90", "3.6.0")
    assert k["size_bytes"] == apparent_size(triton_dir / OLD_KERNEL)
    for other in ("flashinfer", "deepgemm", "cuda"):
        assert all(not c["exists"] for c in caches_of(doc, other))
    text = cli(env, "ls", "--all-caches").stdout
    assert "triton_poi_fused_add_gelu_mul_0" in text and "cuda sm_90" in text


def test_symlinked_cache_folder_listed_at_its_target(host: dict[str, str], triton_dir: Path,
                                                     tmp_path: Path) -> None:
    link = tmp_path / "home" / "triton-link"
    link.symlink_to(triton_dir)
    env = {**host, "TRITON_CACHE_DIR": str(link)}
    doc = listing(env)
    (tri,) = caches_of(doc, "triton")
    assert tri["symlink_to"] == str(triton_dir)
    assert tri["size_bytes"] == apparent_size(triton_dir)
    assert any("symlink" in p for p in tri["problems"])
    # prune works inside the target and never removes the link itself
    r = cli(env, "prune", "--cache", "triton", "--older-than", "30d", "--yes")
    assert r.returncode == 0, r.stderr
    assert link.is_symlink() and not (triton_dir / OLD_KERNEL).exists()
    assert (triton_dir / NEW_KERNEL).is_dir()


def test_unreadable_cache_folder_is_a_problem_not_a_crash(host: dict[str, str],
                                                          triton_dir: Path) -> None:
    env = {**host, "TRITON_CACHE_DIR": str(triton_dir)}
    (triton_dir / NEW_KERNEL).chmod(0)
    try:
        r = cli(env, "ls", "--all-caches", "--json", unprivileged=True)
        assert r.returncode == 0, r.stderr
        (tri,) = caches_of(json.loads(r.stdout), "triton")
        assert any("unreadable" in p and NEW_KERNEL in p for p in tri["problems"])
        assert "unreadable" in r.stderr
        # prune keeps what it could not read, removes the old readable folder
        r = cli(env, "prune", "--cache", "triton", "--older-than", "1h", "--grace", "0",
                "--yes", "--json", unprivileged=True)
        assert r.returncode == 0, r.stderr
        kept = {k["path"]: k["reason"] for k in json.loads(r.stdout)["kept"]}
        assert "could not be read" in kept[str(triton_dir / NEW_KERNEL)]
        assert not (triton_dir / OLD_KERNEL).exists()
        # the cache folder itself unreadable: a row without sizes, a problem, exit 0
        triton_dir.chmod(0)
        r = cli(env, "ls", "--all-caches", "--json", unprivileged=True)
        assert r.returncode == 0, r.stderr
        (tri,) = caches_of(json.loads(r.stdout), "triton")
        assert tri["exists"] and tri["size_bytes"] is None
        assert any(p.startswith(f"unreadable: {triton_dir}") for p in tri["problems"])
        assert "(unreadable)" in cli(env, "ls", "--all-caches", unprivileged=True).stdout
    finally:
        triton_dir.chmod(0o755)
        (triton_dir / NEW_KERNEL).chmod(0o755)


def test_other_users_inductor_folder_listed_never_pruned_without_all_users(
        host: dict[str, str], tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to make another user's folder")
    other = Path(host["TMPDIR"]) / "torchinductor_nobody"
    (other / "fxgraph" / "ab").mkdir(parents=True)
    (other / "fxgraph" / "ab" / "entry").write_bytes(b"x" * 1000)
    (other / "zz").mkdir()
    (other / "zz" / "code.py").write_text("print(1)\n")
    age_tree(other, 60)
    for d, dirs, files in os.walk(other):
        for n in (*dirs, *files):
            os.chown(Path(d) / n, 65534, 65534, follow_symlinks=False)
    os.chown(other, 65534, 65534)
    doc = listing(host)
    (theirs,) = [c for c in caches_of(doc, "inductor") if c["source"] == "other user"]
    assert theirs["user"] == "nobody" and theirs["owners"] == ["nobody"]
    assert theirs["size_bytes"] == apparent_size(other) == 1009
    parts = {e["name"]: e for e in doc["entries"] if e["cache"] == "inductor"}
    assert parts["fxgraph"]["what"] == "FX graph cache"
    before = files_of(other)
    r = cli(host, "prune", "--cache", "inductor", "--older-than", "1d", "--yes", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["planned"] == [] and files_of(other) == before
    r = cli(host, "prune", "--cache", "inductor", "--older-than", "1d", "--all-users",
            "--yes", "--json")
    assert r.returncode == 0, r.stderr
    assert sorted(Path(p["path"]).name for p in json.loads(r.stdout)["planned"]) == [
        "fxgraph", "zz"]
    assert list(other.iterdir()) == []


# ------------------------------------------------------------------------------------------
# Prune per kind


def test_prune_triton_by_age_keeps_in_use_and_recent(host: dict[str, str],
                                                     triton_dir: Path) -> None:
    env = {**host, "TRITON_CACHE_DIR": str(triton_dir)}
    r = cli(env, "prune", "--cache", "triton", "--older-than", "30d", "--dry-run", "--json")
    doc = json.loads(r.stdout)
    assert doc["schema"] == "vllm-cache-tools/prune-cache/1"
    assert [p["path"] for p in doc["planned"]] == [str(triton_dir / OLD_KERNEL)]
    assert doc["planned"][0]["size_bytes"] == apparent_size(triton_dir / OLD_KERNEL)
    assert (triton_dir / OLD_KERNEL).is_dir()  # dry run
    with open(triton_dir / OLD_KERNEL / "triton_poi_fused_add_gelu_mul_0.cubin", "rb"):
        r = cli(env, "prune", "--cache", "triton", "--older-than", "30d", "--yes", "--json")
        kept = {k["path"]: k["reason"] for k in json.loads(r.stdout)["kept"]}
        assert kept[str(triton_dir / OLD_KERNEL)].startswith("in use: open by pid")
    assert (triton_dir / OLD_KERNEL).is_dir()
    fresh = triton_dir / "FRESH"
    fresh.mkdir()
    (fresh / "k.json").write_text("{}")
    r = cli(env, "prune", "--cache", "triton", "--max-size", "0", "--yes", "--json")
    doc = json.loads(r.stdout)
    kept = {k["path"]: k["reason"] for k in doc["kept"]}
    assert "within --grace" in kept[str(fresh)]
    assert doc["result"]["freed_bytes"] == sum(p["size_bytes"] for p in doc["planned"])
    assert sorted(p.name for p in triton_dir.iterdir()) == ["FRESH"]


@pytest.mark.parametrize("where", ["/", "HOME", "TMP", "ABOVE_ROOT"])
def test_dangerous_cache_dir_refused(host: dict[str, str], where: str, tmp_path: Path) -> None:
    target = {"/": "/", "HOME": host["HOME"], "TMP": "/tmp",
              "ABOVE_ROOT": str(tmp_path)}[where]
    (Path(host["HOME"]) / "keep-me").write_text("x")
    env = {**host, "TRITON_CACHE_DIR": target, "HOME": host["HOME"]}
    r = cli(env, "prune", "--cache", "triton", "--max-size", "0", "--grace", "0", "--yes")
    assert r.returncode != 0
    assert "refusing to prune the triton cache" in r.stderr and "--force" in r.stderr
    assert (Path(host["HOME"]) / "keep-me").exists()
    # listed, but not walked (a variable pointing at / must not walk the whole disk)
    (tri,) = caches_of(listing(env), "triton")
    assert tri["size_bytes"] is None
    assert any(p.startswith(f"not walked: {target} (from TRITON_CACHE_DIR)")
               for p in tri["problems"])


def test_bad_kind_and_policy_combinations(host: dict[str, str]) -> None:
    r = cli(host, "prune", "--cache", "nosuch", "--older-than", "1d")
    assert r.returncode == 2 and "unknown cache kind 'nosuch'" in r.stderr
    r = cli(host, "prune", "--cache", "triton", "--keep", "2")
    assert r.returncode == 2 and "only --older-than and --max-size" in r.stderr
    r = cli(host, "prune", "--cache", "triton")
    assert r.returncode == 2 and "choose --older-than" in r.stderr
    r = cli(host, "ls", "--all-caches", "--by-owner")
    assert r.returncode == 2


# ------------------------------------------------------------------------------------------
# Real vLLM: Inductor's own folder filled by real starts


@pytest.mark.realvllm
def test_real_vllm_inductor_cache_listed_by_kind_and_pruned_on_a_copy(
        host: dict[str, str], tmp_path: Path) -> None:
    run = run_scenario(SCENARIOS["jit-caches"])
    root = copy_root(run.vllm_root, tmp_path / "root")
    jit = copy_root(run.dir / "jit", tmp_path / "jit")
    ind, tri = jit / "inductor", jit / "triton"
    env = {**host, "TORCHINDUCTOR_CACHE_DIR": str(ind), "TRITON_CACHE_DIR": str(tri)}
    doc = listing(env, "--root", str(root))
    (c,) = [c for c in caches_of(doc, "inductor") if c["source"] == "TORCHINDUCTOR_CACHE_DIR"]
    assert c["exists"] and c["files"] > 0
    assert c["size_bytes"] == apparent_size(ind) == du_files_only(ind)
    parts = [e for e in doc["entries"] if e["cache"] == "inductor"
             and e["path"].startswith(str(ind))]
    assert {e["name"] for e in parts} == {p.name for p in ind.iterdir()}
    assert sum(e["size_bytes"] for e in parts) == c["size_bytes"]
    vllm = [e for e in doc["entries"] if e["cache"] == "vllm"]
    assert vllm and all(e["path"].startswith(str(root)) for e in vllm)
    (v,) = caches_of(doc, "vllm")
    assert v["size_bytes"] == apparent_size(root / "torch_compile_cache")
    (t,) = caches_of(doc, "triton")
    if tri.exists():  # the CPU build of Inductor compiles C++, not Triton kernels
        assert t["size_bytes"] == apparent_size(tri)
    # prune Inductor by kind on the copy: vLLM's root is not touched
    before_root = files_of(root)
    age_tree(ind, 45)
    r = cli(env, "prune", "--cache", "inductor", "--older-than", "30d", "--yes", "--json",
            "--root", str(root))
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["result"]["freed_bytes"] == c["size_bytes"]
    assert list(ind.iterdir()) == []
    assert files_of(root) == before_root
    # and a vLLM prune never touches another kind's folder
    (ind / "aa").mkdir()
    (ind / "aa" / "x.py").write_text("x\n")
    age_tree(ind, 45)
    r = cli(env, "prune", "--older-than", "1d", "--grace", "0", "--yes", "--root", str(root))
    assert r.returncode == 0, r.stderr
    assert (ind / "aa" / "x.py").exists()


def test_cache_inside_another_is_said(host: dict[str, str], triton_dir: Path,
                                      tmp_path: Path) -> None:
    ind = tmp_path / "ind"
    ind.mkdir()
    shutil.move(str(triton_dir), ind / "triton")
    env = {**host, "TORCHINDUCTOR_CACHE_DIR": str(ind), "TRITON_CACHE_DIR": str(ind / "triton")}
    doc = listing(env)
    (tri,) = caches_of(doc, "triton")
    assert f"inside the inductor cache {ind}: counted there too" in tri["problems"]
    (c,) = [c for c in caches_of(doc, "inductor") if c["path"] == str(ind)]
    assert c["size_bytes"] == tri["size_bytes"] == apparent_size(ind)


@pytest.mark.realvllm
def test_real_vllm_other_folders_pruned_only_when_named(host: dict[str, str],
                                                        tmp_path: Path) -> None:
    run = run_scenario(SCENARIOS["jit-caches"])
    root = copy_root(run.vllm_root, tmp_path / "root")
    others = sorted(p.name for p in root.iterdir() if p.name != "torch_compile_cache")
    assert "modelinfos" in others
    doc = listing(host, "--root", str(root))
    assert sorted(e["name"] for e in doc["entries"] if e["cache"] == "vllm-other") == others
    (vo,) = caches_of(doc, "vllm-other")
    assert vo["size_bytes"] == apparent_size(root) - apparent_size(root / "torch_compile_cache")
    compile_cache = files_of(root / "torch_compile_cache")
    age_tree(root / "modelinfos", 40)
    r = cli(host, "prune", "--cache", "vllm-other", "--older-than", "30d", "--yes", "--json",
            "--root", str(root))
    assert r.returncode == 0, r.stderr
    assert [Path(p["path"]).name for p in json.loads(r.stdout)["planned"]] == ["modelinfos"]
    assert not (root / "modelinfos").exists()
    assert files_of(root / "torch_compile_cache") == compile_cache
