"""``host-profile``: what this host's vLLM keys depend on, written here and read elsewhere by
``predict --for-host`` (:mod:`vllm_cache_tools.analyze.for_host`).

The platform factors: the CPU's instruction-set flags (vLLM's CPU platform and Inductor key
on them), the GPU's name and compute capability, CUDA and the driver, torch / triton / vLLM /
Python versions, the install prefix (traced files' absolute paths enter the backend code
hash); with vLLM arguments, also what vLLM's platform set in the environment and every key
input except the traced files (:mod:`vllm_cache_tools.live.host_profile`, run in the user's
vLLM interpreter).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from vllm_cache_tools.fleet.errors import FleetError
from vllm_cache_tools.fleet.host import cpu_facts
from vllm_cache_tools.live.host_profile import collect
from vllm_cache_tools.safeio import NamedOutput
from vllm_cache_tools.units import iso

KIND = "host-profile"


class HostProfileError(FleetError):
    """The profile could not be made: no vLLM for that interpreter, arguments vLLM rejects."""


def host_profile(vllm_args: Sequence[str] = (), *, python: str | None = None,
                 usage: str = "serve", env: Mapping[str, str] | None = None
                 ) -> dict[str, Any]:
    """The profile document of this host (without its schema id; ``views`` adds it)."""
    exe = python or sys.executable
    live = collect(exe, vllm_args, usage, dict(os.environ if env is None else env))
    if "error" in live:
        raise HostProfileError(f"host-profile: {live['error']}")
    return {"kind": KIND, "host": socket.gethostname(), "created": iso(time.time()),
            "cpu": cpu_facts(), **live}


def profile_text(doc: dict[str, Any]) -> str:
    """The profile as written: to a file by :func:`write_profile`, to stdout for ``-o -``."""
    return json.dumps(doc, indent=1) + "\n"


def write_profile(path: str | os.PathLike[str], doc: dict[str, Any] | None, *,
                  force: bool = False) -> None:
    """Write ``doc`` to ``path`` atomically (:class:`~vllm_cache_tools.safeio.NamedOutput`:
    an existing name is refused unless ``force``, then replaced, never followed).
    ``doc=None``: only refuse a taken name now, before the profile is collected."""
    p = os.fspath(path)
    try:
        if doc is None:
            NamedOutput.refuse_taken(p, force)
            return
        with NamedOutput(p, force=force) as out:
            out.write(profile_text(doc).encode())
    except OSError as exc:
        raise HostProfileError(f"host-profile: cannot write {p}: {exc.strerror or exc}"
                               ) from None


__all__ = ["KIND", "HostProfileError", "host_profile", "profile_text", "write_profile"]
