"""The one table of metric names (issue 29), read by both expositions: ``stats --format
openmetrics`` / ``serve-metrics`` (:mod:`vllm_cache_tools.views.metrics`, counted from ledgers)
and the recorder inside vLLM (:mod:`vllm_cache_tools.recorder.metrics`, counted as vLLM decides,
served by vLLM's own ``/metrics``). Standard library only: the recorder imports it inside vLLM.

Every name starts ``vllm_compile_cache_`` (vLLM's own metrics use ``vllm:``); labels are
bounded (``tree`` is ``aot`` or ``backend``; never an entry key or a path)."""

from __future__ import annotations

PREFIX = "vllm_compile_cache_"
TREES = ("aot", "backend")

LIVE_COUNTERS: dict[str, str] = {
    "hits": "Entries vLLM loaded from its compile cache in this vLLM (one per worker, entry "
            "and backend prefix)",
    "misses": "Entries vLLM found absent and compiled in this vLLM",
    "load_failures": "Entries vLLM found and could not load in this vLLM (AOT: compiled "
                     "again; backend: the start stops unless the recorder moves the file "
                     "aside; vllm-cache ls shows them load-failed)",
    "entries_written": "Entries vLLM wrote to its compile cache in this vLLM (AOT: the model "
                       "file saved; backend: a prefix folder compiled)",
    "written_bytes": "Bytes of the entries written (AOT: the model file; backend: the "
                     "prefix folder, without the per-rank Inductor and Triton caches)",
    "guard_warnings": "Hits whose entry was compiled for factors vLLM does not hash but "
                      "that change the compiled graph (the recorder's wrong-hit guard)",
    "quarantined": "Files of an entry vLLM failed to load that the recorder moved aside "
                   "(VLLM_CACHE_TOOLS_GUARD=strict or quarantine), so vLLM compiled them "
                   "again",
}
"""The recorder's ``_total`` counters, each with the one label ``tree``: name (without the
prefix and the ``_total`` suffix) -> help."""

LIVE_HISTOGRAMS: dict[str, tuple[str, tuple[float, ...]]] = {
    "compile_seconds": ("Seconds vLLM spent compiling an entry on a miss or after a load "
                        "failure (backend: its backend call; AOT: from the miss to the "
                        "model file saved)",
                        (1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 320.0, 640.0)),
    "load_seconds": ("Seconds vLLM spent loading an entry on a hit",
                     (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0)),
}
"""The recorder's histograms (label ``tree``): name -> (help, upper bounds; ``+Inf`` added)."""


def live_sample_names() -> frozenset[str]:
    """Every sample name the recorder's part of ``/metrics`` can hold."""
    out = {PREFIX + n + "_total" for n in LIVE_COUNTERS}
    for n in LIVE_HISTOGRAMS:
        out |= {PREFIX + n + s for s in ("_bucket", "_sum", "_count")}
    return frozenset(out)
