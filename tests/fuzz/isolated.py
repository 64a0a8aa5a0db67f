"""Read one hostile artifact in a child process and report what happened.

``python -m tests.fuzz.isolated NAME`` writes the artifact :data:`tests.fuzz.hostile.ARTIFACTS`
names into a temporary folder laid out as the reader expects, reads it with every reader of
that file, and prints one JSON line: ``{"outcome": "ok" | "ReadError" | <other exception>,
"seconds": ...}``. The parent measures peak RSS (``os.wait4``) and enforces a timeout, so a
crash, a hang or a memory bomb is observed rather than suffered. Used by the tests and by
benchmarks/bench_hostile_parse.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent


def read_as(kind: str, path: Path) -> None:
    """Every reader (and the listing's fast paths) a file posing as ``kind`` meets."""
    if kind == "model":
        from vllm_cache_tools.read.aot_model import read_aot_model
        for full in (True, False):
            try:
                read_aot_model(path, full=full)
            except ValueError as exc:  # ReadError is a ValueError; anything else is re-raised
                _reraise_unless_read_error(exc)
    elif kind == "cache_key_factors.json":
        from vllm_cache_tools.read.factors import read_factors
        read_factors(path)
    elif kind.startswith("vct-manifest"):
        from vllm_cache_tools.read.manifest import read_manifest
        read_manifest(path)
    elif kind == "ledger.jsonl":
        from vllm_cache_tools.store.usage import usage
        usage(path.parent.parent.parent)
    elif kind == "vllm_compile_cache.py":
        from vllm_cache_tools.read.compile_cache import read_compile_cache
        read_compile_cache(path)
    elif kind == "computation_graph.py":
        from vllm_cache_tools.read.graph import model_file_from_head, read_graph
        from vllm_cache_tools.read.noatime import read_noatime
        model_file_from_head(read_noatime(path, 256 * 1024))
        read_graph(path)
    elif kind == "graph diff":  # diff-graph of this graph against an edited copy
        from vllm_cache_tools.analyze.graph_diff import diff_graphs
        text = path.read_text(errors="replace")
        diff_graphs(text, text[: len(text) // 3] + "x = y\n" + text[len(text) // 3:])
    elif kind == "log":
        from vllm_cache_tools.read.logs import LogStream
        for start in LogStream([str(path)]):  # what `log --json` reads of each start
            for _, fn in start.functions:
                fn.env_values  # noqa: B018 - a lazy property: reading it parses the values
    elif kind == "none":
        pass
    elif kind == "triton.json":
        from vllm_cache_tools.read.triton import read_triton_meta
        read_triton_meta(path)
    else:
        raise SystemExit(f"unknown kind {kind}")


def _reraise_unless_read_error(exc: ValueError) -> None:
    from vllm_cache_tools.read.errors import ReadError
    if not isinstance(exc, ReadError):
        raise exc


def place(kind: str, data: bytes, folder: Path) -> Path:
    """Write ``data`` where a reader of ``kind`` looks for it."""
    if kind == "ledger.jsonl":
        d = folder / "torch_compile_cache" / ".vllm-cache-tools" / "ledger"
        d.mkdir(parents=True)
        path = d / "host.jsonl"
    else:
        path = folder / kind
    path.write_bytes(data)
    return path


def child(name: str) -> None:
    from tests.fuzz.hostile import ARTIFACTS, REAL
    from vllm_cache_tools.read.errors import ReadError
    kind, build = {**ARTIFACTS, **REAL, "baseline (imports only)": ("none", bytes)}[name]
    data = build()
    with tempfile.TemporaryDirectory(prefix="vct-hostile-") as d:
        path = place(kind, data, Path(d))
        del data
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            read_as(kind, path)
            outcome = "ok"
        except ReadError:
            outcome = "ReadError"
        except BaseException as exc:
            outcome = f"{type(exc).__name__}: {str(exc)[:120]}"
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        size = path.stat().st_size
    print(json.dumps({"outcome": outcome, "seconds": seconds, "cpu": cpu, "bytes": size,
                      "hwm_kb": _own_peak_kb()}))


def _own_peak_kb() -> int | None:
    """This process's own peak RSS since its exec (``VmHWM``): ``ru_maxrss`` also keeps the
    peak of the process it was spawned from (Linux records the replaced memory's peak at
    exec, and subprocess spawns with vfork), so under pytest it reported pytest's peak."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


@dataclass(frozen=True)
class Result:
    name: str
    outcome: str
    bytes: int
    seconds: float
    """Wall time spent reading (the artifact's creation and the interpreter start excluded)."""
    cpu_s: float
    """CPU time of the same (what the goal is judged on: other work on a shared machine
    stretches wall time, not this)."""
    peak_rss_mb: float
    """Peak RSS of the whole child (interpreter and imports included)."""


def run_isolated(name: str, timeout: float = 60.0) -> Result:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "tests.fuzz.isolated", name], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    t0 = time.monotonic()
    status = None
    usage = None
    while time.monotonic() - t0 < timeout:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        time.sleep(0.01)
    else:
        proc.kill()
        _, status, usage = os.wait4(proc.pid, 0)
        return Result(name, f"timeout after {timeout:.0f} s", 0, timeout, timeout,
                      usage.ru_maxrss / 1024)
    out = proc.stdout.read().decode() if proc.stdout else ""
    err = proc.stderr.read().decode() if proc.stderr else ""
    rss = usage.ru_maxrss / 1024 if usage else 0.0
    if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
        why = (f"killed by signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
               else f"exit {os.WEXITSTATUS(status)}: {err.strip().splitlines()[-1:]}")
        return Result(name, why, 0, time.monotonic() - t0, time.monotonic() - t0, rss)
    rep = json.loads(out.strip().splitlines()[-1])
    if rep.get("hwm_kb"):
        rss = rep["hwm_kb"] / 1024  # the child's own peak (see _own_peak_kb)
    return Result(name, rep["outcome"], rep["bytes"], rep["seconds"], rep["cpu"], rss)


if __name__ == "__main__":
    child(sys.argv[1])
