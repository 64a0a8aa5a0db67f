"""A fast, partial read of an AOT ``model`` pickle for listings (``ls`` over thousands of
entries).

Rather than unpickling, it tokenizes two small regions of the opcode stream over an ``mmap``:
the head up to the ``runtime_env`` key (``original_code`` sits there, right after the skipped
``compiled_fn`` blob) and the tail from the ``system_info`` key (the last top-level item) to
STOP. Only well-formed opcode boundaries are read and nothing is executed; large payloads are
stepped over by their length prefix. The full reader (:func:`read_aot_model`) stays the
reference; tests check both agree on real vLLM artifacts.
"""

from __future__ import annotations

import mmap
import os
import pickletools
import re
import struct
from collections.abc import Iterator
from typing import Any

from vllm_cache_tools.read.errors import ReadError
from vllm_cache_tools.read.noatime import open_noatime

_ARG: dict[int, Any] = {op.code.encode("latin1")[0]: op.arg for op in pickletools.opcodes}
_LEN = {pickletools.TAKEN_FROM_ARGUMENT1: ("<B", 1), pickletools.TAKEN_FROM_ARGUMENT4: ("<i", 4),
        pickletools.TAKEN_FROM_ARGUMENT4U: ("<I", 4), pickletools.TAKEN_FROM_ARGUMENT8U: ("<Q", 8)}
_STR_OPS = {0x8C, 0x58, 0x8D}  # SHORT_BINUNICODE, BINUNICODE, BINUNICODE8
_INT_OPS = {0x4B: "<B", 0x4D: "<H", 0x4A: "<i"}  # BININT1, BININT2, BININT
_MEMO_OPS = {0x94, 0x71, 0x72, 0x95}  # MEMOIZE, BINPUT, LONG_BINPUT, FRAME
_NONE, _STOP, _TUPLE2 = 0x4E, 0x2E, 0x86
_MAX_STR = 64 * 1024
_HEAD_STOP = b"runtime_env"
_HEAD_START = b"\x8c\x0bcompiled_fn\x94"
_TAIL_KEYS_RAW = (b"\x8c\x0bdevice_type\x94", b"\x8c\x0bsystem_info\x94")
_VERSION = re.compile(r"^\d+\.\d+")

Token = tuple[int, Any]


def _tokens(buf: Any, pos: int, stop_str: bytes | None = None,
            limit: int = 20000) -> Iterator[Token]:
    n = len(buf)
    for _ in range(limit):
        if pos >= n:
            raise ReadError("truncated AOT model pickle")
        code = buf[pos]
        pos += 1
        arg = _ARG.get(code)
        if code not in _ARG:
            raise ReadError(f"unknown pickle opcode 0x{code:02x} in AOT model")
        if arg is None:
            yield code, None
            if code == _STOP:
                return
            continue
        an = arg.n
        if pos + (an if an >= 0 else _LEN[an][1] if an in _LEN else 0) > n:
            raise ReadError("truncated AOT model pickle")  # not struct.error (fuzzer)
        if an >= 0:
            val: Any = bytes(buf[pos:pos + an])
            if code in _INT_OPS:
                val = struct.unpack(_INT_OPS[code], val)[0]
            pos += an
        elif an == pickletools.UP_TO_NEWLINE:
            end = buf.find(b"\n", pos)
            if end < 0:
                raise ReadError("truncated AOT model pickle")
            val = bytes(buf[pos:end])
            pos = end + 1
        else:
            fmt, size = _LEN[an]
            (length,) = struct.unpack_from(fmt, buf, pos)
            pos += size
            if length < 0 or pos + length > n:
                raise ReadError("truncated AOT model pickle (payload runs past the end)")
            val = None
            if code in _STR_OPS and length <= _MAX_STR:
                raw = bytes(buf[pos:pos + length])
                if stop_str is not None and raw == stop_str:
                    return
                val = raw.decode("utf-8", errors="replace")
            pos += length
        yield code, val


def _pairs(tokens: Iterator[Token], keys: set[str], want: int = 3) -> dict[str, list[Token]]:
    """For each key of interest (first occurrence), the tokens that follow it up to the next
    key of interest (memo bookkeeping dropped). Stops once every key has ``want`` tokens."""
    out: dict[str, list[Token]] = {}
    cur: list[Token] | None = None
    for code, val in tokens:
        if code in _MEMO_OPS:
            continue
        if code in _STR_OPS and val in keys and val not in out:
            cur = out[val] = []
            continue
        if cur is not None and len(cur) < 40:
            cur.append((code, val))
            if len(out) == len(keys) and len(cur) >= want:
                break
    return out


def _first_str(toks: list[Token], pattern: re.Pattern[str] | None = None) -> str | None:
    for code, val in toks:
        if code in _STR_OPS and isinstance(val, str) and (pattern is None or pattern.match(val)):
            return val
        if code == _NONE and pattern is None:
            return None
    return None


def _first_int(toks: list[Token]) -> int | None:
    for code, val in toks[:2]:
        if code in _INT_OPS:
            return int(val)
    return None


def _triton(toks: list[Token]) -> str | None:
    nums = []
    for code, val in toks:
        if code in _INT_OPS:
            nums.append(str(val))
        elif code == _TUPLE2 and len(nums) == 2:
            return ".".join(nums)
        elif code in _STR_OPS:
            return val if isinstance(val, str) else None
        elif code == _NONE:
            return None
        else:
            break
    return None


_HEAD_KEYS = {"compiled_fn", "co_filename", "co_name", "co_qualname", "co_firstlineno"}
_TAIL_KEYS = {"device_type", "python_version", "torch_version", "toolkit_version",
              "triton_version", "gpu_name"}


_STACK_GLOBAL = 0x93


def _deserializer(toks: list[Token]) -> str | None:
    """``module.Class`` of ``compiled_fn``'s ``(getattr(Class, "deserialize_..."), bytes)``:
    the strings before the second STACK_GLOBAL (the first is ``builtins.getattr``). A memo
    reference instead of a string leaves it unknown."""
    globals_seen = 0
    strs: list[str | None] = []
    for code, val in toks:
        if code == _STACK_GLOBAL:
            globals_seen += 1
            if globals_seen == 2:
                mod, cls = (strs[-2:] if len(strs) >= 2 else (None, None))
                return f"{mod}.{cls}" if mod and cls else None
            strs = []
        elif code in _STR_OPS:
            strs.append(val if isinstance(val, str) else None)
        elif code in (0x68, 0x6A):  # BINGET, LONG_BINGET
            strs.append(None)
        elif code not in _MEMO_OPS:
            return None
    return None


def read_aot_quick(path: str | os.PathLike[str]) -> dict[str, Any]:
    """``{qualname, filename, firstlineno, device_type, python_version, torch_version,
    cuda_version, triton_version, gpu_name, loader}`` read from two small regions of the
    file."""
    with open_noatime(path) as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            raise ReadError("empty AOT model file (0 bytes)")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            if mm[:1] != b"\x80":
                raise ReadError("not a pickle (no protocol header)")
            if mm[-1:] != b".":
                raise ReadError("truncated AOT model pickle (no STOP opcode)")
            # original_code follows the compiled_fn blob; start there when the key is where
            # a well-formed stream has it, else tokenize from the beginning.
            start = mm.find(_HEAD_START)
            try:
                head = _pairs(_tokens(mm, max(start, 0), stop_str=_HEAD_STOP), _HEAD_KEYS)
            except ReadError:
                if start <= 0:
                    raise
                head = {}
            if start > 0 and "co_firstlineno" not in head:
                head = _pairs(_tokens(mm, 0, stop_str=_HEAD_STOP), _HEAD_KEYS)
            # device_type, backend_name and system_info are the last top-level items.
            tail_at = -1
            for marker in _TAIL_KEYS_RAW:
                tail_at = mm.rfind(marker, max(0, size - 65536))
                if tail_at >= 0:
                    break
            tail = _pairs(_tokens(mm, tail_at), _TAIL_KEYS) if tail_at >= 0 else {}

    def get(d: dict[str, list[Token]], k: str) -> list[Token]:
        return d.get(k, [])

    qual = _first_str(get(head, "co_qualname")) or _first_str(get(head, "co_name"))
    return {
        "qualname": qual,
        "filename": _first_str(get(head, "co_filename")),
        "firstlineno": _first_int(get(head, "co_firstlineno")),
        "device_type": _first_str(get(tail, "device_type")),
        "python_version": _first_str(get(tail, "python_version")),
        "torch_version": _first_str(get(tail, "torch_version"), _VERSION),
        "cuda_version": _first_str(get(tail, "toolkit_version")),
        "triton_version": _triton(get(tail, "triton_version")),
        "gpu_name": _first_str(get(tail, "gpu_name")),
        "loader": _deserializer(get(head, "compiled_fn")),
    }
