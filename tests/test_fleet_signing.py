"""Signed bundles and store entries (issue 28 item 1), with real keys and the real
``ssh-keygen`` on both sides: what we sign ``ssh-keygen -Y verify`` accepts, what it signs we
accept, and every way a bundle or an entry can lie is refused with nothing placed. The cache is
the shipped example (``examples/sample_cache``: a real vLLM start's entries); stores are
``file://`` and moto's S3 server on loopback, as the other fleet tests use."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import zstandard

from tests.conftest import run_cli
from tests.fleet_support import moto as moto
from tests.fleet_support import s3 as s3
from vllm_cache_tools.fleet.allowed_signers import decide, parse
from vllm_cache_tools.fleet.records import MANIFEST_NAME
from vllm_cache_tools.fleet.sshsig import NAMESPACE, public_key_from_blob
from vllm_cache_tools.fleet.sshsig import parse as parse_sig
from vllm_cache_tools.fleet.trust import BUNDLE_SIG_NAME

SAMPLE = Path(__file__).resolve().parent.parent / "examples" / "sample_cache"
SIG = BUNDLE_SIG_NAME

pytestmark = pytest.mark.skipif(shutil.which("ssh-keygen") is None,
                                reason="ssh-keygen (openssh-client) is not installed")


def keygen(path: Path, comment: str, passphrase: str = "", kind: str = "ed25519") -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", passphrase, "-C", comment, "-f",
                    str(path)], check=True)
    return path


def pub(key: Path) -> str:
    """``keytype base64`` of a key's public half."""
    return " ".join(Path(f"{key}.pub").read_text().split()[:2])


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("keys")
    return {"alice": keygen(d / "alice", "alice"), "mallory": keygen(d / "mallory", "mallory")}


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory, keys: dict[str, Path]) -> dict[str, Path]:
    """A copy of the example root, a bundle of one start signed by alice, another signed
    bundle of the other start, and a policy trusting alice."""
    d = tmp_path_factory.mktemp("signing")
    src = d / "src"
    shutil.copytree(SAMPLE, src)
    for name, ref in (("signed", "28fd"), ("other", "39ec")):
        r = run_cli("pack", "--root", str(src), ref, "-o", str(d / f"{name}.tar.zst"),
                    "--sign", str(keys["alice"]))
        assert r.returncode == 0, r.stderr
        assert "signed by key SHA256:" in r.stdout
    policy = d / "allowed_signers"
    policy.write_text(f"# the team\nalice@example.com namespaces=\"{NAMESPACE}\" "
                      f"{pub(keys['alice'])} build-key\n")
    return {"dir": d, "src": src, "signed": d / "signed.tar.zst", "other": d / "other.tar.zst",
            "policy": policy}


def members(bundle: Path) -> list[tuple[str, bytes]]:
    data = zstandard.ZstdDecompressor().stream_reader(bundle.read_bytes()).read()
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        out = []
        for m in tar.getmembers():
            f = tar.extractfile(m)
            assert f is not None
            out.append((m.name, f.read()))
    return out


def rebuild(src: Path, dst: Path, *, manifest: bytes | None = None,
            sig: bytes | None = None, drop_sig: bool = False) -> Path:
    """``src`` with its manifest and/or signature member replaced (or the signature left
    out), written as pack writes bundles."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members(src):
            if name == MANIFEST_NAME and manifest is not None:
                data = manifest
            if name == SIG and (drop_sig or sig is not None):
                if drop_sig:
                    continue
                data = sig
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    dst.write_bytes(zstandard.ZstdCompressor(write_checksum=True).compress(buf.getvalue()))
    return dst


def ssh_verify(policy: Path, principal: str, sig: Path, message: bytes,
               namespace: str = NAMESPACE) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["ssh-keygen", "-Y", "verify", "-f", str(policy), "-I", principal,
                           "-n", namespace, "-s", str(sig)], input=message,
                          capture_output=True)


def test_our_signature_is_verified_by_ssh_keygen_and_places_with_provenance(
        work: dict[str, Path], tmp_path: Path) -> None:
    got = dict(members(work["signed"]))
    names = [n for n, _ in members(work["signed"])]
    assert names[:2] == [MANIFEST_NAME, SIG]  # the signature right after the manifest
    (tmp_path / "m.sig").write_bytes(got[SIG])
    r = ssh_verify(work["policy"], "alice@example.com", tmp_path / "m.sig", got[MANIFEST_NAME])
    assert r.returncode == 0, r.stderr
    assert b'Good "vllm-cache" signature for alice@example.com' in r.stdout + r.stderr
    prov = json.loads(got[MANIFEST_NAME])["provenance"]
    assert {"host", "user", "time", "tool", "versions", "hardware", "serve_args"} <= set(prov)
    assert prov["versions"]["vllm"] == "0.32.0" and prov["tool"].startswith("vllm-cache-tools")
    assert prov["hardware"]["devices"] == ["cpu"] and prov["serve_args"]

    root = tmp_path / "pod"
    r = run_cli("unpack", str(work["signed"]), "--root", str(root), "--trust",
                str(work["policy"]))
    assert r.returncode == 0, r.stderr
    assert "signature: trusted, signed by alice@example.com" in r.stdout
    assert "provenance: " in r.stdout
    assert (root / "torch_compile_cache" / "28fd362d4e").is_dir()
    # The mega AOT entry's key is only linked by its sources (no vLLM arguments): placed
    # because the trusted signature vouches for it; without the policy it is refused.
    (aot,) = [x for x in r.stdout.splitlines() if x.startswith("placed    aot")]
    assert aot.endswith("placed because of the trusted signature of alice@example.com)"), aot
    r = run_cli("unpack", str(work["signed"]), "--root", str(tmp_path / "unchecked"))
    assert r.returncode == 1 and "key linked by sources" in r.stdout, r.stdout
    shown = run_cli("show", "28fd", "--root", str(root))
    assert "trusted: alice@example.com (key SHA256:" in shown.stdout, shown.stdout
    assert "placed from        bundle " in shown.stdout
    doc = json.loads(run_cli("show", "28fd", "--root", str(root), "--json").stdout)
    assert doc["placed"]["signature"]["signer"] == "alice@example.com"
    assert doc["placed"]["provenance"]["host"] == prov["host"]
    listed = run_cli("ls", "--root", str(root))
    assert "placed from bundle " in listed.stderr and "(signed by alice@example.com)" in \
        listed.stderr, listed.stderr
    placed = json.loads(run_cli("ls", "--root", str(root), "--json").stdout)["placed"]
    assert placed["28fd362d4e"] == {"source": f"bundle {work['signed'].resolve()}",
                                    "signer": "alice@example.com", "signature": "trusted"}


def test_a_signature_made_by_ssh_keygen_is_accepted(work: dict[str, Path], keys: dict[str, Path],
                                                     tmp_path: Path) -> None:
    manifest = dict(members(work["signed"]))[MANIFEST_NAME]
    (tmp_path / "manifest").write_bytes(manifest)
    subprocess.run(["ssh-keygen", "-q", "-Y", "sign", "-f", str(keys["alice"]), "-n", NAMESPACE,
                    str(tmp_path / "manifest")], check=True)
    theirs = (tmp_path / "manifest.sig").read_bytes()
    b = rebuild(work["signed"], tmp_path / "theirs.tar.zst", sig=theirs)
    r = run_cli("unpack", str(b), "--root", str(tmp_path / "pod"), "--trust",
                str(work["policy"]))
    assert r.returncode == 0, r.stderr
    assert "signed by alice@example.com" in r.stdout


def _refusals(work: dict[str, Path], keys: dict[str, Path], d: Path) -> Iterator[
        tuple[str, Path, Path, str]]:
    """(case, bundle, policy, what the refusal says)."""
    got = dict(members(work["signed"]))
    manifest = got[MANIFEST_NAME]
    doc = json.loads(manifest)
    doc["provenance"]["host"] = doc["provenance"]["host"][:-1] + "X"  # one byte
    changed = (json.dumps(doc, sort_keys=True, separators=(",", ":")) + "\n").encode()
    assert len(changed) == len(manifest)
    yield ("one byte of provenance", rebuild(work["signed"], d / "t1.tar.zst",
                                             manifest=changed),
           work["policy"], "bad signature: the signature does not match the signed content")
    (d / "changed").write_bytes(changed)
    subprocess.run(["ssh-keygen", "-q", "-Y", "sign", "-f", str(keys["mallory"]), "-n",
                    NAMESPACE, str(d / "changed")], check=True)
    yield ("re-signed by an untrusted key",
           rebuild(work["signed"], d / "t2.tar.zst", manifest=changed,
                   sig=(d / "changed.sig").read_bytes()),
           work["policy"], "which the trust policy does not list")
    yield ("unsigned", rebuild(work["signed"], d / "t3.tar.zst", drop_sig=True),
           work["policy"], "unsigned")
    yield ("a signature of another manifest",
           rebuild(work["signed"], d / "t4.tar.zst", sig=dict(members(work["other"]))[SIG]),
           work["policy"], "bad signature")
    expired = d / "expired"
    expired.write_text(f'alice@example.com valid-before="20200101" {pub(keys["alice"])}\n')
    yield ("expired principal", work["signed"], expired, "expired at 2020-01-01")
    other_ns = d / "other_ns"
    other_ns.write_text(f'alice@example.com namespaces="git,file" {pub(keys["alice"])}\n')
    yield ("a key allowed other namespaces", work["signed"], other_ns,
           "is not allowed the namespace 'vllm-cache'")
    (d / "m").write_bytes(manifest)
    subprocess.run(["ssh-keygen", "-q", "-Y", "sign", "-f", str(keys["alice"]), "-n", "file",
                    str(d / "m")], check=True)
    yield ("a signature in another namespace",
           rebuild(work["signed"], d / "t5.tar.zst", sig=(d / "m.sig").read_bytes()),
           work["policy"], "signed for namespace 'file'")


def test_every_lie_is_refused_and_nothing_placed(work: dict[str, Path], keys: dict[str, Path],
                                                  tmp_path: Path) -> None:
    seen = 0
    for case, bundle, policy, says in _refusals(work, keys, tmp_path):
        root = tmp_path / f"pod{seen}"
        # --check says the same (once: each CLI start costs ~0.5 s)
        for args in (["unpack", str(bundle)], *([["unpack", str(bundle), "--check"]]
                                                 if seen == 0 else [])):
            r = run_cli(*args, "--root", str(root), "--trust", str(policy))
            assert r.returncode == 1, (case, r.stdout, r.stderr)
            assert r.stderr.count("\n") == 1 and says in r.stderr, (case, r.stderr)
            assert "Traceback" not in r.stderr
            assert not root.exists(), case  # not even the root's folders
        seen += 1
    assert seen == 7


def test_policy_cases_agree_with_ssh_keygen(work: dict[str, Path], keys: dict[str, Path],
                                            tmp_path: Path) -> None:
    """The same allowed_signers lines and signature judged by ssh-keygen -Y verify and by
    our parser: the same answer in every case (patterns, negation, namespaces, validity
    windows in UTC and local time, quoting, cert-authority)."""
    manifest = dict(members(work["signed"]))[MANIFEST_NAME]
    sig_bytes = dict(members(work["signed"]))[SIG]
    (tmp_path / "sig").write_bytes(sig_bytes)
    sig = parse_sig(sig_bytes)
    alice = pub(keys["alice"])
    future = time.strftime("%Y%m%d%H%M", time.gmtime(time.time() + 86400 * 400))
    cases = [
        ("*@example.com", f"*@example.com {alice}", True),
        ("alice@example.com", f"*@example.com,!alice@example.com {alice}", False),
        ("bob@example.com", f"*@example.com,!alice@example.com {alice}", True),
        ("a@x", f'"a@x,b@y" namespaces="vllm-*" {alice}', True),
        ("a@x", f'a@x namespaces="git" {alice}', False),
        ("a@x", f'a@x namespaces="g?t,vllm-cach?" {alice}', True),
        ("a@x", f'a@x valid-after="{future}Z" {alice}', False),
        ("a@x", f'a@x valid-before="{future}" {alice}', True),
        ("a@x", f'a@x valid-after="20200101",valid-before="20991231235959Z" {alice}', True),
        ("a@x", f'a@x valid-before="20200101000000Z" {alice}', False),
        ("a@x", f'a@x cert-authority {alice}', False),
        ("a@x", f'a@x {pub(keys["mallory"])}\na@x {alice}', True),
        ("a@x", f'a@x {pub(keys["mallory"])}', False),
        ("A@X", f"a@x {alice}", False),  # case-sensitive, as OpenSSH matches principals
    ]
    for principal, text, expect in cases:
        policy = tmp_path / "p"
        policy.write_text(text + "\n")
        theirs = ssh_verify(policy, principal, tmp_path / "sig", manifest).returncode == 0
        signers = parse(text, "p")
        ours = decide(signers, sig.public_key, NAMESPACE, time.time())
        from vllm_cache_tools.fleet.allowed_signers import match_pattern_list

        ours_ok = ours.allowed and any(
            match_pattern_list(principal, s.principals) for s in signers
            if s.key_blob == sig.public_key.blob)
        assert theirs == expect == ours_ok, (text, principal, theirs, ours)
    assert public_key_from_blob(sig.public_key.blob).fingerprint.startswith("SHA256:")


def test_bad_policies_and_keys_are_one_line_exit_2(work: dict[str, Path], tmp_path: Path
                                                   ) -> None:
    from vllm_cache_tools.fleet.errors import FleetError
    from vllm_cache_tools.fleet.trust import load_policy, load_signing_key

    root = tmp_path / "pod"
    bad = tmp_path / "bad"
    for text, says in (("alice@x ssh-ed25519 not-base64!!\n", "bad:1: bad base64 key"),
                       ('alice@x valid-before="2020" ssh-ed25519 AAAA\n',
                        'bad:1: invalid "valid-before" time'),
                       ('\n\nalice@x nosuch="x" ssh-ed25519 AAAA\n',
                        "bad:3: unknown signature option")):
        bad.write_text(text)
        with pytest.raises(FleetError, match=says) as exc:
            load_policy(bad)
        assert exc.value.exit_code == 2 and "\n" not in str(exc.value)
    r = run_cli("unpack", str(work["signed"]), "--root", str(root), "--trust", str(bad))
    assert r.returncode == 2 and "bad:3: unknown signature option" in r.stderr
    assert r.stderr.count("\n") == 1 and not root.exists()
    r = run_cli("unpack", str(work["signed"]), "--root", str(root), "--require-signature",
                env={"VLLM_CACHE_TOOLS_TRUST": ""})
    assert r.returncode == 2 and "--require-signature: no trust policy" in r.stderr
    # The policy from the environment, as a pod's spec sets it.
    r = run_cli("unpack", str(work["signed"]), "--root", str(root), "--check",
                "--require-signature", env={"VLLM_CACHE_TOOLS_TRUST": str(work["policy"])})
    assert r.returncode == 0 and "trusted, signed by alice@example.com" in r.stdout, r.stderr
    locked = keygen(tmp_path / "locked", "locked", passphrase="secret phrase")
    rsa = keygen(tmp_path / "rsa", "rsa", kind="rsa")
    for key, says in ((locked, "protected by a passphrase"), (rsa, "ed25519 keys only"),
                      (tmp_path / "nokey", "cannot read signing key"),
                      (Path(f"{rsa}.pub"), "not an OpenSSH private key")):
        with pytest.raises(FleetError, match=says) as exc:
            load_signing_key(key)
        assert exc.value.exit_code == 2 and "\n" not in str(exc.value)
    out = tmp_path / "b.tar.zst"
    r = run_cli("pack", "--root", str(work["src"]), "28fd", "-o", str(out), "--sign",
                str(locked))
    assert r.returncode == 2 and "passphrase" in r.stderr and r.stderr.count("\n") == 1
    assert not out.exists()


@pytest.fixture(params=["file", "s3"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "file":
        return f"file://{tmp_path}/store"
    return str(request.getfixturevalue("s3")) + "/signed"


def test_signed_store_entries(work: dict[str, Path], keys: dict[str, Path], store_url: str,
                              tmp_path: Path) -> None:
    src = work["src"]
    r = run_cli("push", "--root", str(src), "28fd", store_url, "--sign", str(keys["alice"]))
    assert r.returncode == 0, r.stderr
    # Another start pushed without a signature.
    assert run_cli("push", "--root", str(src), "39ec", store_url).returncode == 0
    from vllm_cache_tools.fleet.remote import Store

    store = Store(store_url)
    idx = store.index_path("backend", "28fd362d4e")
    raw, sig = store.cat(idx), store.cat(idx + ".sig")
    (tmp_path / "i.sig").write_bytes(sig)
    v = ssh_verify(work["policy"], "alice@example.com", tmp_path / "i.sig", raw)
    assert v.returncode == 0, v.stderr
    assert json.loads(raw)["provenance"]["user"]

    ls = run_cli("ls", store_url, "--trust", str(work["policy"]))
    assert ls.returncode == 0, ls.stderr
    rows = {line.split()[0]: line for line in ls.stdout.splitlines()[3:] if line.strip()}
    assert rows["28fd362d4e"].endswith("alice@example.com")
    assert "REFUSED: unsigned" in rows["39ecaca4bf"]
    doc = json.loads(run_cli("ls", store_url, "--trust", str(work["policy"]), "--json").stdout)
    by = {e["key"]: e for e in doc["entries"]}
    assert by["28fd362d4e"]["signature"]["status"] == "trusted"
    assert by["39ecaca4bf"]["signature"]["status"] == "unsigned"

    # The trusted start places; the unsigned one is refused, none of its bytes fetched.
    pod = tmp_path / "pod"
    r = run_cli("pull", store_url, "--root", str(pod), "--trust", str(work["policy"]), "--json")
    assert r.returncode == 1, r.stderr
    res = {p["key"][:10]: p for p in json.loads(r.stdout)["placements"]}
    assert res["28fd362d4e"]["action"] == "placed"
    # Its AOT entry, linked by its sources only: placed under alice's trusted signature.
    assert (res["0b8536d36d"]["action"], res["0b8536d36d"]["key_proof"]) == ("placed", "linked")
    assert "trusted signature of alice@example.com" in res["0b8536d36d"]["detail"]
    assert res["39ecaca4bf"]["action"] == "refused"
    assert "unsigned" in res["39ecaca4bf"]["detail"]
    assert not (pod / "torch_compile_cache" / "39ecaca4bf").exists()
    shown = run_cli("show", "28fd", "--root", str(pod))
    assert f"placed from        {store.url}" in shown.stdout, shown.stdout
    assert "trusted: alice@example.com" in shown.stdout

    if not store_url.startswith("file://"):
        return  # what follows reads and writes the same Store objects on both kinds
    # One byte of the index object's provenance changed: refused, nothing placed.
    doc2 = json.loads(raw)
    doc2["provenance"]["host"] = doc2["provenance"]["host"][:-1] + "X"
    store.put_bytes(idx, json.dumps(doc2, sort_keys=True).encode())
    pod2 = tmp_path / "pod2"
    r = run_cli("pull", store_url, "28fd", "--root", str(pod2), "--trust", str(work["policy"]))
    assert r.returncode == 1, r.stderr
    assert "does not match the signed content" in r.stdout
    assert not (pod2 / "torch_compile_cache" / "28fd362d4e").exists()
    # Re-signed by mallory: still refused.
    store.put_bytes(idx + ".sig", subprocess.run(
        ["ssh-keygen", "-q", "-Y", "sign", "-f", str(keys["mallory"]), "-n", NAMESPACE],
        input=store.cat(idx), capture_output=True, check=True).stdout)
    r = run_cli("pull", store_url, "28fd", "--root", str(pod2), "--trust", str(work["policy"]))
    assert r.returncode == 1 and "which the trust policy does not list" in r.stdout, r.stdout
    assert not (pod2 / "torch_compile_cache" / "28fd362d4e").exists()
    # Pushed again with the signature: trusted again (the present entry is signed anew).
    r = run_cli("push", "--root", str(src), "28fd", store_url, "--sign", str(keys["alice"]),
                "--force")
    assert r.returncode == 0, r.stderr
    r = run_cli("pull", store_url, "28fd", "--root", str(pod2), "--trust", str(work["policy"]))
    assert r.returncode == 0, r.stdout + r.stderr
