"""``vllm-cache serve-metrics``: the ``stats`` metrics over HTTP (``GET /metrics``) for a
Prometheus scrape, e.g. from a sidecar beside vLLM pods sharing a cache root. Loopback unless
``--host`` says otherwise; the source is counted again at most every ``--refresh`` seconds
(:class:`~vllm_cache_tools.views.metrics.CachedExposition`); SIGTERM and Ctrl-C stop it with
status 0; a port already taken is one line and status 2."""

from __future__ import annotations

import errno
import signal
import socket
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import typer

from vllm_cache_tools.cli.common import fail, warn, write_err
from vllm_cache_tools.cli.ls import RootOpt
from vllm_cache_tools.cli.options import StorageOpt

DEFAULT_HOST = "127.0.0.1"
DEFAULT_REFRESH = 30.0


def serve_metrics_cmd(
    port: Annotated[int, typer.Option(
        "--port", "-p", min=0, max=65535, help="TCP port (0: any free port, printed).")],
    source: Annotated[str | None, typer.Argument(
        metavar="[SOURCE]", help="What stats reads: a cache root, a folder of collected "
        "roots/ledgers/manifests, or a remote store URL (default: --root, else the root vLLM "
        "uses).")] = None,
    host: Annotated[str, typer.Option(
        "--host", help="Address to listen on (default loopback; 0.0.0.0 for every "
        "interface).")] = DEFAULT_HOST,
    root: RootOpt = None,
    by: Annotated[str, typer.Option(
        "--by", help="Label the start counters by model or host (one series per host: "
        "bounded by the hosts you have).")] = "model",
    refresh: Annotated[float, typer.Option(
        "--refresh", min=0.0, help="Read the source again at most every this many seconds; "
        "scrapes in between get the kept answer.")] = DEFAULT_REFRESH,
    drift: Annotated[bool, typer.Option(
        "--drift", help="Also the drift factor counts per model (reads every recorder "
        "manifest at each refresh, as vllm-cache drift does).")] = False,
    storage_option: StorageOpt = None,
) -> None:
    """Serve the stats metrics (vllm_compile_cache_*) at http://HOST:PORT/metrics for
    Prometheus: OpenMetrics when the scraper asks for it, else the text format 0.0.4. Runs
    until SIGTERM or Ctrl-C."""
    run_serve_metrics(source, root, port=port, host=host, by=by, refresh=refresh,
                      drift=drift, storage_option=storage_option)


def run_serve_metrics(source: str | None, root: Path | None, *, port: int, host: str,
                      by: str = "model", refresh: float = DEFAULT_REFRESH, drift: bool = False,
                      storage_option: Sequence[str] | None = None) -> None:
    from vllm_cache_tools.cli.stats_run import check_metrics_options, count_metrics
    from vllm_cache_tools.views.metrics import CachedExposition, problems

    check_metrics_options("openmetrics", by)
    if source is not None and root is not None:
        fail("give the source either as SOURCE or as --root, not both")
    options = None
    if storage_option:
        from vllm_cache_tools.cli.fleetout import run
        from vllm_cache_tools.fleet.remote import parse_storage_options

        options = run(lambda: parse_storage_options(storage_option))
    where: str | Path | None = source if source is not None else root
    answer = CachedExposition(lambda: count_metrics(where, by, drift=drift,
                                                    storage_options=options), refresh)

    def stop(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    # Stopped the same way at any moment: while the source is first read, or serving.
    previous = signal.signal(signal.SIGTERM, stop)
    server = None
    try:
        server = _bind(host, port, answer)  # a taken port fails first, before any reading
        try:
            first, drifted = answer.report()  # a source that cannot be read fails here
        except ValueError as exc:
            fail(str(exc))
        for p in problems(first, drifted):
            warn(p)
        bound_host, bound_port = str(server.server_address[0]), int(server.server_address[1])
        shown_host = f"[{bound_host}]" if ":" in bound_host else bound_host
        write_err(f"serving metrics of {first.source} at http://{shown_host}:{bound_port}"
                  f"/metrics (read again at most every {refresh:g} s; Ctrl-C or SIGTERM "
                  "stops)\n", flush=True)
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        write_err("stopped\n", flush=True)
    finally:
        signal.signal(signal.SIGTERM, previous)
        if server is not None:
            server.server_close()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    answer: Any = None


class _Server6(_Server):
    address_family = socket.AF_INET6


def _bind(host: str, port: int, answer: Any) -> _Server:
    cls = _Server6 if ":" in host else _Server  # an IPv6 address
    try:
        server = cls((host, port), _Handler)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            fail(f"port {port} on {host} is already in use (another exporter?); pick another "
                 "with --port")
        fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}")
    server.answer = answer
    return server


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    # Headers and body in one buffered write, sent at once: written apart on a kept-alive
    # connection, Nagle's algorithm held the body for the client's delayed ACK (measured:
    # 44 ms a scrape instead of < 1 ms, benchmarks/bench_metrics.py).
    wbufsize = 1 << 16
    disable_nagle_algorithm = True

    def do_GET(self) -> None:
        from vllm_cache_tools.views.metrics import CONTENT_TYPES, negotiated

        path = self.path.split("?", 1)[0]
        if path == "/":
            self._send(200, "text/plain; charset=utf-8",
                       b"vllm-cache serve-metrics: the metrics are at /metrics\n")
            return
        if path != "/metrics":
            self._send(404, "text/plain; charset=utf-8", b"not found: try /metrics\n")
            return
        fmt = negotiated(self.headers.get("Accept"))
        try:
            body = self.server.answer.body(fmt)
        except Exception as exc:  # the source went away or broke: this scrape fails (up=0)
            from vllm_cache_tools.cli.common import shown_cell

            line = shown_cell(str(exc) or type(exc).__name__)
            warn(f"scrape failed: {line}")
            self._send(503, "text/plain; charset=utf-8", f"{line}\n".encode())
            return
        self._send(200, CONTENT_TYPES[fmt], body)

    def _send(self, status: int, ctype: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: a scrape every few seconds is not worth a line."""
