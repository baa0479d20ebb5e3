"""Loopback origins and a proxy under test, for the egress tests.

An *origin* is a tiny trio server on ``127.0.0.1`` standing in for a remote
service: it answers HTTP (a fixed body, a redirect, an echo of the request head)
and, for a request that is not HTTP, echoes raw bytes. Everything stays on the
loopback; names resolve through a resolver seam (:func:`table_resolver`).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import socket
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import trio

from sandbox import IPAddress
from supervisor import EgressRefused, NetGuard
from supervisor.lowlevel import Egress

#: Bound on every network step of these tests.
TIMEOUT = 20.0


@dataclasses.dataclass
class Origin:
    """A loopback server and what it was sent."""

    port: int
    heads: list[bytes] = dataclasses.field(default_factory=list)
    #: path -> (status, headers, body)
    routes: dict[str, tuple[int, dict[str, str], bytes]] = dataclasses.field(default_factory=dict)
    #: Connections it saw end (EOF from the proxy's side).
    closed: int = 0
    #: Set at the first such end.
    ended: trio.Event = dataclasses.field(default_factory=trio.Event)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _ended(origin: Origin) -> None:
    origin.closed += 1
    origin.ended.set()


async def _serve_origin(origin: Origin, stream: trio.SocketStream) -> None:
    async with stream:
        data = b""
        try:
            while b"\r\n\r\n" not in data and len(data) < 65536:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    _ended(origin)
                    return
                data += chunk
                if not data.startswith((b"GET ", b"POST ", b"HEAD ")):  # an echo service
                    await stream.send_all(b"echo:" + chunk)
                    while chunk := await stream.receive_some(65536):
                        await stream.send_all(b"echo:" + chunk)
                    _ended(origin)
                    return
            head = data.split(b"\r\n\r\n", 1)[0]
            origin.heads.append(head)
            path = head.split(b" ", 2)[1].decode()
            status, headers, body = origin.routes.get(
                path, (200, {}, b"hello from " + path.encode())
            )
            if path == "/head":
                body = head
            lines = [f"HTTP/1.1 {status} X", f"Content-Length: {len(body)}"]
            lines += [f"{k}: {v}" for k, v in headers.items()]
            await stream.send_all(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
            if b"connection: close" in head.lower():
                return  # as a server does: the answer, then the end
            while await stream.receive_some(65536):
                pass
            _ended(origin)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass


@asynccontextmanager
async def open_origin() -> AsyncIterator[Origin]:
    """A loopback origin, served until the block ends."""
    sock = trio.socket.socket()
    await sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    origin = Origin(port=sock.getsockname()[1])
    async with trio.open_nursery() as nursery:

        async def accept() -> None:
            while True:
                conn, _ = await sock.accept()
                nursery.start_soon(_serve_origin, origin, trio.SocketStream(conn))

        nursery.start_soon(accept)
        try:
            yield origin
        finally:
            nursery.cancel_scope.cancel()
            sock.close()


def table_resolver(table: dict[str, Sequence[str]]) -> Callable[[str, int], Any]:
    """A resolver seam answering from ``table`` (a name missing there fails the test)."""

    async def resolve(host: str, port: int) -> list[IPAddress]:
        await trio.lowlevel.checkpoint()
        if host not in table:
            raise AssertionError(f"the test resolver has no entry for {host!r}")
        return [ipaddress.ip_address(a) for a in table[host]]

    return resolve


@dataclasses.dataclass
class Proxy:
    """An :class:`Egress` served on a loopback listener, as a child's would be."""

    port: int
    egress: Egress
    reports: list[EgressRefused]


@asynccontextmanager
async def open_proxy(
    destinations: Sequence[str],
    *,
    guard: NetGuard | None = None,
    head_timeout: float = 30.0,
) -> AsyncIterator[Proxy]:
    """The proxy of a child granted ``destinations``, on ``127.0.0.1:<port>``."""
    reports: list[EgressRefused] = []

    async def report(event: EgressRefused) -> None:
        reports.append(event)

    egress = Egress(
        "child",
        destinations,
        guard or NetGuard(),
        grant="permissions.network",
        report=report,
        head_timeout=head_timeout,
    )
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(egress.serve, listener)
            yield Proxy(listener.getsockname()[1], egress, reports)
            nursery.cancel_scope.cancel()
    finally:
        listener.close()


async def exchange(port: int, data: bytes, *, until: bytes | None = None) -> bytes:
    """Connect to ``port``, send ``data``, read until ``until`` appears or EOF."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(data)
        got = b""
        while until is None or until not in got:
            chunk = await stream.receive_some(65536)
            if not chunk:
                break
            got += chunk
        return got
