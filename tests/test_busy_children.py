"""prune's /proc look (maintain.execute.Busy) leaves out only the reading processes a
streaming prune starts itself: a child process the caller had before (a library caller's vLLM
engine: V1 starts its EngineCore with multiprocessing) holding an entry's file keeps it in
use."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

from vllm_cache_tools.maintain.execute import Busy


def _hold(path: str, ready: multiprocessing.synchronize.Event,
          done: multiprocessing.synchronize.Event) -> None:
    with open(path, "rb"):
        ready.set()
        done.wait(60)


def test_a_child_started_before_is_a_user(tmp_path: Path) -> None:
    entry = tmp_path / "torch_compile_cache" / "0123456789"
    (entry / "rank_0_0" / "backbone").mkdir(parents=True)
    held = entry / "rank_0_0" / "backbone" / "artifact"
    held.write_bytes(b"x" * 64)
    ctx = multiprocessing.get_context("fork")
    ready, done = ctx.Event(), ctx.Event()
    child = ctx.Process(target=_hold, args=(str(held), ready, done))
    child.start()
    try:
        assert ready.wait(30)
        busy = Busy(tmp_path, 0.0)  # made after the child: the caller's, not prune's
        time.sleep(0.01)
        assert busy.get().get("torch_compile_cache/0123456789") == [child.pid]
        # A child started after the look began (a streaming prune's reading pool) is ours.
        later = Busy.__new__(Busy)
        later.__dict__.update(busy.__dict__, before=set(), taken=-1e18)
        assert "torch_compile_cache/0123456789" not in later.get()
    finally:
        done.set()
        child.join(30)
