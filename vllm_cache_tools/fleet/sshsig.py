"""Signatures in OpenSSH's SSHSIG format (``ssh-keygen -Y sign``; OpenSSH's PROTOCOL.sshsig),
ed25519 keys only, through the ``cryptography`` library: what we sign ``ssh-keygen -Y verify``
accepts, and what ``ssh-keygen -Y sign`` makes we verify.

The signed data is never the message itself but ``"SSHSIG" || string(namespace) ||
string(reserved) || string(hash_algorithm) || string(H(message))`` with H = SHA-512, so a
signature is checked from the message's SHA-512 alone (:func:`verify_digest`: a store's index
object is hashed once, when it is read, and checked later without being kept).

:data:`NAMESPACE` (``vllm-cache``) keeps our signatures apart from any other use of the same
key (a signature made for ``git`` or ``file`` is not one of ours, and ours is not theirs).
Pure functions over bytes: reading a key file is the caller's."""

from __future__ import annotations

import base64
import hashlib
import struct
from dataclasses import dataclass

NAMESPACE = "vllm-cache"
"""The SSHSIG namespace of every signature this tool makes or accepts (``ssh-keygen -Y
verify -n vllm-cache``; ``namespaces="vllm-cache"`` in an allowed_signers line)."""
MAGIC = b"SSHSIG"
SIG_VERSION = 1
HASH = "sha512"
KEY_TYPE = "ssh-ed25519"
BEGIN = "-----BEGIN SSH SIGNATURE-----"
END = "-----END SSH SIGNATURE-----"
MAX_SIGNATURE_BYTES = 16 << 10
"""An armored signature is read up to this size (an ed25519 one is ~300 bytes)."""


class SignatureError(ValueError):
    """A signature that is not one (bad armor, bad encoding, another format or key type) or
    that does not verify; the message is one line."""


@dataclass(frozen=True)
class PublicKey:
    """An ed25519 public key as OpenSSH writes it (``ssh-ed25519 <base64>``)."""

    key_type: str
    blob: bytes
    """The SSH wire encoding: string(key_type) || string(32 raw bytes)."""

    @property
    def raw(self) -> bytes:
        _type, rest = _string(self.blob, 0)
        k, _ = _string(self.blob, rest)
        return k

    @property
    def openssh(self) -> str:
        return f"{self.key_type} {base64.b64encode(self.blob).decode()}"

    @property
    def fingerprint(self) -> str:
        """``SHA256:<base64 without padding>``, as ``ssh-keygen -l`` prints it."""
        d = base64.b64encode(hashlib.sha256(self.blob).digest()).decode().rstrip("=")
        return f"SHA256:{d}"


@dataclass(frozen=True)
class Signature:
    """A parsed SSHSIG signature (not yet verified)."""

    public_key: PublicKey
    namespace: str
    hash_algorithm: str
    signature: bytes
    """The raw 64-byte ed25519 signature."""


def _u32(n: int) -> bytes:
    return struct.pack(">I", n)


def _sshstr(b: bytes | str) -> bytes:
    if isinstance(b, str):
        b = b.encode()
    return _u32(len(b)) + b


def _string(buf: bytes, at: int) -> tuple[bytes, int]:
    if at + 4 > len(buf):
        raise SignatureError("truncated signature")
    (n,) = struct.unpack_from(">I", buf, at)
    end = at + 4 + n
    if end > len(buf):
        raise SignatureError("truncated signature")
    return buf[at + 4:end], end


def public_key_from_blob(blob: bytes) -> PublicKey:
    t, at = _string(blob, 0)
    key_type = t.decode("ascii", "replace")
    if key_type != KEY_TYPE:
        raise SignatureError(f"key type {key_type[:40]} is not supported (ed25519 only)")
    raw, at = _string(blob, at)
    if len(raw) != 32 or at != len(blob):
        raise SignatureError("malformed ed25519 public key")
    return PublicKey(key_type, blob)


def public_key_from_raw(raw: bytes) -> PublicKey:
    return PublicKey(KEY_TYPE, _sshstr(KEY_TYPE) + _sshstr(raw))


def signed_data(digest: bytes, namespace: str = NAMESPACE) -> bytes:
    """What the key signs for a message whose SHA-512 is ``digest``."""
    return MAGIC + _sshstr(namespace) + _sshstr(b"") + _sshstr(HASH) + _sshstr(digest)


def armor(blob: bytes) -> bytes:
    """The signature blob as ``ssh-keygen -Y sign`` writes it (base64, 70 columns)."""
    b = base64.b64encode(blob).decode()
    lines = [b[i:i + 70] for i in range(0, len(b), 70)]
    return ("\n".join([BEGIN, *lines, END]) + "\n").encode()


def unarmor(text: bytes) -> bytes:
    if len(text) > MAX_SIGNATURE_BYTES:
        raise SignatureError(f"signature over {MAX_SIGNATURE_BYTES} bytes")
    try:
        s = text.decode("ascii").strip()
    except UnicodeDecodeError:
        raise SignatureError("not an SSH signature (not ASCII)") from None
    if not s.startswith(BEGIN) or not s.endswith(END):
        raise SignatureError("not an SSH signature (no BEGIN/END SSH SIGNATURE lines)")
    body = "".join(s[len(BEGIN):-len(END)].split())
    try:
        return base64.b64decode(body, validate=True)
    except ValueError:
        raise SignatureError("not an SSH signature (bad base64)") from None


def parse(text: bytes) -> Signature:
    """An armored SSHSIG signature, decoded and checked for form (not verified)."""
    blob = unarmor(text)
    if not blob.startswith(MAGIC) or len(blob) < 10:
        raise SignatureError("not an SSHSIG signature")
    (version,) = struct.unpack_from(">I", blob, 6)
    if version != SIG_VERSION:
        raise SignatureError(f"SSHSIG version {version} is not supported")
    at = 10
    pk, at = _string(blob, at)
    ns, at = _string(blob, at)
    _reserved, at = _string(blob, at)
    halg, at = _string(blob, at)
    sig, at = _string(blob, at)
    if at != len(blob):
        raise SignatureError("trailing bytes after the signature")
    key = public_key_from_blob(pk)
    st, sat = _string(sig, 0)
    raw, sat = _string(sig, sat)
    if st.decode("ascii", "replace") != KEY_TYPE or len(raw) != 64 or sat != len(sig):
        raise SignatureError("malformed ed25519 signature")
    return Signature(key, ns.decode("utf-8", "replace"), halg.decode("ascii", "replace"), raw)


def verify_digest(sig: Signature, sha512: bytes, namespace: str = NAMESPACE) -> None:
    """Raise :class:`SignatureError` unless ``sig`` is its key's valid signature, in
    ``namespace``, of the message whose SHA-512 is ``sha512``."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    if sig.namespace != namespace:
        raise SignatureError(f"signed for namespace {sig.namespace[:60]!r}, not {namespace!r}")
    if sig.hash_algorithm != HASH:
        # ssh-keygen signs with sha512 by default; sha256 is allowed by the format but
        # our digests of index objects are SHA-512.
        raise SignatureError(f"hash algorithm {sig.hash_algorithm[:20]!r} (only {HASH})")
    try:
        Ed25519PublicKey.from_public_bytes(sig.public_key.raw).verify(
            sig.signature, signed_data(sha512, namespace))
    except InvalidSignature:
        raise SignatureError("the signature does not match the signed content (tampered, "
                             "or a signature of other content)") from None


def verify(sig: Signature, message: bytes, namespace: str = NAMESPACE) -> None:
    verify_digest(sig, hashlib.sha512(message).digest(), namespace)


@dataclass(frozen=True)
class SigningKey:
    """An ed25519 private key read from an OpenSSH private key file."""

    private: object
    """``cryptography``'s ``Ed25519PrivateKey``."""
    public_key: PublicKey

    def sign_digest(self, sha512: bytes, namespace: str = NAMESPACE) -> bytes:
        """The armored SSHSIG signature of the message whose SHA-512 is ``sha512``."""
        raw = self.private.sign(signed_data(sha512, namespace))  # type: ignore[attr-defined]
        blob = (MAGIC + _u32(SIG_VERSION) + _sshstr(self.public_key.blob) + _sshstr(namespace)
                + _sshstr(b"") + _sshstr(HASH) + _sshstr(_sshstr(KEY_TYPE) + _sshstr(raw)))
        return armor(blob)

    def sign(self, message: bytes, namespace: str = NAMESPACE) -> bytes:
        return self.sign_digest(hashlib.sha512(message).digest(), namespace)


def load_signing_key(data: bytes, what: str) -> SigningKey:
    """An OpenSSH ed25519 private key (``ssh-keygen -t ed25519``, no passphrase); raises
    :class:`SignatureError` (one line naming ``what``) for anything else."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import (
        Encoding,
        PublicFormat,
        load_ssh_private_key,
    )

    if b"BEGIN OPENSSH PRIVATE KEY" not in data[:200]:
        raise SignatureError(f"{what}: not an OpenSSH private key (make one with ssh-keygen -t "
                             "ed25519)")
    try:
        key = load_ssh_private_key(data, password=None)
    except TypeError:
        raise SignatureError(f"{what}: the key is protected by a passphrase, which vllm-cache "
                             "does not read (use a key without one, kept where only the "
                             "signer can read it)") from None
    except (ValueError, Exception) as exc:  # cryptography's parse errors
        text = str(exc).strip().splitlines()[0][:120] if str(exc).strip() else type(exc).__name__
        raise SignatureError(f"{what}: not a usable OpenSSH private key ({text})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise SignatureError(f"{what}: a {type(key).__name__.replace('PrivateKey', '')} key; "
                             "vllm-cache signs with ed25519 keys only (ssh-keygen -t ed25519)")
    raw = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return SigningKey(key, public_key_from_raw(raw))


__all__ = ["NAMESPACE", "PublicKey", "Signature", "SignatureError", "SigningKey", "armor",
           "load_signing_key", "parse", "public_key_from_blob", "public_key_from_raw",
           "signed_data", "verify", "verify_digest"]
