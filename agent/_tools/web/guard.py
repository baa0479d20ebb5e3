"""The network guard: where an outgoing HTTP request may go, checked twice.

A :class:`NetGuard` answers one question, "may this process talk to that host?",
at the two moments it matters:

1. **Pre-flight** (:meth:`NetGuard.check_url`): the URL is parsed, its scheme must
   be http or https, ``localhost`` names and credentials in the URL are refused,
   and the host is resolved; *every* address it resolves to must pass the
   :class:`~.address.AddressPolicy` (one private answer among public ones is
   enough to refuse), so a mistake is reported before anything is sent.
2. **Dial time** (:class:`GuardedBackend`): the httpcore network backend under
   every connection resolves the host again, checks every answer again, connects
   to exactly the address it checked, and verifies the socket's peer is that
   address. A name that passed step 1 and then rebinds to 127.0.0.1 (DNS
   rebinding), or a redirect to an internal host, is refused here at the latest;
   the TLS handshake still verifies the certificate against the host *name*.

:meth:`NetGuard.open_client` gives an ``httpx.AsyncClient`` built on that
backend with ``trust_env=False`` (a proxy from ``HTTP_PROXY`` and friends would
connect on our behalf and bypass the dial-time check) and without automatic
redirects: callers follow them hop by hop with :func:`redirect_target` and
pre-flight each hop. Nothing here is specific to fetching pages: MCP's HTTP
transport needs the same gate: :meth:`NetGuard.dial` is the dial-time check for
any connection function (the MCP client's HTTP stack is httpcore2, not httpcore).
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
import typing
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import Any, Protocol, TypeVar

import httpcore
import httpx
import trio

from sandbox._log import get_logger

from .address import AddressPolicy, IPAddress, is_localhost_name, parse_host
from .errors import BlockedTarget, FetchFailed

__all__ = [
    "REDIRECT_STATUSES",
    "GuardedBackend",
    "NetGuard",
    "Resolver",
    "redirect_target",
    "system_resolver",
]

log = get_logger()

#: Resolves a host name (never an address literal) to its addresses.
Resolver = Callable[[str, int], Awaitable[Sequence[IPAddress]]]

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})


class _Dialed(Protocol):
    """A connected stream, as network backends return them."""

    def get_extra_info(self, info: str) -> Any: ...

    async def aclose(self) -> None: ...


_S = TypeVar("_S", bound=_Dialed)
_SCHEMES = ("http", "https")


async def system_resolver(host: str, port: int) -> list[IPAddress]:
    """The system's resolver (``getaddrinfo``), addresses in its order, deduplicated.

    Raises:
        FetchFailed: the name does not resolve.

    Cancellation: the lookup is abandoned (it finishes in its worker thread).
    """
    try:
        infos = await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise FetchFailed(host, f"cannot resolve host: {exc.strerror}") from exc
    found: dict[IPAddress, None] = {}
    for _family, _type, _proto, _canon, sockaddr in infos:
        found[ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])] = None
    return list(found)


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


@typing.final
class NetGuard:
    """The address policy and the resolver, applied before and while connecting.

    Args:
        policy: what is refused, and the explicit exceptions.
        resolver: name resolution (a seam for tests; the system's by default).
        resolve_timeout: seconds a lookup may take.
    """

    def __init__(
        self,
        policy: AddressPolicy | None = None,
        resolver: Resolver = system_resolver,
        *,
        resolve_timeout: float = 5.0,
    ) -> None:
        self.policy = policy or AddressPolicy()
        self._resolver = resolver
        self._resolve_timeout = resolve_timeout
        self._ssl: ssl.SSLContext | None = None

    def __repr__(self) -> str:
        return f"<NetGuard {self.policy!r}>"

    async def resolve(self, host: str, port: int) -> list[IPAddress]:
        """The addresses of ``host``, every one of them allowed for ``port``.

        Raises:
            BlockedTarget: a ``localhost`` name, or any address the policy refuses.
            FetchFailed: the name does not resolve (in time).

        Cancellation: the lookup is abandoned.
        """
        literal = parse_host(host)
        if literal is not None:
            addresses: Sequence[IPAddress] = [literal]
        elif is_localhost_name(host):
            raise BlockedTarget(host, "localhost names are never fetched")
        else:
            addresses = []
            with trio.move_on_after(self._resolve_timeout) as scope:
                addresses = await self._resolver(host, port)
            if scope.cancelled_caught:
                raise FetchFailed(host, f"name resolution took over {self._resolve_timeout:g} s")
            if not addresses:
                raise FetchFailed(host, "the name resolves to no address")
        for ip in addresses:
            why = self.policy.refusal(ip, port)
            if why is not None:
                log.info("net_guard_blocked", host=host, address=str(ip), reason=why)
                raise BlockedTarget(host, why, address=str(ip))
        return list(addresses)

    async def dial(
        self,
        host: str,
        port: int,
        connect: Callable[[str], Awaitable[_S]],
        failures: tuple[type[Exception], ...],
    ) -> _S:
        """Resolve ``host``, refuse if any answer is refused, connect to a checked address.

        Args:
            host: the name (or address) to reach.
            port: the port.
            connect: connects to one address (given as text) and returns the stream.
            failures: what ``connect`` raises when an address does not answer; the
                next address is tried, and the last failure raised.

        Raises:
            BlockedTarget: the policy refuses an address, or the peer is not the
                address that was checked.

        Cancellation: the connection attempt is abandoned.
        """
        addresses = await self.resolve(host, port)
        failure: Exception | None = None
        for ip in addresses:
            try:
                stream = await connect(str(ip))
            except failures as exc:
                failure = exc
                continue
            peer = parse_host(str(stream.get_extra_info("server_addr")[0]))
            if peer != ip:
                await stream.aclose()
                raise BlockedTarget(host, f"connected to {peer}, not the checked {ip}")
            return stream
        assert failure is not None
        raise failure

    async def check_url(self, url: str | httpx.URL) -> httpx.URL:
        """Pre-flight ``url``: scheme, host, credentials, and every resolved address.

        Returns:
            The parsed URL.

        Raises:
            BlockedTarget: the policy refuses it.
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
        await self.resolve(parsed.host, port)
        return parsed

    async def ssl_context(self) -> ssl.SSLContext:
        """The verifying TLS context (loaded once, in a worker thread: it reads files).

        Cancellation: the load is abandoned.
        """
        if self._ssl is None:
            self._ssl = await trio.to_thread.run_sync(httpx.create_ssl_context)
        return self._ssl

    @asynccontextmanager
    async def open_client(
        self,
        *,
        timeouts: httpx.Timeout,
        headers: dict[str, str] | None = None,
        max_connections: int = 4,
    ) -> AsyncIterator[httpx.AsyncClient]:
        """An ``httpx.AsyncClient`` whose every connection is checked at dial time.

        Environment proxies are ignored and redirects are not followed.

        Cancellation: the client is closed (shielded) on the way out.
        """
        transport = GuardedTransport(
            self,
            ssl_context=await self.ssl_context(),
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=0),
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


@typing.final
class GuardedBackend(httpcore.AsyncNetworkBackend):
    """An httpcore network backend that resolves, checks, and dials exact addresses."""

    def __init__(self, guard: NetGuard, inner: httpcore.AsyncNetworkBackend | None = None) -> None:
        self._guard = guard
        self._inner = inner or httpcore.TrioBackend()

    def __repr__(self) -> str:
        return f"<GuardedBackend {self._guard!r}>"

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        """Resolve ``host``, refuse if any answer is refused, connect to a checked address.

        Raises:
            BlockedTarget: the policy refuses an address, or the peer is not the
                address that was checked.
            httpcore.ConnectError: no checked address accepted the connection.

        Cancellation: the connection attempt is abandoned and its socket closed.
        """

        async def connect(ip: str) -> httpcore.AsyncNetworkStream:
            return await self._inner.connect_tcp(
                ip,
                port,
                timeout=timeout,
                local_address=local_address,
                socket_options=socket_options,
            )

        return await self._guard.dial(
            host, port, connect, (httpcore.ConnectError, httpcore.ConnectTimeout)
        )

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        """Refused: a guarded client only speaks TCP to checked addresses."""
        raise BlockedTarget(path, "unix sockets are not reachable through the guard")

    async def sleep(self, seconds: float) -> None:
        """As the inner backend."""
        await self._inner.sleep(seconds)


@typing.final
class GuardedTransport(httpx.AsyncHTTPTransport):
    """httpx's own transport, with its connection pool on a :class:`GuardedBackend`."""

    def __init__(
        self, guard: NetGuard, *, ssl_context: ssl.SSLContext, limits: httpx.Limits
    ) -> None:
        super().__init__(verify=ssl_context, trust_env=False, limits=limits)
        # httpx builds its pool without a way to choose the network backend; replace
        # it with an identical pool that has one. Refuse to run on an httpx whose
        # transport is shaped differently rather than silently dial unguarded.
        if not isinstance(getattr(self, "_pool", None), httpcore.AsyncConnectionPool):
            raise RuntimeError("unsupported httpx version: cannot install the network guard")
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=GuardedBackend(guard),
        )

    def __repr__(self) -> str:
        return f"<GuardedTransport {self._pool!r}>"
