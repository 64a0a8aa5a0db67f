"""Issue 28's whole chain with real parts, one vLLM start: a harness root (a real vLLM's
cache) -> ``pack --sign`` -> ``unpack --trust`` (the bundle's signature checked) -> ``push
--sign`` to an ``oci://`` store (Debian's docker-registry on loopback) -> ``pull --if-hit
--trust --require-signature`` into an empty root -> a real vLLM start loads without compiling.
The same entries in the registry with one byte of provenance changed, re-signed by a key the
policy does not list, or unsigned: refused (exit 1), nothing placed."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.oci_support import Registry
from tests.oci_support import registry as registry
from tests.realvllm.harness import (
    ScenarioRun,
    model_lock,
    restore_pristine_sources,
    run_start,
    start_env,
    venv_python,
)
from vllm_cache_tools.fleet.remote import Store
from vllm_cache_tools.fleet.trust import sig_path

pytestmark = pytest.mark.realvllm
BK = 10


def _entries(root: Path) -> set[tuple[str, str]]:
    cc = root / "torch_compile_cache"
    if not cc.is_dir():
        return set()
    out = {("backend", p.name) for p in cc.iterdir() if len(p.name) == BK}
    aot = cc / "torch_aot_compile"
    out |= {("aot", p.name) for p in aot.iterdir()} if aot.is_dir() else set()
    return out


def _keygen(path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)],
                   check=True)
    return " ".join(path.with_suffix(".pub").read_text().split()[:2])


def _tamper_provenance(url: str, entries: set[tuple[str, str]]) -> None:
    """One byte of the signed provenance changed in each entry's index object in the
    registry (an attacker with write access to the repository), the tag re-pointed at
    them; the signatures left as they were."""
    store = Store(url)
    assert store.oci is not None
    for layout, key in sorted(entries):
        path = store.index_path(layout, key)
        raw = store.cat(path)
        host = json.loads(raw)["provenance"]["host"]
        at = raw.index(json.dumps(host).encode(), raw.index(b'"provenance"')) + 1
        store.put_bytes(path, raw[:at] + bytes([raw[at] ^ 1]) + raw[at + 1:])
        assert store.exists(sig_path(path))
    store.oci.pin([p.split(store.base + "/", 1)[1] for p in store.oci.find(store.base)])


def test_signed_chain_through_a_registry_loads_in_a_real_start(
        registry: Registry, real_compile: ScenarioRun, tmp_path: Path) -> None:
    start = real_compile.scenario.starts[0]
    args = start.serve_args()
    src = real_compile.before(1)  # the cache start 0 compiled (start 1 loaded it)
    want = _entries(src)
    keys = sorted(k for _, k in want)
    aot = next(k for layout, k in want if layout == "aot")
    trusted = tmp_path / "allowed_signers"
    trusted.write_text(f'ci@example.com namespaces="vllm-cache" {_keygen(tmp_path / "ci")}\n')
    other = _keygen(tmp_path / "intruder")

    bundle = tmp_path / "start.tar.zst"
    res = run_cli("pack", "--root", str(src), *keys, "-o", str(bundle), "--sign",
                  str(tmp_path / "ci"))
    assert res.returncode == 0, res.stderr
    staged = tmp_path / "ci-root"
    res = run_cli("unpack", str(bundle), "--root", str(staged), "--trust", str(trusted),
                  "--require-signature", "--python", str(venv_python()), "--json")
    assert res.returncode == 0, (res.stdout[-2000:], res.stderr)
    assert json.loads(res.stdout)["signature"]["signer"] == "ci@example.com"
    assert _entries(staged) == want

    def push(repo: str, *sign: str) -> str:
        url = registry.url(repo) + ":tiny-llama"
        r = run_cli("push", "--root", str(staged), *keys, url, *sign)
        assert r.returncode == 0, r.stderr
        return url

    good = push("chain/signed", "--sign", str(tmp_path / "ci"))
    tampered = push("chain/tampered", "--sign", str(tmp_path / "ci"))
    _tamper_provenance(tampered, want)
    untrusted = push("chain/untrusted", "--sign", str(tmp_path / "intruder"))
    unsigned = push("chain/unsigned")
    assert other  # the intruder's key is in no policy

    with model_lock():
        restore_pristine_sources()
        for url, status in ((tampered, "invalid"), (untrusted, "untrusted"),
                            (unsigned, "unsigned")):
            pod = tmp_path / f"refused-{status}"
            res = run_cli("pull", url, "--root", str(pod), "--trust", str(trusted),
                          "--require-signature", "--json")
            assert res.returncode == 1, (status, res.stdout[-2000:], res.stderr)
            doc = json.loads(res.stdout)
            assert {p["action"] for p in doc["placements"]} == {"refused"}, status
            statuses = {v["status"] for v in doc["signatures"].values()}
            assert status in statuses, (status, doc["signatures"])
            assert _entries(pod) == set(), status  # nothing placed

        pod = tmp_path / "pod-root"
        res = run_cli("pull", good, "--root", str(pod), "--if-hit", "--trust", str(trusted),
                      "--require-signature", "--python", str(venv_python()), "--usage", "llm",
                      "--json", "--", *args, env=start_env(pod, start), inherit=False)
        assert res.returncode == 0, (res.stdout[-2000:], res.stderr)
        doc = json.loads(res.stdout)
        assert doc["check"]["verdict"] == "hit" and doc["check"]["predicted"]["aot"] == aot
        assert {v["status"] for v in doc["signatures"].values()} == {"trusted"}
        assert {p["key"] for p in doc["placements"] if p["action"] == "placed"} == set(keys)
        shown = run_cli("show", "--root", str(pod), aot, "--json")
        assert "ci@example.com" in shown.stdout

    (tmp_path / "log").mkdir()
    rec = run_start(venv_python(), pod, start, tmp_path / "log" / "start-0.log")
    log = rec.log.read_text(errors="replace")
    assert rec.returncode == 0, log[-3000:]
    assert "Directly load AOT compilation" in log
    assert "Compiling a graph" not in log and "saved AOT compiled function" not in log
    assert _entries(pod) == want  # nothing new was compiled
