"""``ls`` through the one CLI layer (typer, its pydantic conversion avoided for plain values:
cli/coercion.py): the keywords, help, errors and exit codes are those of typer's own
conversion, for the command lines the removed typer-free reader took and for those it left
to typer."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli_layer_support import layer_checks
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


test_plain_values_are_the_ones_typer_converts, test_help_and_errors_are_typers = layer_checks(
    "ls", "vllm_cache_tools.cli.ls_run.run_ls", run_ls, PLAIN, LEFT_TO_TYPER)


@pytest.mark.realvllm
def test_a_repeated_option_keeps_the_last_value(real_compile: ScenarioRun,
                                                tmp_path: Path) -> None:
    root = str(real_compile.vllm_root)
    # Same bytes (the table's ages move between two runs on a slow machine: JSON and owners).
    for args in (["--json"], ["--by-owner"], ["--json", "--filter", "layout=aot"]):
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


def test_a_plain_listing_never_imports_pydantic(tmp_path: Path) -> None:
    """The cost the one layer avoids (~0.08 s of CPU a run): typer's pydantic conversion is
    built only for a value that needs it (here ``-o`` given twice is plain too)."""
    import subprocess
    import sys

    code = ("import sys; from vllm_cache_tools.cli import main; sys.argv = ['vllm-cache', "
            "*sys.argv[1:]]\ntry:\n    main()\nexcept SystemExit:\n    pass\n"
            "sys.stderr.write('pydantic: %s' % ('pydantic' in sys.modules))")
    sample = str(Path(__file__).resolve().parent.parent / "examples" / "sample_cache")
    env = {**__import__("os").environ, "XDG_CACHE_HOME": str(tmp_path)}
    for args in (["ls", "--root", sample, "--json"], ["ls", "--root", sample, "-w", "--sort",
                                                      "size"], ["stats", "--root", sample],
                 ["ls", "--help"]):
        r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True,
                           text=True, env=env, timeout=120)
        assert r.stderr.endswith("pydantic: False"), (args, r.stderr[-500:])
    r = subprocess.run([sys.executable, "-c", code, "stats", "--root", sample, "-j", "x"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert "pydantic: True" in r.stderr and "Invalid value for '--jobs' / '-j'" in r.stderr
