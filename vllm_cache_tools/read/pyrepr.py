"""A total reader for the Python ``repr`` text vLLM logs (``non-default args: {...}``).

vLLM prints its arguments with ``%s`` of a dict, so the text mixes literals (``'a'``, ``128``,
``None``, nested dicts and lists) with reprs that are not literals (``<CompilationMode.
VLLM_COMPILE: 3>``, ``KernelConfig(...)``, ``torch.bfloat16``). ``ast.literal_eval`` refuses the
whole line for one such value; :func:`parse_repr` never fails: literals become Python values,
anything else becomes :class:`Opaque` holding its text, and text cut short yields what came
before the cut. Nothing is evaluated or imported.
"""

from __future__ import annotations

import ast
import warnings
from typing import Any

MAX_DEPTH = 64
"""Deeper nesting is kept as opaque text (a hostile line must not recurse without bound)."""


def _literal(text: str, limit: int) -> Any:
    """``ast.literal_eval`` of a short text, else :class:`Opaque`: ast takes ~100 bytes of
    memory per byte of text and recursion per operator (``1+1+...``), and warns on stderr
    (``1if``: "invalid decimal literal") (issue 12, surgical)."""
    if len(text) > limit:
        return Opaque(text)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return Opaque(text)


class Opaque(str):
    """The text of a value that is not a Python literal (an enum, an object repr)."""

    __slots__ = ()


_CLOSE = {"(": ")", "[": "]", "{": "}", "<": ">"}


class _Reader:
    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0

    def ws(self) -> None:
        s, n = self.s, len(self.s)
        while self.i < n and s[self.i] in " \t\r\n":
            self.i += 1

    def peek(self) -> str:
        return self.s[self.i] if self.i < len(self.s) else ""

    def value(self, depth: int) -> Any:
        self.ws()
        ch = self.peek()
        if not ch:
            return Opaque("")
        if depth < MAX_DEPTH:
            if ch == "{":
                return self.mapping(depth)
            if ch in "[(":
                return self.sequence(ch, depth)
        if ch in "'\"" or (ch in "bBrRuU" and self.s[self.i + 1:self.i + 2] in ("'", '"')):
            return self.string()
        return self.atom()

    def mapping(self, depth: int) -> Any:
        self.i += 1
        out: dict[Any, Any] = {}
        as_set: list[Any] = []
        while True:
            self.ws()
            ch = self.peek()
            if ch in ("}", ""):
                self.i += 1
                break
            key = self.value(depth + 1)
            self.ws()
            if self.peek() == ":":
                self.i += 1
                val = self.value(depth + 1)
                try:
                    out[key] = val
                except TypeError:  # an unhashable key: keep its text
                    out[Opaque(repr(key))] = val
            else:
                as_set.append(key)
            self.ws()
            if self.peek() == ",":
                self.i += 1
            elif self.peek() not in ("}", ""):
                self.skip_to(",}")
        return out if out or not as_set else as_set

    def sequence(self, opener: str, depth: int) -> Any:
        closer = _CLOSE[opener]
        self.i += 1
        items: list[Any] = []
        while True:
            self.ws()
            ch = self.peek()
            if ch in (closer, ""):
                self.i += 1
                break
            items.append(self.value(depth + 1))
            self.ws()
            if self.peek() == ",":
                self.i += 1
            elif self.peek() not in (closer, ""):
                self.skip_to("," + closer)
        return tuple(items) if opener == "(" else items

    def string(self) -> Any:
        s, start = self.s, self.i
        while s[self.i] not in "'\"":
            self.i += 1
        quote = s[self.i]
        triple = s.startswith(quote * 3, self.i)
        self.i += 3 if triple else 1
        end_mark = quote * 3 if triple else quote
        while self.i < len(s):
            if s[self.i] == "\\":
                self.i += 2
                continue
            if s.startswith(end_mark, self.i):
                self.i += len(end_mark)
                text = s[start:self.i]
                return _literal(text, 64 * 1024) if len(text) <= 64 * 1024 else Opaque(text)
            self.i += 1
        return Opaque(s[start:])  # cut short inside the string

    def atom(self) -> Any:
        """A number, True/False/None, or any other text up to the next ``,``/closer at this
        level (brackets, quotes and ``<...>`` balanced): kept as :class:`Opaque`."""
        start = self.i
        self.skip_to(",:}])")
        text = self.s[start:self.i].strip()
        v = _literal(text, 100)  # a number or a name is short; longer text is opaque
        return v if v is None or isinstance(v, (bool, int, float, complex)) else Opaque(text)

    def skip_to(self, stops: str) -> None:
        """Advance to the next character of ``stops`` outside brackets and quotes."""
        s, n = self.s, len(self.s)
        stack: list[str] = []
        while self.i < n:
            ch = s[self.i]
            if ch in "'\"":
                q = ch
                self.i += 1
                while self.i < n and s[self.i] != q:
                    self.i += 2 if s[self.i] == "\\" else 1
                self.i += 1
                continue
            if stack:
                if ch == stack[-1]:
                    stack.pop()
                elif ch in _CLOSE:
                    stack.append(_CLOSE[ch])
            elif ch in stops:
                return
            elif ch in _CLOSE:
                stack.append(_CLOSE[ch])
            self.i += 1


def parse_repr(text: str) -> Any:
    """The value of one Python repr (see the module docstring); never raises."""
    return _Reader(text).value(0)


def plain(value: Any) -> Any:
    """JSON-safe form: tuples as lists, non-string keys as their text, opaque reprs as their
    text (an enum ``<CompilationMode.VLLM_COMPILE: 3>`` as ``CompilationMode.VLLM_COMPILE``)."""
    if isinstance(value, Opaque):
        t = str(value)
        if t.startswith("<") and t.endswith(">") and ": " in t:
            return t[1:-1].split(": ", 1)[0]
        return t
    if isinstance(value, dict):
        return {k if isinstance(k, str) else repr(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, (bytes, complex)):
        return repr(value)
    return value
