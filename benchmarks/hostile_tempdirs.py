"""Issue 23 figures, items 1, 2 and 9 (``nox -s hostile``):

(a) temp folders and named outputs: every attack of tests/tempdir_attacks.py (a second real
    uid plants links and folders in a mode-1777 folder used as ``$TMPDIR`` and as the output
    folder, ``fs.protected_symlinks=0``), with ``vllm-cache`` run as root and as another
    user: names changed outside the intended folders (a victim's folder recorded exactly,
    the attacker's own folder), parts a prune plan put outside them, and whether the tool
    said what it skipped or refused. Every count must be 0.
(b) deep JSON: 200,000-deep text as a bundle manifest, a store index object, a store
    marker, a recorder manifest and a host profile: runs that ended in an internal error
    (exit 3) or a traceback (must be 0); and what the depth check costs, against
    ``json.loads`` of the same 10^6-object manifest in the same run (a ratio; paths as real
    ones, and the worst case: a bracket in every string).

Prints two tables; ``--json PATH`` writes the figures; exit 1 when a count is not 0. Needs
root for the second uid and the sysctl (without it: (b) only).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests import tempdir_attacks as attacks  # noqa: E402
from tests.conftest import run_cli  # noqa: E402
from vllm_cache_tools.read import jsontext  # noqa: E402

DEEP = b"[" * 200_000 + b"]" * 200_000
DEEP_OBJ = b'{"a":' * 100_000 + b"1" + b"}" * 100_000


def table(rows: list[list[str]], head: list[str]) -> str:
    w = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    fmt = "  ".join(f"{{:<{x}}}" for x in w)
    return "\n".join([fmt.format(*head), fmt.format(*("-" * x for x in w)),
                      *(fmt.format(*r) for r in rows)])


def temp_attacks() -> tuple[list[dict[str, object]], int]:
    rows: list[dict[str, object]] = []
    bad = 0
    for name in attacks.ATTACKS:
        for as_user in (False, True):
            t0 = time.perf_counter()
            o = attacks.play(name, as_user)
            rows.append({"attack": name, "runner": "user" if as_user else "root",
                         "changed_outside": o.changed, "planned_outside": o.planned_outside,
                         "said": o.said, "seconds": round(time.perf_counter() - t0, 2)})
            bad += o.changed + o.planned_outside + (not o.said)
    return rows, bad


def _bundle_with(manifest: bytes, work: Path) -> Path:
    good = work / "good.tar.zst"
    r = run_cli("pack", "--root", str(attacks.SAMPLE), attacks.AOT[:8], "-o", str(good))
    assert r.returncode == 0, r.stderr
    import zstandard

    with open(good, "rb") as f, zstandard.ZstdDecompressor().stream_reader(f) as z, \
            tarfile.open(fileobj=z, mode="r|") as tar:
        first = tar.next()
        assert first is not None
    first.size = len(manifest)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as out:
        out.addfile(first, io.BytesIO(manifest))
    bad = work / "deep.tar.zst"
    bad.write_bytes(zstandard.ZstdCompressor().compress(buf.getvalue()))
    return bad


def deep_json() -> tuple[list[dict[str, object]], int, dict[str, float]]:
    work = Path(tempfile.mkdtemp(prefix="vct-deep-"))
    rows: list[dict[str, object]] = []
    try:
        store = work / "store"
        assert run_cli("push", "--root", str(attacks.SAMPLE), attacks.AOT[:8],
                       f"file://{store}").returncode == 0
        idx = sorted((store / "entries").rglob("*.json"))[0]
        idx.write_bytes(DEEP)
        marker_store = work / "store2"
        shutil.copytree(store, marker_store)
        (marker_store / "vllm-cache-store.json").write_bytes(DEEP_OBJ)
        root = work / "root"
        shutil.copytree(attacks.SAMPLE, root, symlinks=True)
        manifest = next((root / "torch_compile_cache" / "28fd362d4e").rglob("vct-manifest.*"))
        manifest.write_bytes(DEEP_OBJ)
        profile = work / "profile.json"
        profile.write_bytes(DEEP_OBJ)
        cases = {
            "bundle manifest (unpack)": ["unpack", str(_bundle_with(DEEP, work)), "--root",
                                         str(work / "r2")],
            "store index (ls URL)": ["ls", f"file://{store}"],
            "store index (pull)": ["pull", f"file://{store}", "--root", str(work / "r3")],
            "store marker (ls URL)": ["ls", f"file://{marker_store}"],
            "recorder manifest (show)": ["show", "--root", str(root), "28fd362d4e"],
            "recorder manifest (--for-host)": ["predict", "--for-host", str(manifest),
                                               "--root", str(root), "--", "/m"],
            "host profile (--for-host)": ["predict", "--for-host", str(profile), "--root",
                                          str(attacks.SAMPLE), "--", "/m"],
        }
        bad = 0
        for name, args in cases.items():
            r = run_cli(*args)
            internal = r.returncode == 3 or "Traceback" in r.stderr
            bad += internal
            rows.append({"input": name, "exit": r.returncode, "internal_error": internal,
                         "stderr_lines": r.stderr.count("\n")})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    cost: dict[str, float] = {}
    for label, path in (("typical", b"rank_0_0/inductor_cache/fx/ab"),
                        ("brackets_in_every_string", b"a/b[c]")):
        big = b'{"files":[' + b",".join(b'{"p":"' + path + b'","s":1}'
                                         for _ in range(1_000_000)) + b"]}"
        t_check, t_loads = [], []
        for _ in range(3):
            t0 = time.perf_counter()
            jsontext.text_depth_over(big, jsontext.MAX_DEPTH)
            t_check.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            json.loads(big)
            t_loads.append(time.perf_counter() - t0)
        cost[f"{label}_mb"] = round(len(big) / 1e6, 1)
        cost[f"{label}_check_s"] = round(statistics.median(t_check), 3)
        cost[f"{label}_loads_s"] = round(statistics.median(t_loads), 3)
        cost[f"{label}_ratio"] = round(statistics.median(t_check) / statistics.median(t_loads),
                                       2)
    return rows, bad, cost


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="accepted (every figure is quick)")
    ap.add_argument("--json", type=Path)
    ns = ap.parse_args()
    figures: dict[str, object] = {}
    bad = 0
    if os.geteuid() == 0:
        rows, b = temp_attacks()
        bad += b
        figures["temp_attacks"] = rows
        print("(a) temp folders and named outputs, fs.protected_symlinks=0 "
              "(changed outside / planned outside / said)")
        by: dict[str, dict[str, str]] = {}
        for r in rows:
            by.setdefault(str(r["attack"]), {})[str(r["runner"])] = (
                f"{r['changed_outside']} / {r['planned_outside']} / "
                f"{'yes' if r['said'] else 'NO'}")
        print(table([[a, v.get("root", "-"), v.get("user", "-")] for a, v in by.items()],
                    ["attack", "as root", "as a second uid"]))
    else:
        print("(a) skipped: needs root for the second uid and fs.protected_symlinks")
    rows2, b2, cost = deep_json()
    bad += b2
    figures["deep_json"] = rows2
    figures["depth_check_cost"] = cost
    print("\n(b) JSON nested 200,000 deep (exit status; internal errors must be 0)")
    print(table([[str(r["input"]), str(r["exit"]), str(int(bool(r["internal_error"])))]
                 for r in rows2], ["input", "exit", "internal error"]))
    for label in ("typical", "brackets_in_every_string"):
        print(f"\ndepth check of a {cost[label + '_mb']} MB manifest of 10^6 file objects "
              f"({label.replace('_', ' ')}): {cost[label + '_check_s']} s; json.loads of it: "
              f"{cost[label + '_loads_s']} s (ratio {cost[label + '_ratio']})")
    if ns.json:
        ns.json.write_text(json.dumps(figures, indent=1) + "\n")
    print(f"\n{'all counts 0' if not bad else f'{bad} non-zero counts'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
