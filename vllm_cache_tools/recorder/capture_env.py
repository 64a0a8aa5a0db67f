"""The ``VLLM_*`` variables of a start, as the recorder keeps them: every one, declared by vLLM
or not (undeclared ones never reach its key), secrets redacted, this tool's own switches left
out. Standard library only, and light: the plugin's ``register()`` imports it in the first
process of a start, before vLLM has set variables of its own."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from vllm_cache_tools import redaction

OWN_ENV = "VLLM_CACHE_TOOLS_"
"""This tool's switches: not vLLM's, never part of a start's record."""


def vllm_env(environ: Mapping[str, str]) -> dict[str, Any]:
    return redaction.redact_env({k: environ[k] for k in sorted(environ)
                                 if k.startswith("VLLM_") and not k.startswith(OWN_ENV)})


def start_env_json(environ: Mapping[str, str]) -> str:
    return json.dumps(vllm_env(environ), sort_keys=True)


def from_json(text: str | None) -> dict[str, Any] | None:
    """What :func:`start_env_json` wrote, or ``None`` for anything else."""
    try:
        data = json.loads(text or "")
    except ValueError:
        return None
    if isinstance(data, dict) and all(isinstance(k, str) and k.startswith("VLLM_")
                                      for k in data):
        return data
    return None
