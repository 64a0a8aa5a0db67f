"""The restricted unpickler as it was before issue 12 (the C unpickler with stand-in classes),
kept as the reference that real artifacts must still read the same through the hardened one,
and :func:`same_tree` to compare the two results."""

from __future__ import annotations

import _compat_pickle
import io
import pickle
from typing import Any

from vllm_cache_tools.read import safe_pickle
from vllm_cache_tools.read.safe_pickle import SafePickleError, Stub


class _Reference(pickle.Unpickler):
    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file)
        self._classes: dict[tuple[str, str], type[Stub]] = {}

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _compat_pickle.NAME_MAPPING:
            module, name = _compat_pickle.NAME_MAPPING[(module, name)]
        elif module in _compat_pickle.IMPORT_MAPPING:
            module = _compat_pickle.IMPORT_MAPPING[module]
        pure = _REFERENCE_PURE.get((module, name))
        if pure is not None:
            return pure
        cls = self._classes.get((module, name))
        if cls is None:
            cls = type(f"Stub[{module}.{name}]", (Stub,), {"module": module, "name": name})
            self._classes[(module, name)] = cls
        return cls

    def persistent_load(self, pid: Any) -> Any:
        return self.find_class("<persistent>", "load")(pid)


def _empty_bytes(*args: Any) -> bytes:
    if args:
        raise pickle.UnpicklingError("bytes() with arguments")
    return b""


_REFERENCE_PURE: dict[tuple[str, str], Any] = {
    ("builtins", "bytes"): _empty_bytes,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("builtins", "bytearray"): bytearray,
    ("collections", "OrderedDict"): __import__("collections").OrderedDict,
    ("_codecs", "encode"): lambda s, enc="utf-8", err="strict": s.encode("latin1"),
    ("codecs", "encode"): lambda s, enc="utf-8", err="strict": s.encode("latin1"),
}


def reference_loads(data: bytes) -> Any:
    try:
        return _Reference(io.BytesIO(data)).load()
    except Exception as exc:
        raise SafePickleError(f"{type(exc).__name__}: {exc}") from None


def same_tree(a: Any, b: Any) -> bool:
    """Structural equality of two unpickled results, stand-ins compared by the global they
    name and what was recorded on them; shared and cyclic references handled."""
    seen: set[tuple[int, int]] = set()
    todo = [(a, b)]
    while todo:
        x, y = todo.pop()
        if (id(x), id(y)) in seen:
            continue
        seen.add((id(x), id(y)))
        if isinstance(x, type) and issubclass(x, Stub):
            if not (isinstance(y, type) and issubclass(y, Stub) and x.qualname() == y.qualname()):
                return False
            continue
        if isinstance(x, Stub):
            if not (isinstance(y, Stub) and type(x).qualname() == type(y).qualname()):
                return False
            todo += [(x.args, y.args), (x.kwargs, y.kwargs),  # type: ignore[attr-defined]
                     (x.state, y.state), (x.items, y.items),  # type: ignore[attr-defined]
                     (x.mapping, y.mapping)]  # type: ignore[attr-defined]
            continue
        if type(x) is not type(y) and not (isinstance(x, bytes | bytearray)
                                           and isinstance(y, bytes | bytearray)):
            return False
        if isinstance(x, dict):
            if len(x) != len(y) or list(map(_key, x)) != list(map(_key, y)):
                return False
            todo += [(x[k], y[k2]) for k, k2 in zip(x, y, strict=True)]
        elif isinstance(x, list | tuple):
            if len(x) != len(y):
                return False
            todo += list(zip(x, y, strict=True))
        elif isinstance(x, set | frozenset):
            if {_key(v) for v in x} != {_key(v) for v in y}:
                return False
        elif x != y and not (x != x and y != y):  # NaN equals NaN here
            return False
    return True


def _key(k: Any) -> Any:
    """A comparable form of a dict key or set element (stand-ins by the global they name)."""
    if isinstance(k, Stub):
        return ("<stub>", type(k).qualname(), repr(k.args))  # type: ignore[attr-defined]
    if isinstance(k, type) and issubclass(k, Stub):
        return ("<stub class>", k.qualname())
    if isinstance(k, tuple):
        return tuple(_key(v) for v in k)
    return k


__all__ = ["reference_loads", "safe_pickle", "same_tree"]
