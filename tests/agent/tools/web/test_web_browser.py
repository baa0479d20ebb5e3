"""``web_fetch``'s headless Chromium fallback, with the real browser.

The pages are JavaScript app shells served from a loopback site. Every request the
page makes is answered by corral through the network guard: the "internal" site
the page reaches for must see no request at all. Each test checks that the browser
and its profile are gone afterwards, also when the call is cancelled.
"""

from __future__ import annotations

import contextlib
import glob
import os
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest
import trio
from web_fakes import TIMEOUT, Page, Site, config_for, open_site, resolver
from web_fakes import loopback_only as loopback_only  # a fixture

from agent._tools.base import ToolRunResult
from agent._tools.web import NetGuard, WebFetchTool, find_chromium
from sandbox import SandboxUnavailable, select_sandbox

if find_chromium() is None and not os.environ.get("CI"):
    pytest.skip("no Chromium here (./dev test installs it)", allow_module_level=True)

pytestmark = pytest.mark.usefixtures("loopback_only", "no_leaks", "no_profiles_left")

APP = """<!doctype html><html><head><title>Shell</title></head><body>
<div id="root">Loading…</div>
<script>
fetch('/api/items').then(r => r.json()).then(items => {
  document.getElementById('root').innerText =
    'Inventory: ' + items.map(i => i.name).join(', ') + '. Rendered by the app.';
  document.title = 'Inventory app';
});
</script></body></html>"""

ITEMS = '[{"name": "anchor"}, {"name": "buoy"}, {"name": "compass"}]'


def sandboxes() -> list[Any]:
    params: list[Any] = [pytest.param(None, id="unsandboxed")]
    with contextlib.suppress(SandboxUnavailable):
        params.append(pytest.param(select_sandbox("required"), id="sandboxed"))
    return params


@pytest.fixture
def no_profiles_left() -> Iterator[None]:
    pattern = os.path.join(tempfile.gettempdir(), "corral-chromium-*")
    before = set(glob.glob(pattern))
    yield
    assert set(glob.glob(pattern)) - before == set()


@pytest.fixture
def site() -> Iterator[Site]:
    with open_site() as s:
        s.routes["/"] = Page(body=APP)
        s.routes["/api/items"] = Page(body=ITEMS, content_type="application/json")
        yield s


@pytest.fixture
def internal() -> Iterator[Site]:
    with open_site() as s:
        yield s


def tool_for(site: Site, sandbox: Any = None, table: dict[str, Any] | None = None) -> WebFetchTool:
    # Without bubblewrap the browser renders only when the user allows it.
    config = config_for(site, browser_unsandboxed=sandbox is None)
    return WebFetchTool(
        config, guard=NetGuard(config.policy(), resolver(table or {})), sandbox=sandbox
    )


async def fetch(tool: WebFetchTool, url: str, **args: Any) -> tuple[ToolRunResult, list[str]]:
    progress: list[str] = []

    async def report(line: str) -> None:
        progress.append(line)

    with trio.fail_after(TIMEOUT):
        return await tool.run("c1", {"url": url, **args}, report), progress


def text(result: ToolRunResult) -> str:
    (block,) = result.content
    return getattr(block, "text", "")


@pytest.mark.parametrize("sandbox", sandboxes())
async def test_an_app_shell_is_rendered_in_the_browser(site: Site, sandbox: Any) -> None:
    result, progress = await fetch(tool_for(site, sandbox), site.url("/"))
    assert not result.is_error, text(result)
    out = text(result)
    assert "Title: Inventory app" in out
    assert "Inventory: anchor, buoy, compass. Rendered by the app." in out
    assert "Loading…" not in out
    how = "sandboxed" if sandbox is not None else "not sandboxed"
    assert f"[Rendered with headless Chromium ({how}; " in out
    assert progress[-1] == "rendering in headless Chromium (the page looks like a JavaScript app)"
    # The document came from the plain GET; the browser asked corral for the data.
    assert site.paths().count("/") == 1
    (api,) = [hit for hit in site.hits if hit.path == "/api/items"]
    assert "HeadlessChrome" in api.headers["user-agent"]
    assert "corral/" in api.headers["user-agent"]


async def test_requests_from_inside_the_page_go_through_the_guard(
    site: Site, internal: Site
) -> None:
    secret = f"http://127.0.0.1:{internal.port}/secret"
    site.routes["/bounce"] = Page(status=302, headers={"Location": secret})
    site.routes["/probe"] = Page(
        body=f"""<!doctype html><html><body><div id="out">probing</div>
<img src="http://2130706433:{internal.port}/pixel.png">
<iframe src="http://localhost:{internal.port}/frame"></iframe>
<script>
const urls = ['{secret}', 'http://metadata.example/latest/meta-data/', '/bounce'];
Promise.all(urls.map(u => fetch(u).then(() => 'reached', () => 'refused'))).then(r => {{
  document.getElementById('out').innerText = 'Probe results: ' + r.join(' ') + '.';
}});
</script></body></html>"""
    )
    tool = tool_for(site, table={"metadata.example": ["169.254.169.254"]})
    result, _ = await fetch(tool, site.url("/probe"), render="always")
    assert not result.is_error, text(result)
    out = text(result)
    assert "Probe results: refused refused refused." in out
    assert "blocked: " in out
    assert f"{secret}: loopback" in out
    assert "http://metadata.example/latest/meta-data/: link-local" in out
    assert internal.hits == []
    assert "/bounce" in site.paths()


async def test_render_always_renders_a_full_page_too(site: Site) -> None:
    site.routes["/full"] = Page(
        body="<html><head><title>Static</title></head><body><p>"
        + "A perfectly ordinary paragraph of static text. " * 30
        + "</p><script>document.body.append('Added by script.')</script></body></html>"
    )
    plain, _ = await fetch(tool_for(site), site.url("/full"))
    assert "Rendered with headless Chromium" not in text(plain)
    assert "Added by script." not in text(plain)
    rendered, _ = await fetch(tool_for(site), site.url("/full"), render="always")
    assert "Rendered with headless Chromium" in text(rendered)
    assert "Added by script." in text(rendered)


@pytest.mark.slow  # starts a real headless Chromium
async def test_cancelling_a_render_kills_the_browser(site: Site) -> None:
    site.routes["/hang"] = Page(body="never mind", content_type="text/plain", delay=30)
    site.routes["/stuck"] = Page(
        body="<html><body><script>fetch('/hang')</script><img src='/hang'></body></html>"
    )
    tool = tool_for(site)
    progress: list[str] = []

    async def report(line: str) -> None:
        progress.append(line)

    with trio.fail_after(TIMEOUT):
        with trio.move_on_after(5) as scope:
            await tool.run("c1", {"url": site.url("/stuck"), "render": "always"}, report)
    assert scope.cancelled_caught
    assert progress[-1].startswith("rendering in headless Chromium")
    # no_leaks and no_profiles_left check the rest.


async def test_a_browser_that_will_not_start_leaves_the_plain_text(site: Site) -> None:
    config = config_for(site, chromium="/bin/false", browser_unsandboxed=True)
    result, _ = await fetch(WebFetchTool(config), site.url("/"))
    assert not result.is_error
    assert "rendering failed: headless browser" in text(result)
    assert "Loading…" in text(result)
    forced, _ = await fetch(WebFetchTool(config), site.url("/"), render="always")
    assert forced.is_error
    assert "headless browser" in text(forced)


class _OtherBackend:
    """A sandbox backend that is not bubblewrap (only its name is looked at)."""

    backend = "sandbox-exec"


async def test_a_required_sandbox_without_bubblewrap_refuses_to_render(site: Site) -> None:
    config = config_for(site)
    tool = WebFetchTool(config, sandbox=_OtherBackend(), require_sandbox=True)  # type: ignore[arg-type]
    result, _ = await fetch(tool, site.url("/"), render="always")
    assert result.is_error
    assert "--sandbox required" in text(result)
    assert site.paths() == ["/"]  # the plain GET only; no browser started


@pytest.mark.parametrize("backend", [None, _OtherBackend()], ids=["none", "sandbox-exec"])
async def test_without_bubblewrap_rendering_is_refused_unless_allowed(
    site: Site, backend: Any
) -> None:
    tool = WebFetchTool(config_for(site), sandbox=backend)
    forced, _ = await fetch(tool, site.url("/"), render="always")
    assert forced.is_error
    assert "rendering is off without bubblewrap" in text(forced)
    assert "CORRAL_BROWSER_UNSANDBOXED=1" in text(forced)
    auto, _ = await fetch(tool, site.url("/"))
    assert not auto.is_error  # the plain text, with a note saying why
    assert "rendering failed: " in text(auto)
    assert "Loading…" in text(auto)
    assert site.paths() == ["/", "/"]  # no browser ever asked for /api/items
