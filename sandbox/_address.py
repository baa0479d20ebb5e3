"""Which network addresses a guarded connection may reach: pure functions, no I/O.

One classification for every guarded path: the web tools, MCP's HTTP client and
the egress proxy of sandboxed children (see ``supervisor.NetGuard``).

:func:`blocked_reason` classifies one IP address. It refuses everything that is
not a public unicast address: loopback, private (RFC 1918, unique local),
link-local (cloud metadata at 169.254.169.254 included), shared CGNAT space,
multicast, documentation, benchmarking, reserved and unspecified ranges. IPv6
forms that carry an IPv4 address (IPv4-mapped ``::ffff:a.b.c.d``, IPv4-compatible
``::a.b.c.d``, NAT64 ``64:ff9b::a.b.c.d`` and 6to4 ``2002:AABB:CCDD::``) are judged
by the IPv4 address inside, so ``::ffff:127.0.0.1`` is loopback like ``127.0.0.1``.
Anything Python does not consider globally routable is refused as well, so a range
this table misses still fails closed.

:func:`parse_host` turns a URL host into an address when it is one, in every
spelling the C library's ``inet_aton`` accepts (``2130706433``, ``0x7f.1``,
``0177.0.0.1``, ``127.1``), so such a host is checked as the address it is;
:func:`is_localhost_name` catches ``localhost`` and ``*.localhost`` (RFC 6761),
trailing dots included.

An :class:`AddressPolicy` holds the exceptions a user (or a test) grants
explicitly, as networks with an optional port.
"""

from __future__ import annotations

import ipaddress
import re
import typing
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network

__all__ = [
    "AddressPolicy",
    "Allowance",
    "IPAddress",
    "blocked_reason",
    "is_localhost_name",
    "local_reason",
    "parse_allowance",
    "parse_host",
]

IPAddress = IPv4Address | IPv6Address

_V4_BLOCKED: tuple[tuple[IPv4Network, str], ...] = tuple(
    (IPv4Network(net), why)
    for net, why in (
        ("0.0.0.0/8", "unspecified ('this network')"),
        ("10.0.0.0/8", "private"),
        ("100.64.0.0/10", "shared address space (CGNAT)"),
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link-local (cloud metadata lives here)"),
        ("172.16.0.0/12", "private"),
        ("192.0.0.0/24", "IETF protocol assignments"),
        ("192.0.2.0/24", "documentation"),
        ("192.88.99.0/24", "6to4 relay anycast"),
        ("192.168.0.0/16", "private"),
        ("198.18.0.0/15", "benchmarking"),
        ("198.51.100.0/24", "documentation"),
        ("203.0.113.0/24", "documentation"),
        ("224.0.0.0/4", "multicast"),
        ("240.0.0.0/4", "reserved"),
    )
)

_V6_BLOCKED: tuple[tuple[IPv6Network, str], ...] = tuple(
    (IPv6Network(net), why)
    for net, why in (
        ("::/128", "unspecified"),
        ("::1/128", "loopback"),
        ("64:ff9b:1::/48", "local-use NAT64"),
        ("100::/64", "discard-only"),
        ("2001::/23", "IETF protocol assignments (Teredo, benchmarking, ORCHID)"),
        ("2001:db8::/32", "documentation"),
        ("3fff::/20", "documentation"),
        ("fc00::/7", "unique local (private)"),
        ("fe80::/10", "link-local"),
        ("fec0::/10", "site-local"),
        ("ff00::/8", "multicast"),
    )
)

_MAPPED = IPv6Network("::ffff:0:0/96")
_COMPATIBLE = IPv6Network("::/96")
_NAT64 = IPv6Network("64:ff9b::/96")
_SIX_TO_FOUR = IPv6Network("2002::/16")


def _embedded_v4(ip: IPv6Address) -> tuple[IPv4Address, str] | None:
    """The IPv4 address an IPv6 address stands for, and the name of the form."""
    value = int(ip)
    if ip in _MAPPED:
        return IPv4Address(value & 0xFFFFFFFF), "IPv4-mapped"
    if ip in _COMPATIBLE and value > 1:
        return IPv4Address(value & 0xFFFFFFFF), "IPv4-compatible"
    if ip in _NAT64:
        return IPv4Address(value & 0xFFFFFFFF), "NAT64"
    if ip in _SIX_TO_FOUR:
        return IPv4Address((value >> 80) & 0xFFFFFFFF), "6to4"
    return None


def blocked_reason(ip: IPAddress) -> str | None:
    """Why ``ip`` must not be reached, or None for a public unicast address."""
    if isinstance(ip, IPv6Address):
        if ip.scope_id:
            ip = IPv6Address(ip.compressed.split("%", 1)[0])
        inner = _embedded_v4(ip)
        if inner is not None:
            v4, form = inner
            why = blocked_reason(v4)
            return f"{form} form of {v4}, {why}" if why else None
        for net6, why in _V6_BLOCKED:
            if ip in net6:
                return why
    else:
        for net4, why in _V4_BLOCKED:
            if ip in net4:
                return why
    if not ip.is_global:
        return "not globally routable"
    return None


#: The reasons of :func:`blocked_reason` that mean "this machine, its LAN or its cloud":
#: the addresses a network grant may name only with ``unsafe`` (see :func:`local_reason`).
_LOCAL = (
    "unspecified",
    "private",
    "shared address space (CGNAT)",
    "loopback",
    "link-local",
    "unique local",
    "site-local",
    "local-use NAT64",
)


def local_reason(ip: IPAddress) -> str | None:
    """Why ``ip`` belongs to this machine, its LAN or its cloud provider, or None.

    Loopback, private (RFC 1918, unique local), link-local (cloud metadata),
    shared CGNAT space, unspecified, and the IPv6 forms that carry such an IPv4
    address. Other non-public ranges (documentation, benchmarking, multicast,
    reserved) are not "local": :func:`blocked_reason` still refuses them behind a
    name, but a grant may name them without ``unsafe``.
    """
    why = blocked_reason(ip)
    if why is not None and any(tag in why for tag in _LOCAL):
        return why
    return None


# inet_aton: one to four parts, each decimal, octal (leading 0) or hex (0x).
_PART = re.compile(r"0[xX][0-9a-fA-F]*|0[0-7]*|[1-9][0-9]*")


def _loose_ipv4(host: str) -> IPv4Address | None:
    parts = host.split(".")
    if not 1 <= len(parts) <= 4 or not all(_PART.fullmatch(p) for p in parts):
        return None
    values = []
    for part in parts:
        if part[:2] in ("0x", "0X"):
            values.append(int(part[2:] or "0", 16))
        elif part.startswith("0"):
            values.append(int(part, 8))
        else:
            values.append(int(part))
    *head, last = values
    if any(v > 0xFF for v in head) or last >= 1 << (8 * (5 - len(values))):
        return None
    number = last
    for index, value in enumerate(head):
        number |= value << (8 * (3 - index))
    return IPv4Address(number)


def parse_host(host: str) -> IPAddress | None:
    """The address ``host`` spells, or None when it is a name.

    Accepts bracketed IPv6 (``[::1]``), zone ids, a trailing dot, and every numeric
    IPv4 spelling ``inet_aton`` accepts.
    """
    text = host.strip().rstrip(".")
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        pass
    return _loose_ipv4(text)


def is_localhost_name(host: str) -> bool:
    """``localhost`` and any name under it (RFC 6761), in any case, trailing dots too."""
    name = host.strip().rstrip(".").lower()
    return name == "localhost" or name.endswith(".localhost")


@typing.final
class Allowance:
    """An explicit exception: addresses in ``network``, on ``port`` when given."""

    def __init__(self, network: IPv4Network | IPv6Network, port: int | None = None) -> None:
        self.network = network
        self.port = port

    def __repr__(self) -> str:
        return f"<Allowance {self}>"

    def __str__(self) -> str:
        if self.port is None:
            return str(self.network)
        host = str(self.network.network_address)
        if self.network.num_addresses > 1:
            host = str(self.network)
        return f"[{host}]:{self.port}" if self.network.version == 6 else f"{host}:{self.port}"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Allowance) and (self.network, self.port) == (
            other.network,
            other.port,
        )

    def __hash__(self) -> int:
        return hash((self.network, self.port))

    def covers(self, ip: IPAddress, port: int) -> bool:
        """True when ``ip:port`` falls under this allowance."""
        return (
            ip.version == self.network.version
            and ip in self.network
            and (self.port is None or self.port == port)
        )


def parse_allowance(text: str) -> Allowance:
    """Parse ``127.0.0.1``, ``10.0.0.0/8``, ``127.0.0.1:8080``, ``[::1]:8080`` or ``::1``.

    Raises:
        ValueError: not one of those forms; the message quotes ``text``.
    """
    spec = text.strip()
    port: int | None = None
    match = re.fullmatch(r"\[([^\]]+)\](?::(\d+))?", spec)
    if match:
        spec, port_text = match.group(1), match.group(2)
        port = int(port_text) if port_text else None
    elif spec.count(":") == 1:
        spec, port_text = spec.split(":")
        if not port_text.isdigit():
            raise ValueError(f"{text!r}: the port must be a number")
        port = int(port_text)
    if port is not None and not 0 < port < 65536:
        raise ValueError(f"{text!r}: port {port} is out of range")
    try:
        network = ipaddress.ip_network(spec, strict=False)
    except ValueError:
        raise ValueError(
            f"{text!r} is not an address or network (e.g. 127.0.0.1:8080, 10.0.0.0/8, [::1]:80)"
        ) from None
    return Allowance(network, port)


@typing.final
class AddressPolicy:
    """The default-deny rule for non-public addresses, with explicit allowances."""

    def __init__(self, allow: typing.Iterable[Allowance] = ()) -> None:
        self.allow = tuple(allow)

    def __repr__(self) -> str:
        return f"<AddressPolicy allow={[str(a) for a in self.allow]}>"

    def refusal(self, ip: IPAddress, port: int) -> str | None:
        """Why ``ip:port`` may not be reached under this policy, or None."""
        why = blocked_reason(ip)
        if why is None or any(a.covers(ip, port) for a in self.allow):
            return None
        return why
