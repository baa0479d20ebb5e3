"""The pure parts of the web tools: address policy, host spellings, tool selection,
content classification, truncation, settings."""

from __future__ import annotations

import ipaddress

import httpx
import pytest

from agent import AgentError
from agent._tools.selection import select_tools
from agent._tools.web import (
    AddressPolicy,
    BlockedTarget,
    FetchFailed,
    WebConfig,
    WebConfigError,
    blocked_reason,
    parse_allowance,
    parse_host,
    redirect_target,
)
from agent._tools.web.extract import ContentKind, classify, clean_text, decode, truncate
from agent._tools.web.search import search_endpoint
from sandbox import is_localhost_name


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("127.0.0.1", "loopback"),
        ("127.255.0.9", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("172.31.255.255", "private"),
        ("192.168.1.1", "private"),
        ("169.254.169.254", "link-local"),
        ("100.64.0.1", "CGNAT"),
        ("0.0.0.0", "unspecified"),
        ("224.0.0.251", "multicast"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "reserved"),
        ("198.18.0.1", "benchmarking"),
        ("192.0.2.10", "documentation"),
        ("::1", "loopback"),
        ("::", "unspecified"),
        ("fe80::1", "link-local"),
        ("fd00::1", "unique local"),
        ("ff02::1", "multicast"),
        ("::ffff:127.0.0.1", "IPv4-mapped form of 127.0.0.1, loopback"),
        ("::ffff:10.0.0.1", "IPv4-mapped form of 10.0.0.1, private"),
        ("::127.0.0.1", "IPv4-compatible form of 127.0.0.1, loopback"),
        ("64:ff9b::a9fe:a9fe", "NAT64 form of 169.254.169.254"),
        ("64:ff9b:1::1", "local-use NAT64"),
        ("2002:c0a8:0101::1", "6to4 form of 192.168.1.1, private"),
        ("2001:0::1", "Teredo"),
        ("2001:db8::1", "documentation"),
    ],
)
def test_internal_addresses_are_refused_with_their_reason(address: str, why: str) -> None:
    reason = blocked_reason(ipaddress.ip_address(address))
    assert reason is not None
    assert why in reason


@pytest.mark.parametrize(
    "address",
    ["93.184.216.34", "8.8.8.8", "2606:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808"],
)
def test_public_addresses_pass(address: str) -> None:
    assert blocked_reason(ipaddress.ip_address(address)) is None


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("2130706433", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("0x7f.1", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("127.0.0.1.", "127.0.0.1"),
        ("10.0.258", "10.0.1.2"),
        ("[::1]", "::1"),
        ("[::ffff:7f00:1]", "::ffff:127.0.0.1"),
        ("0", "0.0.0.0"),
    ],
)
def test_numeric_host_spellings_are_the_addresses_they_spell(host: str, address: str) -> None:
    assert parse_host(host) == ipaddress.ip_address(address)


@pytest.mark.parametrize("host", ["example.com", "1.2.3.4.5", "08.1.1.1", "0x", "256.1.1.1", ""])
def test_names_are_not_addresses(host: str) -> None:
    if host == "0x":
        assert parse_host(host) == ipaddress.ip_address("0.0.0.0")  # inet_aton accepts it
    else:
        assert parse_host(host) is None


@pytest.mark.parametrize(
    ("host", "local"),
    [
        ("localhost", True),
        ("LOCALHOST.", True),
        ("api.localhost", True),
        ("a.b.localhost..", True),
        ("localhost.example.com", False),
        ("notlocalhost", False),
    ],
)
def test_localhost_names(host: str, local: bool) -> None:
    assert is_localhost_name(host) is local


def test_allowances_open_exactly_what_they_name() -> None:
    policy = AddressPolicy([parse_allowance("127.0.0.1:8080"), parse_allowance("10.0.0.0/8")])
    loopback = ipaddress.ip_address("127.0.0.1")
    assert policy.refusal(loopback, 8080) is None
    assert policy.refusal(loopback, 8081) == "loopback"
    assert policy.refusal(ipaddress.ip_address("10.9.9.9"), 443) is None
    assert policy.refusal(ipaddress.ip_address("192.168.0.1"), 443) == "private"
    v6 = parse_allowance("[::1]:80")
    assert v6.port == 80
    assert str(v6) == "[::1]:80"
    assert v6.covers(ipaddress.ip_address("::1"), 80)
    assert not v6.covers(ipaddress.ip_address("127.0.0.1"), 80)


@pytest.mark.parametrize("bad", ["localhost", "127.0.0.1:http", "1.2.3.4:99999", "10.0.0.0/33"])
def test_bad_allowances_name_the_entry(bad: str) -> None:
    with pytest.raises(ValueError, match=r"127\.0\.0\.1:http|out of range|not an address"):
        parse_allowance(bad)


def test_redirect_policy() -> None:
    here = httpx.URL("https://example.com/a/b?q=1")
    assert redirect_target(here, 200, "/x") is None
    assert redirect_target(here, 302, "../c#frag") == httpx.URL("https://example.com/c")
    assert redirect_target(here, 308, "http://other.example/") == httpx.URL("http://other.example/")
    with pytest.raises(BlockedTarget, match="scheme 'file'"):
        redirect_target(here, 301, "file:///etc/passwd")
    with pytest.raises(FetchFailed, match="without a Location"):
        redirect_target(here, 307, None)


def test_tool_selection() -> None:
    defaults = ("read", "write", "edit", "bash")
    optional = ("web_fetch", "web_search")
    groups = {"web": optional}

    def pick(*entries: str) -> list[str]:
        return select_tools(list(entries), defaults, optional, groups)

    assert select_tools(None, defaults, optional, groups) == list(defaults)
    assert pick("+web") == [*defaults, *optional]
    assert pick("+web_fetch", "-bash") == ["read", "write", "edit", "web_fetch"]
    assert pick("read", "web") == ["read", "web_fetch", "web_search"]
    assert pick("web_search", "read") == ["read", "web_search"]
    assert pick() == []
    with pytest.raises(AgentError, match=r"unknown built-in tool\(s\) teleport; valid: read"):
        pick("+teleport")


@pytest.mark.parametrize(
    ("content_type", "head", "kind"),
    [
        ("text/html; charset=utf-8", b"", ContentKind.HTML),
        ("application/xhtml+xml", b"", ContentKind.HTML),
        ("text/plain", b"", ContentKind.TEXT),
        ("application/json", b"{}", ContentKind.TEXT),
        ("application/vnd.api+json", b"{}", ContentKind.TEXT),
        ("image/svg+xml", b"<svg/>", ContentKind.TEXT),
        ("image/png", b"\x89PNG", ContentKind.BINARY),
        ("application/pdf", b"%PDF-1.7", ContentKind.BINARY),
        ("", b"  <!DOCTYPE html><html>", ContentKind.HTML),
        ("application/octet-stream", b"<!-- x --><html lang=en>", ContentKind.HTML),
        ("", b"just words", ContentKind.TEXT),
        ("", b"\x00\x01\x02binary", ContentKind.BINARY),
        ("", b"\xff\xfe\xfa not utf-8 at all", ContentKind.BINARY),
    ],
)
def test_content_classification(content_type: str, head: bytes, kind: ContentKind) -> None:
    assert classify(content_type, head) is kind


def test_decoding_honours_declared_detected_and_bogus_charsets() -> None:
    assert decode("café".encode("latin-1"), "text/plain; charset=ISO-8859-1") == "café"
    assert decode("café".encode(), "text/plain") == "café"
    assert decode("café".encode(), "text/plain; charset=no-such-codec") == "café"


def test_clean_text_removes_terminal_escapes() -> None:
    dirty = "title\x1b]0;pwned\x07 and \x1b[31mred\x1b[0m\r\nnext\x9b2J\n\n\n\nend\x00"
    assert clean_text(dirty) == "title]0;pwned and [31mred[0m\nnext2J\n\nend"


def test_truncation_prefers_a_sentence_end() -> None:
    text = "First sentence here. Second one follows! Third is long and rambles on and on"
    cut, truncated = truncate(text, 50)
    assert truncated
    assert cut == "First sentence here. Second one follows!"
    assert truncate(text, 500) == (text, False)
    words = "word " * 40
    cut, truncated = truncate(words, 52)
    assert truncated
    assert cut.endswith("word")
    assert len(cut) <= 52
    assert truncate("x" * 100, 10) == ("x" * 10, True)


def test_settings_from_the_environment() -> None:
    env = {
        "CORRAL_SEARXNG_URL": " http://127.0.0.1:8888 ",
        "CORRAL_WEB_ALLOW": "127.0.0.1:9000, 10.0.0.0/8",
        "CORRAL_CHROMIUM": "off",
        "CORRAL_WEB_MAX_CHARS": "1234",
    }
    config = WebConfig.from_env(env, allow=["[::1]:80"])
    assert config.searxng_url == "http://127.0.0.1:8888"
    assert config.allow == ["127.0.0.1:9000", "10.0.0.0/8", "[::1]:80"]
    assert config.chromium == "off"
    assert config.max_chars == 1234
    assert WebConfig.from_env(env, searxng_url="http://x/").searxng_url == "http://x/"
    with pytest.raises(WebConfigError, match=r"CORRAL_WEB_ALLOW.*'intranet'"):
        WebConfig.from_env({"CORRAL_WEB_ALLOW": "intranet"})
    with pytest.raises(WebConfigError, match="CORRAL_WEB_MAX_CHARS"):
        WebConfig.from_env({"CORRAL_WEB_MAX_CHARS": "lots"})
    assert not config.browser_unsandboxed  # rendering without bubblewrap: off by default
    assert WebConfig.from_env({"CORRAL_BROWSER_UNSANDBOXED": "1"}).browser_unsandboxed
    assert not WebConfig.from_env({"CORRAL_BROWSER_UNSANDBOXED": "0"}).browser_unsandboxed
    with pytest.raises(WebConfigError, match="CORRAL_BROWSER_UNSANDBOXED"):
        WebConfig.from_env({"CORRAL_BROWSER_UNSANDBOXED": "maybe"})


def test_search_endpoint_forms() -> None:
    assert str(search_endpoint("http://127.0.0.1:8888")) == "http://127.0.0.1:8888/search"
    assert str(search_endpoint("https://s.example/searx/")) == "https://s.example/searx/search"
    assert str(search_endpoint("https://s.example/search?x=1")) == "https://s.example/search"
    with pytest.raises(AgentError, match="http"):
        search_endpoint("ftp://s.example/")
