"""The web tools' side of the network guard: URLs, redirects and guarded HTTP clients.

The guard itself is :class:`supervisor.NetGuard`, the one every connection corral
makes for someone else goes through (the egress proxy of sandboxed children
too). An HTTP request is checked at two moments:

1. **Pre-flight** (:func:`check_url`): the URL is parsed, its scheme must be http
   or https, ``localhost`` names and credentials in the URL are refused, and the
   host is resolved; *every* address it resolves to must pass the guard's
   policy, so a mistake is reported before anything is sent.
2. **Dial time** (:class:`GuardedBackend`): the httpcore network backend under
   every connection goes through :meth:`~supervisor.NetGuard.dial`: the host is
   resolved again, every answer checked again, the connection made to exactly a
   checked address and its peer verified. A name that passed step 1 and then
   rebinds to 127.0.0.1 (DNS rebinding), or a redirect to an internal host, is
   refused here at the latest; the TLS handshake still verifies the certificate
   against the host *name*.

:func:`guarded_transport` is the one way a guarded transport is built (httpx's
here, httpx2's for MCP's HTTP client); :func:`open_client` gives an
``httpx.AsyncClient`` built on it with
``trust_env=False`` (a proxy from ``HTTP_PROXY`` and friends would connect on our
behalf and bypass the dial-time check) and without automatic redirects: callers
follow them hop by hop with :func:`redirect_target` and pre-flight each hop. The
guard's own errors become the web tools' (:class:`~.errors.BlockedTarget`,
:class:`~.errors.FetchFailed`) here, at the boundary.
"""

from __future__ import annotations

import importlib
import ssl
import types
import typing
from collections.abc import AsyncIterator, Awaitable, Iterable
from contextlib import asynccontextmanager
from typing import Any, Literal, TypeVar

import httpcore
import httpx
import trio

from supervisor import NetGuard, NetRefused, NetUnresolved

from .errors import BlockedTarget, FetchFailed

__all__ = [
    "REDIRECT_STATUSES",
    "GuardedBackend",
    "check_url",
    "guarded",
    "guarded_transport",
    "open_client",
    "redirect_target",
    "tls_context",
]

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})

_T = TypeVar("_T")
_SCHEMES = ("http", "https")
_ssl: ssl.SSLContext | None = None


async def guarded(step: Awaitable[_T]) -> _T:
    """Await ``step`` (a guard call), its refusals as the web tools' errors.

    Raises:
        BlockedTarget: the guard refused the destination.
        FetchFailed: the name did not resolve.

    Cancellation: as ``step``.
    """
    try:
        return await step
    except NetRefused as exc:
        raise BlockedTarget(exc.target, exc.reason, address=exc.address) from exc
    except NetUnresolved as exc:
        raise FetchFailed(exc.host, exc.reason) from exc


def redirect_target(url: httpx.URL, status: int, location: str | None) -> httpx.URL | None:
    """Where a response redirects to, or None when it is not a redirect.

    Relative locations are resolved against ``url``; fragments are dropped.

    Raises:
        FetchFailed: a redirect status without a usable ``Location``.
        BlockedTarget: the location is not http or https (``file:``, ``gopher:`` ...).
    """
    if status not in REDIRECT_STATUSES:
        return None
    if not location:
        raise FetchFailed(str(url), f"HTTP {status} redirect without a Location", status=status)
    try:
        target = url.join(location)
    except (httpx.InvalidURL, ValueError) as exc:
        raise FetchFailed(str(url), f"HTTP {status} redirect to an invalid URL: {exc}") from exc
    if target.scheme not in _SCHEMES:
        raise BlockedTarget(str(target), f"redirect to scheme {target.scheme!r}; only http(s)")
    return target.copy_with(fragment=None)


async def check_url(guard: NetGuard, url: str | httpx.URL) -> httpx.URL:
    """Pre-flight ``url``: scheme, host, credentials, and every resolved address.

    Returns:
        The parsed URL.

    Raises:
        BlockedTarget: the guard refuses it.
        FetchFailed: it is not a valid URL, or its host does not resolve.

    Cancellation: the lookup is abandoned.
    """
    try:
        parsed = url if isinstance(url, httpx.URL) else httpx.URL(url.strip())
    except (httpx.InvalidURL, TypeError) as exc:
        raise FetchFailed(str(url), f"not a valid URL: {exc}") from exc
    if parsed.scheme not in _SCHEMES:
        raise BlockedTarget(str(url), f"scheme {parsed.scheme!r} is not http or https")
    if not parsed.host:
        raise FetchFailed(str(url), "the URL has no host")
    if parsed.userinfo:
        raise BlockedTarget(str(url), "URLs with credentials are not fetched")
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    await guarded(guard.resolve(parsed.host, port))
    return parsed


async def tls_context() -> ssl.SSLContext:
    """The verifying TLS context (loaded once, in a worker thread: it reads files).

    Cancellation: the load is abandoned.
    """
    global _ssl
    if _ssl is None:
        _ssl = await trio.to_thread.run_sync(httpx.create_ssl_context)
    return _ssl


@asynccontextmanager
async def open_client(
    guard: NetGuard,
    *,
    timeouts: httpx.Timeout,
    headers: dict[str, str] | None = None,
    max_connections: int = 4,
) -> AsyncIterator[httpx.AsyncClient]:
    """An ``httpx.AsyncClient`` whose every connection ``guard`` checks at dial time.

    Environment proxies are ignored and redirects are not followed.

    Cancellation: the client is closed (shielded) on the way out.
    """
    transport: httpx.AsyncHTTPTransport = guarded_transport(
        guard, await tls_context(), max_connections=max_connections, max_keepalive=0
    )
    client = httpx.AsyncClient(
        transport=transport,
        timeout=timeouts,
        headers=headers,
        trust_env=False,
        follow_redirects=False,
    )
    try:
        yield client
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(5):
            await client.aclose()


def guarded_transport(
    guard: NetGuard,
    ssl_context: ssl.SSLContext,
    *,
    max_connections: int,
    max_keepalive: int,
    library: Literal["httpx", "httpx2"] = "httpx",
) -> Any:
    """An ``AsyncHTTPTransport`` whose every connection ``guard`` checks at dial time:
    the one way corral builds a guarded HTTP transport.

    Environment proxies are ignored (``trust_env=False``: a proxy would connect on
    our behalf, out of the guard's sight).

    Args:
        guard: the network guard.
        ssl_context: the verifying TLS context (:func:`tls_context`).
        max_connections: connections open at once.
        max_keepalive: idle connections kept.
        library: ``"httpx"`` (the web tools), or ``"httpx2"``, the fork the MCP SDK's
            HTTP client is built on (imported only then).

    Raises:
        RuntimeError: that library's transport is shaped otherwise (see
            :func:`_install`).
    """
    core: types.ModuleType = httpcore
    http: types.ModuleType = httpx
    if library == "httpx2":  # MCP's: imported when used
        core, http = importlib.import_module("httpcore2"), importlib.import_module("httpx2")
    inner = core.AnyIOBackend() if library == "httpx2" else core.TrioBackend()
    limits = http.Limits(max_connections=max_connections, max_keepalive_connections=max_keepalive)
    transport = http.AsyncHTTPTransport(verify=ssl_context, trust_env=False, limits=limits)
    _install(transport, guard, core, inner, ssl_context, limits)
    return transport


def _install(
    transport: Any,
    guard: NetGuard,
    core: types.ModuleType,
    inner: Any,
    ssl_context: ssl.SSLContext,
    limits: Any,
) -> None:
    """Put ``transport``'s connection pool on a :class:`GuardedBackend`.

    httpx builds its pool without a way to choose the network backend: the pool is
    replaced with an identical one (``limits``, ``ssl_context``) that has one. A
    transport shaped otherwise is refused rather than left dialing unguarded.

    Raises:
        RuntimeError: ``transport`` has no pool of ``core``'s kind.
    """
    if not isinstance(getattr(transport, "_pool", None), core.AsyncConnectionPool):
        raise RuntimeError(f"unsupported {core.__name__} version: cannot install the network guard")
    transport._pool = core.AsyncConnectionPool(
        ssl_context=ssl_context,
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        network_backend=GuardedBackend(guard, inner, (core.ConnectError, core.ConnectTimeout)),
    )


@typing.final
class GuardedBackend:
    """A network backend (httpcore's interface, which httpcore2 shares) that
    resolves, checks, and dials exact addresses.

    Args:
        guard: the network guard.
        inner: the library's own backend, which connects to one checked address.
        failures: what ``inner`` raises when an address does not answer (the next
            one is tried).
    """

    def __init__(self, guard: NetGuard, inner: Any, failures: tuple[type[Exception], ...]) -> None:
        self._guard = guard
        self._inner = inner
        self._failures = failures

    def __repr__(self) -> str:
        return f"<GuardedBackend {self._guard!r}>"

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> Any:
        """Resolve ``host``, refuse if any answer is refused, connect to a checked address.

        Raises:
            BlockedTarget: the policy refuses an address, or the peer is not the
                address that was checked.
            ConnectError: (the library's) no checked address accepted the connection.

        Cancellation: the connection attempt is abandoned and its socket closed.
        """

        async def connect(ip: str) -> Any:
            return await self._inner.connect_tcp(
                ip,
                port,
                timeout=timeout,
                local_address=local_address,
                socket_options=socket_options,
            )

        return await guarded(self._guard.dial(host, port, connect, self._failures))

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        socket_options: Iterable[Any] | None = None,
    ) -> Any:
        """Refused: a guarded client only speaks TCP to checked addresses."""
        raise BlockedTarget(path, "unix sockets are not reachable through the guard")

    async def sleep(self, seconds: float) -> None:
        """As the inner backend."""
        await self._inner.sleep(seconds)
