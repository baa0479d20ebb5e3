"""The egress proxy of a child granted a network list: HTTP CONNECT, plain HTTP, SOCKS5.

A child whose ``permissions.network`` is a list runs in a network namespace of its
own, with only a loopback; the one way out is a listening socket on
``127.0.0.1:3128`` there, which the child made before ``exec`` and handed to the
host (:mod:`sandbox._spawn`). The host accepts on it directly: one :class:`Egress`
per child, in the task that owns the child, so the proxy lives and dies with it
and knows whose connection it is by the listener that accepted it.

Each connection speaks one of:

* **HTTP CONNECT** ``host:port`` (HTTPS, and any TCP an HTTP client tunnels);
* **plain HTTP** with an absolute URL (``GET http://host/path``): one request per
  connection, sent on with ``Connection: close``, the ``Host`` header set to the
  URL's, hop-by-hop and proxy headers dropped; a redirect in the answer is the
  client's business (its next request is checked like the first);
* **SOCKS5** ``CONNECT`` (no authentication; names resolved here, ``socks5h``).
  ``BIND`` and ``UDP ASSOCIATE`` are refused: plain UDP stays off.

The destination must match the list (:class:`sandbox.Destinations`), and the
connection goes through the network guard (:class:`~supervisor.NetGuard`): a name
is resolved here (never by the child) and every address it resolves to must be
public; the address checked is the address dialed. A literal entry (which
validation allowed, with ``unsafe`` for a local address) is dialed as exactly that
address and port. A refusal is an HTTP 403 (or a SOCKS reply ``2``, not allowed)
whose text names the permission to add, is logged with the child's name and the
destination, counted, and reported (an :class:`~supervisor.EgressRefused` to the
audit log) at a bounded rate. Bytes are relayed in the kernel where it can
(:mod:`supervisor._splice`); the proxy never looks inside a tunnel.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import socket
import struct
import time
import typing
import urllib.parse
from collections.abc import Awaitable, Callable, Sequence

import trio

from sandbox import AddressPolicy, Allowance, Destination, Destinations
from sandbox.log import get_logger

from ._api import EgressRefused
from ._exceptions import NetRefused, NetUnresolved
from ._manifest import ChildKind, ExtensionSpec
from ._netguard import NetGuard
from ._splice import relay

__all__ = ["Egress", "EgressReport", "egress_of"]

log = get_logger(__name__)

#: Reports a refusal (the audit log's way in); awaited in the refused connection's task.
EgressReport = Callable[[EgressRefused], Awaitable[None]]

#: A request head (HTTP) or greeting (SOCKS) larger than this is refused.
HEAD_LIMIT = 16 * 1024
#: Connections of one child at once; more wait in the listener's backlog.
MAX_CONNECTIONS = 128
#: Refusals reported one by one: a burst of this many, then one per second.
_REPORT_BURST = 20
_REPORT_RATE = 1.0

_HOP_BY_HOP = frozenset(
    {
        "connection", "keep-alive", "proxy-connection", "proxy-authorization",
        "proxy-authenticate", "te", "trailer", "upgrade",
    }
)  # fmt: skip
_SOCKS_OK, _SOCKS_FAILED, _SOCKS_NOT_ALLOWED = 0, 1, 2
_SOCKS_UNREACHABLE, _SOCKS_REFUSED, _SOCKS_BAD_COMMAND, _SOCKS_BAD_ADDRESS = 4, 5, 7, 8


class _Closed(Exception):
    """The client went away, or sent something no proxy protocol allows."""


class _Failed(Exception):
    """A connection the proxy could not make (not a refusal): HTTP status and text."""

    def __init__(self, status: int, text: str, socks: int) -> None:
        super().__init__(text)
        self.status = status
        self.text = text
        self.socks = socks


class _Refused(Exception):
    def __init__(self, reason: str, hint: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.hint = hint


@typing.final
class _Reader:
    """A stream with a buffer: what was read past a head is kept for the relay."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buf = bytearray()

    async def _fill(self) -> None:
        try:
            data = await self.stream.receive_some(65536)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            data = b""
        if not data:
            raise _Closed
        self.buf += data

    async def exactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            await self._fill()
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    async def head(self) -> bytes:
        while (end := self.buf.find(b"\r\n\r\n", 0, HEAD_LIMIT)) < 0:
            if len(self.buf) >= HEAD_LIMIT:
                raise _Failed(431, "request head too large", _SOCKS_FAILED)
            await self._fill()
        out = bytes(self.buf[: end + 4])
        del self.buf[: end + 4]
        return out


def _authority(text: str, default: int | None) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` (the port optional when ``default`` is given)."""
    parts = urllib.parse.urlsplit("//" + text)
    try:
        port = parts.port
    except ValueError:
        port = None
        default = None
    host = parts.hostname or ""
    if not host or parts.username is not None or (port is None and default is None):
        raise _Failed(400, f"not a host:port: {text!r}", _SOCKS_FAILED)
    return host, port or typing.cast(int, default)


def _response(status: int, reason: str, text: str) -> bytes:
    body = text.encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


_REASONS = {400: "Bad Request", 403: "Forbidden", 431: "Request Header Fields Too Large"}
_REASONS |= {502: "Bad Gateway", 504: "Gateway Timeout"}


@typing.final
class Egress:
    """The egress proxy of one child (see the module docstring).

    Args:
        name: the child's name (logs, reports).
        destinations: its network list (validated entries).
        guard: the network guard (its resolver is the seam tests use).
        grant: where the user adds a destination, for refusal texts, e.g.
            ``"permissions.network in weather's extension.json"``.
        report: awaited with each reported refusal (the audit log).
        connect_timeout: seconds to resolve and connect.
        head_timeout: seconds a client may take to say where it wants to go.
    """

    def __init__(
        self,
        name: str,
        destinations: Sequence[str],
        guard: NetGuard,
        *,
        grant: str,
        report: EgressReport | None = None,
        connect_timeout: float = 10.0,
        head_timeout: float = 30.0,
    ) -> None:
        self.name = name
        self.destinations = Destinations(destinations)
        self.guard = guard
        self.grant = grant
        self._report = report
        self._connect_timeout = connect_timeout
        self._head_timeout = head_timeout
        #: Connections made for the child, and refused (every one counted).
        self.allowed = 0
        self.refused = 0
        self._tokens = float(_REPORT_BURST)
        self._refilled = time.monotonic()
        self._unreported = 0

    def __repr__(self) -> str:
        return (
            f"<Egress {self.name!r} {self.destinations!r} "
            f"allowed={self.allowed} refused={self.refused}>"
        )

    async def serve(
        self,
        listener: socket.socket,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Accept and serve the child's connections on ``listener`` until cancelled.

        ``listener`` stays the caller's (it closes it after this returns).

        Cancellation: every connection of the child is closed before it propagates.
        """
        sock = trio.socket.from_stdlib_socket(listener)
        # Wake for a connection once its first bytes (the request) are in: one wake-up
        # of the host instead of two per connection.
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_DEFER_ACCEPT, 1)
        slots = trio.Semaphore(MAX_CONNECTIONS)
        async with trio.open_nursery() as nursery:
            task_status.started()
            while True:
                await slots.acquire()
                try:
                    conn, _ = await sock.accept()
                except OSError as exc:
                    slots.release()
                    if exc.errno not in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                        log.warning("egress_listener_failed", extension=self.name, error=str(exc))
                        return
                    # Out of descriptors: the backlog holds the child's connections.
                    log.warning("egress_accept_failed", extension=self.name, error=exc.strerror)
                    await trio.sleep(0.1)
                    continue
                nursery.start_soon(self._connection, trio.SocketStream(conn), slots)

    async def _connection(self, client: trio.SocketStream, slots: trio.Semaphore) -> None:
        try:
            async with client:
                reader = _Reader(client)
                server: trio.SocketStream | None = None
                with trio.move_on_after(self._head_timeout):
                    first = await reader.exactly(1)
                    reader.buf[:0] = first
                    if first == b"\x05":
                        server = await self._socks(reader)
                    else:
                        server = await self._http(reader)
                if server is None:
                    return
                async with server:
                    if reader.buf:
                        await server.send_all(bytes(reader.buf))
                    await relay(client.socket, server.socket)
        except (_Closed, trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        except Exception as exc:  # a bug here must not end the child's other connections
            log.error("egress_connection_failed", extension=self.name, error=repr(exc))
        finally:
            slots.release()

    # --- the protocols -----------------------------------------------------------------

    async def _http(self, reader: _Reader) -> trio.SocketStream | None:
        client = reader.stream
        try:
            head = await reader.head()
            lines = head[:-4].decode("latin-1").split("\r\n")
            request = lines[0].split(" ")
            if len(request) != 3 or not request[2].startswith("HTTP/1."):
                raise _Failed(400, "not an HTTP/1 request", _SOCKS_FAILED)
            method, target, version = request
            if method == "CONNECT":
                host, port = _authority(target, None)
                server = await self._open(host, port, "connect")
                await client.send_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                return server
            url = urllib.parse.urlsplit(target)
            if url.scheme.lower() != "http":
                why = (
                    "this is corral's egress proxy: send requests through it (HTTP_PROXY), "
                    "with an absolute http:// URL, or CONNECT host:port for anything else"
                )
                raise _Failed(400, why, _SOCKS_FAILED)
            host, port = _authority(url.netloc, 80)
            server = await self._open(host, port, "http")
        except _Refused as exc:
            await client.send_all(_response(403, "Forbidden", exc.hint))
            return None
        except _Failed as exc:
            text = f"corral's egress proxy: {exc.text}\n"
            await client.send_all(_response(exc.status, _REASONS.get(exc.status, ""), text))
            return None
        path = url.path or "/"
        out = [f"{method} {path}{'?' + url.query if url.query else ''} {version}"]
        headers = [line.split(":", 1) for line in lines[1:] if ":" in line]
        # Hop-by-hop: the fixed ones, and those the Connection header names.
        hop = set(_HOP_BY_HOP) | {"host"}
        for name, value in headers:
            if name.strip().lower() == "connection":
                hop |= {token.strip().lower() for token in value.split(",")}
        out += [f"{name}:{value}" for name, value in headers if name.strip().lower() not in hop]
        out += [f"Host: {url.netloc}", "Connection: close", "", ""]
        try:
            await server.send_all("\r\n".join(out).encode("latin-1"))
        except BaseException:
            await server.aclose()
            raise
        return server

    async def _socks(self, reader: _Reader) -> trio.SocketStream | None:
        client = reader.stream
        _, count = await reader.exactly(2)
        if 0 not in await reader.exactly(count):
            await client.send_all(b"\x05\xff")  # only "no authentication" is offered
            return None
        await client.send_all(b"\x05\x00")
        version, command, _, kind = await reader.exactly(4)
        if version != 5:
            raise _Closed
        if kind == 1:
            host = str(ipaddress.IPv4Address(await reader.exactly(4)))
        elif kind == 4:
            host = str(ipaddress.IPv6Address(await reader.exactly(16)))
        elif kind == 3:
            (length,) = await reader.exactly(1)
            host = (await reader.exactly(length)).decode("ascii", "replace")
        else:
            await client.send_all(_socks_reply(_SOCKS_BAD_ADDRESS))
            return None
        (port,) = struct.unpack("!H", await reader.exactly(2))
        try:
            if command != 1:
                what = {2: "BIND", 3: "UDP ASSOCIATE"}.get(command, f"command {command}")
                await self._refuse(host, port, "socks", f"SOCKS {what} is never carried")
                await client.send_all(_socks_reply(_SOCKS_BAD_COMMAND))
                return None
            server = await self._open(host, port, "socks")
        except _Refused:
            await client.send_all(_socks_reply(_SOCKS_NOT_ALLOWED))
            return None
        except _Failed as exc:
            await client.send_all(_socks_reply(exc.socks))
            return None
        await client.send_all(_socks_reply(_SOCKS_OK))
        return server

    # --- the check, the dial and the refusal ------------------------------------------

    async def _open(self, host: str, port: int, via: str) -> trio.SocketStream:
        """A connection to ``host:port`` if the list and the guard allow it.

        Raises:
            _Refused: not allowed (reported, counted); its hint is the 403's text.
            _Failed: allowed, but not reachable.
        """
        dest = self.destinations.match(host, port)
        if dest is None:
            await self._refuse(host, port, via, f"not in {self.grant}")
            raise _Refused("not in the list", self._hint_missing(host, port))
        target, policy = host, None
        if dest.address is not None:
            # A granted address is dialed as exactly that address, on that port.
            target = str(dest.address)
            policy = AddressPolicy([Allowance(ipaddress.ip_network(dest.address), port)])

        async def connect(ip: str) -> trio.SocketStream:
            # One address, already checked: a plain connect (no happy-eyeballs nursery).
            family = socket.AF_INET6 if ":" in ip else socket.AF_INET
            sock = trio.socket.socket(family, socket.SOCK_STREAM)
            try:
                await sock.connect((ip, port))
            except BaseException:
                sock.close()
                raise
            return trio.SocketStream(sock)

        try:
            with trio.fail_after(self._connect_timeout):
                server = await self.guard.dial(target, port, connect, (OSError,), policy=policy)
        except NetRefused as exc:
            reason = exc.reason
            if exc.address and dest.address is None:
                reason = f"{host} resolves to {exc.address}: {exc.reason}"
            await self._refuse(host, port, via, reason)
            raise _Refused(reason, self._hint_local(host, port, dest, exc)) from None
        except NetUnresolved as exc:
            raise _Failed(502, exc.reason, _SOCKS_UNREACHABLE) from None
        except trio.TooSlowError:
            raise _Failed(
                504, f"{host}:{port} did not answer in time", _SOCKS_UNREACHABLE
            ) from None
        except OSError as exc:
            code = _SOCKS_REFUSED if exc.errno == errno.ECONNREFUSED else _SOCKS_UNREACHABLE
            why = exc.strerror or str(exc)
            raise _Failed(502, f"cannot connect to {host}:{port}: {why}", code) from None
        self.allowed += 1
        log.debug("egress_allowed", extension=self.name, destination=f"{host}:{port}", via=via)
        return server

    def _hint_missing(self, host: str, port: int) -> str:
        return (
            f"corral refused {host}:{port}: {self.name} may not reach it.\n"
            f'To allow it, add "{_suggest(host, port)}" to {self.grant}.\n'
        )

    def _hint_local(self, host: str, port: int, dest: Destination, exc: NetRefused) -> str:
        if exc.address is None or dest.address is not None:
            return f"corral refused {host}:{port}: {exc.reason}.\n"
        address = exc.address if ":" not in exc.address else f"[{exc.address}]"
        return (
            f"corral refused {host}:{port}: {host} resolves to {exc.address} ({exc.reason}), "
            "and a name never reaches such an address.\nTo reach that address anyway, grant "
            f'it by itself ("{address}:{port}") in {self.grant}, and repeat it in '
            "permissions.unsafe.\n"
        )

    async def _refuse(self, host: str, port: int, via: str, reason: str) -> None:
        """Count, log and (at a bounded rate) report one refusal."""
        self.refused += 1
        now = time.monotonic()
        self._tokens = min(
            float(_REPORT_BURST), self._tokens + (now - self._refilled) * _REPORT_RATE
        )
        self._refilled = now
        if self._tokens < 1:
            self._unreported += 1
            return
        self._tokens -= 1
        unreported, self._unreported = self._unreported, 0
        destination = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        log.warning(
            "egress_refused",
            extension=self.name,
            destination=destination,
            reason=reason,
            via=via,
            unreported=unreported,
        )
        if self._report is not None:
            event = EgressRefused(
                extension=self.name,
                destination=destination,
                reason=reason,
                via=via,
                unreported=unreported,
            )
            with contextlib.suppress(Exception):  # a report must never break the proxy
                await self._report(event)


def egress_of(spec: ExtensionSpec, guard: NetGuard, report: EgressReport) -> Egress | None:
    """The egress proxy of a supervised child with a network list (None without one)."""
    destinations = spec.manifest.permissions.destinations
    if not destinations:
        return None
    if spec.kind is ChildKind.MCP_SERVER:
        grant = f"permissions.network of MCP server {spec.name} (its mcp.json entry)"
    else:
        grant = f"permissions.network in {spec.name}'s extension.json"
    return Egress(spec.name, destinations, guard, grant=grant, report=report)


def _suggest(host: str, port: int) -> str:
    """The entry that would allow ``host:port``."""
    shown = f"[{host}]" if ":" in host else host.lower().rstrip(".")
    return shown if port in (80, 443) else f"{shown}:{port}"


def _socks_reply(code: int) -> bytes:
    return bytes([5, code, 0, 1, 0, 0, 0, 0, 0, 0])
