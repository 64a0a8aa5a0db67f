"""``stats`` through the one CLI layer (cli/coercion.py): the keywords, help, errors and exit
codes are those of typer's own conversion (``--jobs`` out of range or not a number is still
answered by typer's pydantic conversion, built then)."""

from __future__ import annotations

from pathlib import Path

from tests.cli_layer_support import layer_checks
from tests.conftest import run_cli
from tests.test_stats import AOT, root_with, start_lines
from vllm_cache_tools.cli.stats_run import run_stats

PLAIN = [
    [],
    ["--json"],
    ["--json", "--root", "/some/root"],
    ["--root=/some/root", "--by", "entry", "--json"],
    ["some/folder", "--wide", "--since", "7d"],
    ["-j", "2", "--by=host"],
    ["--jobs=64", "s3://bucket/store", "--json"],
    ["some/root", "--format", "openmetrics", "--by", "host"],
    ["--format=prometheus", "--drift"],
]
LEFT_TO_TYPER = [
    ["--help"], ["-h"], ["--bogus"], ["--json", "--json"], ["--root"], ["--root", "-x"],
    ["--root="], ["--", "x"], ["a", "b"], ["-j", "0"], ["-j", "65"], ["--jobs", "two"],
    ["-o", "anon=true", "s3://b/s"], ["--storage-option", "anon=true"], ["--by", "model",
                                                                          "--by", "host"],
]


test_plain_values_are_the_ones_typer_converts, test_help_and_errors_are_typers = layer_checks(
    "stats", "vllm_cache_tools.cli.stats.run_stats", run_stats, PLAIN, LEFT_TO_TYPER)


def test_a_repeated_option_keeps_the_last_value(tmp_path: Path) -> None:
    lines = [x for i in range(4) for x in start_lines("h", f"s{i}", 1.8e9 + i * 100,
                                                         ("miss", "hit")[i % 2], tp=2)]
    root = str(root_with(tmp_path, {"h": [*lines, "not json"]}))
    for args in (["--json"], [], ["--by", "entry", "--wide"], ["--by", "bogus"]):
        fast = run_cli("stats", "--root", root, *args)
        typed = run_cli("stats", "--root", root, "--jobs", "1", "--jobs", "1", *args)
        assert fast.returncode == typed.returncode, fast.stderr + typed.stderr
        assert fast.stdout == typed.stdout and fast.stderr == typed.stderr
        assert fast.returncode == (2 if "bogus" in args else 0), fast.stderr
    by_entry = run_cli("stats", "--root", root, "--by", "entry").stdout
    assert f"\n{AOT[:12]} " in by_entry and AOT[:13] not in by_entry  # as ls shows it
