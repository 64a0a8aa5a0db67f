"""Reading a verb's plain command line without typer: the one reader behind the fast paths
of ``ls``, ``pull``, ``stats`` and ``predict`` (cli/*_run.py, listed in ``FAST_PATHS``).

Building a typer command costs ~0.2 s (typer converts every parameter through a pydantic
``TypeAdapter``), more than an indexed listing or a pod's pull decision may take. A verb that
wants the fast path declares its flags, its options taking one value and its repeatable
options; :func:`read_plain` reads a command line made only of those, each flag and valued
option at most once, values as ``--opt value``, ``--opt=value`` or ``-o value`` (never
empty, never starting with ``-``), and answers ``None`` for anything else (``--help``, an
unknown, repeated or malformed option, ``-`` alone), which the caller then leaves to typer:
help, errors and their exit codes stay typer's. The tests compare the keywords with those
typer passes."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class PlainArgs:
    """What a plain command line said: keywords (flags as ``True``, valued options as their
    string, repeatable ones as lists), the positionals, and what followed ``--``."""

    keywords: dict[str, Any]
    positionals: list[str]
    after_dashdash: list[str]


def read_plain(args: Sequence[str], *, flags: Mapping[str, str], valued: Mapping[str, str],
               lists: Mapping[str, str] | None = None, dashdash: bool = False
               ) -> PlainArgs | None:
    """``args`` (after the verb) read with these option tables (option -> keyword), or
    ``None`` when typer should read them. ``dashdash``: ``--`` ends the options and what
    follows is passed through (otherwise a ``--`` is left to typer)."""
    lists = lists or {}
    args = list(args)
    rest: list[str] = []
    if "--" in args:
        if not dashdash:
            return None
        cut = args.index("--")
        args, rest = args[:cut], args[cut + 1:]
    kw: dict[str, Any] = {}
    positionals: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        i += 1
        if not a.startswith("-"):
            positionals.append(a)
            continue
        # ``--opt=value``; a short option takes its value as the next argument only (click
        # reads ``-j=3`` as the value ``=3``: left to typer).
        name, eq, value = a.partition("=") if a.startswith("--") else (a, "", "")
        if not eq and name in flags:
            if flags[name] in kw:
                return None
            kw[flags[name]] = True
            continue
        if name not in valued and name not in lists:
            return None
        if not eq:
            if i >= len(args):
                return None
            value = args[i]
            i += 1
        if not value or value.startswith("-"):
            return None
        if name in lists:
            kw.setdefault(lists[name], []).append(value)
        elif valued[name] in kw:
            return None
        else:
            kw[valued[name]] = value
    return PlainArgs(kw, positionals, rest)


def typed(kw: dict[str, Any], *, bounded: Mapping[str, int] | None = None
          ) -> dict[str, Any] | None:
    """``kw`` with ``root`` as a :class:`~pathlib.Path` and each ``bounded`` option as an
    int in ``1..max``; ``None`` (typer should read them) when such a value is not one."""
    for name, most in (bounded or {}).items():
        if name in kw:
            if not kw[name].isdigit() or not 1 <= int(kw[name]) <= most:
                return None
            kw[name] = int(kw[name])
    if "root" in kw:
        kw["root"] = Path(kw["root"])
    return kw


def run_printing(verb: Callable[[], object]) -> None:
    """Run a verb that prints, exiting as typer would on a closed pipe: status 1, with no
    second error while the interpreter flushes it."""
    try:
        verb()
        sys.stdout.flush()
    except BrokenPipeError:
        # As click does: no second error while the interpreter flushes the closed pipe.
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115
        raise SystemExit(1) from None
