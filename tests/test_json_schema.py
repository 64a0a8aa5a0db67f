"""Every verb's ``--json``: its schema id (one table, vllm_cache_tools/views/payloads.py) and times
in ISO 8601 with a zone, wherever they are in the document."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, run_cli
from vllm_cache_tools.views.payloads import SCHEMAS, log_json, log_stamp_iso, predict_document

SAMPLE = REPO / "examples" / "sample_cache"
LOGS = REPO / "examples" / "sample_logs"
# A key that names a point in time. Durations end in _s; *_source / *_basis say where from.
TIME_KEY = re.compile(r"(?:^|_)(?:time|created|modified|last_used|date|timestamp|when|at|"
                      r"since|until|started|finished|mtime|atime|ctime)(?:_iso)?$")
ISO_LIKE = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}")
LOG_STAMP = re.compile(r"^\d{2}-\d{2} \d{2}:\d{2}:\d{2}")


def walk(o: Any, path: str = "$") -> Iterator[tuple[str, str, Any, dict[str, Any]]]:
    """(path, key, value, the dict holding it) for every field, however deep."""
    if isinstance(o, dict):
        for k, v in o.items():
            yield f"{path}.{k}", k, v, o
            yield from walk(v, f"{path}.{k}")
    elif isinstance(o, list):
        for i, v in enumerate(o):
            yield from walk(v, f"{path}[{i}]")


def assert_iso_with_zone(where: str, v: object) -> None:
    assert isinstance(v, str), f"{where}: a time as {type(v).__name__} {v!r}, not ISO 8601"
    t = datetime.fromisoformat(v)
    assert t.tzinfo is not None and t.utcoffset() is not None, f"{where}: {v!r} has no zone"


def check_document(doc: dict[str, Any], kind: str) -> int:
    """Schema id first; every time ISO 8601 with a zone. Raw vLLM log stamps (no year, no
    zone: kept in log's schema 1 for scripts) must have their ``*_iso`` beside them.
    Returns the number of time fields checked."""
    assert next(iter(doc)) == "schema" and doc["schema"] == SCHEMAS[kind], doc.get("schema")
    n = 0
    for where, key, v, parent in walk(doc):
        if isinstance(v, str) and LOG_STAMP.match(v) and key.endswith("_time"):
            assert kind.startswith("log"), f"{where}: a log stamp outside log's document"
            iso = parent.get(f"{key}_iso")
            assert iso is not None, f"{where}: raw log stamp {v!r} without {key}_iso"
            assert_iso_with_zone(f"{where}_iso", iso)
            assert iso[5:19].replace("T", " ") == v[:14], (v, iso)
            n += 1
        elif TIME_KEY.search(key) and not isinstance(v, (dict, list)):
            if v is not None:
                assert_iso_with_zone(where, v)
                n += 1
        elif isinstance(v, str) and ISO_LIKE.match(v):
            assert_iso_with_zone(where, v)
            n += 1
    return n


def cli_json(kind: str, *args: str, ok: tuple[int, ...] = (0,),
             env: dict[str, str] | None = None, inherit: bool = True) -> dict[str, Any]:
    r = run_cli(args[0], "--json", *args[1:], env=env, inherit=inherit)  # before any --
    assert r.returncode in ok, (args, r.returncode, r.stderr)
    doc: dict[str, Any] = json.loads(r.stdout)
    check_document(doc, kind)
    return doc


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the shipped example, so dry runs may not touch the original either."""
    dst = tmp_path_factory.mktemp("json") / "root"
    shutil.copytree(SAMPLE, dst)
    return dst


def _keys(root: Path) -> tuple[list[str], list[str]]:
    rows = cli_json("ls", "ls", "--root", str(root))["entries"]
    return ([e["key"] for e in rows if e["layout"] == "backend"],
            [e["key"] for e in rows if e["layout"] == "aot"])


def test_every_schema_id_is_versioned_and_distinct() -> None:
    assert len(set(SCHEMAS.values())) == len(SCHEMAS)
    for kind, sid in SCHEMAS.items():
        assert re.fullmatch(r"vllm-cache-tools/[a-z-]+/\d+(/[a-z-]+)?", sid), (kind, sid)


def test_every_verb_with_json_has_a_schema_id() -> None:
    """A new verb's --json gets its id in SCHEMAS (and a case in this file)."""
    import typer.main

    from vllm_cache_tools.cli import build_app

    same_document = {"rm": "prune"}  # rm prints prune's plan document
    group = typer.main.get_command(build_app())
    for verb, cmd in group.commands.items():  # type: ignore[attr-defined]
        if any("--json" in p.opts for p in cmd.params):
            assert same_document.get(verb, verb) in SCHEMAS, f"{verb} --json has no schema id"


def test_ls_and_show(root: Path) -> None:
    doc = cli_json("ls", "ls", "--root", str(root))
    t = doc["totals"]
    rows = doc["entries"]
    assert t["entries"] == len(rows) == doc["root_totals"]["entries"] == 4
    assert t["size_bytes"] == sum(e["size_bytes"] for e in rows) == doc["total_size_bytes"]
    assert t["disk_bytes"] == sum(e["disk_bytes"] for e in rows)
    assert t["files"] == sum(e["files"] for e in rows)
    assert check_document(doc, "ls") >= 3 * len(rows)
    some = cli_json("ls", "ls", "--root", str(root), "--filter", "layout=aot")
    assert some["totals"]["entries"] == 2 and some["root_totals"] == t
    cli_json("ls-by-owner", "ls", "--root", str(root), "--by-owner")
    backend, aot = _keys(root)
    for k in (backend[0], aot[0]):
        show = cli_json("show", "show", k, "--root", str(root))
        assert show["manifests"] and check_document(show, "show") >= 4


def test_maintenance_verbs(root: Path) -> None:
    backend, _ = _keys(root)
    cli_json("verify", "verify", "--root", str(root), ok=(0, 1))
    cli_json("audit", "audit", "--root", str(root), ok=(0, 1))
    prune = cli_json("prune", "prune", "--root", str(root), "--older-than", "0s", "--grace",
                     "0", "--dry-run")
    assert prune["dry_run"] and prune["plan"]["entries"]
    assert check_document(prune, "prune") >= 1  # last_used of each planned entry
    cli_json("prune", "rm", backend[0], "--root", str(root), "--grace", "0", "--dry-run")
    assert len(_keys(root)[0]) == len(backend)  # dry runs removed nothing


def test_explain_and_diff_graph(root: Path) -> None:
    backend, _ = _keys(root)
    x = cli_json("explain", "explain", "--root", str(root), ok=(0, 1))
    assert "causes" in x
    cli_json("explain", "explain", "--logs", str(LOGS / "2-warm-start.log"),
             str(LOGS / "3-long-max-model-len-env.log"), ok=(0, 1))
    cli_json("diff-graph", "diff-graph", backend[0], backend[1], "--root", str(root),
             ok=(0, 1))


def test_log_documents() -> None:
    logs = sorted(str(p) for p in LOGS.glob("*.log"))
    doc = cli_json("log", "log", *logs)
    stamps = [v for _, k, v, _ in walk(doc) if k == "first_time" and v]
    assert stamps and all(LOG_STAMP.match(s) for s in stamps)
    cli_json("log-traced", "log", "--traced-files", *logs)
    cli_json("log-compare", "log", "--compare", logs[0], logs[1])


def test_log_stamps_get_a_year_and_a_zone() -> None:
    ref = datetime(2026, 1, 2, 12, 0).astimezone().timestamp()

    def iso(stamp: str) -> str:
        out = log_stamp_iso(stamp, ref)
        assert out is not None
        assert_iso_with_zone(stamp, out)
        return out

    assert iso("01-02 09:00:00").startswith("2026-01-02T09:00:00")
    # A December line in a log last written in January is from the year before.
    assert iso("12-31 23:59:59").startswith("2025-12-31T23:59:59")
    assert iso("02-29 10:00:00").startswith("2024-02-29")
    assert iso("01-02 09:00:00.250").startswith("2026-01-02T09:00:00.250")
    assert log_stamp_iso("yesterday", ref) is None
    doc = json.loads(log_json({"a": [{"first_time": "01-02 09:00:00", "last_time": None,
                                      "note": 'say "x_time": "01-02 09:00:00"'}]},
                              ["/nonexistent"]))
    assert doc["a"][0]["first_time_iso"] is not None and doc["a"][0]["last_time_iso"] is None
    assert set(doc["a"][0]) == {"first_time", "first_time_iso", "last_time", "last_time_iso",
                                "note"}


def test_predict_document() -> None:
    """predict's document without running vLLM (a real predict costs 20-50 s here; the CLI's
    keys, schema and causes included, are checked by test_predict.test_predict_cli_exit_codes
    over real vLLM)."""
    cause = {"component": "env", "item": "VLLM_X", "old": "0", "new": "1",
             "evidence": "manifest", "detail": None}
    raw = {"hit": False, "backend": {}, "aot": {}, "parts": {}, "reasons": [cause],
           "probe": None}
    doc = predict_document(raw)
    check_document(doc, "predict")
    # One word with explain; the old one stays one release as an alias.
    assert doc["causes"] == doc["reasons"] == [cause]
    assert predict_document({**raw, "schema": "x"})["schema"] == SCHEMAS["predict"]
