"""The egress proxy: what it lets through, what it refuses, and how it says so.

Real sockets on the loopback: the proxy serves a listener the way it serves a
child's, the origins are tiny loopback servers, and names resolve through a
resolver seam. The sandbox around a real child is in ``test_egress_children.py``.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
import urllib.error
import urllib.request

import pytest
import trio
from helpers.egresskit import TIMEOUT, exchange, open_origin, open_proxy, table_resolver

from sandbox import AddressPolicy, Allowance
from supervisor import NetGuard, _splice


def _connect(host: str, port: int) -> bytes:
    return f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode()


async def test_connect_reaches_the_granted_port_and_no_other() -> None:
    with trio.fail_after(TIMEOUT):
        async with open_origin() as granted, open_origin() as other:  # noqa: SIM117
            async with open_proxy([f"127.0.0.1:{granted.port}"]) as proxy:
                through = _connect("127.0.0.1", granted.port) + b"ping"
                got = await exchange(proxy.port, through, until=b"echo:ping")
                assert got.startswith(b"HTTP/1.1 200 ")
                assert got.endswith(b"echo:ping")

                refused = await exchange(proxy.port, _connect("127.0.0.1", other.port))
                assert refused.startswith(b"HTTP/1.1 403 Forbidden")
                assert f'add "127.0.0.1:{other.port}" to permissions.network'.encode() in refused
                assert proxy.egress.allowed == 1
                assert proxy.egress.refused == 1
                (report,) = proxy.reports
                assert report.extension == "child"
                assert report.destination == f"127.0.0.1:{other.port}"
                assert report.via == "connect"
                assert "not in permissions.network" in report.reason
    assert other.heads == []
    assert other.closed == 0  # never even connected to


async def test_a_granted_name_is_80_and_443_only() -> None:
    guard = NetGuard(resolver=table_resolver({}))
    with trio.fail_after(TIMEOUT):
        async with open_proxy(["api.example.com"], guard=guard) as proxy:
            refused = await exchange(proxy.port, _connect("api.example.com", 8443))
    assert refused.startswith(b"HTTP/1.1 403")
    assert b'add "api.example.com:8443" to' in refused


@pytest.mark.parametrize(
    ("answers", "why"),
    [
        (["127.0.0.1"], "loopback"),
        (["10.1.2.3"], "private"),
        (["169.254.169.254"], "link-local"),
        (["100.64.0.1"], "CGNAT"),
        (["::1"], "loopback"),
        (["::ffff:192.168.0.1"], "private"),
        # One local answer among public ones is enough.
        (["8.8.8.8", "192.168.1.1"], "private"),
    ],
)
async def test_a_granted_name_resolving_to_a_local_address_is_refused(
    answers: list[str], why: str
) -> None:
    guard = NetGuard(resolver=table_resolver({"api.example.com": answers}))
    with trio.fail_after(TIMEOUT):
        async with open_proxy(["api.example.com"], guard=guard) as proxy:
            refused = await exchange(proxy.port, _connect("api.example.com", 443))
    assert refused.startswith(b"HTTP/1.1 403")
    assert b"a name never reaches such an address" in refused
    assert b"permissions.unsafe" in refused
    (report,) = proxy.reports
    assert why in report.reason
    assert report.reason.startswith("api.example.com resolves to")
    assert proxy.egress.allowed == 0


async def test_the_address_checked_is_the_address_dialed() -> None:
    # A name allowed (through the guard's policy, a test seam) to reach one loopback
    # port: the proxy dials exactly the address it checked, whatever the client says.
    async with open_origin() as origin:
        policy = AddressPolicy([Allowance(ipaddress.ip_network("127.0.0.1/32"), origin.port)])
        guard = NetGuard(policy, table_resolver({"svc.example": ["127.0.0.1"]}))
        with trio.fail_after(TIMEOUT):
            async with open_proxy([f"svc.example:{origin.port}"], guard=guard) as proxy:
                got = await exchange(
                    proxy.port, _connect("svc.example", origin.port) + b"hi", until=b"echo:hi"
                )
                assert got.endswith(b"echo:hi")
                # The same name on a port the policy does not cover is refused.
                guard2 = NetGuard(policy, table_resolver({"svc.example": ["127.0.0.1"]}))
            async with open_proxy([f"svc.example:{origin.port + 1}"], guard=guard2) as second:
                refused = await exchange(second.port, _connect("svc.example", origin.port + 1))
                assert refused.startswith(b"HTTP/1.1 403")


async def test_plain_http_is_forwarded_as_one_origin_form_request() -> None:
    async with open_origin() as origin:
        with trio.fail_after(TIMEOUT):
            async with open_proxy([f"127.0.0.1:{origin.port}"]) as proxy:
                request = (
                    f"GET {origin.url}/head?q=1 HTTP/1.1\r\nHost: evil.example\r\n"
                    "Proxy-Connection: keep-alive\r\nProxy-Authorization: Basic c2VjcmV0\r\n"
                    "Connection: keep-alive, X-Hop\r\nX-Hop: 1\r\nX-Kept: yes\r\n\r\n"
                )
                got = await exchange(proxy.port, request.encode())
    assert got.startswith(b"HTTP/1.1 200")
    (head,) = origin.heads
    lines = head.decode().split("\r\n")
    assert lines[0] == "GET /head?q=1 HTTP/1.1"
    headers = {line.split(":", 1)[0].lower(): line.split(":", 1)[1].strip() for line in lines[1:]}
    assert headers["host"] == f"127.0.0.1:{origin.port}"
    assert headers["connection"] == "close"
    assert headers["x-kept"] == "yes"
    assert "proxy-connection" not in headers
    assert "proxy-authorization" not in headers
    assert "x-hop" not in headers


async def test_a_redirect_is_relayed_and_its_target_checked_like_any_request() -> None:
    async with open_origin() as granted, open_origin() as other:
        granted.routes["/go"] = (302, {"Location": f"{other.url}/landing"}, b"")
        with trio.fail_after(TIMEOUT):
            async with open_proxy([f"127.0.0.1:{granted.port}"]) as proxy:
                # A real client that honours the proxy and follows redirects itself.
                opener = urllib.request.build_opener(
                    urllib.request.ProxyHandler({"http": f"http://127.0.0.1:{proxy.port}"})
                )

                def fetch() -> None:
                    opener.open(f"{granted.url}/go", timeout=TIMEOUT)

                with pytest.raises(urllib.error.HTTPError) as caught:
                    await trio.to_thread.run_sync(fetch)
    assert caught.value.code == 403
    assert f"127.0.0.1:{other.port}".encode() in caught.value.read()
    assert [h.split(b" ")[1] for h in granted.heads] == [b"/go"]
    assert other.heads == []


async def test_socks5_connects_where_granted_and_refuses_the_rest() -> None:
    async with open_origin() as granted, open_origin() as other:
        with trio.fail_after(TIMEOUT):
            async with open_proxy([f"127.0.0.1:{granted.port}"]) as proxy:

                async def socks(command: int, port: int, payload: bytes = b"") -> bytes:
                    request = b"\x05\x01\x00" + bytes([5, command, 0, 1])
                    request += bytes([127, 0, 0, 1]) + struct.pack("!H", port) + payload
                    return await exchange(proxy.port, request, until=payload or None)

                ok = await socks(1, granted.port, b"hi")
                assert ok[:4] == b"\x05\x00\x05\x00"
                assert ok.endswith(b"echo:hi")
                assert (await socks(1, other.port))[:4] == b"\x05\x00\x05\x02"  # not allowed
                # BIND and UDP ASSOCIATE are never carried, even to a granted address.
                assert (await socks(3, granted.port))[:4] == b"\x05\x00\x05\x07"
                assert (await socks(2, granted.port))[:4] == b"\x05\x00\x05\x07"
                assert proxy.egress.refused == 3
                assert [r.via for r in proxy.reports] == ["socks"] * 3
                assert "UDP ASSOCIATE is never carried" in proxy.reports[1].reason


async def test_socks5_by_name_is_resolved_by_the_proxy() -> None:
    guard = NetGuard(resolver=table_resolver({"api.example.com": ["127.0.0.1"]}))
    name = b"api.example.com"
    with trio.fail_after(TIMEOUT):
        async with open_proxy(["api.example.com"], guard=guard) as proxy:
            request = b"\x05\x01\x00\x05\x01\x00\x03" + bytes([len(name)]) + name
            got = await exchange(proxy.port, request + struct.pack("!H", 443))
    assert got[:4] == b"\x05\x00\x05\x02"
    assert "resolves to 127.0.0.1" in proxy.reports[0].reason


@pytest.mark.parametrize(
    ("request_", "status", "text"),
    [
        (b"GET /path HTTP/1.1\r\nHost: x\r\n\r\n", b"400", b"send requests through it"),
        (b"GET https://x/ HTTP/1.1\r\n\r\n", b"400", b"CONNECT host:port"),
        (b"CONNECT 127.0.0.1 HTTP/1.1\r\n\r\n", b"400", b"not a host:port"),
        (b"garbage\r\n\r\n", b"400", b"not an HTTP/1 request"),
        (b"GET http://x/ HTTP/1.1\r\nX: " + b"a" * 20000 + b"\r\n\r\n", b"431", b"too large"),
    ],
)
async def test_malformed_requests_get_a_clear_error(
    request_: bytes, status: bytes, text: bytes
) -> None:
    with trio.fail_after(TIMEOUT):
        async with open_proxy(["api.example.com"]) as proxy:
            got = await exchange(proxy.port, request_)
    assert got.split(b" ")[1] == status
    assert text in got
    assert proxy.egress.allowed == proxy.egress.refused == 0


async def test_a_silent_client_is_dropped_after_the_head_timeout() -> None:
    with trio.fail_after(TIMEOUT):
        async with open_proxy(["api.example.com"], head_timeout=0.2) as proxy:
            got = await exchange(proxy.port, b"GET http://api.example")
    assert got == b""


async def test_a_flood_of_refusals_is_reported_at_a_bounded_rate_and_all_counted() -> None:
    with trio.fail_after(TIMEOUT):
        async with open_proxy(["api.example.com"]) as proxy:
            for port in range(1, 61):
                await exchange(proxy.port, _connect("127.0.0.1", port))
    assert proxy.egress.refused == 60
    assert 20 <= len(proxy.reports) < 60
    # The first report after the burst says how many were not reported one by one.
    assert sum(r.unreported for r in proxy.reports) + len(proxy.reports) <= 60
    assert all(r.unreported == 0 for r in proxy.reports[:20])


async def test_a_closed_client_closes_the_connection_it_had() -> None:
    async with open_origin() as origin:
        with trio.fail_after(TIMEOUT):
            async with open_proxy([f"127.0.0.1:{origin.port}"]) as proxy:
                await exchange(
                    proxy.port, _connect("127.0.0.1", origin.port) + b"x", until=b"echo:x"
                )
                await origin.ended.wait()


async def _tcp_pair() -> tuple[trio.SocketStream, trio.SocketStream]:
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    near = await trio.open_tcp_stream("127.0.0.1", listener.getsockname()[1])
    far, _ = await listener.accept()
    listener.close()
    return near, trio.SocketStream(far)


@pytest.mark.parametrize("spliced", [True, False], ids=["splice", "copy"])
async def test_the_relay_copies_both_ways_and_passes_each_end_on(
    spliced: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not spliced:
        monkeypatch.setattr(_splice, "_SPLICE", None)
    payload = os.urandom(3 * 1024 * 1024 + 17)
    with trio.fail_after(TIMEOUT):
        client, proxy_in = await _tcp_pair()
        proxy_out, server = await _tcp_pair()
        async with client, proxy_in, proxy_out, server, trio.open_nursery() as nursery:
            nursery.start_soon(_splice.relay, proxy_in.socket, proxy_out.socket)

            async def drain(stream: trio.SocketStream) -> bytes:
                got = bytearray()
                while chunk := await stream.receive_some(1 << 20):
                    got += chunk
                return bytes(got)

            async def send() -> None:
                await client.send_all(payload)
                await client.send_eof()  # the end of the request reaches the server...

            nursery.start_soon(send)
            assert await drain(server) == payload
            await server.send_all(b"answer after the client's end")  # ...which still answers
            await server.send_eof()
            assert await drain(client) == b"answer after the client's end"


async def test_a_broken_side_ends_the_relay() -> None:
    with trio.fail_after(TIMEOUT):
        client, proxy_in = await _tcp_pair()
        proxy_out, server = await _tcp_pair()
        async with client, proxy_in, proxy_out, server:
            # The client resets its connection (SO_LINGER 0): nothing waits on the server.
            client.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            await client.aclose()
            await _splice.relay(proxy_in.socket, proxy_out.socket)
