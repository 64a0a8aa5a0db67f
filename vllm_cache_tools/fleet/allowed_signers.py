"""OpenSSH's ``allowed_signers`` file (``man ssh-keygen``, ALLOWED SIGNERS; ``sshsig.c`` of
OpenSSH 9.x): parsed into frozen records, and the decision ``ssh-keygen -Y verify`` /
``find-principals`` makes for a signing key, as a pure function.

One line: ``principals [options] keytype base64 [comment]``. Principals: a comma-separated
pattern list (``*`` and ``?`` wildcards, ``!`` negates), quoted or not. Options,
comma-separated: ``cert-authority``, ``namespaces="p1,p2"`` (patterns), ``valid-after="T"``,
``valid-before="T"`` with T one of ``YYYYMMDD``, ``YYYYMMDDHHMM``, ``YYYYMMDDHHMMSS``, a
trailing ``Z`` for UTC (local time otherwise); values are quoted, as OpenSSH requires.
Blank lines and ``#`` comments are skipped. As OpenSSH: a key is within its window when
``valid-after <= now <= valid-before``; a ``cert-authority`` line vouches for certificates
only (we never see one: our signatures are made by plain ed25519 keys), so it never matches.

Unlike ``ssh-keygen``, which stops at the first malformed line it reaches, the whole file is
checked when it is read: a policy with a malformed line is an error naming ``file:line``."""

from __future__ import annotations

import base64
import calendar
import re
import time
from dataclasses import dataclass

from vllm_cache_tools.fleet.sshsig import PublicKey

KEY_TYPES = frozenset({
    "ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521", "sk-ssh-ed25519@openssh.com", "sk-ecdsa-sha2-nistp256@openssh.com",
    "ssh-ed25519-cert-v01@openssh.com", "ssh-rsa-cert-v01@openssh.com",
    "ecdsa-sha2-nistp256-cert-v01@openssh.com", "ecdsa-sha2-nistp384-cert-v01@openssh.com",
    "ecdsa-sha2-nistp521-cert-v01@openssh.com",
})
"""Key types OpenSSH reads in the file (a line of another type is an error, as there)."""
MAX_POLICY_BYTES = 4 << 20


class PolicyError(ValueError):
    """A malformed line: ``file:line: why``."""


@dataclass(frozen=True)
class AllowedSigner:
    """One line of the file."""

    principals: str
    """The pattern list as written (``*@example.com,!mallory@example.com``)."""
    key_type: str
    key_blob: bytes
    line: int
    namespaces: str | None = None
    valid_after: int | None = None
    """Seconds since the epoch (inclusive)."""
    valid_before: int | None = None
    cert_authority: bool = False


@dataclass(frozen=True)
class Decision:
    """Whether a key is allowed now for a namespace: the signer's principals when it is,
    else why not (one line)."""

    allowed: bool
    principals: str | None = None
    reason: str = ""


def match_pattern(s: str, pattern: str) -> bool:
    """OpenSSH's ``match_pattern``: ``*`` any run, ``?`` one character, nothing else
    special; case-sensitive."""
    rx = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(rx, s, re.DOTALL) is not None


def match_pattern_list(s: str, patterns: str) -> bool:
    """OpenSSH's ``match_pattern_list`` (true only for 1): a match of a negated pattern
    wins over any positive one."""
    found = False
    for p in patterns.split(","):
        neg = p.startswith("!")
        if match_pattern(s, p[1:] if neg else p):
            if neg:
                return False
            found = True
    return found


def parse_time(text: str) -> int:
    """OpenSSH's ``parse_absolute_time``: seconds since the epoch."""
    s, utc = text, False
    if s[-1:] in ("z", "Z"):
        s, utc = s[:-1], True
    fmt = {8: "%Y%m%d", 12: "%Y%m%d%H%M", 14: "%Y%m%d%H%M%S"}.get(len(s))
    if fmt is None or not s.isdigit():
        raise ValueError(text)
    t = time.strptime(s, fmt)
    return calendar.timegm(t) if utc else int(time.mktime(t))


def _token(line: str, at: int) -> tuple[str, int]:
    """A whitespace-delimited token (a leading ``"`` quotes it to the next ``"``)."""
    n = len(line)
    while at < n and line[at] in " \t":
        at += 1
    if at < n and line[at] == '"':
        end = line.find('"', at + 1)
        if end < 0:
            raise ValueError("missing end quote")
        return line[at + 1:end], end + 1
    end = at
    while end < n and line[end] not in " \t":
        end += 1
    return line[at:end], end


def _options_token(line: str, at: int) -> tuple[str, int]:
    """The options field: up to the first blank outside quotes (OpenSSH's
    ``sshkey_advance_past_options``)."""
    n = len(line)
    while at < n and line[at] in " \t":
        at += 1
    start, quoted = at, False
    while at < n and (quoted or line[at] not in " \t"):
        if line[at] == "\\" and line[at + 1:at + 2] == '"':
            at += 1
        elif line[at] == '"':
            quoted = not quoted
        at += 1
    if quoted:
        raise ValueError("missing end quote")
    return line[start:at], at


def _quoted(opts: str, at: int) -> tuple[str, int]:
    """OpenSSH's ``opt_dequote``: a ``"``-quoted value, ``\\"`` an escaped quote."""
    if at >= len(opts) or opts[at] != '"':
        raise ValueError("missing start quote")
    out: list[str] = []
    at += 1
    while at < len(opts) and opts[at] != '"':
        if opts[at] == "\\" and opts[at + 1:at + 2] == '"':
            at += 1
        out.append(opts[at])
        at += 1
    if at >= len(opts):
        raise ValueError("missing end quote")
    return "".join(out), at + 1


def _options(opts: str) -> dict[str, object]:
    got: dict[str, object] = {}
    at = 0
    while at < len(opts):
        low = opts[at:].lower()
        if low.startswith("cert-authority") and (len(low) == 14 or low[14] == ","):
            got["cert_authority"] = True
            at += 14
        else:
            for name in ("namespaces", "valid-after", "valid-before"):
                if low.startswith(name + "="):
                    key = name.replace("-", "_")
                    if key in got:
                        raise ValueError(f'multiple "{name}" clauses')
                    value, at = _quoted(opts, at + len(name) + 1)
                    if name == "namespaces":
                        got[key] = value
                    else:
                        try:
                            got[key] = parse_time(value)
                        except ValueError:
                            raise ValueError(f'invalid "{name}" time') from None
                    break
            else:
                raise ValueError("unknown signature option")
        if at >= len(opts):
            break
        if opts[at] != ",":
            raise ValueError("unknown key option")
        at += 1
    va, vb = got.get("valid_after"), got.get("valid_before")
    if isinstance(va, int) and isinstance(vb, int) and vb <= va:
        raise ValueError('"valid-before" time is before "valid-after"')
    return got


def _key(key_type: str, b64: str) -> bytes:
    if key_type not in KEY_TYPES:
        raise ValueError(f"unknown key type {key_type[:40]!r}")
    try:
        blob = base64.b64decode(b64, validate=True)
    except ValueError:
        raise ValueError("bad base64 key") from None
    if len(blob) < 4 or blob[4:4 + int.from_bytes(blob[:4], "big")].decode(
            "ascii", "replace") != key_type:
        raise ValueError("the key's encoding names another key type")
    return blob


def parse_line(line: str, number: int) -> AllowedSigner | None:
    """One line (``None`` for a blank line or a comment); :class:`ValueError` with the
    reason when it is malformed."""
    s = line.strip()
    if not s or s.startswith("#"):
        return None
    principals, at = _token(s, 0)
    if not principals:
        raise ValueError("no principals")
    kt, after = _token(s, at)
    opts: dict[str, object] = {}
    if kt not in KEY_TYPES:  # options first (OpenSSH: a token that is not a key)
        text, after = _options_token(s, at)
        opts = _options(text)
        kt, after = _token(s, after)
    b64, after = _token(s, after)
    if not kt or not b64:
        raise ValueError("no key")
    blob = _key(kt, b64)
    return AllowedSigner(principals, kt, blob, number,
                         namespaces=opts.get("namespaces"),  # type: ignore[arg-type]
                         valid_after=opts.get("valid_after"),  # type: ignore[arg-type]
                         valid_before=opts.get("valid_before"),  # type: ignore[arg-type]
                         cert_authority=bool(opts.get("cert_authority")))


def parse(text: str, name: str) -> tuple[AllowedSigner, ...]:
    """Every line of an allowed_signers file; :class:`PolicyError` at the first malformed
    one."""
    out: list[AllowedSigner] = []
    for n, line in enumerate(text.splitlines(), 1):
        try:
            got = parse_line(line, n)
        except ValueError as exc:
            raise PolicyError(f"{name}:{n}: {exc}") from None
        if got is not None:
            out.append(got)
    return tuple(out)


def _when(t: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


def decide(signers: tuple[AllowedSigner, ...], key: PublicKey, namespace: str,
           now: float) -> Decision:
    """Whether ``key`` may sign for ``namespace`` at ``now``, as ``ssh-keygen -Y
    find-principals`` then ``-Y verify -n NAMESPACE`` decide: the first line with this key,
    no ``cert-authority``, whose namespaces allow it and whose window holds ``now``."""
    why = ""
    for a in signers:
        if a.cert_authority or a.key_blob != key.blob:
            continue
        if a.namespaces is not None and not match_pattern_list(namespace, a.namespaces):
            why = why or (f"key {key.fingerprint} of {a.principals} is not allowed the "
                          f"namespace {namespace!r} (line {a.line}: namespaces="
                          f"\"{a.namespaces}\")")
            continue
        if a.valid_after is not None and now < a.valid_after:
            why = why or (f"key {key.fingerprint} of {a.principals} is not valid before "
                          f"{_when(a.valid_after)} (line {a.line})")
            continue
        if a.valid_before is not None and now > a.valid_before:
            why = why or (f"key {key.fingerprint} of {a.principals} expired at "
                          f"{_when(a.valid_before)} (line {a.line})")
            continue
        return Decision(True, a.principals)
    return Decision(False, None, why or f"signed by key {key.fingerprint}, which the trust "
                                        "policy does not list")


__all__ = ["AllowedSigner", "Decision", "PolicyError", "decide", "match_pattern",
           "match_pattern_list", "parse", "parse_line", "parse_time"]
