"""Every reader is total (issue 12, items 3, 5, 6, 9): a hostile file anywhere under a root
becomes a one-line :class:`ReadError` for its entry, never an exception that aborts the
command, a crash, a hang or a memory bomb; real artifacts read exactly as before."""

from __future__ import annotations

import glob
import json
import os
import pickle
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, run_cli
from tests.fuzz import hostile
from tests.fuzz.isolated import run_isolated
from tests.fuzz.reference_pickle import reference_loads, same_tree
from vllm_cache_tools.read.compile_cache import parse_compile_cache, read_compile_cache
from vllm_cache_tools.read.errors import ReadError
from vllm_cache_tools.read.factors import parse_factors
from vllm_cache_tools.read.graph import model_file_from_head, parse_graph
from vllm_cache_tools.read.manifest import read_ledger, read_manifest
from vllm_cache_tools.read.safe_pickle import SafePickleError, safe_loads
from vllm_cache_tools.read.triton import parse_triton_meta

SAMPLE = REPO / "examples" / "sample_cache"
HARNESS = Path(os.environ.get("VCT_TEST_HOME",
                              Path.home() / ".cache" / "vllm-cache-tools-tests")) / "caches"


def real_models() -> list[Path]:
    """AOT ``model`` files of the shipped sample and of the harness caches made so far."""
    found = sorted(SAMPLE.glob("torch_compile_cache/torch_aot_compile/*/rank_*/model"))
    found += sorted(Path(p) for p in glob.glob(
        str(HARNESS / "*" / "root" / "torch_compile_cache" / "torch_aot_compile" / "*" /
            "rank_*" / "model")))
    return found


# --------------------------------------------------------------------------------------------
# Item 3: JSON and literal readers


@pytest.mark.parametrize("text", [
    hostile.json_deep().decode(),
    hostile.json_huge_int().decode(),
    '{"env": ' + "[" * 900 + "]" * 900 + "}",
    '{"code_hash": "a", "env": {"X": ' + "1" * 5000 + "}}",
])
def test_factors_total(text: str) -> None:
    with pytest.raises(ReadError):
        parse_factors(text)


@pytest.mark.parametrize("text", [hostile.json_deep().decode(),
                                  hostile.json_huge_int().decode()])
def test_triton_meta_total(text: str) -> None:
    with pytest.raises(ReadError):
        parse_triton_meta(text)


@pytest.mark.parametrize("text", [
    hostile.literal_hex_int().decode(),
    "{(1, 0, 'inductor'): 0x" + "f" * 5000 + "}",
    "{1: " + "[" * 190 + "]" * 190 + "}",
    "(" * 100_000,
    "{(1, 2, 'x'): b'\\xff' * 3}",
])
def test_compile_cache_total(text: str) -> None:
    try:
        parse_compile_cache(text)
    except ReadError as exc:
        assert "\n" not in str(exc)


def test_compile_cache_big_file_is_refused_quickly(tmp_path: Path) -> None:
    p = tmp_path / "vllm_compile_cache.py"
    p.write_bytes(hostile.literal_big(10 * hostile.MB))
    t0 = time.perf_counter()
    with pytest.raises(ReadError):
        read_compile_cache(p)
    assert time.perf_counter() - t0 < 2.0  # < 1 s on an idle machine (bench_hostile_parse)


def _manifest(tmp_path: Path, data: Any) -> Path:
    p = tmp_path / "vct-manifest.0123456789abcdef.json"
    p.write_text(data if isinstance(data, str) else json.dumps(data))
    return p


@pytest.mark.parametrize("data", [
    hostile.json_deep_in_object().decode(),
    hostile.json_huge_int().decode(),
    '{"schema": 1, "config": {"a": ' + "[" * 80 + "]" * 80 + "}}",
    {"schema": 1, "versions": ["0.1"]},
    {"schema": 1, "traced_files": ["/a.py"]},
    {"schema": 1, "traced_files": [{"path": ["x"]}]},
    {"schema": 1, "command_line": "vllm serve"},
    {"schema": 1, "config": [1]},
    {"schema": 1, "env": "x"},
    {"schema": 1, "inductor": 3},
    {"schema": 1, "timings": []},
    {"schema": 1, "key_parts": [], "model": 1},
])
def test_manifest_total(tmp_path: Path, data: Any) -> None:
    with pytest.raises(ReadError) as err:
        read_manifest(_manifest(tmp_path, data))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("created", [1e400, float("nan"), -1e300, True, "1"])
def test_manifest_created_is_a_plausible_time(tmp_path: Path, created: Any) -> None:
    text = json.dumps({"schema": 1, "created": created}).replace("Infinity", "1e400")
    assert read_manifest(_manifest(tmp_path, text)).created is None


def _ledger(tmp_path: Path, lines: list[bytes]) -> Path:
    cc = tmp_path / "torch_compile_cache"
    d = cc / ".vllm-cache-tools" / "ledger"
    d.mkdir(parents=True)
    (d / "host.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    return cc


GOOD = b'{"time": 1700000000.5, "event": "hit", "tree": "aot", "key": "k", "host": "h", "pid": 1}'


@pytest.mark.parametrize("bad", [
    hostile.json_deep(),
    b'{"time": 1' + b"0" * 400 + b', "event": "hit", "tree": "aot", "key": "k"}',
    b'{"time": 1' + b"0" * 5000 + b', "event": "hit", "tree": "aot", "key": "k"}',
    b'{"time": 1, "event": "hit", "tree": "aot", "key": "k", "pid": [1]}',
    b'{"time": 1, "event": "hit", "tree": "aot", "key": "k", "pid": {"a": 1}}',
    b'{"time": NaN, "event": "hit", "tree": "aot", "key": "k"}',
    b'{"time": Infinity, "event": "hit", "tree": "aot", "key": "k"}',
    b'{"time": 1e300, "event": "hit", "tree": "aot", "key": "k"}',
    b'{"time": true, "event": "hit", "tree": "aot", "key": "k"}',
    b'{"time": 1, "event": ["hit"], "tree": "aot", "key": "k"}',
    b'{"time": 1, "event": "hit", "tree": "aot", "key": "k", "seconds": "x"}',
    b'{"time": 1, "event": "hit", "tree": "aot", "key": "k", "reason": {"a": []}}',
    b"\xff\xfe" + GOOD,
    b"[" + GOOD + b"]",
    b"x" * (2 * hostile.MB),
])
def test_ledger_lines_are_total(tmp_path: Path, bad: bytes) -> None:
    from vllm_cache_tools.store.usage import summarize
    events, problems = read_ledger(_ledger(tmp_path, [GOOD, bad, GOOD]))
    assert len(events) == 2 and len(problems) == 1, (events, problems)
    assert all("\n" not in p and len(p) < 300 for p in problems)
    use = summarize(events)
    assert use["k"].last == 1700000000.5


# --------------------------------------------------------------------------------------------
# Item 9: the later evidence wins


def _make_entry(last_used: float | None, source: str | None) -> Any:
    from vllm_cache_tools.store.types import Entry, TreeStats
    return Entry(key="k", layout="aot", path=Path("/r/k"),
                 stats=TreeStats(size_bytes=1, files=1),
                 ranks=(), prefixes=(), state="complete", state_detail="",
                 created=None, created_source="", modified=None, last_used=last_used,
                 last_used_source=source, vllm_version=None,  # type: ignore[arg-type]
                 torch_version=None, model=None, hardware=None)


def test_ledger_never_moves_last_use_back() -> None:
    from vllm_cache_tools.store.usage import Usage, apply_usage
    use = {"k": Usage(hits=1, misses=0, load_failures=0, first=100.0, last=200.0,
                      last_event="hit")}
    newer, = apply_usage([_make_entry(300.0, "atime")], use)
    assert (newer.last_used, newer.last_used_source, newer.hits) == (300.0, "atime", 1)
    older, = apply_usage([_make_entry(50.0, "atime")], use)
    assert (older.last_used, older.last_used_source) == (200.0, "ledger")
    unknown, = apply_usage([_make_entry(None, None)], use)
    assert (unknown.last_used, unknown.last_used_source) == (200.0, "ledger")


def test_prune_last_use_takes_the_later_evidence() -> None:
    from vllm_cache_tools.maintain.evidence import last_use
    assert last_use(_make_entry(300.0, "atime"), {"k": 200.0}) == (300.0, "atime")
    assert last_use(_make_entry(100.0, "atime"), {"k": 200.0}) == (200.0, "ledger")
    assert last_use(_make_entry(None, None), {"k": 200.0}) == (200.0, "ledger")
    assert last_use(_make_entry(100.0, "mtime"), {}) == (100.0, "mtime")


# --------------------------------------------------------------------------------------------
# Item 6: graph text is read in linear time


GRAPH = sorted(SAMPLE.glob("torch_compile_cache/*/rank_0_0/backbone/computation_graph.py"))[0]


@pytest.mark.parametrize("text", [
    hostile.graph_newlines(40_000).decode(),
    hostile.graph_file_comments().decode(),
    "#" + " " * 200_000,
    "# File: " + "a:1" * 100_000,
    "# File: x:" + "1" * 300_000,
    ("# File: " + "\t" * 1000) * 300,
    "submod_1 = " * 30_000,
    " " * 300_000 + "\n",
])
def test_graph_parse_is_linear(text: str) -> None:
    t0 = time.perf_counter()
    parse_graph(text)
    model_file_from_head(text.encode()[:256 * 1024])
    assert time.perf_counter() - t0 < 0.5


def test_graph_head_scan_is_linear() -> None:
    t0 = time.perf_counter()
    assert model_file_from_head(hostile.graph_models_head()) in (None, "/model_executor/models/"
                                                                 * 11397)
    assert time.perf_counter() - t0 < 0.5


def test_graph_diff_is_linear() -> None:
    from vllm_cache_tools.analyze.graph_diff import diff_graphs
    for text in ("\n" * 40_000, "a_" * 100_000, '"a[' * 100_000, "torch.ops." * 30_000,
                 "0x" + "f" * 300_000):
        t0 = time.perf_counter()
        diff_graphs(text, text[:-1] + "y")
        assert time.perf_counter() - t0 < 1.0


def _old_parse_graph(text: str) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """The regexes this reader used before (the reference on real, well-formed graphs)."""
    import re
    fc = re.compile(r"#\s*File:\s*(?P<path>.+?):(?P<line>\d+) in (?P<fn>[\w<>.]+)")
    sm = re.compile(r"^\s*(submod_\d+)\s*=\s*self\.(submod_\d+)\(", re.M)
    files: dict[str, None] = {}
    funcs: dict[str, None] = {}
    for m in fc.finditer(text):
        files.setdefault(m["path"].strip(), None)
        funcs.setdefault(f"{m['path'].strip()}:{m['fn']}", None)
    subs = tuple(dict.fromkeys(m.group(1) for m in sm.finditer(text)))
    return tuple(files), tuple(funcs), subs


def test_graph_reads_real_graphs_as_before() -> None:
    graphs = [GRAPH, *sorted(Path(p) for p in glob.glob(
        str(HARNESS / "*" / "root" / "torch_compile_cache" / "*" / "rank_*" / "*" /
            "computation_graph.py")))]
    for g in graphs:
        text = g.read_text()
        info = parse_graph(text)
        assert (info.files, info.functions, info.submodules) == _old_parse_graph(text), g
        assert info.lines == text.count("\n")
        assert model_file_from_head(text.encode()[:256 * 1024]) == info.model_file
    assert parse_graph(GRAPH.read_text()).model_file


# --------------------------------------------------------------------------------------------
# Item 5: the restricted unpickler


def test_real_models_read_exactly_as_before() -> None:
    models = real_models()
    assert models
    for m in models:
        data = m.read_bytes()
        new, old = safe_loads(data), reference_loads(data)
        assert same_tree(new, old), m
        blob = old["compiled_fn"][1]
        assert same_tree(safe_loads(blob), reference_loads(blob)), m


def test_pickled_python_values_read_as_before() -> None:
    import collections
    values: list[Any] = [
        {"a": 1, "b": [1.5, None, True, False], "c": (1, 2, (3,)), "d": b"x" * 300,
         "e": "é" * 300, "f": 2**70, "g": -(2**40), "h": frozenset({1, "a"}), "i": {1, 2}},
        collections.OrderedDict(a=1, b=2), b"", [[]] * 3,
    ]
    for v in values:
        for proto in range(0, pickle.HIGHEST_PROTOCOL + 1):
            data = pickle.dumps(v, protocol=proto)
            try:
                old = reference_loads(data)
            except SafePickleError:
                with pytest.raises(SafePickleError):
                    safe_loads(data)
                continue
            assert same_tree(safe_loads(data), old), (v, proto)


@pytest.mark.parametrize("name", [n for n, (kind, _) in hostile.ARTIFACTS.items()
                                  if kind == "model"])
def test_pickle_bombs_are_refused_cheaply(name: str) -> None:
    r = run_isolated(name, timeout=30)
    assert r.outcome in ("ok", "ReadError"), r
    assert r.cpu_s < 1.0 and r.peak_rss_mb < 300, r


def test_build_cannot_change_the_readers_own_functions() -> None:
    from vllm_cache_tools.read import safe_pickle
    before = {n: getattr(f, "__defaults__", None) for n, f in vars(safe_pickle).items()
              if callable(f)}
    with pytest.raises(SafePickleError):
        safe_loads(hostile.pickle_build_on_reader_function())
    with pytest.raises(SafePickleError):
        safe_loads(hostile.pickle_build_on_stub_class())
    after = {n: getattr(f, "__defaults__", None) for n, f in vars(safe_pickle).items()
             if callable(f)}
    assert before == after


@pytest.mark.parametrize("blob", [
    b"\x80\x04cbuiltins\nbytearray\nJ\x00\x00\x00\x40\x85R.",
    b"\x80\x04cbuiltins\nrange\nK\x05\x85R.",
    b"\x80\x04cbuiltins\nslice\nK\x05\x85R.",
    b"\x80\x04cbuiltins\ncomplex\nK\x05\x85R.",
    b"\x80\x04cbuiltins\nset\ncbuiltins\nset\n\x85R.",
])
def test_constructors_real_artifacts_never_use_are_stand_ins(blob: bytes) -> None:
    from vllm_cache_tools.read.safe_pickle import Stub
    try:
        out = safe_loads(blob)
    except SafePickleError:
        return
    assert isinstance(out, Stub)


def test_safe_pickle_error_is_a_read_error() -> None:
    assert issubclass(SafePickleError, ReadError)


# --------------------------------------------------------------------------------------------
# Item 3 end to end: one hostile file does not abort a command over the root


HOSTILE_FILES = {
    "factors-deep": ("??????????/rank_0_0/backbone/cache_key_factors.json",
                     hostile.json_deep()),
    "factors-bigint": ("??????????/rank_0_0/backbone/cache_key_factors.json",
                       hostile.json_huge_int()),
    "manifest-deep": ("??????????/rank_0_0/backbone/vct-manifest.*.json",
                      hostile.json_deep_in_object()),
    "aot-manifest-deep": ("torch_aot_compile/*/rank_0_0/vct-manifest.*.json",
                          hostile.json_deep_in_object()),
    "manifest-types": ("??????????/rank_0_0/backbone/vct-manifest.*.json",
                       b'{"schema": 1, "versions": [1], "traced_files": [1], '
                       b'"command_line": 1, "config": [1]}'),
    "ledger": (".vllm-cache-tools/ledger/vm.jsonl", hostile.ledger_lines(64 * 1024)),
    "compile-cache": ("??????????/rank_0_0/backbone/vllm_compile_cache.py",
                      hostile.literal_hex_int()),
    "graph": ("??????????/rank_0_0/backbone/computation_graph.py",
              hostile.graph_file_comments()),
    "model": ("torch_aot_compile/*/rank_0_0/model", hostile.aot_model_list_dag()),
}


@pytest.fixture()
def sample_root(tmp_path: Path) -> Path:
    dst = tmp_path / "root"
    shutil.copytree(SAMPLE, dst, symlinks=True)
    return dst


def _plant(root: Path, pattern: str, data: bytes) -> Path:
    cc = root / "torch_compile_cache"
    matches = sorted(cc.glob(pattern))
    target = matches[0] if matches else cc / pattern.replace("??????????", "28fd362d4e")
    target.write_bytes(data)
    old = time.time() - 40 * 86400
    os.utime(target, (old, old))
    return target


@pytest.mark.parametrize("case", sorted(HOSTILE_FILES))
def test_one_hostile_file_does_not_abort_commands(sample_root: Path, case: str) -> None:
    pattern, data = HOSTILE_FILES[case]
    _plant(sample_root, pattern, data)
    root = str(sample_root)
    keys = ["28fd362d4e", "39ecaca4bf", "0b8536d36d", "b6a18428ab"]
    ls = run_cli("ls", "--root", root, "--json")
    assert ls.returncode == 0, ls.stderr
    listed = {e["key"][:10] for e in json.loads(ls.stdout)["entries"]}
    assert set(keys) <= listed
    for args in (["show", "--root", root, keys[0]], ["show", "--root", root, keys[2]],
                 ["verify", "--root", root], ["prune", "--root", root, "--older-than", "1d",
                                              "--grace", "0", "--dry-run"]):
        r = run_cli(*args)
        assert r.returncode != 3 and "Traceback" not in r.stderr, (args, r.stderr[-2000:])
        assert "internal error" not in r.stderr, (args, r.stderr[-500:])
    # --grace 0: the copy's times are the checkout's, minutes old on a fresh clone.
    r = run_cli("rm", "--root", root, "--yes", "--grace", "0", keys[1])
    assert r.returncode == 0, r.stderr[-2000:]


def test_hostile_cli_runs_are_fast(sample_root: Path) -> None:
    """A regex bomb graph and a pickle bomb model together: the listing ends promptly."""
    _plant(sample_root, HOSTILE_FILES["graph"][0], hostile.graph_file_comments(2 * 1024 * 1024))
    _plant(sample_root, "torch_aot_compile/*/rank_0_0/model", hostile.pickle_tuple_dag_hash())
    t0 = time.monotonic()
    r = subprocess.run([str(Path(os.sys.executable).parent / "vllm-cache"), "verify", "--root",
                        str(sample_root)], capture_output=True, text=True, timeout=120)
    assert "Traceback" not in r.stderr and r.returncode != 3, r.stderr[-2000:]
    assert time.monotonic() - t0 < 30


# --------------------------------------------------------------------------------------------
# read/logs.py (helper H4's parser): found by the fuzzer and the regex review


@pytest.mark.parametrize("prefix", [
    "Directly load the compiled graph for ", "Directly lookup the graph for ",
    "Compiling model again due to a load failure from ",
    "Cannot load aot compilation from path ", "torch.compile Using cache directory: ",
])
def test_log_lines_are_parsed_in_linear_time(prefix: str) -> None:
    from vllm_cache_tools.read.logs import parse_text
    line = "INFO 01-01 00:00:00 [backends.py:1] " + prefix * (300_000 // len(prefix)) + "\n"
    t0 = time.perf_counter()
    parse_text(line * 2)
    assert time.perf_counter() - t0 < 1.0


def test_log_process_prefix_with_a_huge_pid() -> None:
    from vllm_cache_tools.read.logs import parse_text
    parse_text("(VllmWorker rank=0 pid=" + "9" * 5000 + ") INFO 01-01 00:00:00 [backends.py:1] "
               "Compiling a graph for (1, 128) takes 1.5 s\n")


def test_model_past_the_readers_limits_is_not_judged(tmp_path: Path) -> None:
    """A well-formed pickle past a limit is ``unknown`` (UnreadableError), never ``corrupt``:
    no policy may delete an entry for being bigger than this reader expects."""
    from vllm_cache_tools.read.aot_model import read_aot_model
    from vllm_cache_tools.read.errors import UnreadableError
    p = tmp_path / "model"
    p.write_bytes(pickle.dumps({"x": [None] * 150_000}, protocol=4))
    with pytest.raises(UnreadableError):
        read_aot_model(p)
    p.write_bytes(pickle.dumps({"x": [None] * 10}, protocol=4)[:-1])
    with pytest.raises(ReadError) as err:
        read_aot_model(p)
    assert not isinstance(err.value, UnreadableError)


@pytest.mark.parametrize("name", ["log env factor of 1 MB", "log args line of 1 MB",
                                  "log 10 MB of backtracking lines"])
def test_hostile_logs_are_read_in_bounded_memory(name: str) -> None:
    r = run_isolated(name, timeout=60)
    assert r.outcome in ("ok", "ReadError"), r
    assert r.cpu_s < 1.0 and r.peak_rss_mb < 300, r


@pytest.mark.parametrize(("data", "state"), [
    (hostile.json_deep(), "unknown"),           # past the reader's limits: not judged
    (hostile.json_huge_int(), "unknown"),
    (b'{"code_hash": "a", ', "corrupt"),        # broken JSON: read and found broken
])
def test_hostile_factors_make_the_entry_unknown_not_corrupt(sample_root: Path, data: bytes,
                                                             state: str) -> None:
    from vllm_cache_tools import scan
    f = _plant(sample_root, "28fd362d4e/rank_0_0/backbone/cache_key_factors.json", data)
    entries = {e.key: e for e in scan(sample_root, check_in_use=False, deep=True).entries}
    assert entries["28fd362d4e"].state == state, entries["28fd362d4e"].state_detail
    assert "\n" not in entries["28fd362d4e"].state_detail
    assert {e.state for k, e in entries.items() if k != "28fd362d4e"} <= {
        "complete", "unloadable", "in-use"}, f


def test_explain_names_the_file_it_could_not_read(tmp_path: Path) -> None:
    """explain of two entries, one with its cache_key_factors.json (or AOT model) unreadable
    to the user: the gap names the entry and the reader's error (was: "an entry has no
    cache_key_factors.json" / "an AOT model could not be read": neither which entry nor that
    the file is there)."""
    root = tmp_path / "root"
    shutil.copytree(SAMPLE, root, symlinks=True)
    cc = root / "torch_compile_cache"
    (cc / "28fd362d4e" / "rank_0_0" / "backbone" / "cache_key_factors.json").chmod(0)
    aot = cc / "torch_aot_compile"
    next(aot.glob("0b8536d36d86*/rank_0_0/model")).chmod(0)
    for a, b, says in (("28fd362d4e", "39ecaca4bf",
                        "28fd362d4e: cannot read cache_key_factors.json: Permission denied"),
                       ("b6a18428ab0d", "0b8536d36d86",
                        "0b8536d36d86: cannot read model: Permission denied")):
        r = run_cli("explain", a, b, "--root", str(root), "--json", unprivileged=True)
        assert r.returncode == 1, r.stderr
        assert [u["detail"] for u in json.loads(r.stdout)["unexplained"]] == [says]


def test_audit_says_which_manifests_it_could_not_read(tmp_path: Path) -> None:
    """A manifest the user cannot read is a start audit cannot compare: a warning naming it,
    a line in the report and ``problems`` in --json (was: skipped in silence, "no possible
    false hits", exit 0, as if it had been compared)."""
    root = tmp_path / "root"
    shutil.copytree(SAMPLE, root, symlinks=True)
    m = next(root.glob("torch_compile_cache/torch_aot_compile/0b8536d36d86*/rank_0_0/"
                       "vct-manifest.*.json"))
    m.chmod(0)
    r = run_cli("audit", "--root", str(root), unprivileged=True)
    assert r.returncode == 0, r.stderr
    assert r.stderr == (f"vllm-cache: warning: 0b8536d36d86: cannot read {m.name}: "
                        "Permission denied (not audited)\n")
    assert "1 manifest(s) could not be read and were not compared" in r.stdout
    r = run_cli("audit", "--root", str(root), "--json", unprivileged=True)
    assert json.loads(r.stdout)["problems"] == [
        f"0b8536d36d86: cannot read {m.name}: Permission denied"]
    m.chmod(0o644)
    r = run_cli("audit", "--root", str(root), "--json")
    assert r.returncode == 0 and r.stderr == "" and json.loads(r.stdout)["problems"] == []
