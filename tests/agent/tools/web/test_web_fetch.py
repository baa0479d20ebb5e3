"""``web_fetch`` against real pages on a loopback server (plain GET, no browser)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from web_fakes import TIMEOUT, Page, Site, config_for, open_site
from web_fakes import loopback_only as loopback_only  # a fixture

from agent._tools.base import ToolRunResult
from agent._tools.web import WebFetchTool

pytestmark = pytest.mark.usefixtures("loopback_only")

PAGES = Path(__file__).resolve().parents[4] / "bench" / "web_pages"


@pytest.fixture
def site() -> Iterator[Site]:
    with open_site() as s:
        yield s


async def fetch(
    tool: WebFetchTool, url: str, progress: list[str] | None = None, **args: Any
) -> ToolRunResult:
    seen = progress if progress is not None else []

    async def report(line: str) -> None:
        seen.append(line)

    with trio.fail_after(TIMEOUT):
        return await tool.run("c1", {"url": url, **args}, report)


def text(result: ToolRunResult) -> str:
    (block,) = result.content
    return getattr(block, "text", "")


def plain(site: Site, **fields: Any) -> WebFetchTool:
    return WebFetchTool(config_for(site, chromium="off", **fields))


async def test_an_article_comes_back_as_its_main_text(site: Site) -> None:
    site.routes["/news"] = Page(body=(PAGES / "news.html").read_bytes())
    progress: list[str] = []
    result = await fetch(plain(site), site.url("/news"), progress)
    assert not result.is_error, text(result)
    out = text(result)
    assert out.startswith(f"URL: {site.url('/news')}\nTitle: Harbour city votes")
    assert "protected corridor for bicycles" in out
    assert "Traders along the road are split." in out
    for chrome in ("Accept all", "Most read", "Advertise with us", "<p>", "gtag("):
        assert chrome not in out
    assert progress == [f"GET {site.url('/news')}"]
    (hit,) = site.hits
    assert hit.headers["user-agent"].startswith("corral/")
    assert "web_fetch" in hit.headers["user-agent"]


async def test_text_types_come_back_as_they_are(site: Site) -> None:
    doc = {"items": [1, 2, 3], "note": "plain JSON"}
    site.routes["/data.json"] = Page(body=json.dumps(doc), content_type="application/json")
    site.routes["/notes.txt"] = Page(body="line one\nline two\n", content_type="text/plain")
    tool = plain(site)
    as_json = await fetch(tool, site.url("/data.json"))
    assert not as_json.is_error
    assert "Content-Type: application/json" in text(as_json)
    assert json.loads(text(as_json).split("\n\n", 1)[1]) == doc
    as_text = await fetch(tool, site.url("/notes.txt"))
    assert text(as_text).endswith("line one\nline two")


async def test_binary_content_is_refused_with_its_type_and_size(site: Site) -> None:
    site.routes["/logo.png"] = Page(
        body=b"\x89PNG\r\n\x1a\n" + bytes(1000), content_type="image/png"
    )
    site.routes["/blob"] = Page(body=bytes(range(256)) * 4, content_type="")
    tool = plain(site)
    png = await fetch(tool, site.url("/logo.png"))
    assert png.is_error
    assert "binary content (image/png, 1008 bytes); web_fetch returns text only" in text(png)
    blob = await fetch(tool, site.url("/blob"))
    assert blob.is_error
    assert "binary content (unknown type, 1024 bytes)" in text(blob)


async def test_http_errors_are_error_results_with_the_error_page(site: Site) -> None:
    site.routes["/gone"] = Page(status=410, body="<h1>Gone</h1><p>This page was removed.</p>")
    result = await fetch(plain(site), site.url("/gone"))
    assert result.is_error
    assert "HTTP 410 Gone" in text(result)
    assert "This page was removed." in text(result)
    missing = await fetch(plain(site), site.url("/nowhere"))
    assert missing.is_error
    assert "HTTP 404" in text(missing)


async def test_the_body_is_read_up_to_the_byte_cap_only(site: Site) -> None:
    sentence = b"All work and no play makes a dull page. "
    site.routes["/huge"] = Page(
        body=sentence * 1000, content_type="text/plain", repeat=50 * 1024 * 1024
    )
    result = await fetch(plain(site, max_bytes=100_000), site.url("/huge"))
    assert not result.is_error
    assert "Only the first 100000 bytes of the body were read." in text(result)
    # The server could not push the 50 MiB it declared: the client stopped reading.
    assert site.sent < 20 * 1024 * 1024


async def test_compressed_bodies_are_inflated_within_the_cap(site: Site) -> None:
    site.routes["/gz"] = Page(body="<p>Compressed but readable text.</p>" * 10, gzip=True)
    ok = await fetch(plain(site), site.url("/gz"))
    assert "Compressed but readable text." in text(ok)
    assert site.hits[0].headers["accept-encoding"] == "gzip, deflate"
    # 100 MiB of zeros in about 100 KiB: never held in memory whole.
    site.routes["/bomb"] = Page(
        body=b"0" * (100 * 1024 * 1024), content_type="text/plain", gzip=True
    )
    bomb = await fetch(plain(site, max_bytes=1_000_000), site.url("/bomb"))
    assert not bomb.is_error
    assert "Only the first 1000000 bytes of the body were read." in text(bomb)


async def test_unsupported_content_encodings_are_refused(site: Site) -> None:
    site.routes["/br"] = Page(body=b"\x0b\x02\x80hello\x03", headers={"Content-Encoding": "br"})
    result = await fetch(plain(site), site.url("/br"))
    assert result.is_error
    assert "unsupported content encoding 'br'" in text(result)
    site.routes["/bad-gzip"] = Page(body=b"not gzip at all", headers={"Content-Encoding": "gzip"})
    corrupt = await fetch(plain(site), site.url("/bad-gzip"))
    assert corrupt.is_error
    assert "corrupt gzip body" in text(corrupt)


async def test_output_is_capped_at_a_sentence_end_with_a_note(site: Site) -> None:
    paragraph = "<p>" + " ".join(f"Sentence number {n} is here." for n in range(400)) + "</p>"
    site.routes["/long"] = Page(body=f"<html><body><article>{paragraph}</article></body></html>")
    tool = plain(site, max_chars=2000)
    result = await fetch(tool, site.url("/long"))
    body = text(result).split("\n\n", 1)[1]
    shown, note = body.split("\n\n[Truncated: ")
    assert len(shown) <= 2000
    assert shown.endswith("is here.")
    assert note.startswith(f"{len(shown)} of ")
    assert "at most 2000" in note
    smaller = await fetch(tool, site.url("/long"), max_chars=300)
    assert len(text(smaller).split("\n\n", 1)[1].split("\n\n[Truncated")[0]) <= 300
    larger = await fetch(tool, site.url("/long"), max_chars=10**9)  # bounded by the config
    assert len(text(larger).split("\n\n", 1)[1].split("\n\n[Truncated")[0]) <= 2000


async def test_a_server_that_stalls_is_a_timeout_error(site: Site) -> None:
    site.routes["/slow"] = Page(body="<p>late</p>", delay=3)
    result = await fetch(plain(site, read_timeout=0.5), site.url("/slow"))
    assert result.is_error
    assert "timed out" in text(result)


async def test_a_pathologically_nested_page_is_still_read(site: Site) -> None:
    # 60,000 nested <div>s: the main-content heuristics would take hours on it
    # (their time grows faster than the square of the depth); the depth check
    # sends it through the linear plain-text pass instead.
    deep = "<html><body>" + "<div><p>Deep words.</p>" * 60_000 + "</body></html>"
    site.routes["/deep"] = Page(body=deep)
    result = await fetch(plain(site, max_chars=500), site.url("/deep"))
    assert not result.is_error
    assert "Deep words." in text(result)


async def test_terminal_escapes_in_a_page_are_neutralised(site: Site) -> None:
    site.routes["/evil"] = Page(
        body="<title>\x1b]0;owned\x07Title</title><p>Text \x1b[2J\x1b[31mred\x9b1m and more.</p>",
    )
    result = await fetch(plain(site), site.url("/evil"))
    assert "\x1b" not in text(result)
    assert "\x9b" not in text(result)
    assert "\x07" not in text(result)
    assert "red" in text(result)


async def test_bad_arguments_are_error_results(site: Site) -> None:
    tool = plain(site)
    for args in ({"url": ""}, {"url": 5}, {"url": site.url(), "render": "sometimes"}, {}):

        async def progress(line: str) -> None:
            pass

        with trio.fail_after(TIMEOUT):
            result = await tool.run("c", args, progress)
        assert result.is_error
        assert text(result).startswith("web_fetch")
    assert site.hits == []


async def test_an_app_shell_without_a_browser_returns_its_text_with_a_note(site: Site) -> None:
    site.routes["/app"] = Page(body="<html><body><div id=root>Loading…</div><script></script>")
    result = await fetch(plain(site), site.url("/app"))
    assert not result.is_error
    assert "looks like a JavaScript app, but rendering failed" in text(result)
    assert "no Chromium found" in text(result)
    assert "Loading…" in text(result)
    forced = await fetch(plain(site), site.url("/app"), render="always")
    assert forced.is_error
    assert "no Chromium found" in text(forced)
