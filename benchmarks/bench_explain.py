"""Benchmark: ``explain`` of two real entries, source diffs included (issue #4: < 1 s).

    python benchmarks/bench_explain.py [--repeat 5]

Two backend entries of the harness's "variants" scenario (a comment appended to the traced
llama.py between them): the whole ``vllm-cache explain A B --json`` process, which reads both
entries and every AOT entry of the root in full, proves which sources each was compiled from
and diffs them. Reported next to ``vllm-cache ls --json`` of the same root in the same run.
Results in .bench/explain.json; exit 1 if the median is >= 1 s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.realvllm.harness import SCENARIOS, run_scenario  # noqa: E402


def timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode not in (0, 1):
        raise SystemExit(r.stderr)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    run = run_scenario(SCENARIOS["variants"])
    keys = [run.log(i).split("Using cache directory: ", 1)[1].split("/rank_")[0]
            for i in (0, 3)]
    exe = str(Path(sys.executable).parent / "vllm-cache")
    explain = [exe, "explain", *keys, "--json"]
    ls = [exe, "ls", "--json", "--root", str(run.vllm_root)]
    rows: dict[str, list[float]] = {"explain": [], "ls": []}
    for _ in range(a.repeat):
        rows["explain"].append(timed(explain))
        rows["ls"].append(timed(ls))
    med = {k: statistics.median(v) for k, v in rows.items()}
    result = {"explain_s": round(med["explain"], 3), "ls_same_root_s": round(med["ls"], 3),
              "ratio_to_ls": round(med["explain"] / med["ls"], 2), "goal_s_max": 1.0,
              "met": med["explain"] < 1.0}
    (REPO / ".bench").mkdir(exist_ok=True)
    (REPO / ".bench" / "explain.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0 if result["met"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
