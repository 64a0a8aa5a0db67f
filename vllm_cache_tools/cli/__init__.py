"""The ``vllm-cache`` command: a thin typer app over the library. One module per verb,
imported only when its verb runs (``vllm-cache log`` does not pay for ``predict``'s imports)."""

from __future__ import annotations

import copy
import importlib
import sys
from typing import Annotated, Any

import typer
import typer.main

from vllm_cache_tools.cli.common import fail
from vllm_cache_tools.errors import VctError

# -h as well as --help, on the command and on every verb (click passes it down).
_HELP = {"help_option_names": ["-h", "--help"]}
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
}


def build_app(only: str | None = None) -> typer.Typer:
    """The app with every verb, or with ``only`` one (kept a group, so ``vllm-cache VERB``
    parses the same either way)."""
    app = typer.Typer(
        name="vllm-cache",
        help="Inspect and manage vLLM's torch.compile cache "
             "($VLLM_CACHE_ROOT/torch_compile_cache).",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        context_settings=_HELP,
    )
    for verb, (mod, fn, ctx) in COMMANDS.items():
        if only is not None and verb != only:
            continue
        func = getattr(importlib.import_module(f"vllm_cache_tools.cli.{mod}"), fn)
        app.command(verb, context_settings={**_HELP, **(ctx or {})})(func)
    app.callback()(_top)
    return app


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("vllm-cache-tools")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def _show_version(value: bool) -> None:
    if value:
        sys.stdout.write(f"vllm-cache {_version()}\n")
        raise typer.Exit(0)


def _top(
    version: Annotated[bool, typer.Option(
        "--version", "-V", is_eager=True, callback=_show_version,
        help="Print the version and exit.")] = False,
) -> None:
    """Inspect and manage vLLM's torch.compile cache ($VLLM_CACHE_ROOT/torch_compile_cache)."""


def __getattr__(name: str) -> Any:
    if name == "app":  # the whole app, for callers that want it (e.g. click's testing tools)
        return build_app()
    raise AttributeError(name)


def build_command(only: str | None = None) -> Any:
    """The click command ``main`` runs: the app, with ``--version`` on every verb too."""
    group = typer.main.get_command(build_app(only))
    version = copy.copy(next(p for p in group.params if p.name == "version"))
    version.expose_value = False  # the verb's function does not take it
    for sub in getattr(group, "commands", {}).values():
        sub.params.append(version)
    return group


def main() -> None:
    verb = sys.argv[1] if len(sys.argv) > 1 else None
    try:
        build_command(verb if verb in COMMANDS else None)(prog_name="vllm-cache")
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    except VctError as exc:  # every error meant for users, reported here and only here
        fail(str(exc), code=exc.exit_code)
    except Exception as exc:  # last resort: one line, never a traceback
        fail(f"internal error: {type(exc).__name__}: {exc}", code=3)
