"""The ledger rule behind ``load-failed`` (issue 29 item 4): load failures count since the
entry's last hit, and vLLM's message is cut to its reason's first line. The real path (a
truncated artifact, a real vLLM start, ls/verify/prune) is in tests/test_recorder_metrics.py."""

from __future__ import annotations

from vllm_cache_tools.read.manifest import LedgerEvent
from vllm_cache_tools.store.usage import failure_line, summarize

MSG = ("Compiling model again due to a load failure from /r/torch_aot_compile/k/rank_0_0/model,"
       " reason: Compile cache file corrupted.")


def ev(t: float, event: str, pid: int, reason: str | None = None) -> LedgerEvent:
    return LedgerEvent(time=t, event=event, tree="aot", key="k", host="h", pid=pid,
                       reason=reason)


def test_failures_count_since_the_last_hit() -> None:
    u = summarize([ev(1, "miss", 1), ev(2, "load-failure", 2, MSG), ev(3, "hit", 3),
                   ev(4, "load-failure", 4, MSG + "\nTraceback ..."),
                   ev(5, "load-failure", 5, "other")])["k"]
    assert (u.load_failures, u.failures_since_hit, u.last_failure) == (3, 2, "other")
    u = summarize([ev(1, "miss", 1), ev(2, "load-failure", 2, MSG)])["k"]
    assert (u.failures_since_hit, u.last_failure) == (1, "Compile cache file corrupted.")
    assert summarize([ev(1, "load-failure", 1, MSG), ev(2, "hit", 2)])["k"].failures_since_hit == 0


def test_failure_line() -> None:
    assert failure_line(MSG + "\nsecond line") == "Compile cache file corrupted."
    assert failure_line(None) == "no reason logged"
    assert failure_line("  just words\nmore") == "just words"
