"""The ``vllm-cache`` command: a thin typer app over the library. One module per verb,
imported only when its verb runs (``vllm-cache log`` does not pay for ``predict``'s imports)."""

from __future__ import annotations

import gc
import sys
from typing import Any

from vllm_cache_tools.errors import VctError

_PASSTHROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}
# verb -> (module, function, typer context settings)
COMMANDS: dict[str, tuple[str, str, dict[str, Any] | None]] = {
    "ls": ("ls", "ls", None),
    "show": ("show", "show", None),
    "predict": ("predict", "predict_cmd", _PASSTHROUGH),
    "host-profile": ("host_profile", "host_profile_cmd", _PASSTHROUGH),
    "log": ("log", "log", None),
    "explain": ("explain", "explain", {"allow_extra_args": False,
                                       "ignore_unknown_options": True}),
    "diff-graph": ("diff_graph", "diff_graph", None),
    "prune": ("prune", "prune", None),
    "rm": ("rm", "rm", None),
    "verify": ("verify", "verify_cmd", None),
    "audit": ("audit", "audit_cmd", None),
    "dedup": ("dedup", "dedup", None),
    # Fleets (vllm_cache_tools/fleet): bundles, remote stores, warming.
    "pack": ("pack", "pack", None),
    "unpack": ("unpack", "unpack", _PASSTHROUGH),
    "push": ("push", "push", None),
    "pull": ("pull", "pull", _PASSTHROUGH),
    "prune-remote": ("prune_remote", "prune_remote", None),
    "warm": ("warm", "warm", _PASSTHROUGH),
    # Fleet insight (vllm_cache_tools/analyze): hit statistics, what splits a model's cache.
    "stats": ("stats", "stats_cmd", None),
    "drift": ("drift", "drift_cmd", None),
    "serve-metrics": ("serve_metrics", "serve_metrics_cmd", None),
}


def build_app(only: str | None = None) -> Any:
    """The app with every verb, or with ``only`` one (kept a group, so ``vllm-cache VERB``
    parses the same either way): :func:`vllm_cache_tools.cli.app.build_app`."""
    from vllm_cache_tools.cli.app import build_app as build

    return build(only)


def __getattr__(name: str) -> Any:
    if name == "app":  # the whole app, for callers that want it (e.g. click's testing tools)
        return build_app()
    raise AttributeError(name)


def build_command(only: str | None = None) -> Any:
    """The click command ``main`` runs (:func:`vllm_cache_tools.cli.app.build_command`)."""
    from vllm_cache_tools.cli.app import build_command as build

    return build(only)


# Start-up allocates tens of thousands of objects that stay (modules, classes, typer's
# command) and almost no cyclic garbage: at the default first threshold (700) the collector
# ran 35 times in a listing of examples/sample_cache (each object looked at in two
# generations) for ~500 objects freed and 8.5 ms of CPU; at 10,000, 5 times and 4.3 ms
# (gc.callbacks, one process). Cycles are still collected, later. Set before anything heavy
# is imported: this module imports only the base error.
_GC_FIRST_THRESHOLD = 10_000


def main() -> None:
    gc.set_threshold(_GC_FIRST_THRESHOLD, *gc.get_threshold()[1:])
    verb = sys.argv[1] if len(sys.argv) > 1 else None
    try:
        build_command(verb if verb in COMMANDS else None)(prog_name="vllm-cache")
    except KeyboardInterrupt:
        from vllm_cache_tools.cli.common import write_err

        write_err("interrupted\n")
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    except VctError as exc:  # every error meant for users, reported here and only here
        from vllm_cache_tools.cli.common import fail

        fail(str(exc), code=exc.exit_code)
    except Exception as exc:  # last resort: one line, never a traceback
        from vllm_cache_tools.cli.common import fail

        fail(f"internal error: {type(exc).__name__}: {exc}", code=3)
