"""push / pull through an OCI registry against ``skopeo copy`` of the same content, measured in
the same run (issue 28: goal >= 0.9x).

    python benchmarks/bench_oci.py [--copies 10] [--repeat 3] [--source ROOT]

Data: ``--copies`` starts synthesized from one real start (``--copies 0``: that start's
own entries, placed by the pull) (bench_fleet's ``synth_starts``:
the entries under new keys, with the ``model`` artifact and two kernels changed per copy);
the source is ``examples/sample_cache`` unless ``--source`` names another root. A real
registry on loopback (Debian's docker-registry, distribution 2.8, tests/oci_support.py).

* push: ``api.push`` of every entry to a fresh repository (nothing there before), against
  ``skopeo copy --all oci:LAYOUT docker://registry/fresh`` of the same artifacts (an OCI
  layout on local disk made once from what we pushed: the same blobs and manifests);
* pull: ``api.pull(force=True)`` of the pinning tag into an empty root (checked, proven and
  placed; ``force`` places the AOT entries whose key is only linked without the vLLM
  arguments), against
  ``skopeo copy --all docker://registry/repo:tag oci:FRESH-LAYOUT`` (written, not placed).

The cases run interleaved ``--repeat`` times, medians reported. ``ratio`` = skopeo's time /
ours (>= 0.9 meets the goal). ``cpu_s``: CPU seconds of this process (all its threads) or of
skopeo (a child), medians; the registry's own CPU is in neither. Results to .bench/oci.json;
exit 1 if a goal is missed."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.bench_fleet import CPU, entry_dirs, interleaved, report, synth_starts  # noqa: E402
from tests.oci_support import REGISTRY, Registry  # noqa: E402
from vllm_cache_tools.fleet import api  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--copies", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--source", type=Path, default=REPO / "examples" / "sample_cache")
    ns = ap.parse_args()
    for exe in (REGISTRY, "skopeo"):
        if not shutil.which(exe) and not Path(exe).is_file():
            print(f"{exe} not installed (apt-get install docker-registry skopeo)")
            return 2
    work = Path(tempfile.mkdtemp(prefix="bench-oci-"))
    os.environ.setdefault("XDG_CACHE_HOME", str(work / "xdg"))
    load_before = os.getloadavg()[0]
    (work / "registry").mkdir()
    reg = Registry(work / "registry", "registry")
    try:
        many = (synth_starts(ns.source, work / "many", ns.copies) if ns.copies
                else ns.source)
        keys = [p.name for p in entry_dirs(many)]
        raw = sum(p.stat().st_size for p in (many / "torch_compile_cache").rglob("*")
                  if p.is_file())
        n = iter(range(1_000_000))
        tls = ["--src-tls-verify=false", "--dest-tls-verify=false"]

        def push() -> None:
            r = api.push(keys, f"oci://{reg.host}/bench/ours-{next(n)}", root=many)
            assert all(e.action == "pushed" for e in r.entries)

        first = api.push(keys, f"oci://{reg.host}/bench/src:all", root=many)
        layout = work / "layout"
        subprocess.run(["skopeo", "copy", "--all", "--quiet", *tls,
                        f"docker://{reg.host}/bench/src:all", f"oci:{layout}:all"], check=True)

        def skopeo_push() -> None:
            subprocess.run(["skopeo", "copy", "--all", "--quiet", *tls, f"oci:{layout}:all",
                            f"docker://{reg.host}/bench/skopeo-{next(n)}:all"], check=True)

        pod = work / "pod"
        out = work / "out"

        def pull() -> None:
            # force: without the vLLM arguments an AOT entry's key is only linked by its
            # sources, which pull refuses by default (issue 23): the entries are then
            # downloaded, checked and proven, and their staging folder removed. A pod's
            # pull --if-hit gives the arguments and places them: so do we, with force.
            r = api.pull(f"oci://{reg.host}/bench/src:all", root=pod, force=True)
            assert r.bytes_downloaded > 0 and r.ok, r.placements

        def skopeo_pull() -> None:
            subprocess.run(["skopeo", "copy", "--all", "--quiet", *tls,
                            f"docker://{reg.host}/bench/src:all", f"oci:{out}:all"],
                           check=True)

        def clean(p: Path) -> None:
            shutil.rmtree(p, ignore_errors=True)

        t = interleaved({"push": (push, None), "skopeo_push": (skopeo_push, None),
                         "pull": (pull, lambda: clean(pod)),
                         "skopeo_pull": (skopeo_pull, lambda: clean(out))}, ns.repeat)
        results: dict[str, object] = {
            "data": {"entries": len(keys), "bytes": raw,
                     "blobs": first.blobs_uploaded, "blob_bytes": first.bytes_uploaded},
            "push": {"s": t["push"], "skopeo_s": t["skopeo_push"],
                     "ratio": t["skopeo_push"] / t["push"], "cpu_s": CPU["push"],
                     "skopeo_cpu_s": CPU["skopeo_push"]},
            "pull": {"s": t["pull"], "skopeo_s": t["skopeo_pull"],
                     "ratio": t["skopeo_pull"] / t["pull"], "cpu_s": CPU["pull"],
                     "skopeo_cpu_s": CPU["skopeo_pull"]},
        }
        ok = all(r["ratio"] >= 0.9 for k, r in results.items()  # type: ignore[index]
                 if k in ("push", "pull"))
        return report(results, load_before, ok, "oci.json")
    finally:
        reg.stop()
        shutil.rmtree(work, ignore_errors=True)
        time.sleep(0)


if __name__ == "__main__":
    sys.exit(main())
