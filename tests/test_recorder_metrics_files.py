"""The recorder's private metrics folder (recorder/metrics.py, issue 29 item 1) without vLLM:
real child processes report as vLLM's engine core and workers do, the first process's
collector sums their files at each scrape; a file of another size or layout, or with damaged
values, counts nothing. The same path runs inside a real vLLM start in
tests/test_recorder_metrics.py."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from vllm_cache_tools.recorder import metrics

CHILD = """
import os, sys
from vllm_cache_tools.recorder import metrics
folder = sys.argv[1]
metrics.on_aot("miss", 0.5, os.path.join(folder, "model"))
for _ in range(int(sys.argv[2])):
    metrics.on_backend("miss", 2.0, folder)
metrics.on_backend("hit", 0.25, folder)
"""


def scrape(folder: str) -> dict[tuple[str, str], float]:
    reg = CollectorRegistry()
    reg.register(metrics.RecorderCollector(folder))
    out = {}
    for fam in text_string_to_metric_families(generate_latest(reg).decode()):
        for s in fam.samples:
            if "tree" in s.labels and "le" not in s.labels:
                out[(s.name, s.labels["tree"])] = s.value
    return out


@pytest.fixture
def private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    d = tmp_path / "vct-metrics"
    d.mkdir(mode=0o700)
    entry = tmp_path / "entry"
    entry.mkdir()
    (entry / "computation_graph.py").write_bytes(b"x" * 1000)
    (entry / "sub").mkdir()
    (entry / "sub" / "f").write_bytes(b"y" * 24)
    (entry / "link").symlink_to("/etc/passwd")  # not followed, not counted
    monkeypatch.delenv(metrics.MULTIPROC_ENV, raising=False)
    monkeypatch.delenv(metrics.ENV_VAR, raising=False)
    return d, entry


def run_children(d: Path, entry: Path, backends: list[int]) -> None:
    env = {**os.environ, metrics.DIR_ENV: str(d)}
    env.pop(metrics.MULTIPROC_ENV, None)
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(entry), str(n)], env=env)
             for n in backends]
    assert all(p.wait(60) == 0 for p in procs)


def test_children_counts_are_summed_at_each_scrape(private: tuple[Path, Path]) -> None:
    d, entry = private
    run_children(d, entry, [1, 2, 3])
    files = sorted(os.listdir(d))
    assert len(files) == 3 and all(f.endswith(metrics.STATE_SUFFIX) for f in files)
    assert all(os.stat(d / f).st_size == metrics.STATE_SIZE for f in files)
    got = scrape(str(d))
    p = metrics.PREFIX
    assert got[(p + "misses_total", "backend")] == 6
    assert got[(p + "misses_total", "aot")] == 3
    assert got[(p + "hits_total", "backend")] == 3
    assert got[(p + "entries_written_total", "backend")] == 6
    assert got[(p + "written_bytes_total", "backend")] == 6 * 1024
    assert got[(p + "compile_seconds_count", "backend")] == 6
    assert got[(p + "compile_seconds_sum", "backend")] == 12.0
    assert got[(p + "load_seconds_sum", "backend")] == 0.75
    # A process reporting again overwrites its own file in place: no new file.
    run_children(d, entry, [1])
    assert len(os.listdir(d)) == 4
    assert scrape(str(d))[(p + "misses_total", "backend")] == 7


def test_damaged_or_foreign_files_count_nothing(private: tuple[Path, Path]) -> None:
    d, entry = private
    run_children(d, entry, [2])
    (good,) = os.listdir(d)
    data = (d / good).read_bytes()
    (d / "1-short.vct").write_bytes(data[:-8])
    (d / "2-layout.vct").write_bytes(b"VCTm\0\0\0\0" + data[8:])
    nan = bytearray(data)
    struct.pack_into("<d", nan, 8, float("nan"))
    (d / "3-nan.vct").write_bytes(bytes(nan))
    neg = bytearray(data)
    struct.pack_into("<d", neg, 16, -5.0)
    (d / "4-neg.vct").write_bytes(bytes(neg))
    os.mkfifo(d / "5-fifo.vct")  # never waited on
    (d / "6-link.vct").symlink_to(d / good)  # not followed
    got = scrape(str(d))
    assert got[(metrics.PREFIX + "misses_total", "backend")] == 2
    assert got[(metrics.PREFIX + "misses_total", "aot")] == 1
