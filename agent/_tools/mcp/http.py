"""The HTTP client of streamable-HTTP MCP servers, behind the web tools' network guard.

The MCP SDK's HTTP transport takes an ``httpx2.AsyncClient`` (httpx2 is the
maintained fork of httpx the SDK is built on; its connection pool is httpcore2's).
:func:`guarded_client` builds one, on the web tools' guarded transport
(:func:`~..web.guard.guarded_transport`), whose every connection goes through
:meth:`supervisor.NetGuard.dial`: the host is resolved again, every answer
checked against the policy, the connection made to exactly a checked address and
its peer verified, at dial time, for each connection the SDK opens (the POSTs, the
GET event stream, reconnections). Environment proxies are ignored (a proxy would
connect on our behalf, out of the guard's sight) and redirects are followed only
by the SDK, within the endpoint's origin.
"""

from __future__ import annotations

import ssl

import httpx2

from supervisor import NetGuard

from ..web.guard import guarded_transport

__all__ = ["guarded_client"]


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
    transport = guarded_transport(
        guard, ssl_context, max_connections=8, max_keepalive=4, library="httpx2"
    )
    return httpx2.AsyncClient(
        transport=transport,
        headers=headers,
        timeout=httpx2.Timeout(timeout, read=read_timeout),
        trust_env=False,
        follow_redirects=False,
    )
