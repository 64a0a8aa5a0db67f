"""Who vouches for a bundle or a store entry: signing with an OpenSSH ed25519 key, and the
trust policy (an OpenSSH ``allowed_signers`` file) that ``unpack``, ``pull`` and ``ls URL``
check signatures against.

What is signed: a bundle's manifest (its first member; the signature is the second member,
:data:`BUNDLE_SIG_NAME`), a store entry's index object (the signature is the object
``<index>.sig`` beside it, :func:`sig_path`). Both list every file's size and sha256 and the
entry's provenance, so a signature covers every byte that is placed. Signatures are SSHSIG
(:mod:`.sshsig`) in the namespace ``vllm-cache``: ``ssh-keygen -Y verify -f allowed_signers
-I PRINCIPAL -n vllm-cache -s index.json.sig < index.json`` checks one without this tool.

The policy comes from ``--trust FILE`` or, without it, ``$VLLM_CACHE_TOOLS_TRUST``; with a
policy, an entry is placed only when its signature verifies and the policy allows its key
(namespace, ``valid-after``/``valid-before``) now. ``--require-signature`` makes a missing
policy an error, so a pod cannot silently fall back to unchecked pulls."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from vllm_cache_tools import safeio
from vllm_cache_tools.fleet import sshsig
from vllm_cache_tools.fleet.allowed_signers import AllowedSigner, PolicyError, decide, parse
from vllm_cache_tools.fleet.errors import FleetError
from vllm_cache_tools.fleet.records import MANIFEST_NAME

ENV = "VLLM_CACHE_TOOLS_TRUST"
"""The trust policy's path when ``--trust`` is not given."""
BUNDLE_SIG_NAME = MANIFEST_NAME + ".sig"
"""A signed bundle's second member: the manifest's armored SSHSIG signature."""
SIG_SUFFIX = ".sig"
MAX_KEY_BYTES = 64 << 10

TRUSTED = "trusted"
UNSIGNED = "unsigned"
UNTRUSTED = "untrusted"
"""Signed, and the signature verifies, by a key the policy does not allow (not listed,
expired, not yet valid, another namespace)."""
INVALID = "invalid"
"""A signature that is malformed or does not verify (tampered content, a signature of other
content)."""
UNCHECKED = "unchecked"
"""Signed, the signature verifies, and no policy was given: who signed is not judged."""


@dataclass(frozen=True)
class TrustPolicy:
    source: str
    """Where it was read (the file, and ``$VLLM_CACHE_TOOLS_TRUST`` when it came from
    there)."""
    signers: tuple[AllowedSigner, ...]


@dataclass(frozen=True)
class SignatureCheck:
    """One signature judged: ``status`` (one of the constants above), the signer's
    principals (as the policy line names them) and key fingerprint where known, and the
    reason of a refusal (one line)."""

    status: str
    signer: str | None = None
    fingerprint: str | None = None
    reason: str = ""

    @property
    def trusted(self) -> bool:
        return self.status == TRUSTED

    @property
    def shown(self) -> str:
        """How a table shows it."""
        if self.status == TRUSTED:
            return self.signer or "-"
        if self.status == UNCHECKED:
            return f"{self.fingerprint} (unchecked)"
        return self.status


def _read_small(path: Path, cap: int, what: str) -> bytes:
    try:
        # Followed: the user named it (a Kubernetes secret volume is a link to ..data/).
        return safeio.read_regular(path, cap, follow=True)
    except safeio.UnsafeTree as exc:
        raise FleetError(f"{what} {path}: {exc.strerror}") from None
    except OSError as exc:
        raise FleetError(f"cannot read {what} {path}: {exc.strerror or exc}") from None


def load_policy(path: str | os.PathLike[str], via: str = "--trust") -> TrustPolicy:
    """An allowed_signers file, every line checked (:class:`FleetError`, exit 2, naming
    ``file:line``); an empty one trusts nobody."""
    p = Path(path)
    raw = _read_small(p, 4 << 20, f"trust policy ({via})")
    try:
        signers = parse(raw.decode("utf-8"), str(p))
    except UnicodeDecodeError:
        raise FleetError(f"trust policy {p}: not UTF-8 text") from None
    except PolicyError as exc:
        raise FleetError(f"trust policy {exc} (OpenSSH allowed_signers format: "
                         "principals [options] ssh-ed25519 BASE64)") from None
    return TrustPolicy(str(p) if via == "--trust" else f"{p} (${ENV})", signers)


def resolve_policy(trust: str | os.PathLike[str] | None, require: bool = False,
                   env: Mapping[str, str] | None = None) -> TrustPolicy | None:
    """The policy of ``--trust``, else of ``$VLLM_CACHE_TOOLS_TRUST``, else ``None``;
    ``require`` (``--require-signature``): no policy is an error (exit 2)."""
    env = os.environ if env is None else env
    if trust is not None and str(trust) != "":
        return load_policy(trust)
    if env.get(ENV):
        return load_policy(env[ENV], via=ENV)
    if require:
        raise FleetError(f"--require-signature: no trust policy (give --trust "
                         f"ALLOWED_SIGNERS or set {ENV})")
    return None


def load_signing_key(path: str | os.PathLike[str]) -> sshsig.SigningKey:
    """``--sign KEYFILE``: an OpenSSH ed25519 private key without passphrase (exit 2
    otherwise, one line)."""
    p = Path(path)
    raw = _read_small(p, MAX_KEY_BYTES, "signing key")
    try:
        return sshsig.load_signing_key(raw, f"signing key {p}")
    except sshsig.SignatureError as exc:
        raise FleetError(str(exc)) from None


def check(sig_text: bytes | None, sha512: bytes, policy: TrustPolicy | None,
          now: float | None = None) -> SignatureCheck:
    """Judge the signature ``sig_text`` (``None``: none) of the content whose SHA-512 is
    ``sha512`` against ``policy`` at ``now``."""
    if sig_text is None:
        return SignatureCheck(UNSIGNED, reason="unsigned (no signature; the trust policy "
                                               "requires one)")
    try:
        sig = sshsig.parse(sig_text)
        sshsig.verify_digest(sig, sha512)
    except sshsig.SignatureError as exc:
        return SignatureCheck(INVALID, reason=f"bad signature: {exc}")
    fp = sig.public_key.fingerprint
    if policy is None:
        return SignatureCheck(UNCHECKED, None, fp, "signed; no trust policy to judge it by")
    d = decide(policy.signers, sig.public_key, sshsig.NAMESPACE,
               time.time() if now is None else now)
    if d.allowed:
        return SignatureCheck(TRUSTED, d.principals, fp)
    return SignatureCheck(UNTRUSTED, None, fp, f"untrusted: {d.reason} ({policy.source})")


def sig_path(index_path: str) -> str:
    """The signature object of a store's index object: beside it, ``<index>.sig`` (not
    ``.json``: listings of index objects skip it)."""
    return index_path + SIG_SUFFIX


__all__ = ["BUNDLE_SIG_NAME", "ENV", "INVALID", "TRUSTED", "UNCHECKED", "UNSIGNED",
           "UNTRUSTED", "SignatureCheck", "TrustPolicy", "check", "load_policy",
           "load_signing_key", "resolve_policy", "sig_path"]
