"""The HTTP client of streamable-HTTP MCP servers, behind the web tools' network guard.

The MCP SDK's HTTP transport takes an ``httpx2.AsyncClient`` (httpx2 is the
maintained fork of httpx the SDK is built on; its connection pool is httpcore2's).
:func:`guarded_client` builds one whose every connection goes through
:meth:`supervisor.NetGuard.dial`: the host is resolved again, every answer
checked against the policy, the connection made to exactly a checked address and
its peer verified, at dial time, for each connection the SDK opens (the POSTs, the
GET event stream, reconnections). Environment proxies are ignored (a proxy would
connect on our behalf, out of the guard's sight) and redirects are followed only
by the SDK, within the endpoint's origin.
"""

from __future__ import annotations

import ssl
import typing
from collections.abc import Iterable

import httpcore2
import httpx2

from supervisor import NetGuard

from ..web import BlockedTarget
from ..web.guard import guarded

__all__ = ["guarded_client"]


@typing.final
class _GuardedBackend(httpcore2.AsyncNetworkBackend):
    """An httpcore2 backend that dials only addresses the guard checked."""

    def __init__(self, guard: NetGuard) -> None:
        self._guard = guard
        self._inner = httpcore2.AnyIOBackend()

    def __repr__(self) -> str:
        return f"<_GuardedBackend {self._guard!r}>"

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore2's interface)
        local_address: str | None = None,
        socket_options: Iterable[typing.Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        async def connect(ip: str) -> httpcore2.AsyncNetworkStream:
            return await self._inner.connect_tcp(
                ip,
                port,
                timeout=timeout,
                local_address=local_address,
                socket_options=socket_options,
            )

        failures = (httpcore2.ConnectError, httpcore2.ConnectTimeout)
        return await guarded(self._guard.dial(host, port, connect, failures))

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore2's interface)
        socket_options: Iterable[typing.Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        raise BlockedTarget(path, "unix sockets are not reachable through the guard")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


@typing.final
class _GuardedTransport(httpx2.AsyncHTTPTransport):
    def __init__(self, guard: NetGuard, ssl_context: ssl.SSLContext) -> None:
        limits = httpx2.Limits(max_connections=8, max_keepalive_connections=4)
        super().__init__(verify=ssl_context, trust_env=False, limits=limits)
        # As the web guard's transport: replace the pool with an identical one on
        # the guarded backend, or refuse to run rather than dial unguarded.
        if not isinstance(getattr(self, "_pool", None), httpcore2.AsyncConnectionPool):
            raise RuntimeError("unsupported httpx2 version: cannot install the network guard")
        self._pool = httpcore2.AsyncConnectionPool(
            ssl_context=ssl_context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=_GuardedBackend(guard),
        )


def guarded_client(
    guard: NetGuard,
    ssl_context: ssl.SSLContext,
    *,
    headers: dict[str, str],
    timeout: float,
    read_timeout: float,
) -> httpx2.AsyncClient:
    """An ``httpx2.AsyncClient`` for one MCP server, dialling through ``guard``.

    Args:
        guard: the network guard.
        ssl_context: a verifying TLS context (``tls_context()``).
        headers: sent with every request (the server's configured headers).
        timeout: seconds to connect, write, or wait for the pool.
        read_timeout: seconds without a byte (the event stream idles long).
    """
    return httpx2.AsyncClient(
        transport=_GuardedTransport(guard, ssl_context),
        headers=headers,
        timeout=httpx2.Timeout(timeout, read=read_timeout),
        trust_env=False,
        follow_redirects=False,
    )
