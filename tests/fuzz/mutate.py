"""Deterministic mutations of real files: the same (seed, target, index) always gives the same
input, whatever the number of workers, so any finding can be replayed from its name.

Mutations are byte-level (flips, inserts, deletes, chunk copies, splices, truncation), token
level (a per-format dictionary of the tokens parsers branch on, and numbers made huge,
negative or fractional) and amplifying (a chunk repeated up to thousands of times, the shape
of nesting and regex bombs)."""

from __future__ import annotations

import hashlib
import pickletools
import random
import re
import struct

# Tokens each format's parsers branch on.
DICTIONARIES: dict[str, tuple[bytes, ...]] = {
    "json": (b"[", b"]", b"{", b"}", b'"', b"\\", b":", b",", b"null", b"true", b"NaN",
             b"Infinity", b"-Infinity", b"1e400", b"-0", b"9" * 400, b"9" * 5000, b"\\ud800",
             b'"schema": 1', b'"time": ', b'"pid": ', b"[" * 200, b"{\"a\":" * 100,
             b"\x00", b"\xff", b"\n"),
    "literal": (b"(", b")", b"[", b"]", b"{", b"}", b"'", b'"', b"\\", b":", b",", b"None",
                b"True", b"0x" + b"f" * 100, b"9" * 30, b"1e999", b"-", b"b'", b"r'", b"u'",
                b"lambda", b"__import__", b"(" * 100, b"'\\x00'", b"\n", b" " * 100),
    "graph": (b"# File: ", b":123 in forward", b" in ", b":", b"#", b"\n", b"\n" * 100,
              b"submod_1 = self.submod_1(", b"/model_executor/models/", b" " * 200,
              b"\t", b"# File:" * 50, b"9" * 50, b"\x00", b"\xff\xfe"),
    "log": (b"\n", b"DEBUG ", b"INFO ", b"WARNING ", b"(VllmWorker rank=1 pid=12) ",
            b"[backends.py:123] ", b"Compiling", b"compil", b"engine (", b"Traced files (",
            b"Compile env factors (raw):", b"{'", b"'", b": ", b"}", b"(" * 100,
            b"\x1b[32m", b"\r", b"9" * 5000, b"torch.compile cache factors: env=",
            b"took 1e400 s", b"range (1, 128)", b"\xff"),
    "pickle": (*(op.code.encode("latin1")[:1] for op in pickletools.opcodes),
        b"\x8a\x08" + b"\xff" * 8, b"J\xff\xff\xff\x7f", b"r\xff\xff\xff\x0f",
        b"j\xff\xff\xff\x0f", b"\x95" + b"\xff" * 8, b"X\xff\xff\xff\x7f",
        b"cbuiltins\nbytearray\n", b"cbuiltins\nset\n", b"c_codecs\nencode\n", b"(" * 100,
        b")" + b"\x85" * 200, b"2\x86" * 40, b"\x8c\x0bsystem_info\x94",
        b"\x8c\x0bcompiled_fn\x94", b"\x8c\x0bruntime_env\x94"),
}

_NUMBER = re.compile(rb"-?\d+(?:\.\d+)?")
_NUMBERS = (b"0", b"-1", b"1e400", b"-1e400", b"NaN", b"1.5", b"9" * 20, b"9" * 400,
            b"9" * 5000, b"4294967296", b"18446744073709551616", b"2305843009213693951")


def rng_for(seed: int, target: str, index: int) -> random.Random:
    h = hashlib.sha256(f"{seed}:{target}:{index}".encode()).digest()
    return random.Random(int.from_bytes(h[:8], "little"))


def _pos(r: random.Random, n: int, hot: list[int] | None) -> int:
    """A position, biased to the structural offsets of the file when they are known."""
    if hot and r.random() < 0.7:
        return min(n, max(0, r.choice(hot) + r.randint(-2, 2)))
    return r.randint(0, n)


def mutate(base: bytes, r: random.Random, dictionary: tuple[bytes, ...],
           others: list[bytes], hot: list[int] | None = None) -> bytes:
    """One mutated input from ``base`` (1 to 8 mutations)."""
    b = bytearray(base)
    for _ in range(1 + min(7, int(r.expovariate(0.7)))):
        n = len(b)
        k = r.randrange(12)
        if k == 0 and n:  # flip a bit
            i = min(n - 1, _pos(r, n - 1, hot))
            b[i] ^= 1 << r.randrange(8)
        elif k == 1 and n:  # set a byte
            i = min(n - 1, _pos(r, n - 1, hot))
            b[i] = r.choice((0, 0xFF, 0x7F, 0x80, 0x0A, 0x22, 0x27, 0x5B, 0x7B, 0x28,
                             r.randrange(256)))
        elif k == 2 and n:  # delete a chunk
            i = _pos(r, n - 1, hot)
            del b[i:i + r.choice((1, 2, 4, 8, r.randint(1, max(1, n // 10))))]
        elif k == 3:  # insert random bytes
            i = _pos(r, n, hot)
            b[i:i] = r.randbytes(r.choice((1, 2, 4, r.randint(1, 64))))
        elif k in (4, 5):  # insert a token of the format
            i = _pos(r, n, hot)
            b[i:i] = r.choice(dictionary)
        elif k == 6 and n:  # copy a chunk elsewhere
            i, j = _pos(r, n - 1, hot), _pos(r, n, hot)
            b[j:j] = b[i:i + r.randint(1, 256)]
        elif k == 7 and n:  # amplify: a chunk repeated
            i = _pos(r, n - 1, hot)
            chunk = bytes(b[i:i + r.choice((1, 2, 3, 8, 32))])
            reps = r.choice((10, 100, 1000, 5000))
            if len(chunk) * reps <= 2_000_000:
                b[i:i] = chunk * reps
        elif k == 8 and n:  # truncate
            del b[r.randint(0, n):]
        elif k == 9 and others:  # splice with another real file
            o = r.choice(others)
            i, j = r.randint(0, n), r.randint(0, len(o))
            b = b[:i] + o[j:]
        elif k == 10:  # a number made extreme
            ms = list(_NUMBER.finditer(bytes(b[: 1 << 20])))
            if ms:
                m = r.choice(ms)
                b[m.start():m.end()] = r.choice(_NUMBERS)
        elif k == 11 and n:  # swap two bytes
            i, j = r.randrange(n), r.randrange(n)
            b[i], b[j] = b[j], b[i]
    return bytes(b)


def pickle_skeleton(data: bytes, keep: int = 48) -> bytes:
    """The same opcode stream with every string/bytes payload cut to ``keep`` bytes (nested
    pickles, which start with PROTO, are skeletonized in place) and FRAMEs dropped: all of a
    real pickle's structure in a few dozen KB, so mutations land on structure."""
    out = bytearray()
    ops = list(pickletools.genops(data))
    for idx, (op, arg, pos) in enumerate(ops):
        end = ops[idx + 1][2] if idx + 1 < len(ops) else len(data)
        code = op.code.encode("latin1")
        if op.name == "FRAME":
            continue
        if op.name in ("BINBYTES", "SHORT_BINBYTES", "BINBYTES8") and isinstance(arg, bytes):
            payload = (pickle_skeleton(arg, keep) if arg[:2] == b"\x80\x04" and _ok(arg)
                       else arg[:keep])
            out += _sized(op.name, code, payload)
        elif op.name in ("BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8") and isinstance(
                arg, str):
            out += _sized(op.name, code, arg[:keep].encode("utf-8", "surrogatepass"))
        else:
            out += data[pos:end]
    return bytes(out)


def _ok(data: bytes) -> bool:
    try:
        for _ in pickletools.genops(data):
            pass
        return True
    except Exception:
        return False


def _sized(name: str, code: bytes, payload: bytes) -> bytes:
    if len(payload) < 256 and name.startswith("SHORT"):
        return code + bytes([len(payload)]) + payload
    if name.startswith("SHORT"):  # grown past a byte: use the 4-byte form
        code = b"B" if "BYTES" in name else b"X"
    fmt = "<Q" if name.endswith("8") else "<I"
    return code + struct.pack(fmt, len(payload)) + payload


def pickle_hot_offsets(data: bytes, limit: int = 5000) -> list[int]:
    """Opcode offsets of a pickle (the places worth mutating), at most ``limit``."""
    out = []
    try:
        for _, _, pos in pickletools.genops(data):
            out.append(pos)
    except Exception:
        pass
    if len(out) > limit:
        step = len(out) / limit
        out = [out[int(i * step)] for i in range(limit)]
    return out


def line_hot_offsets(data: bytes, limit: int = 5000) -> list[int]:
    """Line starts and structural bytes of a text file."""
    out = [m.start() for m in re.finditer(rb"\n|[\[\]{}(),:#\"']", data[: 4 << 20])]
    if len(out) > limit:
        step = len(out) / limit
        out = [out[int(i * step)] for i in range(limit)]
    return out
