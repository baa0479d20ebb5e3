"""``web_search`` against a fake SearXNG on loopback: good, failing, slow and garbage."""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest
import trio
from web_fakes import TIMEOUT, Page, Site, open_site

from agent._tools.base import ToolRunResult
from agent._tools.web import WebConfig, WebSearchTool

RESULTS = [
    {
        "title": f"Result number {n}",
        "url": f"https://example.org/{n}",
        "content": f"Snippet of result {n}.",
        "engine": "fake",
    }
    for n in range(1, 9)
]


@pytest.fixture
def searxng() -> Iterator[Site]:
    with open_site() as site:
        site.routes["/search"] = Page(
            body=json.dumps({"query": "q", "results": RESULTS, "suggestions": []}),
            content_type="application/json",
        )
        yield site


async def search(tool: WebSearchTool, **args: Any) -> ToolRunResult:
    async def progress(line: str) -> None:
        pass

    with trio.fail_after(TIMEOUT):
        return await tool.run("s1", args, progress)


def text(result: ToolRunResult) -> str:
    (block,) = result.content
    return getattr(block, "text", "")


def tool(site: Site, **fields: Any) -> WebSearchTool:
    # No allowance: the endpoint is the user's choice and may be local.
    return WebSearchTool(WebConfig(searxng_url=site.url("/"), **fields))


async def test_results_are_numbered_labelled_text(searxng: Site) -> None:
    result = await search(tool(searxng), query="  corral   sandbox ", count=3)
    assert not result.is_error
    assert text(result) == "\n".join(
        [
            'Search results for "corral sandbox" (3):',
            "",
            "1. Title: Result number 1",
            "   URL: https://example.org/1",
            "   Snippet: Snippet of result 1.",
            "",
            "2. Title: Result number 2",
            "   URL: https://example.org/2",
            "   Snippet: Snippet of result 2.",
            "",
            "3. Title: Result number 3",
            "   URL: https://example.org/3",
            "   Snippet: Snippet of result 3.",
        ]
    )
    (hit,) = searxng.hits
    path, _, query = hit.path.partition("?")
    assert path == "/search"
    assert urllib.parse.parse_qs(query) == {"q": ["corral sandbox"], "format": ["json"]}


async def test_json_output_is_structured(searxng: Site) -> None:
    result = await search(tool(searxng), query="x", output="json")
    doc = json.loads(text(result))
    assert doc["query"] == "x"
    assert len(doc["results"]) == 5  # the default count
    assert doc["results"][0] == {
        "title": "Result number 1",
        "url": "https://example.org/1",
        "snippet": "Snippet of result 1.",
    }
    many = json.loads(text(await search(tool(searxng), query="x", output="json", count=500)))
    assert len(many["results"]) == len(RESULTS)


async def test_no_results_says_so_with_suggestions(searxng: Site) -> None:
    searxng.routes["/search"] = Page(
        body=json.dumps({"results": [], "suggestions": ["corral rs", "coral reef"]}),
        content_type="application/json",
    )
    result = await search(tool(searxng), query="corral")
    assert not result.is_error
    assert text(result) == 'No results for "corral". Suggestions: corral rs, coral reef'


async def test_hostile_result_text_is_neutralised(searxng: Site) -> None:
    evil = {
        "title": "\x1b]0;pwn\x07Title\nsecond line",
        "url": "https://x/",
        "content": "a\x1b[2Jb",
    }
    searxng.routes["/search"] = Page(
        body=json.dumps({"results": [evil]}), content_type="application/json"
    )
    out = text(await search(tool(searxng), query="x"))
    assert "\x1b" not in out
    assert "\x07" not in out
    assert "1. Title: ]0;pwnTitle second line" in out


@pytest.mark.parametrize(
    ("page", "fields", "expected"),
    [
        (
            Page(status=502, body="bad gateway"),
            {},
            "HTTP 502 Bad Gateway; the search backend failed",
        ),
        (Page(status=403, body="forbidden"), {}, "may not allow format=json"),
        (Page(status=429, body="slow down"), {}, "rate limiting"),
        (Page(status=302, headers={"Location": "/elsewhere"}), {}, "redirects to /elsewhere"),
        (Page(body="<html>not json</html>"), {}, "not SearXNG JSON"),
        (Page(body='{"results": "nope"}'), {}, "not SearXNG JSON"),
        (Page(body="{}", delay=3), {"search_timeout": 0.5}, "did not answer within 0.5 s"),
    ],
)
async def test_backend_failures_are_error_results(
    searxng: Site, page: Page, fields: dict[str, Any], expected: str
) -> None:
    searxng.routes["/search"] = page
    result = await search(tool(searxng, **fields), query="anything")
    assert result.is_error
    assert text(result).startswith("web_search: ")
    assert expected in text(result)


async def test_setup_and_argument_mistakes_are_error_results(searxng: Site) -> None:
    unconfigured = await search(WebSearchTool(WebConfig()), query="x")
    assert unconfigured.is_error
    assert "CORRAL_SEARXNG_URL" in text(unconfigured)
    empty = await search(tool(searxng), query="   ")
    assert empty.is_error
    assert "query is empty" in text(empty)
    wrong = await search(tool(searxng), query=["not", "a", "string"])
    assert wrong.is_error
    assert "invalid arguments" in text(wrong)
    bad_url = await search(WebSearchTool(WebConfig(searxng_url="gopher://x/")), query="x")
    assert bad_url.is_error
    assert searxng.hits == []


async def test_an_unreachable_endpoint_is_an_error_result() -> None:
    with open_site() as gone:
        url = gone.url("/")
    result = await search(WebSearchTool(WebConfig(searxng_url=url)), query="x")
    assert result.is_error
    assert "cannot reach the search endpoint" in text(result)
