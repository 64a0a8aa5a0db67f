"""The metrics view alone (views/metrics.py), on reports built here: label values pass the one
rule for secrets and control characters, folded groups get one bounded value, a report from the
files alone has no counters, and unbounded groupings are refused."""

from __future__ import annotations

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse

from vllm_cache_tools.analyze.stats import Counters, Group, StatsReport
from vllm_cache_tools.views.metrics import OTHER, PREFIX, exported_names, exposition, negotiated

SECRET = "hf_abcdefghijklmnopqrstuvwxyz0123456789"


def _counters(n: int) -> Counters:
    return Counters(n, n, 0, 0, 0, 1.0, 2.0, 0.5, 0, 0)


def report(by: str = "model", basis: str = "ledger", groups: tuple[Group, ...] = ()
           ) -> StatsReport:
    return StatsReport("src", "root", basis, None, by, _counters(3), groups,
                       {"aot": {"hit": 3}} if basis == "ledger" else {}, 1, 1, 1.0, 2.0, 0,
                       2, 30, 0, (), (), (), models=(("m", 2, 30),))


def labels(text: bytes) -> set[str]:
    return {v for f in om_parse(text.decode()) for s in f.samples for v in s.labels.values()}


def test_hostile_model_names_are_escaped_and_redacted() -> None:
    bad = f"org/m\x1b]0;pwned\x07\u202e?token={SECRET}"
    r = report(groups=(Group("model", bad, _counters(3)),))
    r = StatsReport(**{**r.__dict__, "models": ((bad, 1, 10),)})
    text = exposition(r)
    assert b"\x1b" not in text and "\u202e".encode() not in text and SECRET.encode() not in text
    assert any(v.startswith("org/m\\x1b]0;pwned\\x07\\u202e") for v in labels(text))


def test_folded_groups_are_one_bounded_value() -> None:
    r = report(by="host", groups=(Group("host", "pod-a", _counters(1)),
                                  Group("host", "12,345 other hosts", _counters(9), others=12345)))
    assert labels(exposition(r)) >= {"pod-a", OTHER}
    assert "12,345 other hosts" not in labels(exposition(r))


def test_files_basis_has_sizes_only() -> None:
    fams = {f.name for f in om_parse(exposition(report(basis="files")).decode())}
    assert PREFIX + "entries" in fams and PREFIX + "size_bytes" in fams
    assert not fams & {PREFIX + n for n in ("starts", "hits", "compile_seconds")}


@pytest.mark.parametrize("by", ["day", "entry"])
def test_unbounded_groupings_are_refused(by: str) -> None:
    with pytest.raises(ValueError, match="unbounded"):
        exposition(report(by=by))


def test_every_name_is_exported_and_accept_picks_the_format() -> None:
    text = exposition(report()).decode()
    assert {s.name for f in om_parse(text) for s in f.samples} <= exported_names()
    assert text.endswith("# EOF\n")
    assert negotiated("application/openmetrics-text; version=1.0.0") == "openmetrics"
    assert negotiated("text/plain") == negotiated(None) == "prometheus"
