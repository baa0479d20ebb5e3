"""The ``web_fetch`` tool: a guarded GET that returns a page's text, not its HTML.

1. The URL is pre-flighted and fetched through the :class:`~supervisor.NetGuard`
   (every address checked before and at dial time, redirects followed by corral
   and checked hop by hop, environment proxies ignored), with connect, read and
   total timeouts and a cap on the body bytes read.
2. HTML is reduced to its main content (:mod:`.extract`), other text types are
   returned as they are, binary types get an error naming the type and size.
3. When the page's text is 512 bytes or less (a JavaScript app shell) or the
   model asks for it (``render: "always"``), the page is rendered in headless
   Chromium (:mod:`.browser`), whose every request goes through the same guard.
4. The text is capped (50,000 characters unless configured or asked otherwise),
   cut at a sentence end, with a note saying so.

Every failure becomes an error result the model can read; nothing raises.
"""

from __future__ import annotations

import enum
import typing
from typing import Any

import httpx
import msgspec
import trio

from sandbox import Sandbox
from supervisor import NetGuard

from ..._exceptions import ToolError
from ..._providers.base import ToolSpec
from ..._version import __version__
from ..base import Progress, ToolKind, ToolRunResult, error_result, text_result
from ..files import decode_args
from .browser import PageRenderer, Rendered
from .client import Fetched, fetch_checked
from .config import WebConfig
from .errors import BrowserError, FetchFailed, WebError
from .extract import ContentKind, PageText, classify, clean_text, page_text, truncate
from .guard import open_client

__all__ = ["APP_SHELL_BYTES", "USER_AGENT", "RenderMode", "WebFetchTool"]

#: A page whose extracted text is this many bytes or fewer is rendered in the browser.
APP_SHELL_BYTES = 512
_ACCEPT = "text/html,application/xhtml+xml,text/plain;q=0.9,application/json;q=0.8,*/*;q=0.5"


class RenderMode(enum.Enum):
    """When ``web_fetch`` renders a page in headless Chromium."""

    #: Only when the plain GET yields an app shell (512 bytes of text or less).
    AUTO = "auto"
    #: Always (the page needs JavaScript).
    ALWAYS = "always"
    #: Never.
    NEVER = "never"


class FetchArgs(msgspec.Struct, frozen=True, kw_only=True):
    """Arguments of ``web_fetch``."""

    url: str
    max_chars: int | None = None
    render: RenderMode = RenderMode.AUTO


#: ``User-Agent`` of web_fetch and web_search: who is asking, said plainly.
USER_AGENT: typing.Final = f"corral/{__version__} (web_fetch; AI agent tool)"


@typing.final
class WebFetchTool:
    """``web_fetch``: fetch a URL and return its readable text.

    Args:
        config: limits, timeouts, allowances and the browser setting.
        guard: the network guard (default: one built from ``config``).
        sandbox: the sandbox backend the browser runs in.
        require_sandbox: refuse to render without a sandbox.
    """

    #: As the model sees it.
    spec: ToolSpec
    #: corral's own (``--tools +web``).
    kind = ToolKind.BUILTIN
    owner = ""

    def __init__(
        self,
        config: WebConfig,
        *,
        guard: NetGuard | None = None,
        sandbox: Sandbox | None = None,
        require_sandbox: bool = False,
    ) -> None:
        self.config = config
        self.guard = guard or NetGuard(config.policy())
        self.renderer = PageRenderer(
            self.guard,
            config,
            sandbox=sandbox,
            require_sandbox=require_sandbox,
            user_agent=USER_AGENT,
        )
        self.spec = ToolSpec(
            name="web_fetch",
            description=(
                "Fetch a web page (http or https) and return its readable text: the main "
                "content of HTML pages, other text as is. Pages that need JavaScript are "
                "rendered in a headless browser. Internal and private addresses are refused. "
                f"Output is at most {config.max_chars} characters, cut at a sentence end."
            ),
            schema={
                "type": "object",
                "properties": {
                    "url": {"type": "string", "description": "The http(s) URL to fetch."},
                    "max_chars": {
                        "type": "integer",
                        "minimum": 1,
                        "description": f"Characters of text at most (<= {config.max_chars}).",
                    },
                    "render": {
                        "type": "string",
                        "enum": [m.value for m in RenderMode],
                        "description": "auto: render only JavaScript app shells (default); "
                        "always: render in the browser; never: plain GET only.",
                    },
                },
                "required": ["url"],
            },
        )

    def __repr__(self) -> str:
        return f"<WebFetchTool {self.guard!r} {self.renderer!r}>"

    async def run(self, call_id: str, args: dict[str, Any], progress: Progress) -> ToolRunResult:
        """Fetch, extract, maybe render, cap.

        Cancellation: the request is abandoned and a running browser is killed and
        reaped before ``Cancelled`` propagates.
        """
        try:
            parsed = decode_args(args, FetchArgs, "web_fetch")
            if not parsed.url.strip():
                raise WebError("url must not be empty")
            limit = min(parsed.max_chars or self.config.max_chars, self.config.max_chars)
            if limit < 1:
                raise WebError("max_chars must be positive")
            await progress(f"GET {clean_text(parsed.url)[:300]}")
            fetched = await self._get(parsed.url, progress)
            return await self._answer(fetched, parsed.render, limit, progress)
        except ToolError as exc:
            message = str(exc)
            if not message.startswith("web_fetch"):
                message = f"web_fetch: {message}"
            return error_result(clean_text(message))

    async def _get(self, url: str, progress: Progress) -> Fetched:
        config = self.config
        timeout = httpx.Timeout(config.read_timeout, connect=config.connect_timeout)
        headers = {"user-agent": USER_AGENT, "accept": _ACCEPT}

        async def redirected(target: str) -> None:
            await progress(f"redirected to {clean_text(target)[:300]}")

        async with open_client(self.guard, timeouts=timeout, headers=headers) as client:
            with trio.move_on_after(config.total_timeout):
                return await fetch_checked(
                    client,
                    self.guard,
                    url,
                    max_bytes=config.max_bytes,
                    max_redirects=config.max_redirects,
                    on_redirect=redirected,
                )
        raise FetchFailed(url, f"no complete response within {config.total_timeout:g} s")

    async def _answer(
        self, fetched: Fetched, mode: RenderMode, limit: int, progress: Progress
    ) -> ToolRunResult:
        kind = classify(fetched.content_type, fetched.body[:4096])
        if kind is ContentKind.BINARY:
            size = f"{len(fetched.body)}{'+' if fetched.truncated else ''} bytes"
            what = fetched.content_type.split(";")[0].strip() or "unknown type"
            raise FetchFailed(
                fetched.url,
                f"binary content ({what}, {size}); web_fetch returns text only "
                f"(HTTP {fetched.status})",
                status=fetched.status,
            )
        page = await trio.to_thread.run_sync(page_text, fetched.body, fetched.content_type, kind)
        if fetched.status >= 400:
            snippet, _ = truncate(page.text, 1000)
            detail = f"\n\nThe error page says:\n{snippet}" if snippet else ""
            raise FetchFailed(
                fetched.url,
                f"HTTP {fetched.status} {fetched.reason}{detail}",
                status=fetched.status,
            )
        notes: list[str] = []
        if fetched.truncated:
            notes.append(f"Only the first {self.config.max_bytes} bytes of the body were read.")
        shell = len(page.text.encode()) <= APP_SHELL_BYTES
        if kind is ContentKind.HTML and (
            mode is RenderMode.ALWAYS or (mode is RenderMode.AUTO and shell)
        ):
            page = await self._render(fetched, page, mode, limit, progress, notes)
        return self._format(fetched, page, limit, notes)

    async def _render(
        self,
        fetched: Fetched,
        page: PageText,
        mode: RenderMode,
        limit: int,
        progress: Progress,
        notes: list[str],
    ) -> PageText:
        why = "asked for" if mode is RenderMode.ALWAYS else "the page looks like a JavaScript app"
        try:
            self.renderer.check()
            await progress(f"rendering in headless Chromium ({why})")
            rendered: Rendered | None = None
            with trio.move_on_after(self.config.browser_timeout):
                rendered = await self.renderer.render(
                    fetched.url, max_chars=limit + 1, prefetched=fetched
                )
            if rendered is None:
                raise BrowserError("render", f"no result within {self.config.browser_timeout:g} s")
        except BrowserError as exc:
            if mode is RenderMode.ALWAYS:
                raise
            notes.append(f"The page looks like a JavaScript app, but rendering failed: {exc}")
            return page
        how = "sandboxed" if rendered.sandboxed else "not sandboxed"
        note = f"Rendered with headless Chromium ({how}; {rendered.requests} requests"
        if rendered.blocked:
            note += f", {len(rendered.blocked)} blocked: " + "; ".join(rendered.blocked)
        notes.append(note + ").")
        text = clean_text(rendered.text)
        length = len(text) + max(rendered.length - len(rendered.text), 0)
        return PageText(clean_text(rendered.title) or page.title, text, length)

    def _format(
        self, fetched: Fetched, page: PageText, limit: int, notes: list[str]
    ) -> ToolRunResult:
        lines = [f"URL: {clean_text(fetched.url)}"]
        if page.title:
            lines.append(f"Title: {page.title}")
        media = fetched.content_type.split(";")[0].strip()
        if media and not media.startswith("text/html"):
            lines.append(f"Content-Type: {clean_text(media)}")
        lines += [f"[{clean_text(note)}]" for note in notes]
        body, cut = truncate(page.text, limit)
        lines.append("")
        lines.append(body or "(the page has no readable text)")
        if cut:
            lines.append(
                f"\n[Truncated: {len(body)} of {page.length} characters shown, cut at a "
                "sentence end where possible. Pass a larger max_chars (at most "
                f"{self.config.max_chars}) for more, or fetch a more specific URL.]"
            )
        return text_result("\n".join(lines))
