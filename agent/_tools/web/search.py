"""The ``web_search`` tool: a query against a SearXNG instance.

The endpoint (``CORRAL_SEARXNG_URL`` or ``--searxng``) is the user's explicit
choice, so it may be local and is not subject to the network guard that protects
``web_fetch``; it is still asked with ``trust_env=False`` (no proxy from the
environment) and without following redirects. SearXNG must have the ``json``
format enabled (``search.formats`` in its ``settings.yml``).

Results come back as labelled plain text by default, numbered so the model can
refer to "result 2"::

    1. Title: ...
       URL: ...
       Snippet: ...

or, with ``output: "json"``, as ``{"query": ..., "results": [{"title", "url",
"snippet"}]}``. Every failure (no endpoint, empty query, HTTP error, timeout,
unreadable reply) is an error result, never an exception.
"""

from __future__ import annotations

import enum
import typing
from typing import Any

import httpx
import msgspec
import trio

from ..._exceptions import ToolError
from ..._providers.base import ToolSpec
from ..base import Progress, ToolKind, ToolRunResult, error_result, text_result
from ..files import decode_args
from .client import read_capped
from .config import WebConfig
from .errors import WebError
from .extract import clean_text
from .fetch import USER_AGENT

__all__ = ["SearchOutput", "WebSearchTool", "search_endpoint"]

#: Results returned at most, whatever the model asks for.
MAX_RESULTS = 20
_MAX_REPLY_BYTES = 4 * 1024 * 1024


class SearchOutput(enum.Enum):
    """How ``web_search`` formats its results."""

    #: Numbered, labelled title / URL / snippet triples.
    TEXT = "text"
    #: ``{"query": ..., "results": [...]}``.
    JSON = "json"


class SearchArgs(msgspec.Struct, frozen=True, kw_only=True):
    """Arguments of ``web_search``."""

    query: str
    count: int = 5
    output: SearchOutput = SearchOutput.TEXT


class SearchResult(msgspec.Struct, frozen=True, kw_only=True):
    """One result, as returned with ``output: "json"``."""

    title: str
    url: str
    snippet: str


class _Hit(msgspec.Struct):
    title: str | None = None
    url: str | None = None
    content: str | None = None


class _Reply(msgspec.Struct):
    results: list[_Hit]
    suggestions: list[Any] = []


_reply_decoder = msgspec.json.Decoder(_Reply)
_encoder = msgspec.json.Encoder()


def search_endpoint(base: str) -> httpx.URL:
    """The ``/search`` URL of a SearXNG base URL (a trailing ``/search`` is accepted).

    Raises:
        WebError: not an http(s) URL with a host.
    """
    try:
        url = httpx.URL(base.strip())
    except (httpx.InvalidURL, TypeError) as exc:
        raise WebError(f"the SearXNG URL {base!r} is invalid: {exc}") from exc
    if url.scheme not in ("http", "https") or not url.host:
        raise WebError(f"the SearXNG URL {base!r} must be an http(s) URL with a host")
    path = url.path.rstrip("/")
    if not path.endswith("/search"):
        path += "/search"
    return url.copy_with(path=path, query=None, fragment=None)


def _one_line(text: str | None) -> str:
    return " ".join(clean_text(text or "").split())


@typing.final
class WebSearchTool:
    """``web_search``: search the web through SearXNG."""

    #: As the model sees it.
    spec: ToolSpec
    #: corral's own (``--tools +web``).
    kind = ToolKind.BUILTIN
    owner = ""

    def __init__(self, config: WebConfig) -> None:
        self.config = config
        self.spec = ToolSpec(
            name="web_search",
            description=(
                "Search the web. Returns numbered results, each with a title, URL and "
                "snippet; fetch a result's URL with web_fetch to read it."
            ),
            schema={
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What to search for."},
                    "count": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": MAX_RESULTS,
                        "description": "Results wanted (default 5).",
                    },
                    "output": {
                        "type": "string",
                        "enum": [o.value for o in SearchOutput],
                        "description": "text (default) or json.",
                    },
                },
                "required": ["query"],
            },
        )

    def __repr__(self) -> str:
        return f"<WebSearchTool endpoint={self.config.searxng_url!r}>"

    async def run(self, call_id: str, args: dict[str, Any], progress: Progress) -> ToolRunResult:
        """Ask SearXNG and format its results.

        Cancellation: the request is abandoned.
        """
        try:
            parsed = decode_args(args, SearchArgs, "web_search")
            query = " ".join(parsed.query.split())
            if not query:
                raise WebError("the query is empty; say what to search for")
            if not self.config.searxng_url:
                raise WebError(
                    "no search endpoint is configured; the user can set CORRAL_SEARXNG_URL "
                    "(or pass --searxng URL) to a SearXNG instance with the json format enabled"
                )
            endpoint = search_endpoint(self.config.searxng_url)
            count = max(1, min(parsed.count, MAX_RESULTS))
            await progress(f"searching for {query[:200]!r}")
            reply = await self._ask(endpoint, query)
        except ToolError as exc:
            return error_result(f"web_search: {clean_text(str(exc))}")
        results = [
            SearchResult(
                title=_one_line(hit.title) or "(untitled)",
                url=_one_line(hit.url),
                snippet=_one_line(hit.content),
            )
            for hit in reply.results
            if hit.url
        ][:count]
        if parsed.output is SearchOutput.JSON:
            return text_result(_encoder.encode({"query": query, "results": results}).decode())
        return text_result(_as_text(query, results, reply.suggestions))

    async def _ask(self, endpoint: httpx.URL, query: str) -> _Reply:
        seconds = self.config.search_timeout
        where = str(endpoint)
        async with httpx.AsyncClient(
            timeout=httpx.Timeout(seconds, connect=self.config.connect_timeout),
            headers={"user-agent": USER_AGENT, "accept": "application/json"},
            trust_env=False,
            follow_redirects=False,
        ) as client:
            body = b""
            with trio.move_on_after(seconds):
                try:
                    params = {"q": query, "format": "json"}
                    async with client.stream("GET", endpoint, params=params) as response:
                        body, _ = await read_capped(response, _MAX_REPLY_BYTES)
                except httpx.TimeoutException as exc:
                    raise WebError(f"{where} did not answer within {seconds:g} s") from exc
                except httpx.HTTPError as exc:
                    raise WebError(f"cannot reach the search endpoint {where}: {exc}") from exc
                _check_status(where, response)
                try:
                    return _reply_decoder.decode(body)
                except msgspec.DecodeError as exc:
                    excerpt = _one_line(body[:120].decode("utf-8", "replace"))
                    raise WebError(
                        f"{where} sent a reply that is not SearXNG JSON ({exc}); it begins "
                        f"{excerpt!r}"
                    ) from exc
        raise WebError(f"{where} did not answer within {seconds:g} s")


def _check_status(where: str, response: httpx.Response) -> None:
    status = response.status_code
    if status == 200:
        return
    if status == 403:
        hint = "; the instance may not allow format=json (enable it in settings.yml search.formats)"
    elif status == 429:
        hint = "; the instance is rate limiting, wait before searching again"
    elif status >= 500:
        hint = "; the search backend failed, try again later or rephrase the query"
    elif 300 <= status < 400:
        hint = f"; it redirects to {response.headers.get('location', '?')}, configure that URL"
    else:
        hint = ""
    raise WebError(f"{where} answered HTTP {status} {response.reason_phrase}{hint}")


def _as_text(query: str, results: list[SearchResult], suggestions: list[Any]) -> str:
    if not results:
        text = f'No results for "{query}".'
        hints = [_one_line(str(s)) for s in suggestions if isinstance(s, str)][:5]
        return text + (f" Suggestions: {', '.join(hints)}" if hints else "")
    lines = [f'Search results for "{query}" ({len(results)}):', ""]
    for number, result in enumerate(results, 1):
        lines.append(f"{number}. Title: {result.title}")
        lines.append(f"   URL: {result.url}")
        lines.append(f"   Snippet: {result.snippet or '(none)'}")
        lines.append("")
    return "\n".join(lines).rstrip()
