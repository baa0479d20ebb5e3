"""Web tool figures: fetch + extract of a 1 MB article, the browser fallback, extraction quality.

Run from the repository root::

    python bench/bench_web.py [--quick] [--json-out PATH]   # or: python bench/run.py --only web

1. **Fetch + extract, 1 MB article.** ``web_fetch`` (plain GET, no browser) of an
   article page of about 1 MB from a loopback server, through the whole tool: the
   guard's checks, the capped read, main-content extraction and the 50k-character
   cap. The extraction alone is measured too.
2. **Browser fallback.** ``web_fetch`` of a JavaScript app shell that builds its
   text from a JSON request: plain GET, then headless Chromium (start, load with
   every request answered through the guard, 1.5 s settle, ``innerText``, kill).
   Sandboxed (bubblewrap) and not, where available.
3. **Extraction quality.** The hand-written pages in ``bench/web_pages/`` (a news
   article, a documentation page, a blog post, a Q&A thread and an encyclopedia
   entry, each with the navigation, sidebars, comments and footers of its kind)
   against a hand-made reference text of each: word-overlap precision, recall and
   F1 (bags of lower-cased words). Other extractors are measured on the same pages
   when they happen to be installed (they are not dependencies of corral).
"""

from __future__ import annotations

import collections
import http.server
import re
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from _common import Row, Rows, main

from agent._tools.web import WebConfig, WebFetchTool, find_chromium
from agent._tools.web.extract import html_to_text
from sandbox import SandboxUnavailable, select_sandbox

PAGES = Path(__file__).resolve().parent / "web_pages"
APP_SHELL = b"""<!doctype html><html><head><title>Shell</title></head><body>
<div id="root">Loading</div><script>
fetch('/api').then(r => r.json()).then(d => {
  document.getElementById('root').innerText = d.items.join('. ') + '.';
});</script></body></html>"""
API = b'{"items": ["First item of the app", "Second item of the app", "Third item"]}'


def _article(size: int) -> bytes:
    """news.html with its article's paragraphs repeated until the page is ``size`` bytes."""
    page = (PAGES / "news.html").read_text(encoding="utf-8")
    paragraphs = "\n".join(re.findall(r"<p>.*?</p>", page, re.S))
    at = page.index("<h2>Shops divided</h2>")
    copies = max(1, (size - len(page)) // len(paragraphs) + 1)
    return (page[:at] + (paragraphs + "\n") * copies + page[at:]).encode()


@contextmanager
def _serve(routes: dict[str, tuple[str, bytes]]) -> Iterator[int]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            kind, body = routes.get(self.path, ("text/plain", b"missing"))
            self.send_response(200 if self.path in routes else 404)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


async def _progress(line: str) -> None:
    return None


async def _timed_fetch(tool: WebFetchTool, url: str, runs: int) -> tuple[list[float], str]:
    times: list[float] = []
    text = ""
    for _ in range(runs):
        start = time.perf_counter()
        result = await tool.run("b", {"url": url}, _progress)
        times.append(time.perf_counter() - start)
        text = result.content[0].text if result.content else ""  # type: ignore[union-attr]
        if result.is_error:
            raise RuntimeError(text)
    return times, text


async def _fetch_rows(rows: Rows, quick: bool) -> None:
    page = _article(1_000_000)
    runs = 3 if quick else 10
    with _serve({"/article": ("text/html; charset=utf-8", page)}) as port:
        config = WebConfig(allow=[f"127.0.0.1:{port}"], chromium="off")
        tool = WebFetchTool(config)
        times, text = await _timed_fetch(tool, f"http://127.0.0.1:{port}/article", runs)
    rows.add(
        "fetch_extract_1mb",
        statistics.median(times) * 1000,
        "ms",
        note=f"median of {runs}; page {len(page) / 1e6:.2f} MB; {len(text)} chars returned",
    )
    html = page.decode()
    extract: list[float] = []
    for _ in range(runs):
        start = time.perf_counter()
        html_to_text(html)
        extract.append(time.perf_counter() - start)
    rows.add("extract_only_1mb", statistics.median(extract) * 1000, "ms", note="html_to_text")


async def _browser_rows(rows: Rows, quick: bool) -> None:
    if find_chromium() is None:
        rows.add("browser_fallback", 0, "ms", ok=False, note="no Chromium installed")
        return
    modes: list[tuple[str, Any]] = [("unsandboxed", None)]
    try:
        modes.append(("sandboxed", select_sandbox("required")))
    except SandboxUnavailable as exc:
        rows.add("browser_fallback.sandboxed", 0, "ms", note=f"no sandbox: {exc}")
    runs = 1 if quick else 5
    routes = {"/": ("text/html", APP_SHELL), "/api": ("application/json", API)}
    with _serve(routes) as port:
        for name, sandbox in modes:
            config = WebConfig(allow=[f"127.0.0.1:{port}"])
            tool = WebFetchTool(config, sandbox=sandbox)
            times, text = await _timed_fetch(tool, f"http://127.0.0.1:{port}/", runs)
            if "Second item of the app" not in text:
                raise RuntimeError(f"the app shell was not rendered: {text[:300]}")
            rows.add(
                f"browser_fallback.{name}",
                statistics.median(times) * 1000,
                "ms",
                note=f"median of {runs}; includes the 1.5 s settle",
            )


def _words(text: str) -> collections.Counter[str]:
    return collections.Counter(re.findall(r"\w+", text.lower()))


def _overlap(out: str, ref: str) -> tuple[float, float, float]:
    got, want = _words(out), _words(ref)
    common = sum((got & want).values())
    precision = common / max(sum(got.values()), 1)
    recall = common / max(sum(want.values()), 1)
    f1 = 2 * precision * recall / (precision + recall) if common else 0.0
    return precision, recall, f1


def _extractors() -> dict[str, Callable[[str], str]]:
    found: dict[str, Callable[[str], str]] = {
        "corral": lambda html: "\n".join(filter(None, [html_to_text(html).text]))
    }
    try:
        import trafilatura  # type: ignore[import-not-found]

        found["trafilatura"] = lambda html: trafilatura.extract(html, include_tables=True) or ""
    except ImportError:
        pass
    try:
        import lxml.html  # type: ignore[import-not-found]
        from readability import Document  # type: ignore[import-not-found]

        found["readability"] = lambda html: lxml.html.fromstring(
            Document(html).summary()
        ).text_content()
    except ImportError:
        pass
    return found


def _quality_rows(rows: Rows) -> None:
    pages = sorted(PAGES.glob("*.html"))
    for name, extract in _extractors().items():
        scores = []
        for page in pages:
            html = page.read_text(encoding="utf-8")
            ref = page.with_suffix(".txt").read_text(encoding="utf-8")
            precision, recall, f1 = _overlap(extract(html), ref)
            scores.append(f1)
            if name == "corral":
                rows.add(
                    f"quality.{page.stem}",
                    f1,
                    "F1",
                    note=f"precision {precision:.2f}, recall {recall:.2f}",
                )
        rows.add(
            f"quality.mean.{name}",
            statistics.fmean(scores),
            "F1",
            note=f"word overlap with the references, {len(pages)} pages",
        )


async def measure(quick: bool) -> list[Row]:
    rows = Rows("web")
    with rows.guard("fetch_extract_1mb"):
        await _fetch_rows(rows, quick)
    with rows.guard("browser_fallback"):
        await _browser_rows(rows, quick)
    with rows.guard("quality"):
        _quality_rows(rows)
    return rows.rows


if __name__ == "__main__":
    main(measure)
