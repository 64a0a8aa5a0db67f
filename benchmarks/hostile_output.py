"""Issue 23 figures, items 7 and 8, on a copy of a real root (``nox -s hostile``):

(a) raw control bytes in every human output: each verb that prints data from a cache, log,
    manifest, bundle or store runs under a real pseudo-terminal over a copy of the ``sample``
    scenario's root whose every data source was planted with escape sequences (OSC title set,
    erase screen, C1 CSI, DEL, bidi override and isolate) and a password in a model URL
    (tests/output_hostile.py); counted: control characters that reached the terminal other
    than line breaks and tabs, plain (``TERM=dumb``) and styled (``xterm-256color``, the
    tool's own SGR sequences and its transient progress bar's cursor moves left out). A figure
    per verb; the total must be 0.
(b) secrets in any output, bundle or store object: the password counted in every output of
    (a), in ``--json`` outputs of the same verbs, in a bundle packed and a store pushed from
    the real root, in a bundle manifest and an index object written from a record holding the
    URL, and in what pack and push of the planted root leave (they refuse).

``--before CHECKOUT`` runs the same verbs from another checkout of this package (e.g. the main
branch before this change) as the reference measured in the same run. Prints a table;
``--json PATH`` writes the figures; exit 1 when a figure of this checkout is not 0.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.output_hostile import (  # noqa: E402
    MODEL_URL,
    PASSWORD,
    cli,
    human_env,
    plant,
    raw_controls,
    run_pty,
    verbs,
)
from tests.realvllm.harness import SCENARIOS, run_scenario  # noqa: E402

_MAIN = ("import sys; sys.path.insert(0, sys.argv.pop(1)); from vllm_cache_tools.cli import "
         "main; sys.argv[0] = 'vllm-cache'; sys.exit(main())")
JSON_VERBS = ("ls", "show aot (manifest)", "audit", "stats", "stats --by host", "drift",
              "log", "ls URL", "stats URL")


def _argv(checkout: Path | None) -> list[str]:
    return [cli()] if checkout is None else [sys.executable, "-c", _MAIN, str(checkout)]


def _count_raw(out: str, styled: bool) -> int:
    from tests.output_hostile import _RAW, TOOL_STYLING

    text = TOOL_STYLING.sub("", out) if styled else out
    return sum(1 for c in _RAW.findall(text) if c not in "\n\t")


def _objects_secrets(h: object, tmp: Path) -> dict[str, int]:
    """The password in bundles and store objects this tool writes."""
    import zstandard

    from vllm_cache_tools.fleet.bundle import manifest_bytes
    from vllm_cache_tools.fleet.records import BundleManifest
    from vllm_cache_tools.fleet.redacted import redacted_record
    from vllm_cache_tools.fleet.remote import index_bytes
    from vllm_cache_tools.fleet.selection import select

    pw = PASSWORD.encode()
    out: dict[str, int] = {}
    clean, aot_key = h.clean, h.aot_key  # type: ignore[attr-defined]
    rec = select(clean, [aot_key]).records[0]
    leaky = replace(rec, checkpoint=MODEL_URL,
                    env_factors={**rec.env_factors, "HF_TOKEN": "hf_" + PASSWORD * 3})
    out["bundle manifest of a record with the URL"] = manifest_bytes(
        BundleManifest((redacted_record(leaky),))).count(pw)
    out["index object of a record with the URL"] = index_bytes(
        redacted_record(leaky), (), {}, 0.0).count(pw)
    bundle = tmp / "secrets.tzst"
    env = dict(os.environ)
    subprocess.run([cli(), "pack", "--root", str(clean), aot_key, "-o", str(bundle)],
                   env=env, capture_output=True, timeout=300, check=True)
    with bundle.open("rb") as f:
        data = zstandard.ZstdDecompressor().stream_reader(f, read_across_frames=True).read()
    out["bundle packed from the real root"] = data.count(pw)
    store = tmp / "secrets-store"
    subprocess.run([cli(), "push", "--root", str(clean), aot_key, f"file://{store}"],
                   env=env, capture_output=True, timeout=300, check=True)
    out["store pushed from the real root"] = sum(p.read_bytes().count(pw)
                                                 for p in store.rglob("*") if p.is_file())
    return {**out, **_left_by_pack_and_push(h, tmp / "refused", [cli()])}


def _left_by_pack_and_push(h: object, left: Path, argv: list[str]) -> dict[str, int]:
    """The password in what pack and push of the planted root write and print (the bundle
    decompressed, every store object)."""
    import zstandard

    pw = PASSWORD.encode()
    out: dict[str, int] = {}
    left.mkdir(parents=True, exist_ok=True)
    for verb in ("pack", "push"):
        target = [str(left / "b.tzst")] if verb == "pack" else [f"file://{left / 'store'}"]
        args = [*argv, verb, "--root", str(h.root), h.aot_key,  # type: ignore[attr-defined]
                *(["-o"] if verb == "pack" else []), *target]
        res = subprocess.run(args, env=dict(os.environ), capture_output=True, timeout=300)
        written = 0
        made = left / ("b.tzst" if verb == "pack" else "store")
        for p in ([made] if made.is_file() else made.rglob("*") if made.exists() else ()):
            if p.is_file():
                data = p.read_bytes()
                if p.suffix == ".tzst":
                    data = zstandard.ZstdDecompressor().stream_reader(
                        p.open("rb"), read_across_frames=True).read()
                written += data.count(pw)
        out[f"{verb} of the planted root (exit {res.returncode})"] = (
            written + (res.stdout + res.stderr).count(pw))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", type=Path, help="a checkout to measure as the reference")
    ap.add_argument("--json", type=Path, help="write the figures here")
    ap.add_argument("--quick", action="store_true", help="(accepted for nox -s hostile)")
    args = ap.parse_args()
    t0 = time.monotonic()
    run = run_scenario(SCENARIOS["sample"])
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="vct-hostile-output-") as d:
        tmp = Path(d)
        h = plant(run.vllm_root, [run.records[0].log, run.records[2].log], tmp, os.environ)
        checkouts: list[tuple[str, Path | None]] = [("this", None)]
        if args.before is not None:
            checkouts.append(("before", args.before.resolve()))
        for name, argv in verbs(h).items():
            row: dict[str, object] = {"verb": name}
            for label, checkout in checkouts:
                for styled in (False, True):
                    if name.startswith(("unpack", "pull")):  # a fresh root for each run
                        i = argv.index("--root") + 1
                        argv = [*argv[:i], str(tmp / f"{name.split()[0]}-{label}-{styled}"),
                                *argv[i + 1:]]
                    _, out = run_pty([*_argv(checkout), *argv], human_env(os.environ, styled))
                    key = f"{label} {'styled' if styled else 'plain'}"
                    row[f"{key} raw"] = _count_raw(out, styled)
                    row[f"{key} secrets"] = out.count(PASSWORD)
                    row[f"{key} traceback"] = int("Traceback" in out)
                if name in JSON_VERBS:
                    res = subprocess.run([*_argv(checkout), *argv, "--json"], env=dict(
                        os.environ), capture_output=True, text=True, timeout=300)
                    row[f"{label} json secrets"] = (res.stdout + res.stderr).count(PASSWORD)
                    row[f"{label} json raw"] = len(raw_controls(res.stdout))
            rows.append(row)
        objects = _objects_secrets(h, tmp)
        before_objects = {} if args.before is None else _left_by_pack_and_push(
            h, tmp / "before-objects", _argv(args.before.resolve()))
    figures = {"verbs": rows, "objects": objects, "before_objects": before_objects,
               "seconds": round(time.monotonic() - t0, 1)}
    _print(rows, objects, [c[0] for c in checkouts])
    for k, v in before_objects.items():
        print(f"  reference (--before): {v:>3}  {k}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    bad = sum(int(v) for r in rows for k, v in r.items() if k.startswith("this ")
              and isinstance(v, int)) + sum(objects.values())
    print(f"\n{'FAIL' if bad else 'OK'}: {bad} raw control characters, secrets and tracebacks "
          f"in this checkout's outputs and objects ({figures['seconds']} s)")
    return 1 if bad else 0


def _print(rows: list[dict[str, object]], objects: dict[str, int], labels: list[str]) -> None:
    cols = [f"{lab} {kind}" for lab in labels
            for kind in ("plain raw", "styled raw", "plain secrets", "json secrets")]
    head = ["verb", *cols]
    table = [head] + [[str(r["verb"]), *(str(r.get(c, "-")) for c in cols)] for r in rows]
    widths = [max(len(x[i]) for x in table) for i in range(len(head))]
    for line in table:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                        for i, (c, w) in enumerate(zip(line, widths, strict=True))))
    print("\nsecrets in what this checkout writes:")
    for k, v in objects.items():
        print(f"  {v:>3}  {k}")


if __name__ == "__main__":
    raise SystemExit(main())
