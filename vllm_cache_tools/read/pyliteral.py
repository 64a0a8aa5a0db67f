"""A bounded reader for the Python literals vLLM writes with ``pprint.pformat`` (the backend
tree's ``vllm_compile_cache.py``).

:func:`ast.literal_eval` builds a whole syntax tree first: ~500 MB and seconds for 1 MB of
``[1,1,...]``, ``RecursionError`` / ``MemoryError`` / ``ValueError`` on hostile text, and a
dict of keys that all hash alike (ints differing by 2**61 - 1) takes quadratic time. This
reader takes exactly what ``pformat`` produces — dicts, lists, tuples, sets, strings and bytes
(adjacent literals concatenated), ints, floats, ``None``/``True``/``False`` — token by token,
in time and memory linear in the text, with :data:`MAX_TOKENS`, :data:`MAX_DEPTH` and ints
below 2**61 - 1. Anything else is a :class:`ReadError` with a one-line message; nothing is
evaluated."""

from __future__ import annotations

import ast
import re
import warnings
from typing import Any

from vllm_cache_tools.read.errors import ReadError

MAX_TOKENS = 200_000
"""A real table holds ~20 tokens per compiled graph (a few thousand graphs at most)."""
MAX_DEPTH = 32
"""Nesting of containers (real: 4)."""
MAX_ESCAPED = 64 * 1024
"""Longest string token with escapes or a prefix (read by ``ast``, which takes ~100 bytes of
memory per byte of it); ``repr`` of real cache keys and paths has few or none."""
_MAX_INT = (1 << 61) - 1
"""Larger ints hash alike by construction (a quadratic dict); no real value comes near."""

# One token, after optional whitespace. Every alternative starts with a distinct character
# class and none can backtrack into another, so a match costs the length of what it matches.
# A string token is matched up to its opening quote only; :meth:`_Tokens.string` finds its
# end (``(?:[^'\\]|\\.)*`` would keep backtracking state for every character: 1 GB for a
# 10 MB string).
_TOKEN = re.compile(r"""
    [ \t\r\n\f\v]*
    (?:
        (?P<str>(?:[rRuU]|[bB][rR]?|[rR][bB])?['"])
      | (?P<num>-?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)
      | (?P<name>None|True|False)
      | (?P<punct>[\[\](){},:])
      | (?P<end>\Z)
    )""", re.X)
_RUN = {"'": re.compile(r"[^'\\\n]*"), '"': re.compile(r'[^"\\\n]*')}
_NAMES = {"None": None, "True": True, "False": False}
_CLOSE = {"[": "]", "(": ")", "{": "}"}


class LiteralLimit(ReadError):
    """The text is past :data:`MAX_TOKENS` or :data:`MAX_DEPTH` (not judged, not broken)."""


class _Tokens:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.count = 0

    def next(self) -> tuple[str, str]:
        """(kind, text) of the next token; kind ``end`` at the end of the text."""
        self.count += 1
        if self.count > MAX_TOKENS:
            raise LiteralLimit(f"more than {MAX_TOKENS} tokens")
        m = _TOKEN.match(self.text, self.pos)
        if m is None:
            bad = self.text[self.pos:self.pos + 40].strip().splitlines()
            raise ReadError(f"not a literal vLLM writes at offset {self.pos}: "
                            f"{(bad[0] if bad else '')!r}")
        self.pos = m.end()
        kind = m.lastgroup or "end"
        if kind == "str":
            return kind, self.string(m.start("str"))
        return kind, m.group(kind) if kind != "end" else ""

    def string(self, start: int) -> str:
        """The whole string token that starts at ``start`` (its opening quote just read)."""
        text, quote = self.text, self.text[self.pos - 1]
        run = _RUN[quote].match
        pos = self.pos
        while True:
            pos = run(text, pos).end()  # type: ignore[union-attr]
            c = text[pos:pos + 1]
            if c == quote:
                self.pos = pos + 1
                return text[start:pos + 1]
            if c != "\\":
                raise ReadError(f"unterminated string literal at offset {start}")
            pos += 2
            if pos - start > MAX_ESCAPED:
                raise LiteralLimit(f"a string literal with escapes longer than {MAX_ESCAPED} "
                                   f"bytes")


def _string(tok: str) -> str | bytes:
    if "\\" not in tok and tok[0] in "'\"":
        return tok[1:-1]
    if len(tok) > MAX_ESCAPED:
        raise LiteralLimit(f"a string literal with escapes longer than {MAX_ESCAPED} bytes")
    with warnings.catch_warnings():  # an invalid escape ("\\l") warns: not for users to see
        warnings.simplefilter("ignore")
        v = ast.literal_eval(tok)  # one string token, a literal by the regex above
    if not isinstance(v, str | bytes):
        raise ReadError("not a string literal")
    return v


def _number(tok: str) -> int | float:
    if any(c in tok for c in ".eE"):
        return float(tok)
    if len(tok) > 20:
        raise ReadError("an implausibly large integer")
    v = int(tok)
    if not -_MAX_INT < v < _MAX_INT:
        raise ReadError("an implausibly large integer")
    return v


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = _Tokens(text)
        self.peeked: tuple[str, str] | None = None

    def take(self) -> tuple[str, str]:
        if self.peeked is not None:
            t, self.peeked = self.peeked, None
            return t
        return self.toks.next()

    def peek(self) -> tuple[str, str]:
        if self.peeked is None:
            self.peeked = self.toks.next()
        return self.peeked

    def value(self, depth: int) -> Any:
        kind, tok = self.take()
        if kind == "str":
            out = _string(tok)
            while self.peek()[0] == "str":  # 'a' 'b': pformat splits long strings so
                nxt = _string(self.take()[1])
                if type(nxt) is not type(out):
                    raise ReadError("str and bytes literals concatenated")
                out = out + nxt  # type: ignore[operator]
            return out
        if kind == "num":
            return _number(tok)
        if kind == "name":
            return _NAMES[tok]
        if kind == "punct" and tok in _CLOSE:
            if depth >= MAX_DEPTH:
                raise LiteralLimit(f"literal nested more than {MAX_DEPTH} deep")
            return self.container(tok, depth + 1)
        raise ReadError(f"unexpected {tok or 'end of file'!r}")

    def container(self, opener: str, depth: int) -> Any:
        close = _CLOSE[opener]
        items: list[Any] = []
        pairs: list[tuple[Any, Any]] = []
        is_dict = False
        trailing_comma = False
        while True:
            if self.peek() == ("punct", close):
                self.take()
                break
            item = self.value(depth)
            if opener == "{" and (is_dict or not items) and self.peek() == ("punct", ":"):
                self.take()
                is_dict = True
                pairs.append((item, self.value(depth)))
            elif is_dict:
                raise ReadError("a dict entry without ':'")
            else:
                items.append(item)
            _, tok = self.take()
            trailing_comma = tok == ","
            if tok == close:
                break
            if tok != ",":
                raise ReadError(f"expected ',' or {close!r}, found {tok or 'end of file'!r}")
        try:
            if opener == "[":
                return items
            if opener == "(":
                return items[0] if len(items) == 1 and not trailing_comma else tuple(items)
            if is_dict:
                return dict(pairs)
            return set(items) if items else {}
        except TypeError as exc:  # an unhashable key or member
            raise ReadError(f"invalid literal: {exc}") from None


def parse_literal(text: str) -> Any:
    """The value of one Python literal in ``text`` (see the module docstring)."""
    p = _Parser(text)
    try:
        v = p.value(0)
        if p.take()[0] != "end":
            raise ReadError("text after the literal")
    except (MemoryError, RecursionError) as exc:
        raise LiteralLimit(type(exc).__name__) from None
    except (ValueError, SyntaxError, OverflowError) as exc:
        if isinstance(exc, ReadError):
            raise
        raise ReadError(f"invalid literal ({type(exc).__name__})") from None
    return v
