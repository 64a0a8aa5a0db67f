"""Where a probe standby's answer goes (issue 24; run on the lent H200 by
benchmarks/gpu/standby_profile.sh). Given as predict's ``--python`` through a shell wrapper:
a standby (``probe.py --standby ...``) runs with its ``answer()`` under cProfile and writes
the profile, its phase timings and the modules it imported to ``$VCT_PROF_OUT``; any other
command line is handed to the real interpreter (``$VCT_REAL_PYTHON``) unchanged."""

from __future__ import annotations

import cProfile
import importlib.util
import io
import os
import pstats
import sys
import time
from typing import Any

REAL = os.environ.get("VCT_REAL_PYTHON", "/usr/bin/python3")
OUTD = os.environ.get("VCT_PROF_OUT", "/tmp/prof")
SHOWN = ("vllm.model", "vllm.attention", "vllm.v1", "transformers.models", "triton",
         "vllm.distributed", "vllm.platforms")


def _report(n: int, wall: float, req: dict[str, Any], out: dict[str, Any],
            new: list[str], pr: cProfile.Profile) -> None:
    tops: dict[str, int] = {}
    for m in new:
        tops[m.split(".")[0]] = tops.get(m.split(".")[0], 0) + 1
    text = io.StringIO()
    st = pstats.Stats(pr, stream=text)
    st.sort_stats("cumulative").print_stats(110)
    st.sort_stats("tottime").print_stats(40)
    by_count = sorted(tops.items(), key=lambda x: -x[1])[:30]
    with open(f"{OUTD}/answer-{n}.txt", "w") as f:
        f.write(f"wall {wall:.3f}s args={req.get('args')} timings={out.get('timings')} "
                f"inductor_from={out.get('inductor_from')}\n")
        f.write(f"new modules {len(new)} by top: {by_count}\n")
        f.write("\n".join(m for m in new if m.startswith(SHOWN))[:20000])
        f.write("\n\n" + text.getvalue())
    pr.dump_stats(f"{OUTD}/answer-{n}.prof")


def main() -> None:
    args = sys.argv[1:]
    if not (len(args) >= 2 and args[0].endswith("probe.py") and args[1] == "--standby"):
        os.execv(REAL, [REAL, *args])
    spec = importlib.util.spec_from_file_location("vct_probe_main", args[0])
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["vct_probe_main"] = mod
    spec.loader.exec_module(mod)
    orig = mod.answer

    def profiled(req: dict[str, Any]) -> dict[str, Any]:
        os.makedirs(OUTD, exist_ok=True)
        n = len(os.listdir(OUTD))
        before = set(sys.modules)
        pr = cProfile.Profile()
        t0 = time.perf_counter()
        out: dict[str, Any] = {}
        pr.enable()
        try:
            out = orig(req)
            return out
        finally:
            pr.disable()
            _report(n, time.perf_counter() - t0, req, out, sorted(set(sys.modules) - before),
                    pr)

    mod.answer = profiled  # type: ignore[attr-defined]
    sys.argv = args
    mod.main()


if __name__ == "__main__":
    main()
