"""The ``vllm-cache`` console script, run as a real process over real vLLM caches."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli
from tests.realvllm.harness import ScenarioRun, copy_root

pytestmark = pytest.mark.realvllm

LS_KEYS = {"key", "layout", "path", "size_bytes", "disk_bytes", "files", "ranks", "prefixes",
           "state", "created", "modified", "last_used", "last_used_source", "vllm_version",
           "torch_version", "model", "hardware"}


def test_ls_json_schema_and_totals(real_compile: ScenarioRun) -> None:
    r = run_cli("ls", "--root", str(real_compile.vllm_root), "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["root"] == str(real_compile.vllm_root)
    assert len(data["entries"]) == 4
    for row in data["entries"]:
        assert set(row) >= LS_KEYS
        # Backend folders of the mega-AOT mode hold no compiled graph: vLLM loads the AOT entry.
        assert row["state"] == "complete" or (row["layout"], row["state"]) == (
            "backend", "unloadable")
    assert data["total_size_bytes"] == sum(e["size_bytes"] for e in data["entries"])
    # Apparent size matches du -sb over the entry folders.
    du = subprocess.run(["du", "-sb", *[e["path"] for e in data["entries"]]],
                        capture_output=True, text=True, check=True).stdout
    du_total = sum(int(line.split()[0]) for line in du.splitlines())
    dirs = sum(1 for e in data["entries"] for _ in [0])
    assert abs(du_total - data["total_size_bytes"]) < 4096 * 40 * dirs  # du adds folder sizes


def test_ls_accepts_env_root_and_compile_cache_path(real_compile: ScenarioRun) -> None:
    a = json.loads(run_cli("ls", "--json", env={"VLLM_CACHE_ROOT": str(real_compile.vllm_root)})
                   .stdout)
    b = json.loads(run_cli("ls", "--json", "--root", str(real_compile.compile_cache)).stdout)
    assert [e["key"] for e in a["entries"]] == [e["key"] for e in b["entries"]]


def test_ls_sort_and_filter(real_compile: ScenarioRun) -> None:
    root = str(real_compile.vllm_root)
    rows = json.loads(run_cli("ls", "--root", root, "--json", "--sort", "size").stdout)["entries"]
    assert [r["size_bytes"] for r in rows] == sorted((r["size_bytes"] for r in rows), reverse=True)
    rows = json.loads(run_cli("ls", "--root", root, "--json", "--filter", "layout=backend")
                      .stdout)["entries"]
    assert {r["layout"] for r in rows} == {"backend"} and len(rows) == 2
    table = run_cli("ls", "--root", root, "--filter", "layout=aot,size>100K")
    assert table.returncode == 0 and "2 of 4 entries" in table.stdout
    for bad in (["--sort", "colour"], ["--filter", "bogus=1"], ["--filter", "size>lots"]):
        r = run_cli("ls", "--root", root, *bad)
        assert r.returncode == 2 and "error:" in r.stderr and "Traceback" not in r.stderr


def test_show_by_prefix_path_and_json(real_compile: ScenarioRun) -> None:
    root = str(real_compile.vllm_root)
    backend = sorted(p.name for p in real_compile.compile_cache.glob("??????????"))[0]
    r = run_cli("show", backend[:5], "--root", root)
    assert r.returncode == 0, r.stderr
    assert f"backend entry {backend}" in r.stdout and "matches the folder name" in r.stdout
    d = json.loads(run_cli("show", backend, "--root", root, "--json").stdout)
    assert d["key_check"]["matches"] is True
    assert len(d["env_factors"]) > 100 and "VLLM_ALLOW_LONG_MAX_MODEL_LEN" in d["env_factors"]
    assert set(d["hashes"]) == {"env", "config", "code", "compiler"}
    aot_model = next(real_compile.compile_cache.glob("torch_aot_compile/*/rank_0_0/model"))
    d = json.loads(run_cli("show", str(aot_model), "--json").stdout)
    assert d["layout"] == "aot" and d["code"]["qualname"] == "LlamaModel.forward"
    assert d["system"]["torch"] == "2.13.0+cpu"
    assert any(s["module"] == "vllm.model_executor.models.llama" for s in d["traced_sources"])
    assert d["compiled"]["compiled_ranges"]


def test_show_ambiguous_and_unknown(real_compile: ScenarioRun, tmp_path: Path) -> None:
    root = tmp_path / "root"
    copy_root(real_compile.vllm_root, root)
    src = sorted((root / "torch_compile_cache").glob("??????????"))[0]
    twin = src.with_name(src.name[:4] + "000000")
    shutil.copytree(src, twin)
    r = run_cli("show", src.name[:4], "--root", str(root))
    assert r.returncode == 2 and "ambiguous" in r.stderr
    assert src.name in r.stderr and twin.name in r.stderr
    r = run_cli("show", "ffffffffff", "--root", str(root))
    assert r.returncode == 2 and "no entry matches" in r.stderr
    r = run_cli("show", "not-a-key", "--root", str(root))
    assert r.returncode == 2 and "neither" in r.stderr
    r = run_cli("show", str(tmp_path), "--root", str(root))
    assert r.returncode == 2 and "not inside a compile-cache entry" in r.stderr


def test_help_texts() -> None:
    for args in (["--help"], ["ls", "--help"], ["show", "--help"]):
        r = run_cli(*args)
        assert r.returncode == 0 and "Usage" in r.stdout
    r = run_cli("frobnicate")
    assert r.returncode == 2


def test_help_and_version_on_every_verb() -> None:
    from importlib.metadata import version

    from vllm_cache_tools.cli import COMMANDS

    for args in (["--version"], ["-V"], ["ls", "--version"], ["predict", "-V"],
                 ["log", "--version"]):
        r = run_cli(*args)
        assert r.returncode == 0 and r.stdout == f"vllm-cache {version('vllm-cache-tools')}\n"
    for verb in ("", *COMMANDS):  # --help itself: test_help_texts
        r = run_cli(*([verb] if verb else []), "-h")
        assert r.returncode == 0 and r.stdout.startswith("Usage: vllm-cache"), verb
        assert "-h, --help" in r.stdout


def test_readme_command_table_is_complete() -> None:
    """Every verb has a row in the README's table, naming every option its --help lists
    (--root and -h/--help are said once above the table)."""
    import typer.main

    from vllm_cache_tools.cli import build_app

    readme = (REPO / "README.md").read_text()
    table = readme[readme.index("| command | what it does |"):]
    table = table[: table.index("\n\n")]
    rows = {}
    for line in table.splitlines()[2:]:
        cell = line.split(" | ")[0]
        verb = cell.split("`vllm-cache ", 1)[1].split()[0].rstrip("`")
        rows[verb] = cell
    group = typer.main.get_command(build_app())
    assert set(rows) == set(group.commands)  # type: ignore[attr-defined]
    for verb, cmd in group.commands.items():  # type: ignore[attr-defined]
        for p in cmd.params:
            if p.param_type_name != "option" or p.hidden or "--root" in p.opts:
                continue
            assert any(f"`{o}" in rows[verb] or f"[{o}" in rows[verb] or f" {o}" in rows[verb]
                       for o in p.opts), f"README: `vllm-cache {verb}` row lacks {p.opts[0]}"


def test_inspector_never_imports_torch_or_vllm(real_compile: ScenarioRun) -> None:
    code = ("import sys, vllm_cache_tools as v; from vllm_cache_tools.views.payloads import "
            "entry_detail; info = v.scan(sys.argv[1]); "
            "[entry_detail(v.read_entry(e.path)) for e in info.entries]; "
            "bad = [m for m in ('torch', 'vllm', 'triton') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code, str(real_compile.vllm_root)],
                       capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stdout + r.stderr


def test_sample_cache_shipped_in_examples() -> None:
    root = REPO / "examples" / "sample_cache"
    r = run_cli("ls", "--root", str(root), "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["entries"]
    assert {r["layout"] for r in rows} == {"backend", "aot"} and len(rows) == 4
    assert all(r["state"] == "complete" or (r["layout"], r["state"]) == ("backend", "unloadable")
               for r in rows)
    # Made with the recorder on: the warm start's hit is in the ledger, every entry has a
    # manifest, nothing is flagged by audit.
    assert sorted(r["hits"] for r in rows) == [0, 0, 0, 1]
    r = run_cli("audit", "--root", str(root), "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["with_manifests"] == 4


def test_ls_of_an_entry_path_in_another_root(tmp_path: Path) -> None:
    """ls PATH where PATH is an entry of another root than --root: one line, exit 2, as rm
    says it (was: an empty table, "0 of 4 entries", exit 0)."""

    for name in ("a", "b"):
        shutil.copytree(REPO / "examples" / "sample_cache", tmp_path / name)
    other = tmp_path / "a" / "torch_compile_cache" / "28fd362d4e"
    for extra in ([], ["--json"], ["--sort", "key", "--sort", "key"]):  # a repeated option too
        r = run_cli("ls", str(other), "--root", str(tmp_path / "b"), *extra)
        assert r.returncode == 2 and r.stdout == "", (extra, r.stdout, r.stderr)
        assert r.stderr.count("\n") == 1 and "is not an entry of" in r.stderr, r.stderr
    r = run_cli("ls", str(other), "--root", str(tmp_path / "a"), "--json")
    assert r.returncode == 0 and len(json.loads(r.stdout)["entries"]) == 1


def test_key_prefixes_in_upper_case(tmp_path: Path) -> None:
    """Keys are hex: a prefix typed in upper case names the same entry, in every verb that
    takes a KEY and in a store's pull (was: "'28FD' is neither an entry key (hex) nor a path",
    exit 2)."""
    root = tmp_path / "root"
    shutil.copytree(REPO / "examples" / "sample_cache", root)
    r = run_cli("show", "28FD", "--root", str(root))
    assert r.returncode == 0 and "backend entry 28fd362d4e" in r.stdout, r.stderr
    for extra in ([], ["--json"]):  # the table and JSON
        r = run_cli("ls", "28Fd362D4E", "--root", str(root), *extra)
        assert r.returncode == 0 and "28fd362d4e" in r.stdout, (extra, r.stderr)
    r = run_cli("rm", "28FD", "--root", str(root), "--dry-run", "--grace", "0")
    assert r.returncode == 0 and "28fd362d4e" in r.stdout, r.stdout + r.stderr
    url = f"file://{tmp_path}/store"
    r = run_cli("push", "--root", str(root), "28FD", url, "--json")
    assert r.returncode == 0, r.stderr
    assert "28fd362d4e" in {e["key"] for e in json.loads(r.stdout)["entries"]}
    # --force: the sample's mega AOT key is only linked without the vLLM arguments.
    r = run_cli("pull", url, "28FD", "--root", str(tmp_path / "pod"), "--json", "--force")
    assert r.returncode == 0, r.stderr
    assert "28fd362d4e" in {p["key"] for p in json.loads(r.stdout)["placements"]}
    r = run_cli("show", "28FG", "--root", str(root))
    assert r.returncode == 2 and "neither an entry key" in r.stderr


def test_keys_are_shown_as_ls_shows_them(tmp_path: Path) -> None:
    """stats (its never-hit table and --by entry) and pack name entries by the keys ls prints
    (AOT keys 12 hex digits, backend keys whole), so one key pastes from any of them. Was: 16
    digits in stats' never-hit table and pack, the whole 64 in stats --by entry."""
    root = str(REPO / "examples" / "sample_cache")
    ls_rows = run_cli("ls", "--root", root).stdout.splitlines()
    ls_keys = {ln.split()[0] for ln in ls_rows[3:] if ln and not ln[0].isspace()
               and ln.split()[1] in ("aot", "backend")}
    assert len(ls_keys) == 4 and {len(k) for k in ls_keys} == {10, 12}

    def first_column(text: str, header: str) -> set[str]:
        lines = text.split(f"\n{header} ", 1)[1].split("\n\n")[0].splitlines()[1:]
        return {ln.split()[0] for ln in lines}

    never = first_column(run_cli("stats", "--root", root).stdout, "KEY")
    assert never and never <= ls_keys, never
    by_entry = first_column(run_cli("stats", "--root", root, "--by", "entry").stdout, "ENTRY")
    assert by_entry == ls_keys, by_entry
    r = run_cli("pack", "--root", root, "0b85", "-o", str(tmp_path / "b.tar.zst"))
    assert r.returncode == 0, r.stderr
    packed = {ln.split()[1] for ln in r.stdout.splitlines()[1:]}
    assert packed and packed <= ls_keys, r.stdout
