"""The check behind the one CLI layer (cli/coercion.py): typer with its pydantic conversion
avoided for plain values must pass the same keywords, print the same bytes and exit with the
same status as typer's own conversion (tests/test_ls_fast.py, test_stats_fast.py,
test_fleet_pull_fast.py, test_predict_fast.py)."""

from __future__ import annotations

import contextlib
import inspect
import io
import sys
from collections.abc import Callable
from typing import Any

import pytest

from vllm_cache_tools.cli import build_command


def _typed(kw: dict[str, Any]) -> dict[str, tuple[type, Any]]:
    return {k: (type(v), v) for k, v in kw.items()}


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


@contextlib.contextmanager
def typers_own_conversion() -> Any:
    """typer's pydantic conversion, as before cli/coercion.py, for the duration."""
    import typer.core
    from typer import _coercion

    build_command("ls")  # installs ours (once), so that it can be put aside here
    ours = typer.core.build_runtime_param
    typer.core.build_runtime_param = _coercion.build_runtime_param
    try:
        yield
    finally:
        typer.core.build_runtime_param = ours


def assert_same_keywords(verb: str, args: list[str], target: str, fn: Callable[..., Any],
                         monkeypatch: pytest.MonkeyPatch) -> None:
    ours = typer_kwargs(verb, args, target, fn, monkeypatch)
    assert ours
    with typers_own_conversion():
        theirs = typer_kwargs(verb, args, target, fn, monkeypatch)
    assert _typed(ours) == _typed(theirs)


def _outcome(verb: str, args: list[str]) -> tuple[Any, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code: Any = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            build_command(verb).main([verb, *args], prog_name="vllm-cache")
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def assert_same_outcome(verb: str, args: list[str], target: str,
                        monkeypatch: pytest.MonkeyPatch) -> tuple[Any, str, str]:
    """Status, stdout and stderr of a command line (help, version, a usage error, or the
    keywords the verb at ``target``, stubbed, was given): the same with either conversion."""

    def stub(*a: Any, **kw: Any) -> int:
        sys.stdout.write(f"called with {a!r} {sorted(kw.items())!r}\n")
        return 0

    monkeypatch.setattr(target, stub)
    monkeypatch.setattr(sys, "argv", ["vllm-cache", verb, *args])
    ours = _outcome(verb, args)
    with typers_own_conversion():
        theirs = _outcome(verb, args)
    assert ours == theirs
    return ours


def layer_checks(verb: str, target: str, fn: Callable[..., Any], plain: list[list[str]],
                 left_to_typer: list[list[str]]) -> tuple[Callable[..., None], Callable[..., None]]:
    """The two checks each verb's test file makes, for its module to bind to these names:
    ``test_plain_values_are_the_ones_typer_converts`` (the keywords ``fn``, patched at
    ``target``, is given from each ``plain`` line) and ``test_help_and_errors_are_typers``
    (status, stdout and stderr of each ``left_to_typer`` line), each against typer's own
    conversion."""

    @pytest.mark.parametrize("args", plain, ids=" ".join)
    def test_plain_values_are_the_ones_typer_converts(args: list[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
        assert_same_keywords(verb, args, target, fn, monkeypatch)

    @pytest.mark.parametrize("args", left_to_typer, ids=" ".join)
    def test_help_and_errors_are_typers(args: list[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
        assert_same_outcome(verb, args, target, monkeypatch)

    return test_plain_values_are_the_ones_typer_converts, test_help_and_errors_are_typers
