"""``ls`` with plain options runs without typer (cli/ls_run.py): it must pass the values typer
would pass, print the same bytes, and leave everything else to typer."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli_layer_support import assert_same_keywords, assert_same_outcome
from tests.conftest import run_cli
from tests.realvllm.harness import ScenarioRun
from vllm_cache_tools.cli.ls_run import run_ls

PLAIN = [
    [],
    ["--json"],
    ["--json", "--root", "/some/root"],
    ["--root=/some/root", "--rescan", "--json"],
    ["abc123", "--wide", "def"],
    ["-w", "--sort", "size", "--filter", "layout=aot,size>1M"],
    ["--sort=key", "--by-owner", "--json"],
    ["--all-caches", "--root", "rel/root"],
    ["s3://bucket/store", "--json"],
    ["oci://registry.example/a:v1", "-o", "plain_http=true", "--storage-option", "x=1"],
]
LEFT_TO_TYPER = [
    ["--help"], ["-h"], ["--version"], ["--bogus"], ["--json", "--json"], ["--root"],
    ["--root", "-x"], ["--root="], ["--", "key"], ["-wh"], ["--json=1"], ["-"], ["-w=1"],
    ["--sort", "size", "--sort", "key"],
]


@pytest.mark.parametrize("args", PLAIN, ids=" ".join)
def test_plain_values_are_the_ones_typer_converts(args: list[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    assert_same_keywords("ls", args, "vllm_cache_tools.cli.ls.run_ls",
                         run_ls, monkeypatch)


@pytest.mark.parametrize("args", LEFT_TO_TYPER, ids=" ".join)
def test_help_and_errors_are_typers(args: list[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    assert_same_outcome("ls", args, "vllm_cache_tools.cli.ls.run_ls", monkeypatch)


@pytest.mark.realvllm
def test_same_bytes_with_and_without_typer(real_compile: ScenarioRun, tmp_path: Path) -> None:
    root = str(real_compile.vllm_root)
    # A repeated option sends the same listing through typer (it keeps the last value).
    for args in (["--json"], [], ["--by-owner"], ["--json", "--filter", "layout=aot"]):
        fast = run_cli("ls", "--root", root, *args)
        typed = run_cli("ls", "--root", root, "--sort", "last-used", "--sort", "last-used",
                        *args)
        assert fast.returncode == typed.returncode == 0, fast.stderr + typed.stderr
        assert fast.stdout == typed.stdout and fast.stderr == typed.stderr
    missing = str(tmp_path / "nope")
    fast = run_cli("ls", "--root", missing)
    typed = run_cli("ls", "--root", missing, "--sort", "key", "--sort", "key")
    assert fast.returncode == typed.returncode == 2
    assert fast.stderr == typed.stderr and "does not exist" in fast.stderr
