"""Typer without pydantic on the common path: the one costly part of the CLI layer, avoided.

typer (0.2x) converts every parameter's value through a pydantic ``TypeAdapter``: importing
pydantic and building the adapters cost ~0.09 s of CPU a run, more than typer and the verb's
own imports together (measured: docs/architecture.md, "CLI layer"). Almost every value this
CLI takes is a ``str``, a ``bool`` flag, a ``Path`` without checks, a ``list[str]`` or an
``int`` in range, where that conversion is the identity or one constructor call.
:func:`install` puts a converter for exactly those values in front of typer's own: any other
value (an ``int`` written ``+3`` or out of range, a ``float``, a ``tuple``, an empty path) is
handed to typer's pydantic converter, built then, so its result and its error line stay
typer's. Help and parsing are typer's and click's, untouched (tests/test_cli_layer.py
compares every verb's keywords and errors with and without this converter)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_INT = re.compile(r"(?:0|[1-9][0-9]{0,17})\Z")  # what int() and pydantic read alike
_installed = False


def install() -> None:
    """Put :func:`_fast_runtime_param` in front of typer's ``build_runtime_param`` (once).
    Nothing to do for a typer without it (before 0.2x typer converted through click's types,
    without pydantic)."""
    global _installed
    if _installed:
        return
    _installed = True
    try:
        from typer import _coercion, core
    except ImportError:  # pragma: no cover - an older typer: click's types, already fast
        return
    found = getattr(core, "build_runtime_param", None)
    base = getattr(_coercion, "RuntimeParam", None)
    if found is None or base is None:  # pragma: no cover - typer changed: keep its own
        return
    original: Callable[[Any], Any] = found

    @dataclass(frozen=True)
    class _Plain(base):  # type: ignore[misc,valid-type]
        descriptor: Any = None
        _slow: list[Any] = field(default_factory=list)

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            done, out = _plain_value(self.descriptor, value, param, ctx)
            if done:
                return out
            if not self._slow:  # typer's own converter, built only when a value needs it
                self._slow.append(original(self.descriptor))
            return self._slow[0]._coerce_value(value, param=param, ctx=ctx)

    def fast(descriptor: Any) -> Any:
        if _plain_kind(descriptor) is None:
            return original(descriptor)
        return _Plain(parameter_info=descriptor.parameter_info,
                      annotation=descriptor.annotation, descriptor=descriptor)

    setattr(core, "build_runtime_param", fast)  # noqa: B010 (a private name, on purpose)


def _plain_kind(d: Any) -> str | None:
    """Which of the plain conversions fits this parameter, or ``None`` (typer's own)."""
    info = d.parameter_info
    if d.file_annotation is not None or getattr(info, "parser", None) is not None:
        return None
    ann = d.annotation
    if ann is str or ann is bool:
        return ann.__name__
    if ann is int and not getattr(info, "clamp", False):
        return "int"
    if ann is float and getattr(info, "min", None) is None \
            and getattr(info, "max", None) is None:
        return "float"
    if ann is Path and getattr(info, "path_type", None) is None:
        return "path"
    if repr(ann) == "list[str]":
        return "list[str]"
    return None


def _plain_value(d: Any, value: Any, param: Any, ctx: Any) -> tuple[bool, Any]:
    """``(True, value as typer would give it)``, or ``(False, None)`` for typer's own."""
    kind = _plain_kind(d)
    if kind == "str" and type(value) is str:
        return True, value
    if kind == "bool" and type(value) is bool:
        return True, value
    if kind == "list[str]" and isinstance(value, (list, tuple)) \
            and all(type(v) is str for v in value):
        return True, list(value)
    if kind == "int":
        if type(value) is str and _INT.match(value):
            value = int(value)
        if type(value) is int and _in_range(d.parameter_info, value):
            return True, value
        return False, None
    if kind == "float" and type(value) is float:  # a default; typed values go to typer's
        return True, value
    if kind == "path" and (isinstance(value, Path)
                           or (type(value) is str and value and "\0" not in value)):
        from typer._param_types import coerce_cli_path

        # typer's own checks (exists, readable, ...) and error lines; only pydantic's
        # str -> Path step is ours.
        out = coerce_cli_path(value, d.parameter_info, path_type=None, param=param, ctx=ctx)
        return True, Path(os.fsdecode(out))
    return False, None


def _in_range(info: Any, value: int) -> bool:
    low, high = getattr(info, "min", None), getattr(info, "max", None)
    return (low is None or value >= low) and (high is None or value <= high)
