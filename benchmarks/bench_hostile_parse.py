"""Benchmark: every reader on hostile artifacts up to 10 MB, one child process per artifact.

    python benchmarks/bench_hostile_parse.py [--only SUBSTRING] [--timeout 60]

Artifacts (tests/fuzz/hostile.py): pickle bombs (allowed-constructor, memo-index, tuple-DAG
hash, hash-flood, deep-nesting, list-DAG, many-globals, huge-int, 10 MB of one-byte opcodes,
BUILD on the reader's own functions), nested / huge-int / container-heavy JSON (factors,
manifests, ledger lines), Python-literal bombs (``vllm_compile_cache.py``), regex bombs
(``computation_graph.py``, vLLM logs) and 10 MB files of each kind; the real sample artifacts
are read the same way as reference rows, with a child that only imports as the baseline.

Each artifact is written where its reader looks and read by every reader of that file (both
AOT model reads, the listing's graph fast path, the graph diff, the ledger's usage summary,
the log stream) in a child process (tests/fuzz/isolated.py). Reported per artifact: outcome
(``ok`` or ``ReadError``: anything else is a failure), read time (CPU, and wall beside it:
on a shared machine other work stretches wall time), and the child's peak RSS (``wait4``;
interpreter and imports included). Goals (issue 12): peak RSS < 300 MB and read time < 1 s
for every artifact. ``diff-graph`` of a graph against an edited copy is reported too (rows
"graph diff, ...": a comparison the user asks for, not the reading of a file; not in the
goals). Exit status 1 when a goal is missed. Results also go to .bench/hostile_parse.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.fuzz.hostile import ARTIFACTS, REAL  # noqa: E402
from tests.fuzz.isolated import Result, run_isolated  # noqa: E402

RSS_GOAL_MB = 300
TIME_GOAL_S = 1.0
MAX_BYTES = 10 * 1024 * 1024 + 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="artifacts whose name contains this")
    ap.add_argument("--timeout", type=float, default=60.0)
    a = ap.parse_args()
    names = ["baseline (imports only)", *REAL, *ARTIFACTS]
    names = [n for n in names if a.only.lower() in n.lower()]
    kinds = {**{n: k for n, (k, _) in ARTIFACTS.items()},
             **{n: k for n, (k, _) in REAL.items()}, "baseline (imports only)": "-"}
    rows: list[Result] = []
    print(f"{'artifact':36s} {'read as':22s} {'bytes':>10s} {'outcome':10s} {'CPU s':>6s} "
          f"{'wall s':>6s} {'peak RSS MB':>11s}", flush=True)
    for n in names:
        r = run_isolated(n, timeout=a.timeout)
        rows.append(r)
        flag = "" if (r.outcome in ("ok", "ReadError") and r.cpu_s < TIME_GOAL_S
                      and r.peak_rss_mb < RSS_GOAL_MB) else "  <-- goal missed"
        if kinds[n] == "graph diff":
            flag = "  (a comparison, not in the goals)" if r.outcome == "ok" else "  <-- failed"
        print(f"{n:36s} {kinds[n][:22]:22s} {r.bytes:10,d} {r.outcome[:40]:10s} "
              f"{r.cpu_s:6.3f} {r.seconds:6.3f} {r.peak_rss_mb:11.1f}{flag}", flush=True)
    hostile = [r for r in rows if r.name in ARTIFACTS and kinds[r.name] != "graph diff"]
    failures = [r.name for r in rows if r.outcome not in ("ok", "ReadError")]
    too_big = [r.name for r in hostile if r.bytes > MAX_BYTES]
    worst_t = max(hostile, key=lambda r: r.cpu_s, default=None)
    worst_m = max(hostile, key=lambda r: r.peak_rss_mb, default=None)
    result = {
        "artifacts": len(hostile),
        "largest_artifact_bytes": max((r.bytes for r in hostile), default=0),
        "max_read_cpu_s": round(worst_t.cpu_s, 3) if worst_t else None,
        "max_read_wall_s": round(max(r.seconds for r in hostile), 3) if hostile else None,
        "max_read_cpu_s_artifact": worst_t.name if worst_t else None,
        "max_peak_rss_mb": round(worst_m.peak_rss_mb, 1) if worst_m else None,
        "max_peak_rss_artifact": worst_m.name if worst_m else None,
        "baseline_rss_mb": next((round(r.peak_rss_mb, 1) for r in rows
                                 if r.name.startswith("baseline")), None),
        "not_read_error": failures,
        "over_10_mb": too_big,
        "goals": {"peak_rss_mb_max": RSS_GOAL_MB, "read_cpu_s_max": TIME_GOAL_S},
        "rows": [r.__dict__ for r in rows],
    }
    result["met"] = bool(hostile) and not failures and not too_big and \
        result["max_read_cpu_s"] < TIME_GOAL_S and result["max_peak_rss_mb"] < RSS_GOAL_MB
    bench = REPO / ".bench"
    bench.mkdir(exist_ok=True)
    (bench / "hostile_parse.json").write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}, indent=2))
    return 0 if result["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
