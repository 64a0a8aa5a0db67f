"""``stats`` as Prometheus metrics (``stats --format openmetrics|prometheus``,
``serve-metrics``): one collector over a :class:`~vllm_cache_tools.analyze.stats.StatsReport`,
exposed by ``prometheus_client``'s own encoders (OpenMetrics 1.0 with ``# EOF``, or the
classic text format 0.0.4 that node_exporter's textfile collector and ``promtool`` parse).

Every name starts ``vllm_compile_cache_`` (issue 29; vLLM's own metrics use ``vllm:``).
Labels are bounded: ``tree`` (``aot``, ``backend``), ``outcome`` (four values), ``model``
(the models served, the value vLLM itself puts in its ``model_name`` label) and, only with
``--by host``, ``host`` (one value per host in the ledgers: bounded by the hosts you have).
Never an entry key or a file path of the cache. Label values pass the one rule for secrets
and control characters (:mod:`vllm_cache_tools.redaction`, :mod:`vllm_cache_tools.safetext`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, TypeAlias

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from vllm_cache_tools.analyze.drift import DriftReport
from vllm_cache_tools.analyze.stats import Counters, Group, StatsReport
from vllm_cache_tools.analyze.stats_tally import GUARD_EVENT
from vllm_cache_tools.metric_names import PREFIX, TREES
from vllm_cache_tools.redaction import redact_text
from vllm_cache_tools.safetext import escape_controls

METRIC_BY = ("model", "host")
"""The groupings metrics may carry as a label (``day`` and ``entry`` are unbounded)."""
OUTCOMES = ("hit", "miss", "load_failure", "disabled")
OTHER = "_other"
"""The label value of the row summing up the groups past ``stats``' group cap."""
FORMATS = ("openmetrics", "prometheus")
CONTENT_TYPES = {
    "openmetrics": "application/openmetrics-text; version=1.0.0; charset=utf-8",
    "prometheus": "text/plain; version=0.0.4; charset=utf-8",
}

# name (without the prefix) -> help; one table so docs, dashboard and tests read the same names.
HELP: dict[str, str] = {
    "starts": "vLLM starts in the recorder's ledgers, by outcome (a start is all processes "
              "of one vLLM start; load_failure when an entry was found and could not be loaded)",
    "hits": "Entries loaded from the cache: ledger events, one per worker, entry (and "
            "backend prefix)",
    "misses": "Entries compiled and written: ledger events, one per worker, entry (and "
              "backend prefix)",
    "load_failures": "Entries vLLM found and could not load (AOT: compiled again; "
                     "backend: the start stops unless moved aside): ledger events",
    "guard_warnings": "Decisions the wrong-hit guard warned about: the entry was compiled "
                      "for settings vLLM's key does not see (ledger events with a guard "
                      "note; docs/guard.md)",
    "compile_seconds": "Seconds spent compiling on misses (slowest worker of each start)",
    "load_seconds": "Seconds spent loading by hits (slowest worker of each start)",
    "saved_seconds": "Compile seconds avoided by hits, gross: each hit credited with its "
                     "entry's measured compile time",
    "net_saved_seconds": "Compile seconds avoided minus seconds spent loading (negative: the "
                         "hits cost more than compiling would have)",
    "untimed_compiles": "Starts that compiled without a measured time (vLLM's AOT-only mode)",
    "untimed_hits": "Hits on entries whose compile time was never measured",
    "entries": "Cache entries in the source",
    "size_bytes": "Bytes of the cache entries in the source",
    "never_hit_entries": "Entries written and never loaded since",
    "never_hit_bytes": "Bytes of the entries written and never loaded since",
    "ledger_hosts": "Hosts whose ledgers were read",
    "last_event_timestamp_seconds": "Unix time of the newest ledger event",
    "problems": "Problems met while reading the source (damaged ledger lines, unreadable "
                "entries); stats --json lists them",
    "source": "What the numbers are counted from: basis ledger (the recorder's ledgers) or "
              "files (no ledger: only entries and bytes)",
    "drift_factors": "Factors in vLLM's key that took more than one value across a model's "
                     "starts and split its cache into more entries, by class (vllm-cache drift "
                     "names them and the fix)",
    "drift_unhashed_factors": "Factors that differed between a model's starts while vLLM's key "
                              "does not see them (no new entry; a hit may be stale: vllm-cache "
                              "audit)",
}
DRIFT_CLASSES = ("per host", "per run", "per install", "setting")
COUNTERS = ("starts", "hits", "misses", "load_failures", "guard_warnings", "compile_seconds",
            "load_seconds", "saved_seconds", "untimed_compiles", "untimed_hits")
PER_GROUP = {"compile_seconds": "compile_seconds", "load_seconds": "load_seconds",
             "saved_seconds": "saved_seconds", "untimed_compiles": "compile_unknown",
             "untimed_hits": "saved_unknown"}
"""Counters per model (or host): metric -> the :class:`Counters` field it shows."""
UNITS = {"compile_seconds": "seconds", "load_seconds": "seconds", "saved_seconds": "seconds",
         "net_saved_seconds": "seconds", "size_bytes": "bytes", "never_hit_bytes": "bytes",
         "last_event_timestamp_seconds": "seconds"}


def exported_names() -> frozenset[str]:
    """Every sample name the exposition can hold (``_total`` on counters, ``_info`` on the
    source): what a dashboard expression may name."""
    out = set()
    for name in HELP:
        full = PREFIX + name
        out.add(full + "_total" if name in COUNTERS else
                full + "_info" if name == "source" else full)
    return frozenset(out)


def _label(value: str) -> str:
    return escape_controls(redact_text(value))


def _group_label(g: Group) -> str:
    return OTHER if g.others else _label(g.name)


class StatsCollector(Collector):
    """The metric families of one report (a ``prometheus_client`` collector)."""

    def __init__(self, report: StatsReport, drift: DriftReport | None = None) -> None:
        if report.by not in METRIC_BY:
            raise ValueError(f"metrics group by {' or '.join(METRIC_BY)}, not {report.by!r} "
                             "(one label value per day or entry is unbounded)")
        self.report = report
        self.drift = drift

    def collect(self) -> Iterator[Any]:
        r = self.report
        info = InfoMetricFamily(PREFIX + "source", HELP["source"],
                                labels=["basis", "kind", "by"])
        info.add_metric([r.basis, r.kind, r.by], {})
        yield info
        if r.basis == "ledger":
            yield from self._ledger()
        yield from self._sizes()
        if self.drift is not None:
            yield from self._drift(self.drift)
        yield _gauge("problems", [], [([], len(problems(r, self.drift)))])

    def _ledger(self) -> Iterator[Any]:
        r = self.report
        by = r.by
        starts = _counter("starts", [by, "outcome"])
        rows: dict[str, list[tuple[list[str], float]]] = {n: [] for n in PER_GROUP}
        net = []
        for g in r.groups:
            c, name = g.counters, _group_label(g)
            for outcome, n in zip(OUTCOMES, _outcomes(c), strict=True):
                starts.add_metric([name, outcome], n)
            for metric, field in PER_GROUP.items():
                rows[metric].append(([name], getattr(c, field) or 0))
            net.append(([name], c.net_seconds or 0.0))
        yield starts
        for metric, event in (("hits", "hit"), ("misses", "miss"),
                              ("load_failures", "load-failure"),
                              ("guard_warnings", GUARD_EVENT)):
            fam = _counter(metric, ["tree"])
            for tree in TREES:
                fam.add_metric([tree], r.events.get(tree, {}).get(event, 0))
            yield fam
        for metric, samples in rows.items():
            fam = _counter(metric, [by])
            for labels, v in samples:
                fam.add_metric(labels, v)
            yield fam
        yield _gauge("net_saved_seconds", [by], net)
        yield _gauge("ledger_hosts", [], [([], r.hosts)])
        if r.last is not None:
            yield _gauge("last_event_timestamp_seconds", [], [([], r.last)])

    def _sizes(self) -> Iterator[Any]:
        r = self.report
        models = [([_label(m)], n, b) for m, n, b in r.models]
        yield _gauge("entries", ["model"], [(lab, n) for lab, n, _ in models])
        yield _gauge("size_bytes", ["model"], [(lab, b) for lab, _, b in models])
        yield _gauge("never_hit_entries", [], [([], len(r.never_hit))])
        yield _gauge("never_hit_bytes", [], [([], sum(u.size_bytes or 0
                                                      for u in r.never_hit))])


    def _drift(self, d: DriftReport) -> Iterator[Any]:
        split: list[tuple[list[str], float]] = []
        unhashed: list[tuple[list[str], float]] = []
        for m in d.models:
            name = _label(m.model)
            fs = m.factors
            for cls in DRIFT_CLASSES:
                split.append(([name, cls.replace(" ", "_")],
                              sum(1 for f in fs if f.kind == cls and f.in_key
                                  and f.entries > 1)))
            unhashed.append(([name], sum(1 for f in fs if not f.in_key)))
        yield _gauge("drift_factors", ["model", "class"], split)
        yield _gauge("drift_unhashed_factors", ["model"], unhashed)


def problems(report: StatsReport, drift: DriftReport | None = None) -> list[str]:
    """The problems of both reports, once each (both start from the gathered inputs')."""
    seen = set(report.problems)
    return [*report.problems, *(p for p in (drift.problems if drift else ()) if p not in seen)]


def _outcomes(c: Counters) -> tuple[int, int, int, int]:
    return (c.hits or 0, c.misses or 0, c.load_failures or 0, c.disabled or 0)


def _counter(name: str, labels: list[str]) -> CounterMetricFamily:
    return CounterMetricFamily(PREFIX + name, HELP[name], labels=labels,
                               unit=UNITS.get(name, ""))


def _gauge(name: str, labels: list[str], samples: list[tuple[list[str], float]]
           ) -> GaugeMetricFamily:
    fam = GaugeMetricFamily(PREFIX + name, HELP[name], labels=labels, unit=UNITS.get(name, ""))
    for lab, v in samples:
        fam.add_metric(lab, v)
    return fam


def exposition(report: StatsReport, fmt: str = "openmetrics",
               drift: DriftReport | None = None) -> bytes:
    """The report's metrics in ``fmt``: ``openmetrics`` (OpenMetrics 1.0, ending ``# EOF``)
    or ``prometheus`` (text 0.0.4, for node_exporter's textfile collector and promtool);
    with ``drift``, the drift factor counts of the same source too."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StatsCollector(report, drift))
    return encoder(fmt)(registry)


def encoder(fmt: str) -> Callable[[CollectorRegistry], bytes]:
    if fmt == "openmetrics":
        from prometheus_client.openmetrics.exposition import generate_latest as om
        return om
    if fmt == "prometheus":
        from prometheus_client.exposition import generate_latest
        return generate_latest
    raise ValueError(f"--format must be one of {', '.join(FORMATS)}, not {fmt!r}")


def negotiated(accept: str | None) -> str:
    """The format a scraper asks for in its ``Accept`` header (Prometheus asks for
    OpenMetrics; curl and most tools get the text format)."""
    return "openmetrics" if accept and "application/openmetrics-text" in accept \
        else "prometheus"


Measured: TypeAlias = tuple[StatsReport, DriftReport | None]
"""What one count of a source gives: its stats, and its drift where asked for."""


class CachedExposition:
    """What ``serve-metrics`` answers: the report of ``count()`` encoded per format, counted
    again at most every ``refresh`` seconds (a scrape between two counts costs a dictionary
    lookup; concurrent scrapes after the answer expired count once). ``count`` raises for a
    source that cannot be read; the next scrape tries again."""

    def __init__(self, count: Callable[[], Measured], refresh: float,
                 clock: Callable[[], float] | None = None) -> None:
        import threading
        import time

        self._count = count
        self.refresh = refresh
        self._clock = clock or time.monotonic
        self._lock = threading.Lock()
        self._at: float | None = None
        self._report: Measured | None = None
        self._encoded: dict[str, bytes] = {}
        self.counts = 0
        """How many times the source was read (for tests and the benchmark)."""

    def report(self) -> Measured:
        with self._lock:
            now = self._clock()
            if self._report is None or self._at is None or now - self._at >= self.refresh:
                report = self._count()  # raises: this scrape fails, the next reads again
                self.counts += 1
                self._report, self._at, self._encoded = report, self._clock(), {}
            return self._report

    def body(self, fmt: str) -> bytes:
        report = self.report()
        with self._lock:
            if self._report is report and fmt in self._encoded:
                return self._encoded[fmt]
        data = exposition(report[0], fmt, report[1])
        with self._lock:
            if self._report is report:
                self._encoded[fmt] = data
        return data
