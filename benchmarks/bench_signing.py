"""Benchmark the cost of signatures (issue 28: a signature check < 5 ms per entry), against
references measured in the same run.

    python benchmarks/bench_signing.py [--entries 200] [--repeat 5]

Data: a ``file://`` store with the example cache's four entries (examples/sample_cache) pushed
once signed and once unsigned, and ``--entries`` real index objects of that store (its bytes)
signed with a fresh ed25519 key (ssh-keygen).

* ``check``: :func:`vllm_cache_tools.fleet.trust.check` per index object (parse the armored
  signature, verify it, decide by the allowed_signers policy), in-process; reference
  ``sha256``: hashing the same index object (what every pull already does to each blob), and
  ``ssh-keygen``: ``ssh-keygen -Y verify`` of one signature (a process per entry). Goal:
  ``check`` < 5 ms per entry.
* ``pull --trust`` of the signed store vs ``pull`` of the unsigned one (same entries, same
  blobs, into empty roots, as CLI processes): the added wall time (one more object read per
  entry) as a ratio, medians of ``--repeat`` interleaved runs.
Results go to .bench/signing.json; exit 1 if the goal is missed."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from vllm_cache_tools.fleet import sshsig  # noqa: E402
from vllm_cache_tools.fleet.trust import check, load_policy, load_signing_key  # noqa: E402

CLI = str(Path(sys.executable).parent / "vllm-cache")


def _run(*args: str) -> float:
    t0 = time.perf_counter()
    r = subprocess.run([CLI, *args], capture_output=True, text=True)
    if r.returncode not in (0, 1):
        raise SystemExit(f"{args}: {r.returncode} {r.stderr}")
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--entries", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    d = Path(tempfile.mkdtemp(prefix="bench-signing-"))
    try:
        src = d / "src"
        shutil.copytree(REPO / "examples" / "sample_cache", src)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / "k")],
                       check=True)
        pub = " ".join((d / "k.pub").read_text().split()[:2])
        policy_file = d / "allowed_signers"
        policy_file.write_text(f'ci@example.com namespaces="vllm-cache" {pub}\n')
        signed, plain = f"file://{d}/signed", f"file://{d}/plain"
        _run("push", "--root", str(src), "28fd", "39ec", signed, "--sign", str(d / "k"))
        _run("push", "--root", str(src), "28fd", "39ec", plain)
        key = load_signing_key(d / "k")
        policy = load_policy(policy_file)
        index = sorted((d / "signed" / "entries").rglob("*.json"))
        bodies = [index[i % len(index)].read_bytes() + b" " * (i // len(index))
                  for i in range(a.entries)]
        sigs = [key.sign(b) for b in bodies]

        t0 = time.perf_counter()
        for b in bodies:
            hashlib.sha256(b).hexdigest()
        sha_ms = (time.perf_counter() - t0) * 1000 / len(bodies)
        t0 = time.perf_counter()
        for b, s in zip(bodies, sigs, strict=True):
            assert check(s, hashlib.sha512(b).digest(), policy).trusted
        check_ms = (time.perf_counter() - t0) * 1000 / len(bodies)
        n = min(20, len(bodies))
        t0 = time.perf_counter()
        for b, s in zip(bodies[:n], sigs[:n], strict=True):
            (d / "m.sig").write_bytes(s)
            subprocess.run(["ssh-keygen", "-Y", "verify", "-f", str(policy_file), "-I",
                            "ci@example.com", "-n", sshsig.NAMESPACE, "-s", str(d / "m.sig")],
                           input=b, capture_output=True, check=True)
        ssh_ms = (time.perf_counter() - t0) * 1000 / n

        trust_s, plain_s = [], []
        for i in range(a.repeat):
            plain_s.append(_run("pull", plain, "--root", str(d / f"p{i}")))
            trust_s.append(_run("pull", signed, "--root", str(d / f"t{i}"), "--trust",
                                str(policy_file)))
        load = os.getloadavg()[0]
        out = {
            "entries": len(bodies),
            "check_ms_per_entry": round(check_ms, 3),
            "sha256_ms_per_entry": round(sha_ms, 4),
            "ssh_keygen_verify_ms_per_entry": round(ssh_ms, 2),
            "check_vs_ssh_keygen": round(ssh_ms / check_ms, 1),
            "pull_trust_s": round(statistics.median(trust_s), 3),
            "pull_plain_s": round(statistics.median(plain_s), 3),
            "pull_trust_ratio": round(statistics.median(trust_s) / statistics.median(plain_s), 3),
            "store_entries": 4,
            "load_average": round(load, 2),
            "goal_check_under_5ms": check_ms < 5.0,
        }
        (REPO / ".bench").mkdir(exist_ok=True)
        (REPO / ".bench" / "signing.json").write_text(json.dumps(out, indent=1) + "\n")
        print(json.dumps(out, indent=1))
        return 0 if out["goal_check_under_5ms"] else 1
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
