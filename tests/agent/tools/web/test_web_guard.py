"""SSRF protection of ``web_fetch``, against real loopback servers.

Every test runs the default policy, with an allowance for the one loopback site
that serves the test's pages (never for the "internal" site), and a resolver
seam that gives public-looking names private answers. The internal site records
every request: the assertion that matters is that it saw none. The
``loopback_only`` safety net refuses any connection off this machine.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from typing import Any

import httpcore
import httpx
import pytest
import trio
from web_fakes import TIMEOUT, Page, Site, config_for, open_site, resolver
from web_fakes import loopback_only as loopback_only  # a fixture

from agent._tools.base import ToolRunResult
from agent._tools.web import NetGuard, WebFetchTool, open_client
from agent._tools.web.client import fetch_checked

pytestmark = pytest.mark.usefixtures("loopback_only")


@pytest.fixture
def site() -> Iterator[Site]:
    """The site the test is allowed to fetch from."""
    with open_site() as s:
        yield s


@pytest.fixture
def internal() -> Iterator[Site]:
    """A service on loopback the guard must keep the tool away from."""
    with open_site() as s:
        s.routes["/secret"] = Page(body="<p>the internal secret</p>")
        yield s


async def fetch(tool: WebFetchTool, url: str, **args: Any) -> ToolRunResult:
    async def progress(line: str) -> None:
        pass

    with trio.fail_after(TIMEOUT):
        return await tool.run("c1", {"url": url, "render": "never", **args}, progress)


def tool_for(site: Site, table: dict[str, Any] | None = None) -> WebFetchTool:
    config = config_for(site)
    guard = NetGuard(config.policy(), resolver(table or {}))
    return WebFetchTool(config, guard=guard)


def text(result: ToolRunResult) -> str:
    (block,) = result.content
    return getattr(block, "text", "")


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:{port}/secret",
        "http://2130706433:{port}/secret",
        "http://0x7f.1:{port}/secret",
        "http://127.1:{port}/secret",
        "http://0177.0.0.1:{port}/secret",
        "http://[::ffff:127.0.0.1]:{port}/secret",
        "http://localhost:{port}/secret",
        "http://LocalHost.:{port}/secret",
        "http://api.localhost:{port}/secret",
    ],
)
async def test_internal_spellings_are_refused(site: Site, internal: Site, url: str) -> None:
    result = await fetch(tool_for(site), url.format(port=internal.port))
    assert result.is_error
    # httpx itself rejects some spellings (leading-zero octets) as invalid URLs.
    assert "blocked" in text(result) or "not a valid URL" in text(result)
    assert internal.hits == []


@pytest.mark.parametrize(
    ("answers", "reason"),
    [
        (["127.0.0.1"], "loopback"),
        (["10.20.30.40"], "private"),
        (["169.254.169.254"], "link-local"),
        (["100.64.1.1"], "CGNAT"),
        (["::ffff:192.168.0.1"], "IPv4-mapped form of 192.168.0.1"),
        (["93.184.216.34", "127.0.0.1"], "loopback"),
    ],
)
async def test_public_names_with_private_answers_are_refused(
    site: Site, internal: Site, answers: list[str], reason: str
) -> None:
    tool = tool_for(site, {"intranet.example.com": answers})
    result = await fetch(tool, f"http://intranet.example.com:{internal.port}/secret")
    assert result.is_error
    assert reason in text(result)
    assert "intranet.example.com" in text(result)
    assert internal.hits == []


async def test_dns_rebinding_between_check_and_dial_is_refused(site: Site, internal: Site) -> None:
    # Public at the pre-flight check, loopback when the connection is made.
    tool = tool_for(site, {"rebind.example.com": [["93.184.216.34"], ["127.0.0.1"]]})
    result = await fetch(tool, f"http://rebind.example.com:{internal.port}/secret")
    assert result.is_error
    assert "blocked rebind.example.com (127.0.0.1): loopback" in text(result)
    assert internal.hits == []


async def test_a_redirect_chain_into_an_internal_address_is_refused(
    site: Site, internal: Site
) -> None:
    site.routes["/start"] = Page(status=302, headers={"Location": "/hop"})
    site.routes["/hop"] = Page(
        status=301, headers={"Location": f"http://127.0.0.1:{internal.port}/secret"}
    )
    result = await fetch(tool_for(site), site.url("/start"))
    assert result.is_error
    assert "loopback" in text(result)
    assert site.paths() == ["/start", "/hop"]
    assert internal.hits == []


async def test_a_redirect_to_a_name_that_resolves_internally_is_refused(
    site: Site, internal: Site
) -> None:
    site.routes["/go"] = Page(
        status=307, headers={"Location": f"http://metadata.example:{internal.port}/secret"}
    )
    tool = tool_for(site, {"metadata.example": ["169.254.169.254"]})
    result = await fetch(tool, site.url("/go"))
    assert result.is_error
    assert "link-local" in text(result)
    assert internal.hits == []


async def test_redirects_are_followed_a_few_times_only(site: Site) -> None:
    for n in range(10):
        site.routes[f"/r{n}"] = Page(status=302, headers={"Location": f"/r{n + 1}"})
    site.routes["/r10"] = Page(body="<p>finally</p>")
    result = await fetch(tool_for(site), site.url("/r0"))
    assert result.is_error
    assert "more than 5 redirects" in text(result)
    assert site.paths() == [f"/r{n}" for n in range(6)]


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "ftp://example.com/x",
        "gopher://example.com/",
        "http://u:p@example.com/",
    ],
)
async def test_only_plain_http_urls(site: Site, url: str) -> None:
    result = await fetch(tool_for(site), url)
    assert result.is_error
    assert "blocked" in text(result)


async def test_environment_proxies_never_carry_the_request(
    site: Site, internal: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A proxy would connect on our behalf, where the dial-time check cannot see.
    proxy = f"http://127.0.0.1:{internal.port}"
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "all_proxy"):
        monkeypatch.setenv(name, proxy)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    site.routes["/page"] = Page(body="<p>Straight from the site, no proxy involved.</p>")
    result = await fetch(tool_for(site), site.url("/page"))
    assert not result.is_error, text(result)
    assert "Straight from the site" in text(result)
    assert internal.hits == []
    blocked = await fetch(tool_for(site), f"http://127.0.0.1:{internal.port}/secret")
    assert blocked.is_error
    assert internal.hits == []


async def test_the_allowance_names_one_port_not_the_whole_host(site: Site, internal: Site) -> None:
    site.routes["/ok"] = Page(body="<p>allowed page</p>")
    allowed = await fetch(tool_for(site), site.url("/ok"))
    assert not allowed.is_error
    refused = await fetch(tool_for(site), f"http://127.0.0.1:{internal.port}/secret")
    assert refused.is_error
    assert internal.hits == []


async def test_the_safety_net_itself_refuses_off_machine_traffic() -> None:
    with (
        trio.fail_after(TIMEOUT),
        trio.socket.socket() as sock,
        pytest.raises(OSError, match="safety net"),
    ):
        await sock.connect(("192.0.2.1", 80))


async def test_credentials_never_follow_a_redirect_to_another_origin(
    site: Site, internal: Site
) -> None:
    # Both sites are allowed here: this is about headers, not addresses.
    site.routes["/same"] = Page(status=302, headers={"Location": "/landing"})
    site.routes["/landing"] = Page(body="<p>ok</p>")
    site.routes["/away"] = Page(status=302, headers={"Location": internal.url("/landing")})
    internal.routes["/landing"] = Page(body="<p>ok</p>")
    config = config_for(site, internal)
    guard = NetGuard(config.policy())
    secret = {"Authorization": "Bearer s3cret", "Cookie": "session=1", "X-Other": "kept"}
    with trio.fail_after(TIMEOUT):
        async with open_client(guard, timeouts=httpx.Timeout(5)) as client:
            for path in ("/same", "/away"):
                await fetch_checked(client, guard, site.url(path), headers=secret, max_bytes=1000)
    (same,) = [h for h in site.hits if h.path == "/landing"]
    assert same.headers["authorization"] == "Bearer s3cret"
    (away,) = internal.hits
    assert "authorization" not in away.headers
    assert "cookie" not in away.headers
    assert away.headers["x-other"] == "kept"


def test_a_transport_the_guard_cannot_hold_is_refused() -> None:
    # One factory builds the guarded transports of the web tools (httpx) and of MCP's
    # HTTP client (httpx2): a transport without a pool it can replace is refused,
    # never left dialing unguarded.
    from agent._tools.web.guard import _install, guarded_transport

    for library in ("httpx", "httpx2"):
        transport = guarded_transport(
            NetGuard(),
            ssl.create_default_context(),
            max_connections=1,
            max_keepalive=0,
            library=library,  # type: ignore[arg-type]
        )
        assert "GuardedBackend" in repr(transport._pool._network_backend)

    class Unpooled:
        pass

    with pytest.raises(RuntimeError, match="cannot install the network guard"):
        _install(
            Unpooled(),
            NetGuard(),
            httpcore,
            httpcore.TrioBackend(),
            ssl.create_default_context(),
            httpx.Limits(),
        )
