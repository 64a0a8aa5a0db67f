"""The check behind the typer-free fast paths of ``ls`` and ``pull``
(tests/test_ls_fast.py, tests/test_fleet_pull_fast.py): the keywords the fast reader gives
equal those typer passes for the same command line."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from vllm_cache_tools.cli import build_command


def _plain(kw: dict[str, Any]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, (list, tuple)) else v for k, v in kw.items()}


def typer_kwargs(verb: str, args: list[str], target: str, fn: Callable[..., Any],
                 monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The keywords typer's ``verb`` command passes to ``fn`` (patched at ``target``)."""
    seen: dict[str, Any] = {}

    def capture(*a: Any, **kw: Any) -> int:
        bound = inspect.signature(fn).bind(*a, **kw)
        bound.apply_defaults()
        seen.update(bound.arguments)
        return 0

    monkeypatch.setattr(target, capture)
    monkeypatch.setattr(sys, "argv", ["vllm-cache", verb, *args])  # pass-through reads --
    try:
        build_command(verb).main([verb, *args], prog_name="vllm-cache", standalone_mode=False)
    except SystemExit as exc:
        assert exc.code == 0
    return seen


def assert_reads_as_typer(verb: str, args: list[str], parse: Callable[..., Any],
                          target: str, fn: Callable[..., Any],
                          monkeypatch: pytest.MonkeyPatch) -> None:
    fast = parse(args)
    assert fast is not None
    bound = inspect.signature(fn).bind(**fast)
    bound.apply_defaults()
    assert _plain(bound.arguments) == _plain(typer_kwargs(verb, args, target, fn, monkeypatch))
    if "root" in fast:
        assert isinstance(fast["root"], Path)
