"""Credentials of ``oci://`` stores, the standard way: ``REGISTRY_AUTH_FILE`` (podman, skopeo),
else ``$DOCKER_CONFIG/config.json`` or ``~/.docker/config.json`` (``auths``: ``auth`` = base64
``user:password``, or ``username`` and ``password``), answered to a registry's ``Basic`` or
``Bearer`` (token service) challenge. Credential helpers are not run. No message carries a
credential: they name the host and the files to fix."""

from __future__ import annotations

import base64
import ipaddress
import os
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from vllm_cache_tools.fleet.errors import StoreError
from vllm_cache_tools.read import jsontext

TIMEOUT = (10.0, 60.0)
"""Connect, then between two reads: a registry that accepts and says nothing is an error."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _auth_file() -> str:
    if os.environ.get("REGISTRY_AUTH_FILE"):
        return os.environ["REGISTRY_AUTH_FILE"]
    base = os.environ.get("DOCKER_CONFIG") or os.path.join(os.path.expanduser("~"), ".docker")
    return os.path.join(base, "config.json")


def credentials(host: str) -> tuple[str, str] | None:
    """``(user, password)`` for ``host`` from the standard auth file, or ``None``."""
    path = _auth_file()
    try:
        with open(path, "rb") as f:
            data = jsontext.loads(f.read(1 << 20), os.path.basename(path))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise StoreError(f"{path}: cannot read the registry credentials "
                         f"({getattr(exc, 'strerror', None) or type(exc).__name__})") from None
    auths = data.get("auths") if isinstance(data, dict) else None
    if not isinstance(auths, dict):
        return None
    for name in (host, f"https://{host}", f"http://{host}", f"https://{host}/v2/",
                 f"http://{host}/v2/"):
        a = auths.get(name)
        if not isinstance(a, dict):
            continue
        if isinstance(a.get("auth"), str) and a["auth"]:
            try:
                user, _, pw = base64.b64decode(a["auth"]).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                raise StoreError(f"{path}: the auth of {host} is not base64 of user:password"
                                 ) from None
            return user, pw
        if isinstance(a.get("username"), str) and isinstance(a.get("password"), str):
            return a["username"], a["password"]
    return None


def _challenge(header: str) -> tuple[str, dict[str, str]]:
    scheme, _, rest = header.strip().partition(" ")
    return scheme.lower(), dict(re.findall(r'(\w+)="([^"]*)"', rest))


def authorization(header: str, *, host: str, repo: str, display: str, insecure: bool,
                  read: Callable[[Any, int], bytes] | None = None,
                  session: Any = None) -> str:
    """The ``Authorization`` value that answers a registry's ``WWW-Authenticate`` challenge
    (``Basic``, or ``Bearer`` through its token service) with the standard file's
    credentials for ``host``; :class:`StoreError` (one line, no secret) when it cannot be.
    ``read(response, n)``: at most ``n`` bytes of the token answer's body (``fleet.oci``
    passes its reader, which gives up on a body that drips). ``session``: the ``requests``
    session to ask the token service with (``fleet.oci``'s, whose headers are bounded)."""
    scheme, params = _challenge(header)
    creds = credentials(host)
    if creds is None and scheme == "basic":
        raise StoreError(f"{display}: the registry asks for credentials and none "
                         f"are set for {host} (~/.docker/config.json or "
                         "REGISTRY_AUTH_FILE)")
    if scheme == "basic" and creds is not None:
        return "Basic " + base64.b64encode(":".join(creds).encode()).decode()
    if scheme != "bearer" or not params.get("realm"):
        raise StoreError(f"{display}: the registry asks for an authentication this "
                         f"tool does not speak ({scheme or 'none'})")
    realm = params["realm"]
    rhost = urlsplit(realm).hostname or ""
    if not realm.startswith("https://") and not (insecure and (
            is_loopback(rhost) or rhost == urlsplit(f"//{host}").hostname)):
        raise StoreError(f"{display}: the registry's token service is not HTTPS: "
                         "credentials not sent")
    import requests

    q = {k: v for k, v in params.items() if k in ("service", "scope")}
    if q.get("scope", "").startswith(f"repository:{repo}:"):
        # One token for every request of this store (pushes run 8 at a time: tokens of
        # different scopes would replace each other); the service grants what it allows.
        q["scope"] = f"repository:{repo}:pull,push,delete"
    try:
        r = (session or requests).get(realm, params=q, timeout=TIMEOUT, stream=True,
                                      auth=creds if creds else None)
    except requests.exceptions.RequestException:
        raise StoreError(f"{display}: cannot reach the registry's token service"
                         ) from None
    with r:
        body = (read(r, 1 << 20) if read is not None
                else r.raw.read(1 << 20, decode_content=True))
    if r.status_code in (401, 403):
        raise StoreError(f"{display}: the registry's token service refused the "
                         f"credentials for {host}" if creds else
                         f"{display}: the registry asks for credentials and none are "
                         f"set for {host} (~/.docker/config.json or "
                         "REGISTRY_AUTH_FILE)")
    try:
        tok = jsontext.loads(body, "token")
        token = (tok.get("token") or tok.get("access_token")) if isinstance(tok, dict) else None
    except ValueError:
        token = None
    if not isinstance(token, str) or not token:
        raise StoreError(f"{display}: the registry's token service gave no token")
    return f"Bearer {token}"


__all__ = ["TIMEOUT", "authorization", "credentials", "is_loopback"]
