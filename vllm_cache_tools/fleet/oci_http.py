"""The HTTP session of ``oci://`` stores: ``requests`` whose answers' status line and headers
must all arrive within the read timeout of the request (one deadline for the whole header
block), not only each piece within it.

``requests`` (urllib3, ``http.client``) bounds each ``recv`` by the read timeout: a registry,
or anything between us and it, that sends its headers one byte every few seconds would hold a
pull for as long as it likes (up to 100 header lines of 64 KiB each). Here the reader under
``http.client``'s response re-arms the socket's timeout before each ``recv`` with what is
left of the deadline, and raises ``TimeoutError`` (``socket.timeout``) once it is spent:
urllib3 turns that into its read timeout, as for a registry that says nothing. Bodies keep
the plain read timeout (the store's reader bounds their rate,
:class:`vllm_cache_tools.fleet.oci._Reader`)."""

from __future__ import annotations

import http.client
import io
import socket
import time
from typing import Any

import requests
import urllib3
from requests.adapters import HTTPAdapter
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool


class _HeaderDeadline(io.RawIOBase):
    """A socket's reader that, while :attr:`deadline` is set, ends every read by it."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__()
        self.sock = sock
        self.raw = sock.makefile("rb", buffering=0)
        self.timeout = sock.gettimeout()
        self.deadline: float | None = (time.monotonic() + self.timeout
                                       if self.timeout is not None else None)

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int | None:
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"the answer's headers took over {self.timeout:.0f} s")
            self.sock.settimeout(min(left, self.timeout or left))
        return self.raw.readinto(b)

    def headers_read(self) -> None:
        if self.deadline is not None:
            self.deadline = None
            self.sock.settimeout(self.timeout)

    def close(self) -> None:
        self.raw.close()
        super().close()


class _Sock:
    """What :class:`http.client.HTTPResponse` is given as its socket: it only calls
    ``makefile("rb")``."""

    def __init__(self, raw: _HeaderDeadline) -> None:
        self.raw = raw

    def makefile(self, mode: str) -> io.BufferedReader:
        return io.BufferedReader(self.raw)


class _Response(http.client.HTTPResponse):
    def __init__(self, sock: socket.socket, *args: Any, **kw: Any) -> None:
        self._deadline = _HeaderDeadline(sock)
        super().__init__(_Sock(self._deadline), *args, **kw)  # type: ignore[arg-type]

    def begin(self) -> None:
        super().begin()
        self._deadline.headers_read()


class _Conn(urllib3.connection.HTTPConnection):
    response_class = _Response


class _TlsConn(urllib3.connection.HTTPSConnection):
    response_class = _Response


class _Pool(HTTPConnectionPool):
    ConnectionCls = _Conn


class _TlsPool(HTTPSConnectionPool):
    ConnectionCls = _TlsConn


class _Adapter(HTTPAdapter):
    def init_poolmanager(self, *args: Any, **kw: Any) -> None:
        super().init_poolmanager(*args, **kw)
        self.poolmanager.pool_classes_by_scheme = {"http": _Pool, "https": _TlsPool}


def session() -> requests.Session:
    """A ``requests`` session whose answers' headers are bounded by one deadline (the
    read timeout of each request)."""
    s = requests.Session()
    s.mount("http://", _Adapter())
    s.mount("https://", _Adapter())
    s.headers["User-Agent"] = "vllm-cache-tools"
    return s


__all__ = ["session"]
