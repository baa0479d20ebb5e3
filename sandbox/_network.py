"""Network grants by name: the destinations of ``permissions.network``, checked and matched.

``permissions.network`` is ``false`` (no network), ``true`` (the host's whole
network: risky, shown as such) or a list of destinations a child may reach
through corral's egress proxy (``supervisor``'s, outside the sandbox)::

    "api.github.com"            that name, ports 80 and 443
    "*.githubusercontent.com"   any name below it (not the name itself), 80 and 443
    "api.openai.com:443"        that name, that port
    "203.0.113.7:8443"          that address, that port ([2001:db8::7]:8443 for IPv6)

A name is only ever reached at the public addresses it resolves to: the proxy
resolves it and refuses loopback, private, link-local, CGNAT and metadata
answers (and any other non-public one). Such an address can only be granted by
naming it literally, and then only when the entry is repeated in
``permissions.unsafe`` (:func:`check_network`).

Pure functions and values; the proxy (``supervisor``) matches requests with
:meth:`Destinations.match`.
"""

from __future__ import annotations

import ipaddress
import re
import typing
from collections.abc import Iterable

from ._address import IPAddress, is_localhost_name, local_reason, parse_host
from ._exceptions import PermissionsError

__all__ = [
    "DEFAULT_PORTS",
    "EGRESS_PORT",
    "MAX_DESTINATIONS",
    "Destination",
    "Destinations",
    "check_network",
    "parse_destination",
    "proxy_env",
]

#: Ports of an entry that names none.
DEFAULT_PORTS = (80, 443)
#: The port of the proxy's listener on the loopback of the child's own network
#: namespace (``127.0.0.1``; the namespace is the child's, so no port is taken).
EGRESS_PORT = 3128
#: Entries one grant may hold at most.
MAX_DESTINATIONS = 256

_LABEL = re.compile(r"^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$")


@typing.final
class Destination:
    """One parsed entry: a name (or ``*.`` pattern) or an address, and its ports."""

    __slots__ = ("address", "host", "ports", "text", "wildcard")

    def __init__(
        self, host: str, ports: tuple[int, ...], *, address: IPAddress | None, wildcard: bool
    ) -> None:
        #: The name (lower case, no trailing dot; a pattern's suffix without ``*.``)
        #: or the address's canonical text.
        self.host = host
        self.ports = ports
        self.address = address
        self.wildcard = wildcard
        #: The canonical spelling, as the validated manifest holds it.
        self.text = _spell(self)

    def __repr__(self) -> str:
        return f"<Destination {self.text}>"

    def __str__(self) -> str:
        return self.text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Destination) and self.text == other.text

    def __hash__(self) -> int:
        return hash(self.text)

    def covers_name(self, name: str, port: int) -> bool:
        """``name`` (lower case, no trailing dot) on ``port`` falls under this entry."""
        if self.address is not None or port not in self.ports:
            return False
        if self.wildcard:
            return name.endswith("." + self.host)
        return name == self.host

    def covers_address(self, ip: IPAddress, port: int) -> bool:
        """The address ``ip`` on ``port`` is this entry's."""
        return self.address is not None and port in self.ports and _plain(ip) == self.address


def _plain(ip: IPAddress) -> IPAddress:
    """An IPv4-mapped IPv6 address as the IPv4 address it is; others unchanged."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.scope_id:
            ip = ipaddress.IPv6Address(ip.compressed.split("%", 1)[0])
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped
    return ip


def _spell(d: Destination) -> str:
    host = f"*.{d.host}" if d.wildcard else d.host
    if d.ports == DEFAULT_PORTS:
        return host
    if d.address is not None and d.address.version == 6:
        host = f"[{host}]"
    return f"{host}:{d.ports[0]}"


def _port(text: str, entry: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"{entry!r}: the port must be a number from 1 to 65535")
    return int(text)


def _name(host: str, entry: str) -> tuple[str, bool]:
    """The checked name (lower case) and whether it is a ``*.`` pattern."""
    if not host.isascii():
        raise ValueError(f"{entry!r}: write a non-ASCII name in its xn-- (punycode) form")
    name = host.lower()
    if name.endswith("."):  # the root, as in api.github.com.
        name = name[:-1]
    wildcard = name.startswith("*.")
    if wildcard:
        name = name[2:]
    labels = name.split(".")
    if not name or len(name) > 253 or not all(_LABEL.match(label) for label in labels):
        raise ValueError(
            f"{entry!r} is not a host name, *.name pattern or address "
            "(e.g. api.github.com, *.githubusercontent.com, api.openai.com:443, 203.0.113.7:8443)"
        )
    if labels[-1].isdigit():
        raise ValueError(f"{entry!r}: write an address as a.b.c.d (or [v6]), not another spelling")
    if wildcard and len(labels) < 2:
        raise ValueError(f"{entry!r}: a pattern must name a domain below the top level")
    if is_localhost_name(name):
        raise ValueError(f"{entry!r}: localhost names are this machine's: never reachable")
    return name, wildcard


def parse_destination(text: str) -> Destination:
    """Parse one entry of ``permissions.network``.

    Raises:
        ValueError: not a name, ``*.name`` pattern or address, with an optional port;
            the message quotes ``text`` and shows the accepted forms.
    """
    if not text or text != text.strip():
        raise ValueError(f"{text!r}: must not be empty or have spaces around it")
    if "/" in text or "@" in text:
        raise ValueError(f"{text!r}: give a host (and port), not a URL, e.g. 'api.github.com'")
    host, port = text, None
    bracketed = re.fullmatch(r"\[([^\]]+)\](?::(.*))?", text)
    if bracketed:
        host = bracketed.group(1)
        if bracketed.group(2) is not None:
            port = _port(bracketed.group(2), text)
    elif text.count(":") == 1:
        host, port_text = text.split(":")
        port = _port(port_text, text)
    ports = (port,) if port is not None else DEFAULT_PORTS
    try:
        address = _plain(ipaddress.ip_address(host))
    except ValueError:
        address = None
    if address is not None:
        return Destination(str(address), ports, address=address, wildcard=False)
    if bracketed or ":" in host:
        raise ValueError(f"{text!r}: not an IPv6 address")
    if parse_host(host) is not None:
        raise ValueError(f"{text!r}: write an address as a.b.c.d (or [v6]), not another spelling")
    name, wildcard = _name(host, text)
    return Destination(name, ports, address=None, wildcard=wildcard)


@typing.final
class Destinations:
    """A checked list of destinations, as the egress proxy matches requests against it."""

    def __init__(self, entries: Iterable[str | Destination]) -> None:
        self.entries = tuple(
            e if isinstance(e, Destination) else parse_destination(e) for e in entries
        )

    def __repr__(self) -> str:
        return f"<Destinations {[d.text for d in self.entries]}>"

    def __bool__(self) -> bool:
        return bool(self.entries)

    def match(self, host: str, port: int) -> Destination | None:
        """The entry that lets ``host`` (a name or an address, as a client wrote it) be
        reached on ``port``, or None.

        An address matches only an entry naming that address; a name only a name or
        pattern entry (a name is never taken for the addresses it resolves to).
        """
        ip = parse_host(host)
        if ip is not None:
            return next((d for d in self.entries if d.covers_address(ip, port)), None)
        name = host.strip().lower()
        if name.endswith(".") and not name.endswith(".."):
            name = name[:-1]
        return next((d for d in self.entries if d.covers_name(name, port)), None)


def check_network(
    network: bool | list[str], unsafe: Iterable[str], field: str = "permissions.network"
) -> tuple[bool | list[str], list[str]]:
    """Validate a ``network`` grant; returns it canonical, and the entries that needed
    ``unsafe`` (canonical too).

    An entry naming a local address (loopback, private, link-local, CGNAT,
    metadata) is refused unless the very entry, as written, is also in ``unsafe``.

    Raises:
        PermissionsError: naming the entry, e.g. ``permissions.network[2]``.
    """
    if isinstance(network, bool):
        return network, []
    if not network:
        return False, []  # no destination: no network
    if len(network) > MAX_DESTINATIONS:
        raise PermissionsError(field, f"at most {MAX_DESTINATIONS} destinations")
    granted = set(unsafe)
    out: list[str] = []
    needed: list[str] = []
    for index, raw in enumerate(network):
        where = f"{field}[{index}]"
        try:
            dest = parse_destination(raw)
        except ValueError as exc:
            raise PermissionsError(where, str(exc)) from None
        why = local_reason(dest.address) if dest.address is not None else None
        if why is not None:
            if raw not in granted:
                raise PermissionsError(
                    where,
                    f"{raw!r} is a {why} address (this machine, its network or its cloud); "
                    f"to grant it anyway, also list {raw!r} in permissions.unsafe",
                )
            needed.append(dest.text)
        out.append(dest.text)
    return list(dict.fromkeys(out)), needed


def proxy_env(port: int = EGRESS_PORT, destinations: Iterable[str] = ()) -> dict[str, str]:
    """The variables that send a child's HTTP, HTTPS and other TCP clients to the proxy.

    Upper and lower case (curl reads only ``http_proxy`` in lower case; most others
    take either). ``NO_PROXY`` keeps the child's own loopback direct (it is the
    child's: nothing of the host's is there), except a loopback address granted in
    ``destinations``: that one means the host's, reached through the proxy.
    ``NODE_USE_ENV_PROXY`` makes Node's ``fetch`` and ``http`` (22.21, 24.5 and
    later) honour them.
    """
    granted = {d.address for d in map(parse_destination, destinations) if d.address is not None}
    own = [h for h in ("localhost", "127.0.0.1", "::1") if parse_host(h) not in granted]
    http = f"http://127.0.0.1:{port}"
    values = {
        "HTTP_PROXY": http,
        "HTTPS_PROXY": http,
        "ALL_PROXY": f"socks5h://127.0.0.1:{port}",
        "NO_PROXY": ",".join(own),
    }
    env = {**values, **{k.lower(): v for k, v in values.items()}}
    env["NODE_USE_ENV_PROXY"] = "1"
    return env
