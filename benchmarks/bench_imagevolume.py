"""An ImageVolume-style cache root made writable by an overlay, against copying it, measured in
the same run (issue 28, item 3), and a real vLLM start on the overlay.

    sudo python benchmarks/bench_imagevolume.py [--copies 20] [--repeat 3] [--no-start]
    nox -s imagevolume                  (as root; nox -s bench skips it, saying so, when not)

What a node does with ``pack --format oci-image``: the runtime unpacks the image's one layer
(the bundle) into a folder and mounts it read-only in the pod; vLLM needs a writable root, so
the pod either lays an overlay over it (lower = the image, upper and work = an emptyDir) or
copies it first. Here, as root on loopback:

* the layer of a real start's cache (the harness scenario ``compile``, the cache start 0
  compiled), made with ``pack --format oci-image`` and unpacked as a runtime unpacks it, then
  bind-mounted read-only (the image volume);
* ``overlay``: ``mount -t overlay`` over it (mkdir upper/work included), against ``cp -a`` of
  it and ``vllm-cache unpack`` of the layer blob (copy with every check) into an empty root;
  the same at scale: ``--copies`` starts synthesized from that one (bench_fleet's
  ``synth_starts``);
* a real vLLM start (the scenario's start 0) with ``VLLM_CACHE_ROOT`` = the overlay's merged
  folder: it must load the AOT entry without compiling; what it wrote lands in the upper
  folder (listed), the read-only image is unchanged.

Needs root (``mount``) and the harness's vLLM venv (tests/realvllm). Results to
.bench/imagevolume.json; ``ratio`` = the copy's time / the overlay's (the goal: the overlay
costs less than the copy, ratio > 1, at every size)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.bench_fleet import entry_dirs, interleaved, report, synth_starts  # noqa: E402

CLI = str(Path(sys.executable).with_name("vllm-cache"))


def sh(*args: str) -> None:
    subprocess.run(list(args), check=True, capture_output=True)


def unpack_layer(layout: Path, into: Path) -> Path:
    """The image's layer unpacked as a runtime does it; returns the layer blob."""
    import zstandard

    blobs = layout / "blobs" / "sha256"
    index = json.loads((layout / "index.json").read_text())
    manifest = json.loads((blobs / index["manifests"][0]["digest"][7:]).read_text())
    blob = blobs / manifest["layers"][0]["digest"][7:]
    into.mkdir(parents=True)
    with blob.open("rb") as f, zstandard.ZstdDecompressor().stream_reader(f) as z, \
            tarfile.open(fileobj=z, mode="r|") as tar:
        tar.extractall(into, filter="data")
    return blob


class Mounts:
    def __init__(self) -> None:
        self.points: list[Path] = []

    def read_only(self, src: Path, at: Path) -> Path:
        at.mkdir(parents=True)
        sh("mount", "--bind", str(src), str(at))
        self.points.append(at)
        sh("mount", "-o", "remount,bind,ro", str(at))
        return at

    def overlay(self, lower: Path, base: Path) -> Path:
        for d in ("upper", "work", "merged"):
            (base / d).mkdir(parents=True)
        merged = base / "merged"
        sh("mount", "-t", "overlay", "overlay", "-o",
           f"lowerdir={lower},upperdir={base / 'upper'},workdir={base / 'work'}", str(merged))
        self.points.append(merged)
        return merged

    def umount(self, at: Path) -> None:
        sh("umount", str(at))
        self.points.remove(at)

    def close(self) -> None:
        for p in reversed(self.points):
            subprocess.run(["umount", "-l", str(p)], capture_output=True)
        self.points.clear()


def tree_files(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--copies", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-start", action="store_true", help="skip the vLLM start")
    ap.add_argument("--require-root", action="store_true",
                    help="not root is an error (exit 2), not a skip (nox -s imagevolume)")
    ns = ap.parse_args()
    if os.geteuid() != 0:
        print("bench_imagevolume: skipped: needs root (mount -t overlay); run it as root "
              "with nox -s imagevolume")
        return 2 if ns.require_root else 0
    import signal

    from tests.realvllm.harness import (
        SCENARIOS,
        model_lock,
        restore_pristine_sources,
        run_scenario,
        run_start,
        venv_python,
    )

    def stop(signum: int, frame: object) -> None:  # timeout(1) / Ctrl-C: unmount first
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    work = Path(tempfile.mkdtemp(prefix="bench-imagevolume-"))
    os.environ.setdefault("XDG_CACHE_HOME", str(work / "xdg"))
    load_before = os.getloadavg()[0]
    mounts = Mounts()
    results: dict[str, object] = {}
    ok = True
    try:
        scn = run_scenario(SCENARIOS["compile"])
        start = scn.scenario.starts[0]
        src = scn.before(1)
        keys = [p.name for p in entry_dirs(src)]
        res = subprocess.run([CLI, "pack", "--root", str(src), *keys, "--format", "oci-image",
                              "-o", str(work / "image"), "--json"],
                             capture_output=True, text=True)
        if res.returncode != 0:
            print(res.stderr)
            return 2
        blob = unpack_layer(work / "image", work / "layer")
        sizes: dict[str, Path] = {"real": work / "layer"}
        if ns.copies:
            sizes[f"x{ns.copies}"] = synth_starts(work / "layer", work / "many", ns.copies)
        n = [0]
        state: dict[str, Path] = {}

        def fresh() -> None:
            n[0] += 1
            for k in list(state):
                p = state.pop(k)
                if p in mounts.points:
                    mounts.umount(p)
                shutil.rmtree(p.parent if k == "overlay" else p, ignore_errors=True)

        for label, lower_src in sizes.items():
            lower = mounts.read_only(lower_src, work / f"ro-{label}")
            raw = sum(tree_files(lower).values())

            def overlay(lower: Path = lower, label: str = label) -> None:
                state["overlay"] = mounts.overlay(lower, work / f"ov-{label}-{n[0]}")

            def copy(lower: Path = lower, label: str = label) -> None:
                state["copy"] = work / f"cp-{label}-{n[0]}"
                sh("cp", "-a", str(lower), str(state["copy"]))

            cases = {"overlay": (overlay, fresh), "cp -a": (copy, fresh)}
            if label == "real":
                def unpack() -> None:
                    state["unpack"] = work / f"un-{n[0]}"
                    # --force: without the vLLM arguments the mega AOT entry's key is only
                    # linked by its sources, which unpack refuses by default (issue 23); the
                    # checks still run, as in the copy a pod would make.
                    sh(CLI, "unpack", str(blob), "--root", str(state["unpack"]), "--force")

                cases["vllm-cache unpack"] = (unpack, fresh)
            t = interleaved(cases, ns.repeat)  # type: ignore[arg-type]
            fresh()
            row: dict[str, object] = {"bytes": raw, "files": len(tree_files(lower))}
            row.update({f"{k}_s": v for k, v in t.items()})
            row["ratio_cp"] = t["cp -a"] / t["overlay"]
            if "vllm-cache unpack" in t:
                row["ratio_unpack"] = t["vllm-cache unpack"] / t["overlay"]
            ok = ok and row["ratio_cp"] > 1  # type: ignore[operator]
            results[label] = row

        if not ns.no_start:
            lower = work / "ro-real"
            before = tree_files(lower)
            merged = mounts.overlay(lower, work / "pod")
            (work / "log").mkdir()
            with model_lock():
                restore_pristine_sources()
            t0 = time.perf_counter()
            rec = run_start(venv_python(), merged, start, work / "log" / "start-0.log")
            wall = time.perf_counter() - t0
            log = rec.log.read_text(errors="replace")
            loaded = "Directly load AOT compilation" in log
            compiled = "Compiling a graph" in log or "saved AOT compiled function" in log
            upper = sorted(tree_files(work / "pod" / "upper"))
            results["vllm_start_on_overlay"] = {
                "returncode": rec.returncode, "loaded_aot": loaded, "compiled": compiled,
                "start_s": round(wall, 1), "upper_files": len(upper),
                "upper_sample": ", ".join(upper[:6]),
                "image_unchanged": tree_files(lower) == before}
            ok = ok and rec.returncode == 0 and loaded and not compiled
            mounts.umount(merged)
    finally:
        mounts.close()
        shutil.rmtree(work, ignore_errors=True)
    return report(results, load_before, ok, "imagevolume.json")


if __name__ == "__main__":
    raise SystemExit(main())
