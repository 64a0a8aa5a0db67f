"""A slice of the fuzz session (``nox -s fuzz`` runs 1,000,000 inputs): 2,000 mutations of
real files over every parser, the same ones on every run (seed 0), and every input kept under
tests/fuzz/regressions/ (inputs that once failed), so the test-suite keeps guarding what the
fuzzer found."""

from __future__ import annotations

import contextlib
import tempfile
import time
from pathlib import Path

import pytest

from tests.fuzz.run import fuzz, report
from tests.fuzz.targets import build_targets

REGRESSIONS = Path(__file__).resolve().parent / "fuzz" / "regressions"


def test_fuzz_slice_has_no_findings() -> None:
    results, wall = fuzz(2000, seed=0, workers=0)
    assert sum(s.inputs for s in results.values()) == 2000
    assert not any(s.counts for s in results.values()), report(results, wall, 0)


@pytest.mark.parametrize("path", sorted(REGRESSIONS.glob("*.bin")), ids=lambda p: p.name)
def test_kept_fuzz_findings_read_cleanly(path: Path) -> None:
    """``<target>-<seed>-<index>.bin``: read by that target's reader, ReadError at most."""
    from vllm_cache_tools.read.errors import ReadError
    target = build_targets()[path.name.split("-")[0] if not path.name.startswith(
        ("compile-cache", "ledger-stream")) else "-".join(path.name.split("-")[:2])]
    data = path.read_bytes()
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        with contextlib.suppress(ReadError):
            target.run(data, Path(d), target.corpus[0])
        assert time.perf_counter() - t0 < 2.0
