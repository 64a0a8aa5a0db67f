"""The typer app of ``vllm-cache``: every verb of :data:`vllm_cache_tools.cli.COMMANDS`,
each module imported only when its verb runs."""

from __future__ import annotations

import copy
import importlib
from typing import Annotated, Any

import typer
import typer.main

from vllm_cache_tools.cli import COMMANDS
from vllm_cache_tools.cli.coercion import install

# -h as well as --help, on the command and on every verb (click passes it down).
_HELP = {"help_option_names": ["-h", "--help"]}


def build_app(only: str | None = None) -> typer.Typer:
    """The app with every verb, or with ``only`` one (kept a group, so ``vllm-cache VERB``
    parses the same either way)."""
    install()  # typer's values without pydantic where they are plain (cli/coercion.py)
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
        from vllm_cache_tools.cli.common import write_out

        write_out(f"vllm-cache {_version()}\n")
        raise typer.Exit(0)


def _top(
    version: Annotated[bool, typer.Option(
        "--version", "-V", is_eager=True, callback=_show_version,
        help="Print the version and exit.")] = False,
) -> None:
    """Inspect and manage vLLM's torch.compile cache ($VLLM_CACHE_ROOT/torch_compile_cache)."""


def build_command(only: str | None = None) -> Any:
    """The click command ``main`` runs: the app, with ``--version`` on every verb too."""
    group = typer.main.get_command(build_app(only))
    version = copy.copy(next(p for p in group.params if p.name == "version"))
    version.expose_value = False  # the verb's function does not take it
    for sub in getattr(group, "commands", {}).values():
        sub.params.append(version)
    return group
