"""Hand-made hostile artifacts, one per known attack on a reader: shared by the tests
(tests/test_total_readers.py), the fuzzer's seed corpus and benchmarks/bench_hostile_parse.py.

Each builder returns the bytes of one file; :data:`ARTIFACTS` names them with the file they
pose as (the reader that gets them)."""

from __future__ import annotations

import struct
from collections.abc import Callable

MB = 1024 * 1024

# --------------------------------------------------------------------------------------------
# Pickle opcodes (protocol 4) as bytes, to write bombs the pickle module would never produce.

PROTO4 = b"\x80\x04"
STOP = b"."
NONE = b"N"
MARK = b"("
DUP = b"2"
EMPTY_TUPLE, EMPTY_LIST, EMPTY_DICT = b")", b"]", b"}"
TUPLE1, TUPLE2 = b"\x85", b"\x86"
LIST, TUPLE, SETITEM, SETITEMS, BUILD, REDUCE = b"l", b"t", b"s", b"u", b"b", b"R"
MEMOIZE = b"\x94"


def glob(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def ustr(s: str) -> bytes:
    raw = s.encode()
    return (b"\x8c" + bytes([len(raw)]) + raw if len(raw) < 256
            else b"X" + struct.pack("<I", len(raw)) + raw)


def binint(n: int) -> bytes:
    return b"J" + struct.pack("<i", n)


def long1(n: int) -> bytes:
    raw = n.to_bytes((n.bit_length() + 8) // 8 or 1, "little", signed=True)
    return b"\x8a" + bytes([len(raw)]) + raw


def binget(i: int) -> bytes:
    return b"j" + struct.pack("<I", i)


def pickle_bytearray_bomb() -> bytes:
    """34 bytes asking ``bytearray(2**30)``: a GiB from an allowed constructor."""
    return PROTO4 + glob("__builtin__", "bytearray") + binint(1 << 30) + TUPLE1 + REDUCE + STOP


def pickle_range_set_bomb() -> bytes:
    """``set(range(2**31 - 1))``: allowed constructors chained."""
    rng = glob("builtins", "range") + binint(2**31 - 1) + TUPLE1 + REDUCE
    return PROTO4 + glob("builtins", "set") + rng + TUPLE1 + REDUCE + STOP


def pickle_memo_index_bomb() -> bytes:
    """One ``LONG_BINPUT 2**28``: the C unpickler sizes its memo array to the index."""
    return PROTO4 + NONE + b"r" + struct.pack("<I", 1 << 28) + STOP


def pickle_build_on_reader_function() -> bytes:
    """BUILD on an allowed function: sets ``__defaults__`` on the reader's own helper."""
    slots = EMPTY_DICT + ustr("__defaults__") + ustr("x") + ustr("y") + TUPLE2 + SETITEM
    return PROTO4 + glob("_codecs", "encode") + NONE + slots + TUPLE2 + BUILD + STOP


def pickle_build_on_stub_class() -> bytes:
    """BUILD on the stand-in class itself (rather than an instance of it)."""
    slots = EMPTY_DICT + ustr("module") + ustr("evil") + SETITEM
    return PROTO4 + glob("os", "system") + NONE + slots + TUPLE2 + BUILD + STOP


def pickle_tuple_dag_hash(levels: int = 64) -> bytes:
    """A dict keyed by ``t_n = (t_n-1, t_n-1)``: hashing it visits 2**levels tuples."""
    return PROTO4 + EMPTY_DICT + EMPTY_TUPLE + (DUP + TUPLE2) * levels + NONE + SETITEM + STOP


def pickle_reduce_tuple_dag(levels: int = 64) -> bytes:
    """REDUCE whose callable is a tuple DAG (found by the fuzzer: looking the callable up in a
    set of allowed functions hashed it)."""
    return PROTO4 + EMPTY_TUPLE + (DUP + TUPLE2) * levels + EMPTY_TUPLE + REDUCE + STOP


def pickle_stub_item_tuple_dag(levels: int = 64) -> bytes:
    """SETITEM on a stand-in instance with a tuple-DAG key (its mapping is a dict too)."""
    stub = glob("m", "C") + EMPTY_TUPLE + REDUCE
    return (PROTO4 + stub + EMPTY_TUPLE + (DUP + TUPLE2) * levels + NONE + SETITEM + STOP)


def pickle_deep_tuple_key(depth: int = 1_000_000) -> bytes:
    """A dict keyed by a tuple nested a million deep (hash recursion in C)."""
    return PROTO4 + EMPTY_DICT + EMPTY_TUPLE + TUPLE1 * depth + NONE + SETITEM + STOP


def pickle_hash_flood(n: int = 50_000) -> bytes:
    """Dict keys that all hash alike (ints differing by 2**61 - 1): quadratic insertion."""
    p = (1 << 61) - 1
    body = b"".join(long1(i * p) + NONE for i in range(1, n + 1))
    return PROTO4 + EMPTY_DICT + MARK + body + SETITEMS + STOP


def pickle_list_dag(levels: int = 60) -> bytes:
    """``L_n = [L_n-1, L_n-1]``: 2**levels elements for anything that walks it as a tree."""
    out = PROTO4 + EMPTY_LIST + MEMOIZE
    for i in range(levels):
        out += MARK + binget(i) + binget(i) + LIST + MEMOIZE
    return out + STOP


def _aot_model_with(inner: bytes) -> bytes:
    """A minimal AOT ``model`` top-level dict whose ``compiled_fn`` bytes are ``inner``."""
    blob = b"B" + struct.pack("<I", len(inner)) + inner
    return (PROTO4 + EMPTY_DICT + ustr("compiled_fn") + glob("builtins", "getattr") + blob
            + TUPLE2 + SETITEM + STOP)


def aot_model_list_dag(levels: int = 60) -> bytes:
    """An AOT ``model`` whose nested ``submod_names`` is :func:`pickle_list_dag`."""
    names = EMPTY_LIST + MEMOIZE
    for i in range(levels):
        names += MARK + binget(i) + binget(i) + LIST + MEMOIZE
    inner = PROTO4 + EMPTY_DICT + ustr("submod_names") + MARK + binget(levels) + LIST
    return _aot_model_with(inner + SETITEM + STOP)


def pickle_many_globals(n: int = 200_000) -> bytes:
    """Distinct global names: one stand-in class each."""
    body = b"".join(glob("m", f"c{i}") + b"0" for i in range(n))
    return PROTO4 + body + NONE + STOP


def pickle_big_long(nbytes: int = 4 * MB) -> bytes:
    """A 32-Mbit integer (``LONG4``)."""
    return PROTO4 + b"\x8b" + struct.pack("<i", nbytes) + b"\x7f" * nbytes + STOP


def pickle_cheap_ops(size: int = 10 * MB) -> bytes:
    """10 MB of one-byte opcodes (``NONE``/``POP``): the most operations per byte."""
    return PROTO4 + b"N0" * ((size - 3) // 2) + NONE + STOP


# --------------------------------------------------------------------------------------------
# Text artifacts.

def json_deep(depth: int = 100_000) -> bytes:
    return b"[" * depth + b"]" * depth


def json_deep_in_object(key: str = "env", depth: int = 100_000) -> bytes:
    return b'{"schema": 1, "' + key.encode() + b'": ' + json_deep(depth) + b"}"


def json_huge_int(digits: int = 5000) -> bytes:
    return b'{"schema": 1, "code_hash": ' + b"1" * digits + b"}"


def json_many_containers(size: int = 10 * MB) -> bytes:
    """``[{},{},...]``: the most Python objects per byte of JSON."""
    n = (size - 2) // 3
    return b"[" + b"{}," * (n - 1) + b"{}]"


def ledger_lines(size: int = 10 * MB) -> bytes:
    ok = (b'{"v": 1, "time": 1700000000.5, "event": "hit", "tree": "aot", "key": "k", '
          b'"host": "h", "pid": 1}\n')
    bad = [b'{"time": 1' + b"0" * 400 + b', "event": "hit", "tree": "aot", "key": "k"}\n',
           b'{"time": 1, "event": "hit", "tree": "aot", "key": "k", "pid": [1]}\n',
           b'{"time": NaN, "event": "hit", "tree": "aot", "key": "k"}\n',
           json_deep(5000) + b"\n"]
    one = ok + b"".join(bad)
    return one * (size // len(one))


def literal_hex_int() -> bytes:
    """A 5000-digit hex integer is a valid literal; ``str()`` of it raises ValueError."""
    return b"{(0x" + b"f" * 5000 + b", 0, 'inductor'): ('k', '/p')}\n"


def literal_big(size: int = 10 * MB) -> bytes:
    """A 10 MB literal of small items (the parser's node count)."""
    n = (size - 2) // 2
    return b"[" + b"1," * (n - 1) + b"1]"


def graph_newlines(n: int = 40_000) -> bytes:
    return b"\n" * n


def graph_file_comments(size: int = 300 * 1024) -> bytes:
    """``# File:`` repeated on one line with no ``:line in fn`` tail."""
    return b"# File:" * (size // 7)


def graph_models_head(size: int = 256 * 1024) -> bytes:
    """``/model_executor/models/`` repeated after one ``# File:`` (the listing's fast path)."""
    return b"# File: " + b"/model_executor/models/" * (size // 23)


def graph_big(size: int = 10 * MB) -> bytes:
    line = (b"    # File: /site/vllm/model_executor/models/llama.py:123 in forward, code: "
            b"x = self.mlp(x)\n    submod_1 = self.submod_1(x);  x = None\n")
    return line * (size // len(line))


def json_strings(size: int) -> bytes:
    """``["ab","ab",...]``: the most string objects per byte (``size`` bytes in all)."""
    n = (size - 40) // 5
    return b'{"schema": 1, "env": {"x": [' + b'"ab",' * (n - 1) + b'"ab"]}}'


def literal_one_string(size: int = 10 * MB) -> bytes:
    """One string literal of ``size`` bytes with escapes (the slow path of the literal)."""
    return b"{(1, 0, 'inductor'): ('" + b"\\x41" * ((size - 40) // 4) + b"', '/p')}\n"


def ledger_valid(size: int = 10 * MB) -> bytes:
    line = (b'{"event": "hit", "host": "h", "key": "0123456789", "pid": 12345, "prefix": '
            b'"backbone", "rank": "rank_0_0", "seconds": 0.5, "time": 1700000000.5, '
            b'"tree": "backend", "v": 1}\n')
    return line * (size // len(line))


def log_hostile(size: int = 10 * MB) -> bytes:
    """10 MB of log lines built to make the message patterns backtrack."""
    head = b"INFO 01-01 00:00:00 [backends.py:1] "
    lines = [head + p * (200_000 // len(p)) + b"\n" for p in (
        b"Directly load the compiled graph for ", b"Directly lookup the graph for ",
        b"Compiling model again due to a load failure from ",
        b"torch.compile Using cache directory: ", b"Compiling a graph for ")]
    lines.append(b"(VllmWorker rank=0 pid=" + b"9" * 5000 + b") " + head + b"compile x\n")
    one = b"".join(lines)
    return one * (size // len(one))


def log_env_value(size: int = 900 * 1024) -> bytes:
    """A ``Compile env factors (raw)`` block whose one value is a ~1 MB literal list."""
    h = b"DEBUG 01-01 00:00:00 [compilation/backends.py:1] "
    return (h + b'Start compiling function <code object forward at 0x1, file "/x.py", line '
            b"1>\n" + h + b"Compile env factors (raw):\n" + h + b"{'VLLM_A': ["
            + b"1," * (size // 2) + b"1],\n" + h + b" 'VLLM_B': 2}\n")


def log_args_atom(size: int = 900 * 1024) -> bytes:
    """vLLM's ``non-default args: {...}`` line with one ~1 MB non-literal value."""
    return (b"INFO 01-01 00:00:00 [utils.py:1] non-default args: {'a': " + b"1+" * (size // 2)
            + b"1, 'b': 1" + b"1_1if" * 1000 + b"}\n")


def log_long_line(size: int = 10 * MB) -> bytes:
    return b"INFO 01-01 00:00:00 [backends.py:1] Compiling " + b"(" * size + b"\n"


def _sample(pattern: str) -> Callable[[], bytes]:
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent.parent / "examples"

    def read() -> bytes:
        return sorted(root.glob(pattern))[0].read_bytes()
    return read


REAL: dict[str, tuple[str, Callable[[], bytes]]] = {
    "real AOT model (sample)": (
        "model", _sample("sample_cache/torch_compile_cache/torch_aot_compile/*/rank_0_0/model")),
    "real computation_graph.py": (
        "computation_graph.py", _sample("sample_cache/torch_compile_cache/*/rank_0_0/backbone/"
                                        "computation_graph.py")),
    "real cache_key_factors.json": (
        "cache_key_factors.json", _sample("sample_cache/torch_compile_cache/*/rank_0_0/"
                                          "backbone/cache_key_factors.json")),
    "real manifest": (
        "vct-manifest.0123456789abcdef.json",
        _sample("sample_cache/torch_compile_cache/*/rank_0_0/backbone/vct-manifest.*.json")),
    "real ledger": ("ledger.jsonl", _sample("sample_cache/torch_compile_cache/"
                                            ".vllm-cache-tools/ledger/*.jsonl")),
    "real log (cold start)": ("log", _sample("sample_logs/1-cold-start.log")),
}
"""Real artifacts, read the same way: the reference rows of the benchmark."""


ARTIFACTS: dict[str, tuple[str, Callable[[], bytes]]] = {
    "pickle bytearray(2**30)": ("model", pickle_bytearray_bomb),
    "pickle set(range(2**31))": ("model", pickle_range_set_bomb),
    "pickle memo index 2**28": ("model", pickle_memo_index_bomb),
    "pickle BUILD on reader function": ("model", pickle_build_on_reader_function),
    "pickle BUILD on stand-in class": ("model", pickle_build_on_stub_class),
    "pickle tuple DAG as dict key": ("model", pickle_tuple_dag_hash),
    "pickle 1M-deep tuple as key": ("model", pickle_deep_tuple_key),
    "pickle REDUCE of a tuple DAG": ("model", pickle_reduce_tuple_dag),
    "pickle tuple DAG key on a stand-in": ("model", pickle_stub_item_tuple_dag),
    "pickle hash-flooded dict keys": ("model", pickle_hash_flood),
    "pickle list DAG": ("model", pickle_list_dag),
    "model with list DAG names": ("model", aot_model_list_dag),
    "pickle 200k distinct globals": ("model", pickle_many_globals),
    "pickle 4 MB integer": ("model", pickle_big_long),
    "pickle 10 MB of 1-byte ops": ("model", pickle_cheap_ops),
    "factors nested 100k deep": ("cache_key_factors.json", json_deep),
    "factors 5000-digit int": ("cache_key_factors.json", json_huge_int),
    "factors 10 MB of {}": ("cache_key_factors.json", json_many_containers),
    "manifest nested 100k deep": ("vct-manifest.0123456789abcdef.json", json_deep_in_object),
    "manifest 10 MB of {}": ("vct-manifest.0123456789abcdef.json", json_many_containers),
    "ledger 10 MB hostile lines": ("ledger.jsonl", ledger_lines),
    "compile cache 5000-digit hex": ("vllm_compile_cache.py", literal_hex_int),
    "compile cache 10 MB literal": ("vllm_compile_cache.py", literal_big),
    "compile cache nested 100k": ("vllm_compile_cache.py", lambda: b"(" * 100_000),
    "graph 40k newlines": ("computation_graph.py", graph_newlines),
    "graph 300 KB of '# File:'": ("computation_graph.py", graph_file_comments),
    "graph 256 KB head of models/": ("computation_graph.py", graph_models_head),
    "graph 10 MB real-like": ("computation_graph.py", graph_big),
    "graph 10 MB newlines": ("computation_graph.py", lambda: graph_newlines(10 * MB)),
    "triton meta nested": ("triton.json", json_deep),
    "factors 4 MB of strings": ("cache_key_factors.json", lambda: json_strings(4 * MB)),
    "manifest 8 MB of strings": ("vct-manifest.0123456789abcdef.json",
                                 lambda: json_strings(8 * MB)),
    "manifest 10 MB of strings": ("vct-manifest.0123456789abcdef.json",
                                  lambda: json_strings(10 * MB)),
    "ledger 10 MB of valid events": ("ledger.jsonl", ledger_valid),
    "compile cache 10 MB string": ("vllm_compile_cache.py", literal_one_string),
    "log 10 MB of backtracking lines": ("log", log_hostile),
    "log one 10 MB line": ("log", log_long_line),
    "log env factor of 1 MB": ("log", log_env_value),
    "log args line of 1 MB": ("log", log_args_atom),
    "graph 10 MB one line of File:": ("computation_graph.py",
                                      lambda: b"# File: " + b"a:1" * (10 * MB // 3)),
    "graph diff, 8 MB real-like": ("graph diff", lambda: graph_big(8 * MB)),
    "graph diff, 10 MB newlines": ("graph diff", lambda: graph_newlines(10 * MB)),
    "graph diff, 300 KB of '# File:'": ("graph diff", graph_file_comments),
}
