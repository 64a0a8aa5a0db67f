"""The streaming ``prune --yes`` (maintain/stream.py): each entry judged and moved as the scan
reads it, with the scan's worker processes running (enough entries for the process pool),
against the two-phase plan of an identical tree. Entries cloned from a real root
(benchmarks/synth.py) to have ~100 entries; the live holder is a real process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.synth import generate
from tests.conftest import run_cli
from tests.realvllm.harness import ScenarioRun
from tests.trees import files_of, trash_items
from vllm_cache_tools.maintain.stream import STREAMED_NOTE


def _entries(root: Path) -> set[str]:
    cc = root / "torch_compile_cache"
    return ({p.name for p in cc.iterdir() if not p.name.startswith(".")} - {"torch_aot_compile"}
            | {p.name for p in (cc / "torch_aot_compile").iterdir()})


def test_streamed_prune_matches_the_plan_and_keeps_what_is_held(
        real_compile: ScenarioRun, tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    generate(a, [real_compile.vllm_root], 2500)
    generate(b, [real_compile.vllm_root], 2500)  # same seed: the same keys and files
    assert _entries(a) == _entries(b) and len(_entries(a)) >= 60
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep")
    before_outside = files_of(outside)
    cc = a / "torch_compile_cache"
    aots = sorted((cc / "torch_aot_compile").iterdir())
    # A link planted in an entry, to a folder outside: removed as a link, never followed.
    next(aots[3].glob("rank_*")).joinpath("escape").symlink_to(outside)
    # A live process holding one entry's model open (as a loading vLLM does).
    held = next(aots[0].glob("rank_*/model"))
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys,time; f=open(sys.argv[1],'rb'); print(1, flush=True);"
         " time.sleep(120)", str(held)], stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"1"
        dry = run_cli("prune", "--root", str(b), "--older-than", "0s", "--grace", "0",
                      "--dry-run", "--json")
        assert dry.returncode == 0, dry.stderr
        t0 = time.monotonic()
        r = run_cli("prune", "--root", str(a), "--older-than", "0s", "--grace", "0", "--yes",
                    "--json")
        took = time.monotonic() - t0
        assert r.returncode == 0, r.stderr
    finally:
        holder.kill()
        holder.wait()
    got, plan = json.loads(r.stdout), json.loads(dry.stdout)
    # The same document shape as the two-phase path's, plus the note that it streamed.
    # (a dry run's document has no outcome: deleted, failed, ...)
    assert set(plan) < set(got) and set(got["plan"]) == set(plan["plan"])
    assert STREAMED_NOTE in got["plan"]["notes"]
    assert set(got["plan"]["entries"][0]) == set(plan["plan"]["entries"][0])
    planned = {e["key"] for e in plan["plan"]["entries"]}
    assert planned == _entries(b)
    kept = {s["key"]: s["reason"] for s in got["skipped"]}
    assert list(kept) == [aots[0].name]
    assert kept[aots[0].name].startswith(f"in use: open by pid {holder.pid}")
    assert set(got["deleted"]) == planned - {aots[0].name}
    assert got["failed"] == [] and _entries(a) == {aots[0].name}
    assert files_of(outside) == before_outside and trash_items(a) == []
    # Freed: what the planned run would free, plus the planted link (its target's length).
    assert got["freed_bytes"] == sum(e["size_bytes"] for e in plan["plan"]["entries"]
                                     if e["key"] != aots[0].name) + len(str(outside))
    assert took < 120
    # Held no more: the next streamed run takes it, and prints the plan it followed first.
    text = run_cli("prune", "--root", str(a), "--older-than", "0s", "--grace", "0", "--yes")
    assert text.returncode == 0, text.stderr
    out = text.stdout
    assert out.startswith("Plan: remove 1 of 1 entries") and STREAMED_NOTE in out
    assert "\ndeleted 1 entries, freed " in out
    assert _entries(a) == set() and trash_items(a) == []


def test_whole_root_policies_keep_the_plan_first(real_compile: ScenarioRun,
                                                  tmp_path: Path) -> None:
    """--max-size needs every entry first: the plan is printed before the run's outcome,
    without the streaming note."""
    a = tmp_path / "a"
    generate(a, [real_compile.vllm_root], 600)
    r = run_cli("prune", "--root", str(a), "--max-size", "0", "--grace", "0", "--yes")
    assert r.returncode == 0, r.stderr
    assert STREAMED_NOTE not in r.stdout and r.stdout.startswith("Plan: remove")
    assert "deleted" in r.stdout and _entries(a) == set()
    assert os.listdir(a / "torch_compile_cache" / ".vllm-cache-trash") == ["locks"]
