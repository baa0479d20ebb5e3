"""The network guard: where an outgoing connection may go, checked at dial time.

One guard for every connection corral makes on someone else's behalf: the web
tools (``web_fetch``, the browser's requests), MCP's HTTP client, and the egress
proxy of sandboxed children (:mod:`supervisor._egress`). A :class:`NetGuard`
holds an :class:`~sandbox.AddressPolicy` (what is refused: every address that is
not public unicast, see :func:`sandbox.blocked_reason`, minus explicit
allowances) and a :data:`Resolver` (the system's, or a test's):

* :meth:`NetGuard.resolve`: a ``localhost`` name is refused; a name is resolved
  and *every* address it resolves to must pass the policy (one private answer
  among public ones is enough to refuse); an address is checked as it is, in any
  spelling ``inet_aton`` accepts.
* :meth:`NetGuard.dial`: resolves, checks, connects to exactly a checked address
  and verifies that the socket's peer is that address. The address checked is the
  address dialed, so a name that passed a check earlier and rebinds to
  ``127.0.0.1`` now (DNS rebinding) gains nothing.

What is HTTP-specific (URLs, TLS contexts, httpx transports) lives with the web
tools, which build on this.
"""

from __future__ import annotations

import ipaddress
import socket
import typing
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar

import trio

from sandbox import AddressPolicy, IPAddress, is_localhost_name, parse_host
from sandbox.log import get_logger

from ._exceptions import NetRefused, NetUnresolved

__all__ = ["NetGuard", "Resolver", "system_resolver"]

log = get_logger(__name__)

#: Resolves a host name (never an address literal) to its addresses.
Resolver = Callable[[str, int], Awaitable[Sequence[IPAddress]]]


class _Dialed(Protocol):
    """A connected stream: a ``trio.SocketStream``, or what network backends return."""

    async def aclose(self) -> None: ...


_S = TypeVar("_S", bound=_Dialed)


async def system_resolver(host: str, port: int) -> list[IPAddress]:
    """The system's resolver (``getaddrinfo``), addresses in its order, deduplicated.

    Raises:
        NetUnresolved: the name does not resolve.

    Cancellation: the lookup is abandoned (it finishes in its worker thread).
    """
    try:
        infos = await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise NetUnresolved(host, f"cannot resolve host: {exc.strerror}") from exc
    found: dict[IPAddress, None] = {}
    for _family, _type, _proto, _canon, sockaddr in infos:
        found[ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])] = None
    return list(found)


def _peer(stream: Any) -> IPAddress | None:
    """The address a stream is connected to."""
    if isinstance(stream, trio.SocketStream):
        return parse_host(str(stream.socket.getpeername()[0]))
    return parse_host(str(stream.get_extra_info("server_addr")[0]))


@typing.final
class NetGuard:
    """The address policy and the resolver, applied while connecting.

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

    def __repr__(self) -> str:
        return f"<NetGuard {self.policy!r}>"

    async def resolve(
        self, host: str, port: int, *, policy: AddressPolicy | None = None
    ) -> list[IPAddress]:
        """The addresses of ``host``, every one of them allowed for ``port``.

        Args:
            host: a name or an address.
            port: the port that will be dialed.
            policy: the policy of this one check (default: the guard's).

        Raises:
            NetRefused: a ``localhost`` name, or any address the policy refuses.
            NetUnresolved: the name does not resolve (in time).

        Cancellation: the lookup is abandoned.
        """
        policy = policy or self.policy
        literal = parse_host(host)
        if literal is not None:
            addresses: Sequence[IPAddress] = [literal]
        elif is_localhost_name(host):
            raise NetRefused(host, "localhost names are never reached")
        else:
            addresses = []
            with trio.move_on_after(self._resolve_timeout) as scope:
                addresses = await self._resolver(host, port)
            if scope.cancelled_caught:
                raise NetUnresolved(host, f"name resolution took over {self._resolve_timeout:g} s")
            if not addresses:
                raise NetUnresolved(host, "the name resolves to no address")
        for ip in addresses:
            why = policy.refusal(ip, port)
            if why is not None:
                log.info("net_guard_blocked", host=host, address=str(ip), reason=why)
                raise NetRefused(host, why, address=str(ip))
        return list(addresses)

    async def dial(
        self,
        host: str,
        port: int,
        connect: Callable[[str], Awaitable[_S]],
        failures: tuple[type[Exception], ...],
        *,
        policy: AddressPolicy | None = None,
    ) -> _S:
        """Resolve ``host``, refuse if any answer is refused, connect to a checked address.

        Args:
            host: the name (or address) to reach.
            port: the port.
            connect: connects to one address (given as text) and returns the stream.
            failures: what ``connect`` raises when an address does not answer; the
                next address is tried, and the last failure raised.
            policy: the policy of this one dial (default: the guard's).

        Raises:
            NetRefused: the policy refuses an address, or the peer is not the
                address that was checked.
            NetUnresolved: the name does not resolve (in time).

        Cancellation: the connection attempt is abandoned.
        """
        addresses = await self.resolve(host, port, policy=policy)
        failure: Exception | None = None
        for ip in addresses:
            try:
                stream = await connect(str(ip))
            except failures as exc:
                failure = exc
                continue
            try:
                peer = _peer(stream)
            except OSError:
                peer = None
            if peer != ip:
                await stream.aclose()
                raise NetRefused(host, f"connected to {peer}, not the checked {ip}")
            return stream
        assert failure is not None
        raise failure
