from __future__ import annotations

from pathlib import Path

import pytest

from vllm_cache_tools.errors import UsageError
from vllm_cache_tools.store.filters import parse_filter, sort_entries
from vllm_cache_tools.store.types import Entry, TreeStats
from vllm_cache_tools.units import parse_age, parse_size


def _e(key: str, layout: str = "aot", size: int = 10, last: float = 0.0) -> Entry:
    return Entry(key=key, layout=layout, path=Path("/r") / key,  # type: ignore[arg-type]
                 stats=TreeStats(size_bytes=size, files=1), ranks=("rank_0_0",),
                 prefixes=("backbone",), state="complete", state_detail="", created=None,
                 created_source="", modified=last, last_used=last, last_used_source="mtime",
                 vllm_version=None, torch_version="2.13.0+cpu", model="LlamaModel.forward",
                 hardware="CPU")


def test_sizes_and_ages() -> None:
    assert parse_size("50G") == 50 * 1024**3 and parse_size("1.5k") == 1536
    assert parse_age("30d") == 30 * 86400 and parse_age("45m") == 2700
    for bad in ("x", "5q", ""):
        with pytest.raises(UsageError):
            parse_size(bad)


def test_a_size_too_large_is_a_usage_error() -> None:
    """A size of hundreds of digits was float infinity: prune --max-size and ls --filter
    size>... ended in "internal error: OverflowError", exit 3."""
    huge = "9" * 400 + "T"
    with pytest.raises(UsageError, match="size too large"):
        parse_size(huge)
    with pytest.raises(UsageError, match="size too large"):
        parse_filter(f"size>{huge}")
    assert parse_size("8388607T") == 8388607 * 1024**4
    from tests.conftest import run_cli

    r = run_cli("prune", "--root", "/nonexistent-root", "--max-size", huge, "--dry-run")
    assert r.returncode == 2 and r.stderr.startswith("vllm-cache: error: size too large")


def test_filters() -> None:
    now = 100 * 86400.0
    es = [_e("a" * 10, "backend", 5, now - 86400),
          _e("b" * 64, "aot", 5 * 1024**2, now - 40 * 86400)]
    keep = lambda expr: [e.key[0] for e in es if parse_filter(expr, now)(e)]  # noqa: E731
    assert keep("layout=aot") == ["b"]
    assert keep("size>1M") == ["b"]
    assert keep("age>30d") == ["b"]
    assert keep("age<2d,layout=backend") == ["a"]
    assert keep("model~Llama") == ["a", "b"]
    assert keep("torch!=2.13.0+cpu") == []
    for bad in ("nope=1", "size~3", "layout>2", "garbage", "age>soon"):
        with pytest.raises(UsageError):
            parse_filter(bad)


def test_sorting() -> None:
    es = [_e("b", size=1, last=5), _e("a", size=9, last=1)]
    assert [e.key for e in sort_entries(es, "size")] == ["a", "b"]
    assert [e.key for e in sort_entries(es, "last-used")] == ["b", "a"]
    assert [e.key for e in sort_entries(es, "key")] == ["a", "b"]
    with pytest.raises(UsageError):
        sort_entries(es, "color")
