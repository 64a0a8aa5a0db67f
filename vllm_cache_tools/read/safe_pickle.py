"""A pickle reader that never imports or calls anything named by the pickle.

vLLM's AOT ``model`` file and the ``compiled_fn`` bytes inside it are pickles. Loading them with
:mod:`pickle` would import torch/vLLM and run arbitrary reducers, which is both slow and unsafe
on a shared cache. Here every global the pickle names resolves to an *inert stand-in class*;
calling it (REDUCE), instantiating it (NEWOBJ) or building it (BUILD) only records the
arguments. The result is a tree of plain Python data plus :class:`Stub` objects that say which
global built them and with what. A handful of pure data constructors (``set``, ``OrderedDict``,
``codecs.encode`` of a latin-1 string, ...) are evaluated because their results are plain data.
"""

from __future__ import annotations

import _compat_pickle
import codecs
import collections
import io
import pickle
from typing import Any, ClassVar

__all__ = ["SafePickleError", "Stub", "safe_loads"]


class SafePickleError(ValueError):
    """The data is not a readable pickle (truncated, corrupt, or not a pickle)."""


class Stub:
    """Inert stand-in for an object the pickle would have built.

    ``module``/``name`` name the global; ``args`` holds REDUCE/NEWOBJ arguments, ``state`` the
    BUILD state, ``items``/``mapping`` anything appended or set on it."""

    module: ClassVar[str] = ""
    name: ClassVar[str] = ""

    def __new__(cls, *args: Any, **kwargs: Any) -> Stub:
        self = object.__new__(cls)
        object.__setattr__(self, "args", args)
        object.__setattr__(self, "kwargs", kwargs)
        object.__setattr__(self, "state", None)
        object.__setattr__(self, "items", [])
        object.__setattr__(self, "mapping", {})
        return self

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        object.__setattr__(self, "state", state)

    def __setitem__(self, key: Any, value: Any) -> None:
        self.mapping[key] = value  # type: ignore[attr-defined]

    def append(self, value: Any) -> None:
        self.items.append(value)  # type: ignore[attr-defined]

    def extend(self, values: Any) -> None:
        self.items.extend(values)  # type: ignore[attr-defined]

    @classmethod
    def qualname(cls) -> str:
        return f"{cls.module}.{cls.name}"

    def field(self, key: str, default: Any = None) -> Any:
        """Look a field up in the BUILD state (a dict, or a ``(dict, slots)`` pair)."""
        state = self.state  # type: ignore[attr-defined]
        if isinstance(state, tuple) and len(state) == 2:
            merged: dict[Any, Any] = {}
            for part in state:
                if isinstance(part, dict):
                    merged.update(part)
            state = merged
        if isinstance(state, dict):
            return state.get(key, default)
        return default

    def __repr__(self) -> str:
        return f"<stub {self.qualname()}>"


def _latin1_encode(obj: Any, encoding: str = "utf-8", errors: str = "strict") -> Any:
    if isinstance(obj, str) and encoding == "latin1" and errors == "strict":
        return codecs.encode(obj, "latin1")
    raise pickle.UnpicklingError("codecs.encode with unexpected arguments")


def _empty_bytes(*args: Any) -> bytes:
    # Protocol 2 writes b"" as bytes(); anything else could allocate without bound.
    if args:
        raise pickle.UnpicklingError("bytes() with arguments")
    return b""


_PURE: dict[tuple[str, str], Any] = {
    ("builtins", "bytes"): _empty_bytes,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("builtins", "bytearray"): bytearray,
    ("builtins", "complex"): complex,
    ("builtins", "slice"): slice,
    ("builtins", "range"): range,
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("_codecs", "encode"): _latin1_encode,
    ("codecs", "encode"): _latin1_encode,
}


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file)
        self._classes: dict[tuple[str, str], type[Stub]] = {}

    def find_class(self, module: str, name: str) -> Any:
        # Protocol < 3 pickles name Python 2 modules (``__builtin__``, ``copy_reg``).
        if (module, name) in _compat_pickle.NAME_MAPPING:
            module, name = _compat_pickle.NAME_MAPPING[(module, name)]
        elif module in _compat_pickle.IMPORT_MAPPING:
            module = _compat_pickle.IMPORT_MAPPING[module]
        pure = _PURE.get((module, name))
        if pure is not None:
            return pure
        key = (module, name)
        cls = self._classes.get(key)
        if cls is None:
            cls = type(f"Stub[{module}.{name}]", (Stub,), {"module": module, "name": name})
            self._classes[key] = cls
        return cls

    def persistent_load(self, pid: Any) -> Any:
        return self.find_class("<persistent>", "load")(pid)


def safe_loads(data: bytes) -> Any:
    """Read a pickle into plain data and :class:`Stub` objects. Never imports, never calls
    user code. Raises :class:`SafePickleError` for anything that is not a complete pickle."""
    try:
        return _Unpickler(io.BytesIO(data)).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError,
            IndexError, KeyError, OverflowError, MemoryError, RecursionError,
            UnicodeDecodeError) as exc:
        raise SafePickleError(f"{type(exc).__name__}: {exc}") from None
