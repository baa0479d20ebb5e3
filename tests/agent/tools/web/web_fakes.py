"""Loopback web servers and seams for the web tool tests.

:class:`Site` is a real HTTP/1.1 server (``http.server`` in a thread) on
127.0.0.1 with a route table; it records every request, so a test can assert that
an "internal" service was never reached. :func:`resolver` builds a resolver seam
that answers from a table (a list of answers per name is used one call at a time,
for DNS rebinding). :func:`loopback_only` is a safety net: while it is active,
a trio socket may connect to loopback addresses only, so a guard bug could never
send a test's traffic off this machine.
"""

from __future__ import annotations

import errno
import gzip
import http.server
import ipaddress
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
import trio

from agent._tools.web import WebConfig

#: Seconds any web test may take (the browser ones start Chromium).
TIMEOUT = 60


@dataclass
class Page:
    """What one route answers."""

    body: bytes | str = b""
    status: int = 200
    content_type: str = "text/html; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)
    #: Seconds to wait before answering.
    delay: float = 0.0
    #: Send the body gzip-compressed.
    gzip: bool = False
    #: Declare this length and send the body in pieces of ``chunk`` bytes, repeated
    #: until the client hangs up or ``repeat`` bytes went out.
    repeat: int = 0


@dataclass
class Hit:
    """A request the site received."""

    path: str
    headers: dict[str, str]


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        self.rfile.read(length)
        self._answer()

    def _answer(self) -> None:
        site = self.server.site
        site.hits.append(Hit(self.path, {k.lower(): v for k, v in self.headers.items()}))
        page = site.routes.get(self.path.split("?")[0])
        if page is None:
            page = Page(body=b"<p>no such page</p>", status=404)
        if callable(page):
            page = page(self)
        if page.delay:
            time.sleep(page.delay)
        body = page.body.encode() if isinstance(page.body, str) else page.body
        if page.gzip:
            body = gzip.compress(body)
        try:
            self.send_response(page.status)
            self.send_header("Content-Type", page.content_type)
            if page.gzip:
                self.send_header("Content-Encoding", "gzip")
            for name, value in page.headers.items():
                self.send_header(name, value)
            if page.repeat:
                self.send_header("Content-Length", str(page.repeat))
                self.end_headers()
                sent = 0
                while sent < page.repeat:
                    piece = body[: page.repeat - sent]
                    self.wfile.write(piece)
                    sent += len(piece)
                    site.sent += len(piece)
            else:
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    site: Site


class Site:
    """A loopback HTTP server with a route table (path -> :class:`Page` or callable)."""

    def __init__(self) -> None:
        self.routes: dict[str, Page | Callable[[Any], Page]] = {}
        self.hits: list[Hit] = []
        self.sent = 0
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.site = self
        # serve_forever notices shutdown() only between polls; keep teardown quick.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    @property
    def allowance(self) -> str:
        """The guard allowance for this site alone."""
        return f"127.0.0.1:{self.port}"

    def paths(self) -> list[str]:
        return [hit.path for hit in self.hits]

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@contextmanager
def open_site() -> Iterator[Site]:
    """A running :class:`Site`, stopped on exit."""
    site = Site()
    site.start()
    try:
        yield site
    finally:
        site.stop()


def config_for(*sites: Site, **fields: Any) -> WebConfig:
    """A WebConfig allowing exactly ``sites`` (short timeouts for tests)."""
    base: dict[str, Any] = {
        "allow": [s.allowance for s in sites],
        "connect_timeout": 5.0,
        "read_timeout": 5.0,
        "total_timeout": 10.0,
        "browser_timeout": 30.0,
    }
    base.update(fields)
    return WebConfig(**base)


def resolver(
    table: dict[str, Sequence[str] | list[Sequence[str]]],
) -> Callable[[str, int], Any]:
    """A resolver seam answering from ``table``; a list of lists answers one per call."""
    calls: dict[str, int] = {}

    async def resolve(host: str, port: int) -> list[Any]:
        answers = table.get(host)
        if answers is None:
            raise AssertionError(f"the test resolver has no entry for {host!r}")
        if answers and not isinstance(answers[0], str):
            index = calls.get(host, 0)
            calls[host] = index + 1
            answers = answers[min(index, len(answers) - 1)]  # type: ignore[assignment]
        await trio.lowlevel.checkpoint()
        return [ipaddress.ip_address(a) for a in answers]

    return resolve


@pytest.fixture
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Refuse any trio socket connection to a non-loopback address (a safety net)."""
    socket_type: Any = trio._socket._SocketType  # the class behind every trio socket
    original = socket_type.connect

    async def connect(self: Any, address: Any) -> None:
        host = address[0] if isinstance(address, tuple) else None
        if host is not None and not ipaddress.ip_address(host.split("%")[0]).is_loopback:
            raise OSError(errno.ENETUNREACH, f"test safety net: no traffic to {host}")
        await original(self, address)

    monkeypatch.setattr(socket_type, "connect", connect)
