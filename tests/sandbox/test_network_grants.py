"""``permissions.network`` as a list of destinations: parsing, validation, matching.

Pure: no process, no socket. The proxy that enforces the list is tested in
``tests/supervisor/test_egress*.py``; the namespace it listens in in
``test_egress_namespace.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox import (
    Destinations,
    Permissions,
    PermissionsError,
    check_network,
    parse_destination,
    parse_host,
    proxy_env,
    validate_permissions,
)


@pytest.mark.parametrize(
    ("entry", "canonical", "ports"),
    [
        ("api.github.com", "api.github.com", (80, 443)),
        ("API.GitHub.com.", "api.github.com", (80, 443)),
        ("*.githubusercontent.com", "*.githubusercontent.com", (80, 443)),
        ("api.openai.com:443", "api.openai.com:443", (443,)),
        ("203.0.113.7:8443", "203.0.113.7:8443", (8443,)),
        ("[2001:db8::7]:8443", "[2001:db8::7]:8443", (8443,)),
        ("2001:db8::7", "2001:db8::7", (80, 443)),
        ("[::ffff:127.0.0.1]:80", "127.0.0.1:80", (80,)),
        ("xn--bcher-kva.example", "xn--bcher-kva.example", (80, 443)),
    ],
)
def test_entries_parse_to_a_canonical_form(
    entry: str, canonical: str, ports: tuple[int, ...]
) -> None:
    dest = parse_destination(entry)
    assert dest.text == canonical
    assert dest.ports == ports


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ("", "empty"),
        (" api.github.com", "spaces"),
        ("https://api.github.com", "not a URL"),
        ("api.github.com/path", "not a URL"),
        ("user@api.github.com", "not a URL"),
        ("api.github.com:0", "port must be"),
        ("api.github.com:65536", "port must be"),
        ("api.github.com:https", "port must be"),
        ("*", "not a host name"),
        ("*.com", "below the top level"),
        ("a*.example.com", "not a host name"),
        ("exa mple.com", "not a host name"),
        ("-bad.example.com", "not a host name"),
        ("bücher.example", "punycode"),
        ("localhost", "localhost names"),
        ("api.localhost:8080", "localhost names"),
        ("2130706433", "a.b.c.d"),
        ("0x7f.1:80", "a.b.c.d"),
        ("127.1", "a.b.c.d"),
        ("[not-v6]:80", "not an IPv6"),
        ("1.2.3.4.5", "a.b.c.d"),
    ],
)
def test_malformed_entries_are_refused_with_the_reason(entry: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_destination(entry)


def test_a_malformed_entry_is_refused_at_load_with_the_field_named(tmp_path: Path) -> None:
    perms = Permissions(network=["api.github.com", "https://evil.example/x"])
    with pytest.raises(PermissionsError) as caught:
        validate_permissions(perms, str(tmp_path), home="", corral_home="")
    assert caught.value.field == "permissions.network[1]"
    assert "not a URL" in caught.value.message


@pytest.mark.parametrize(
    "entry",
    [
        "127.0.0.1:8080",
        "10.1.2.3",
        "172.16.0.1:443",
        "192.168.1.1:80",
        "169.254.169.254",  # cloud metadata
        "100.64.0.1:80",  # CGNAT
        "[::1]:8080",
        "[fd00::1]:80",  # unique local
        "[fe80::1]:80",  # link-local
        "[::ffff:10.0.0.1]:80",  # an IPv4 private address in IPv6 clothing
        "0.0.0.0:80",
    ],
)
def test_a_local_address_needs_unsafe(tmp_path: Path, entry: str) -> None:
    with pytest.raises(PermissionsError) as caught:
        validate_permissions(Permissions(network=[entry]), str(tmp_path), home="", corral_home="")
    assert caught.value.field == "permissions.network[0]"
    assert "permissions.unsafe" in caught.value.message
    granted = validate_permissions(
        Permissions(network=[entry], unsafe=[entry]), str(tmp_path), home="", corral_home=""
    )
    canonical = parse_destination(entry).text
    assert granted.network == [canonical]
    assert granted.unsafe == [canonical]


def test_public_and_documentation_addresses_need_no_unsafe(tmp_path: Path) -> None:
    granted = validate_permissions(
        Permissions(network=["203.0.113.7:8443", "8.8.8.8:53", "api.github.com"]),
        str(tmp_path),
        home="",
        corral_home="",
    )
    assert granted.network == ["203.0.113.7:8443", "8.8.8.8:53", "api.github.com"]
    assert granted.unsafe == []


def test_unsafe_must_name_a_listed_entry(tmp_path: Path) -> None:
    perms = Permissions(network=["127.0.0.1:8080"], unsafe=["127.0.0.1:8081"])
    with pytest.raises(PermissionsError) as caught:
        validate_permissions(perms, str(tmp_path), home="", corral_home="")
    # The entry itself is what is refused (its unsafe twin does not match it).
    assert caught.value.field == "permissions.network[0]"
    perms = Permissions(network=["api.github.com"], unsafe=["api.gitlab.com"])
    with pytest.raises(PermissionsError) as caught:
        validate_permissions(perms, str(tmp_path), home="", corral_home="")
    assert caught.value.field == "permissions.unsafe[0]"
    assert "network" in caught.value.message


def test_true_false_and_empty_lists() -> None:
    assert check_network(True, []) == (True, [])
    assert check_network(False, []) == (False, [])
    assert check_network([], []) == (False, [])  # no destination: no network
    assert check_network(["a.example", "A.example."], []) == (["a.example"], [])


def test_too_many_entries_are_refused() -> None:
    with pytest.raises(PermissionsError, match="at most"):
        check_network([f"h{i}.example" for i in range(257)], [])


def test_matching_names_patterns_ports_and_addresses() -> None:
    dests = Destinations(
        ["api.github.com", "*.githubusercontent.com", "api.openai.com:443", "127.0.0.1:8080"]
    )
    assert dests.match("api.github.com", 443) is not None
    assert dests.match("API.GITHUB.COM.", 80) is not None
    assert dests.match("api.github.com", 22) is None
    assert dests.match("github.com", 443) is None
    assert dests.match("evilapi.github.com", 443) is None
    assert dests.match("raw.githubusercontent.com", 443) is not None
    assert dests.match("a.b.githubusercontent.com", 443) is not None
    assert dests.match("githubusercontent.com", 443) is None  # the pattern is below it
    assert dests.match("xgithubusercontent.com", 443) is None
    assert dests.match("api.openai.com", 443) is not None
    assert dests.match("api.openai.com", 80) is None
    # An address matches only an entry naming it, in any spelling of it...
    for spelling in ("127.0.0.1", "2130706433", "0x7f.0.0.1", "[::ffff:127.0.0.1]"):
        assert dests.match(spelling, 8080) is not None, spelling
    assert dests.match("127.0.0.1", 8081) is None
    assert dests.match("127.0.0.2", 8080) is None
    # ...and a name never matches an address entry, whatever it resolves to.
    assert dests.match("localhost", 8080) is None
    assert parse_host("localhost") is None


def test_proxy_variables_upper_and_lower_case() -> None:
    env = proxy_env(3128)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        assert env[name] == env[name.lower()]
    assert env["HTTP_PROXY"] == "http://127.0.0.1:3128"
    assert env["ALL_PROXY"] == "socks5h://127.0.0.1:3128"
    assert env["NO_PROXY"] == "localhost,127.0.0.1,::1"
    # A granted loopback address is the host's: through the proxy, not the child's own.
    assert proxy_env(3128, ["127.0.0.1:8080", "api.example.com"])["no_proxy"] == "localhost,::1"
