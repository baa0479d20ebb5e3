"""Class 5 of the second review: the browser fallback must not talk past the guard.

A page rendered by ``web_fetch`` opens an ``RTCPeerConnection`` whose STUN and TURN
servers are loopback listeners of the host (UDP and TCP, IP literals: fetch
interception never sees them), and a ``WebTransport`` session (QUIC over UDP).
Before the fix, the unsandboxed browser sent STUN binding requests to the host's
UDP port. Now WebRTC gathers no candidate and nothing reaches either listener, in
every mode: under bubblewrap, and without it when the user allows that; without
bubblewrap and without that permission, nothing renders at all. Real Chromium,
real sockets, as root and as an unprivileged user.
"""

from __future__ import annotations

import contextlib
import http.server
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import trio

from agent import TextContent
from agent._tools.web import NetGuard, WebConfig, WebFetchTool, find_chromium
from sandbox import SandboxUnavailable, select_sandbox

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(find_chromium() is None, reason="no Chromium (./dev test installs it)"),
]

_PAGE = """<!doctype html><html><head><title>probe</title></head><body>
<div id="out">probing</div>
<script>
const out = document.getElementById('out');
const found = [];
try {
  const wt = new WebTransport('https://127.0.0.1:%(udp)d/wt');
  wt.ready.catch(() => {});
} catch (e) {}
const pc = new RTCPeerConnection({iceServers: [
  {urls: 'stun:127.0.0.1:%(udp)d'},
  {urls: 'turn:127.0.0.1:%(udp)d?transport=udp', username: 'u', credential: 'p'},
  {urls: 'turn:127.0.0.1:%(tcp)d?transport=tcp', username: 'u', credential: 'p'},
]});
pc.createDataChannel('x');
pc.onicecandidate = (e) => { if (e.candidate) found.push(e.candidate.candidate); };
pc.createOffer().then((o) => pc.setLocalDescription(o));
setTimeout(() => {
  out.innerText = 'RTC ' + typeof RTCPeerConnection + ' candidates=' + found.length +
    ' ' + found.join(' | ') + ' ' + 'padding '.repeat(80);
}, 1500);
</script></body></html>"""


class Listeners:
    """A UDP and a TCP socket on the host's loopback, recording what arrives."""

    def __init__(self) -> None:
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", 0))
        self.tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.tcp.bind(("127.0.0.1", 0))
        self.tcp.listen(8)
        self.got: list[str] = []
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._serve_udp, daemon=True),
            threading.Thread(target=self._serve_tcp, daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _serve_udp(self) -> None:
        self.udp.settimeout(0.2)
        while not self._stop.is_set():
            try:
                data, peer = self.udp.recvfrom(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            self.got.append(f"udp {len(data)} bytes from {peer}")

    def _serve_tcp(self) -> None:
        self.tcp.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, peer = self.tcp.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.got.append(f"tcp connection from {peer}")
            conn.close()

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(5)
        self.udp.close()
        self.tcp.close()


class _Handler(http.server.BaseHTTPRequestHandler):
    page = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/html; charset=utf-8")
        self.send_header("content-length", str(len(self.page)))
        self.end_headers()
        self.wfile.write(self.page)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def listeners() -> Iterator[Listeners]:
    lis = Listeners()
    try:
        yield lis
    finally:
        lis.close()


@pytest.fixture
def page_url(listeners: Listeners) -> Iterator[str]:
    udp, tcp = listeners.udp.getsockname()[1], listeners.tcp.getsockname()[1]
    handler = type("Handler", (_Handler,), {"page": (_PAGE % {"udp": udp, "tcp": tcp}).encode()})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _modes() -> list[Any]:
    modes: list[Any] = [pytest.param(None, id="no-bubblewrap-allowed")]
    with contextlib.suppress(SandboxUnavailable):
        modes.append(pytest.param(select_sandbox("required"), id="bubblewrap"))
    return modes


async def _fetch(url: str, sandbox: Any, **config: Any) -> tuple[bool, str]:
    port = url.rsplit(":", 1)[1].strip("/")
    settings = WebConfig(allow=[f"127.0.0.1:{port}"], browser_timeout=40.0, **config)
    tool = WebFetchTool(settings, guard=NetGuard(settings.policy()), sandbox=sandbox)

    async def progress(_: str) -> None:
        pass

    with trio.fail_after(90):
        result = await tool.run("c1", {"url": url, "render": "always"}, progress)
    text = " ".join(b.text for b in result.content if isinstance(b, TextContent))
    return not result.is_error, text


@pytest.mark.parametrize("sandbox", _modes())
async def test_webrtc_reaches_nothing_in_every_mode(
    page_url: str, listeners: Listeners, sandbox: Any
) -> None:
    ok, text = await _fetch(page_url, sandbox, browser_unsandboxed=sandbox is None)
    assert ok, text
    # The page ran, and had WebRTC to try with: the absence below is the policy's.
    assert "RTC function candidates=0" in text, text
    await trio.sleep(1.0)  # anything in flight arrives
    assert listeners.got == []


async def test_without_bubblewrap_nothing_renders_unless_allowed(
    page_url: str, listeners: Listeners
) -> None:
    ok, text = await _fetch(page_url, None)
    assert not ok
    assert "rendering is off without bubblewrap" in text
    assert "CORRAL_BROWSER_UNSANDBOXED=1" in text
    assert listeners.got == []
