"""Output pasted into README.md and docs/*.md that runs here in seconds, on the shipped
example (examples/sample_cache), compared with what the commands print now. Only what a
fresh clone cannot reproduce is left out: the age and evidence of last use (the checkout's
times) and the order of entries of one shown age. The outputs of the harness's real-vLLM
scenarios are checked by hand (their scenario keys, sizes and times change with each build)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli
from tests.test_render import run_tty

SAMPLE = "examples/sample_cache"
AGE = re.compile(r"\S+ ago \((?:mtime|atime|ledger)\)")


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    """The commands as the docs show them: relative paths, from the clone's top folder."""
    monkeypatch.chdir(REPO)


def block(doc: str, first: str, nth: int = 0) -> str:
    """The fenced block of ``doc`` whose first line is ``first`` (the ``nth`` such), with the
    ``$ command`` line itself left out when ``first`` is one."""
    text = (REPO / doc).read_text()
    found = re.findall(r"^```\w*\n(.*?)^```", text, re.S | re.M)
    hits = [b for b in found if b.splitlines()[0] == first]
    assert len(hits) > nth, f"{doc}: no block starting {first!r}"
    b: str = hits[nth]
    return b.split("\n", 1)[1] if first.startswith("$ ") else b


def _ls_lines(text: str) -> list[str]:
    """The table without last use's age and evidence (spaces squeezed, as the column's width
    follows them) and with the rows sorted: the other columns and the lines around them stay."""
    lines = [re.sub(" +", " ", AGE.sub("AGE", line)).rstrip() for line in text.splitlines()]
    head, rows, tail = lines[:3], lines[3:-2], lines[-2:]
    return head + sorted(rows) + tail


def test_readme_ls_of_the_example_is_what_ls_prints() -> None:
    narrow = block("README.md", "examples/sample_cache/torch_compile_cache", 0)
    wide = block("README.md", "examples/sample_cache/torch_compile_cache", 1)
    assert _ls_lines(run_tty("ls", "--root", SAMPLE, columns=80)) == _ls_lines(narrow)
    r = run_cli("ls", "--root", SAMPLE, "--wide")
    assert r.returncode == 0, r.stderr
    assert _ls_lines(r.stdout) == _ls_lines(wide)
    assert len(wide.splitlines()[2]) > 80 >= max(len(x) for x in narrow.splitlines())


def test_readme_explain_and_audit_of_the_example() -> None:
    r = run_cli("explain", "--root", SAMPLE)
    assert r.returncode == 0 and r.stdout.startswith(
        "recompiled because env VLLM_ALLOW_LONG_MAX_MODEL_LEN changed False -> True\n")
    readme = " ".join((REPO / "README.md").read_text().split())
    assert "(`env VLLM_ALLOW_LONG_MAX_MODEL_LEN changed False -> True`)" in readme
    r = run_cli("audit", "--root", SAMPLE)
    assert r.returncode == 0 and r.stdout.endswith("no possible false hits\n")


def test_stats_md_of_the_example() -> None:
    r = run_cli("stats", SAMPLE)
    assert r.returncode == 0, r.stderr
    assert r.stdout == block("docs/stats.md", f"$ vllm-cache stats {SAMPLE}")


def test_stats_md_of_a_store_without_ledger(tmp_path: Path) -> None:
    store = f"file://{tmp_path}/store"
    r = run_cli("push", "--root", SAMPLE, "b6a1", "0b85", "28fd", "39ec", store)
    assert r.returncode == 0, r.stderr
    r = run_cli("stats", store)
    assert r.returncode == 0, r.stderr
    doc = block("docs/stats.md", "$ vllm-cache stats file:///tmp/store       # the sample's "
                "four entries, pushed with vllm-cache push")
    assert r.stdout == doc.replace("file:///tmp/store", store)


def test_store_md_ls_json_of_one_entry() -> None:
    """Every field of docs/store.md's ``ls --json``, but the checkout's times, their evidence
    and the filesystem this clone is on."""
    cmd = "$ vllm-cache ls 0b85 --root examples/sample_cache --json | python -m json.tool"
    doc = json.loads(block("docs/store.md", cmd))
    r = run_cli("ls", "0b85", "--root", SAMPLE, "--json")
    assert r.returncode == 0, r.stderr
    real = json.loads(r.stdout)
    for d in (doc, real):
        assert set(d.pop("filesystem")) == {"type", "family", "shared", "mount_point", "source",
                                            "atime_mode", "notes"}
        for e in d["entries"]:
            for k in ("created", "modified", "last_used", "last_used_source"):
                e.pop(k)
    assert real == doc


def _verb_options() -> dict[str, list[tuple[str, ...]]]:
    import typer.main

    from vllm_cache_tools.cli import build_app

    group = typer.main.get_command(build_app())
    return {verb: [tuple(p.opts) + tuple(getattr(p, "secondary_opts", ()) or ())
                   for p in cmd.params if p.param_type_name == "option" and not p.hidden]
            for verb, cmd in group.commands.items()}  # type: ignore[attr-defined]


DOCS = ["README.md", *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md")
                             if p.name != "cli.md")]  # cli.md is --help itself


def test_every_option_is_described_in_the_docs() -> None:
    """Each option of each verb is named in README.md or docs/*.md besides the generated
    cli.md (where `nox -s docs` keeps --help)."""
    text = "".join((REPO / d).read_text() for d in DOCS if d != "README.md")
    missing = [f"{verb} {names[0]}" for verb, params in _verb_options().items()
               for names in params
               if not any(re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", text)
                          for n in names)]
    assert not missing, f"options no doc page describes: {missing}"


def test_options_the_docs_give_a_verb_exist() -> None:
    """Every `-x`/`--xy` after `vllm-cache VERB` on one line of the docs (up to ` -- `, where
    vLLM's own arguments begin, a `#` comment or the end of the code span) is an option of
    VERB."""
    opts = {verb: {n for names in params for n in names} | {"-h", "--help", "-V", "--version"}
            for verb, params in _verb_options().items()}
    wrong = []
    for doc in ["README.md", "docs/cli.md", *DOCS[1:]]:
        for n, line in enumerate((REPO / doc).read_text().splitlines(), 1):
            for m in re.finditer(r"vllm-cache\s+([a-z][a-z-]+)([^`|\n]*)", line):
                verb, rest = m.group(1), m.group(2).split(" -- ")[0].split("#")[0]
                if verb not in opts:
                    continue  # prose ("vllm-cache is ...")
                wrong += [f"{doc}:{n}: {verb} {o}"
                          for o in re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", rest)
                          if o not in opts[verb]]
    assert not wrong, wrong


def test_cli_md_is_the_current_help() -> None:
    """docs/cli.md is every verb's --help as it is now (what `nox -s docs` checks; here so that
    `nox -s tests`, the CI command, keeps it current too)."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, str(REPO / "docs" / "gen_cli_docs.py"), "--check"],
                       capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr


def test_metrics_doc_of_the_example_is_what_stats_prints() -> None:
    """docs/metrics.md: the OpenMetrics text of the example is today's."""
    cmd = "$ vllm-cache stats examples/sample_cache --format openmetrics"
    r = run_cli(*cmd.split()[2:])
    assert r.returncode == 0, r.stderr
    assert r.stdout == block("docs/metrics.md", cmd)
