"""Issue 23, items 7 and 8: no data reaches the terminal raw, no secret leaves in any output.

Each human verb runs under a real pseudo-terminal over a copy of a real root (``sample``
scenario: both trees, the recorder's manifests and ledger, vLLM's logs) whose every data
source was planted with escape sequences and a password (tests/output_hostile.py): what the
terminal receives holds no control character but line breaks (and, styled, the SGR sequences
of the tool's own bold), shows the planted bytes escaped, and never the password."""

from __future__ import annotations

import ast
import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from tests.output_hostile import (
    EVIL,
    EVIL_SHOWN,
    MODEL_URL,
    PASSWORD,
    Hostile,
    cli,
    human_env,
    plant,
    raw_controls,
    run_pty,
    verbs,
)
from tests.realvllm.harness import SCENARIOS, run_scenario
from vllm_cache_tools.safetext import escape_controls, escape_controls_but_sgr

CLI_DIR = Path(__file__).resolve().parent.parent / "vllm_cache_tools" / "cli"


# ---- the sanitiser ---------------------------------------------------------------------------

@pytest.mark.parametrize(("raw", "shown"), [
    ("plain text / ünïcode ✓", "plain text / ünïcode ✓"),
    ("a\x1b]0;t\x07b", "a\\x1b]0;t\\x07b"),
    ("\x00\x08\x0b\x0c\r\x7f", "\\x00\\x08\\x0b\\x0c\\x0d\\x7f"),
    ("\x85\x9b31m", "\\x85\\x9b31m"),
    ("evil\u202ecod.py\u2066\u2069\u200e\u200f\u061c\u2028",
     "evil\\u202ecod.py\\u2066\\u2069\\u200e\\u200f\\u061c\\u2028"),
    ("line\nnext\ttab", "line\\x0anext\\x09tab"),
])
def test_escape_controls(raw: str, shown: str) -> None:
    assert escape_controls(raw) == shown


def test_writers_keep_their_own_layout_and_styling() -> None:
    assert escape_controls("a\nb\tc\x1b", keep="\n\t") == "a\nb\tc\\x1b"
    styled = "\x1b[1mKEY\x1b[0m \x1b]0;x\x07 \x1b[2J"
    assert escape_controls_but_sgr(styled) == "\x1b[1mKEY\x1b[0m \\x1b]0;x\\x07 \\x1b[2J"


def test_only_common_writes_to_stdout_and_stderr() -> None:
    """Structural: a renderer cannot forget the sanitiser, since it cannot write but through
    cli/common.py. Outside it ``sys.stdout`` / ``sys.stderr`` may only be asked what they are
    (``isatty``, ``fileno``, ``encoding``) or flushed, never written, aliased or handed on;
    ``print`` is not used."""
    asking = {"isatty", "fileno", "flush", "encoding"}
    known = {  # each with its reason
        # whether to show a progress bar: the stream is only asked if it is a terminal
        "fleetout.py": "wanted(sys.stderr, __import__('os').environ)",
        # the stage line's stream: it escapes its text itself (stageline.StageLine._run)
        "stageline.py": "stream if stream is not None else sys.stderr",
    }
    found = []
    for path in sorted(CLI_DIR.glob("*.py")):
        if path.name == "common.py":
            continue
        tree = ast.parse(path.read_text())
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in ("stdout", "stderr") \
                    and isinstance(node.value, ast.Name) and node.value.id == "sys":
                up = parents.get(node)
                if not (isinstance(up, ast.Attribute) and up.attr in asking) \
                        and known.get(path.name) != ast.unparse(up or node):
                    found.append(f"{path.name}:{node.lineno}: {ast.unparse(up or node)}")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id == "print":
                found.append(f"{path.name}:{node.lineno}: print")
    assert found == []


# ---- every verb under a pty ------------------------------------------------------------------

@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Hostile:
    run = run_scenario(SCENARIOS["sample"])
    tmp = tmp_path_factory.mktemp("hostile-output")
    return plant(run.vllm_root, [run.records[0].log, run.records[2].log], tmp, os.environ)


# Where the planted bytes are part of the answer (the others print them only where they
# matter, e.g. a problem line): the escaped form must be on the screen.
SHOWS_PLANTED = ("ls", "ls --wide", "show backend (file name)", "show aot (manifest)",
                 "stats --by host", "log", "log --compare", "unpack", "ls URL")


@pytest.mark.realvllm
@pytest.mark.parametrize("verb", [
    "ls", "ls --wide", "ls --by-owner", "show backend (file name)", "show aot (manifest)",
    "audit", "stats", "stats --by host", "drift", "verify", "prune --dry-run", "log",
    "log --compare", "explain --logs", "pack (refused: secret in a manifest)", "unpack",
    "ls URL", "stats URL", "pull URL", "explain (entries)"])
def test_human_output_under_a_pty(hostile: Hostile, verb: str) -> None:
    args = verbs(hostile)[verb]
    rc, out = run_pty([cli(), *args], human_env(os.environ))
    assert "Traceback" not in out, out[-3000:]
    assert raw_controls(out) == [], out[-3000:]
    assert PASSWORD not in out
    if verb in SHOWS_PLANTED:
        assert EVIL_SHOWN in out or "\\u202e" in out, out[-3000:]
    assert rc in (0, 1), (rc, out[-3000:])


@pytest.mark.realvllm
@pytest.mark.parametrize("verb", ["ls", "show aot (manifest)", "stats --by host",
                                  "explain --logs", "unpack"])
def test_styled_output_has_only_its_own_sgr(hostile: Hostile, verb: str) -> None:
    _, out = run_pty([cli(), *verbs(hostile)[verb]], human_env(os.environ, styled=True))
    assert raw_controls(out, styled=True) == [], out[-3000:]
    assert PASSWORD not in out


# ---- secrets ---------------------------------------------------------------------------------

@pytest.mark.realvllm
def test_pack_and_push_refuse_a_manifest_holding_a_secret(hostile: Hostile,
                                                         tmp_path: Path) -> None:
    from tests.conftest import run_cli

    for args in (["pack", "--root", str(hostile.root), hostile.aot_key[:12], "-o",
                  str(tmp_path / "b.tzst")],
                 ["push", "--root", str(hostile.root), hostile.aot_key[:12],
                  f"file://{tmp_path / 'store'}"]):
        res = run_cli(*args)
        assert res.returncode == 1, res.stderr
        assert "holds a secret in clear (in model.model" in res.stderr
        assert "vct-manifest." in res.stderr
        assert PASSWORD not in res.stderr + res.stdout
    assert not (tmp_path / "b.tzst").exists()
    assert not list((tmp_path / "store").rglob("*.json")) if (tmp_path / "store").exists() \
        else True


@pytest.mark.realvllm
def test_ls_json_and_table_hide_the_password(hostile: Hostile) -> None:
    from tests.conftest import run_cli

    table = run_cli("ls", "--root", str(hostile.root))
    js = run_cli("ls", "--root", str(hostile.root), "--json")
    assert table.returncode == js.returncode == 0
    assert PASSWORD not in table.stdout + js.stdout
    assert "https://<redacted" in table.stdout
    models = {e.get("checkpoint") for e in json.loads(js.stdout)["entries"]}
    assert any(m and m.startswith("https://<redacted") for m in models)
    remote = run_cli("ls", hostile.store, "--json")
    assert PASSWORD not in remote.stdout and "https://<redacted" in remote.stdout


@pytest.mark.realvllm
def test_bundle_manifest_and_index_object_hide_the_password(hostile: Hostile) -> None:
    """A record holding a model URL with a password (as a manifest written before redaction
    gives one) is written redacted into a bundle manifest and a store index object."""
    from vllm_cache_tools.fleet.bundle import manifest_bytes
    from vllm_cache_tools.fleet.records import BundleManifest
    from vllm_cache_tools.fleet.redacted import redacted_record
    from vllm_cache_tools.fleet.remote import index_bytes
    from vllm_cache_tools.fleet.selection import select

    rec = select(hostile.clean, [hostile.aot_key]).records[0]
    leaky = replace(rec, checkpoint=MODEL_URL,
                    env_factors={**rec.env_factors, "HF_TOKEN": "hf_" + PASSWORD * 3})
    red = redacted_record(leaky)
    assert red.checkpoint is not None and red.checkpoint.startswith("https://<redacted")
    assert EVIL in red.checkpoint  # redaction is not escaping: JSON escapes it, renderers too
    assert redacted_record(red) == red and redacted_record(rec) is rec
    # Field by field with the values seen before (what select does for its records): the
    # same record, the secret hidden the second time too (from the memo).
    seen: dict[tuple[str, bytes], object] = {}
    assert redacted_record(leaky, seen) == red == redacted_record(leaky, seen)
    assert redacted_record(rec, seen) == rec
    for blob in (manifest_bytes(BundleManifest((leaky,))), index_bytes(leaky, (), {}, 0.0)):
        assert PASSWORD.encode() not in blob
        assert b"https://<redacted" in blob


def test_redact_fields_is_redact_value() -> None:
    """fleet/redacted.redact_fields (one field at a time, each value redacted once) gives what
    redact_value gives the whole, the values beside a field naming a secret included."""
    from vllm_cache_tools.fleet.redacted import redact_fields
    from vllm_cache_tools.redaction import redact_value

    token = "hf_" + PASSWORD * 3
    cases = [
        {"env": {"HF_TOKEN": token, "VLLM_X": "1"}, "files": [{"path": "a", "sha": "0" * 64}],
         "model": MODEL_URL, "n": 3},
        {"name": "HF_TOKEN", "value": token, "other": {"x": token}},  # redacted whole
        {"item": "api_key", "old": "abc123456789", "new": ["x", {"k": token}]},
        {"plain": [1, 2, {"a": "b"}], "text": "Bearer abcdefgh12345678"},
        # Nested past the levels taken field by field, a secret at each level.
        {"recorded": [{"env": {"HF_TOKEN": token}}], "m": {"a": {"b": {"c": {"api_key": "x1"},
                                                                       "name": "HF_TOKEN",
                                                                       "value": token}}}},
        {"m": {"hf_token": {"deep": token}, "ok": {"url": MODEL_URL}, "k": "v"}},
    ]
    seen: dict[tuple[str, bytes], object] = {}
    for data in cases * 2:  # the second time from the memo
        assert redact_fields(data, seen) == redact_value(None, data)
        assert token not in str(redact_fields(data, seen))


def test_redact_document_is_redact_value() -> None:
    """fleet/redacted.redact_document (a bundle manifest's records field by field, one memo
    for all of them) gives what redact_value gives the whole document."""
    from vllm_cache_tools.fleet.redacted import redact_document
    from vllm_cache_tools.redaction import redact_value

    token = "hf_" + PASSWORD * 3
    rec = {"key": "a" * 64, "env_factors": {"HF_TOKEN": token, "VLLM_X": "1"},
           "files": [{"path": "a", "sha256": "0" * 64}], "checkpoint": MODEL_URL,
           "recorded": {"config": {"model": MODEL_URL, "x": {"api_key": "k1", "n": 1}},
                        "env": {"name": "HF_TOKEN", "value": token}}}
    docs = [
        {"format": "f", "entries": [rec, {**rec, "key": "b" * 64}, {"name": "HF_TOKEN",
                                                                    "value": token}],
         "extras": [], "host": {"url": MODEL_URL}},
        {"format": "f", "name": "HF_TOKEN", "value": token, "entries": [rec]},  # whole
        {"entries": [rec], "hf_token": [{"x": token}], "argv": ["--api-key", token]},
        [rec],
    ]
    for doc in docs:
        assert redact_document(doc) == redact_value(None, doc)
        assert token not in str(redact_document(doc))
