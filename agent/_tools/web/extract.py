"""From response bytes to text a model can read.

HTML goes through resiliparse's main-content extraction (the article or the docs
body, with headings, lists, ``<pre>`` blocks and tables kept as plain text, and
navigation, footers and sidebars dropped); when that finds next to nothing the
whole visible text is used instead. Other text types are decoded and returned as
they are; binary types are refused with a message that says what they were.

Whatever comes out is cleaned of control characters (terminal escapes in a page
must never reach a terminal) and can be cut at a sentence boundary with
:func:`truncate`.

Why resiliparse: on the hand-written pages in ``bench/web_pages`` it scores a
word-overlap F1 close to trafilatura's and readability-lxml's (0.91 against 0.94)
while extracting a 1 MB article 9-20 times faster and importing in milliseconds,
with a fraction of trafilatura's install size (see ``bench/bench_web.py`` and the
commit that added it).
"""

from __future__ import annotations

import codecs
import enum
import re

from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.encoding import bytes_to_str, detect_encoding
from resiliparse.parse.html import HTMLTree

__all__ = [
    "ContentKind",
    "PageText",
    "classify",
    "clean_text",
    "decode",
    "html_to_text",
    "page_text",
    "truncate",
]


class ContentKind(enum.Enum):
    """What a response body is, for extraction."""

    #: HTML or XHTML: extract the main content.
    HTML = "html"
    #: Any other text (plain, JSON, XML, CSS, JavaScript, CSV, ...): return it as it is.
    TEXT = "text"
    #: Images, archives, PDFs, fonts ...: not returned.
    BINARY = "binary"


_TEXT_APPLICATION = re.compile(
    r"application/(json|xml|javascript|x-javascript|ecmascript|x-ndjson|ld\+json|yaml|x-yaml|"
    r"toml|x-sh|x-httpd-php|sql|graphql|rtf|x-tex|x-www-form-urlencoded)$|.*\+(json|xml)$"
)
_HTML_START = re.compile(rb"\s*(<!--.*?-->\s*)*<(!doctype\s+html|html|head|body)\b", re.I | re.S)
# C0 controls except tab and newline, DEL, C1 controls; also lone carriage returns.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_BLANK_RUNS = re.compile(r"\n[ \t]*\n(?:[ \t]*\n)+")


def _media_type(content_type: str) -> str:
    return content_type.split(";", 1)[0].strip().lower()


def classify(content_type: str, head: bytes) -> ContentKind:
    """The kind of a body from its ``Content-Type`` and its first bytes.

    Without a (useful) content type the bytes decide: an HTML start tag makes it
    HTML, a NUL byte or invalid UTF-8 makes it binary.
    """
    media = _media_type(content_type)
    if media in ("text/html", "application/xhtml+xml"):
        return ContentKind.HTML
    if media.startswith("text/") or _TEXT_APPLICATION.match(media):
        return ContentKind.TEXT
    if media and media not in ("application/octet-stream", "binary/octet-stream"):
        return ContentKind.BINARY
    sample = head[:4096].lstrip(b"\xef\xbb\xbf")
    if _HTML_START.match(sample):
        return ContentKind.HTML
    if b"\x00" in sample:
        return ContentKind.BINARY
    try:
        sample.decode("utf-8")
    except UnicodeDecodeError as exc:
        # A multi-byte character cut at the end of the sample is still text.
        if exc.start < len(sample) - 3:
            return ContentKind.BINARY
    return ContentKind.TEXT


def decode(body: bytes, content_type: str) -> str:
    """``body`` as text: the declared charset, else UTF-8, else a detected one; never fails."""
    match = re.search(r"charset\s*=\s*[\"']?([\w.:-]+)", content_type, re.I)
    encoding = match.group(1) if match else ""
    try:
        codecs.lookup(encoding)
    except LookupError:
        try:
            return body.decode("utf-8")
        except UnicodeDecodeError:
            encoding = detect_encoding(body, from_html_meta=True)
    return bytes_to_str(body, encoding, fallback_encodings=("utf-8", "cp1252"))


def clean_text(text: str) -> str:
    """Control characters removed, line ends normalised, blank-line runs collapsed."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _CONTROL.sub("", text)
    return _BLANK_RUNS.sub("\n\n", text).strip()


class PageText:
    """A page's title and text, and the text's full length when ``text`` is a prefix."""

    __slots__ = ("length", "text", "title")

    def __init__(self, title: str, text: str, length: int | None = None) -> None:
        self.title = title
        self.text = text
        self.length = len(text) if length is None else length

    def __repr__(self) -> str:
        return f"<PageText title={self.title!r} chars={len(self.text)}>"


#: Matches an element nested this deep below <body> (real pages stay far below it).
_TOO_DEEP = "body" + " > *" * 400


def _extract(tree: HTMLTree, *, main_content: bool) -> str:
    return extract_plain_text(
        tree,
        preserve_formatting=True,
        main_content=main_content,
        list_bullets=True,
        alt_texts=False,
    )


def html_to_text(html: str) -> PageText:
    """The title and main content of an HTML page (blocking: run it in a thread)."""
    tree = HTMLTree.parse(html)
    title = clean_text(" ".join((tree.title or "").split()))
    # The main-content heuristics take time that grows faster than the square of the
    # nesting depth (a 540 kB page of 20,000 nested <div>s: 44 s), and a worker thread
    # cannot be cancelled; such a page gets the linear plain-text pass only.
    too_deep = tree.document is not None and tree.document.query_selector(_TOO_DEEP) is not None
    main = "" if too_deep else clean_text(_extract(tree, main_content=True))
    if len(main) < 200:
        # The heuristics can drop everything on an unusual page; then all visible
        # text is better than nothing.
        whole = clean_text(_extract(tree, main_content=False))
        if len(whole) > 2 * len(main):
            main = whole
    return PageText(title, main)


def page_text(body: bytes, content_type: str, kind: ContentKind) -> PageText:
    """The text of a body that is not binary (blocking: run it in a thread)."""
    text = decode(body, content_type)
    if kind is ContentKind.HTML:
        return html_to_text(text)
    return PageText("", clean_text(text))


_SENTENCE_END = re.compile(r"[.!?…。][\"')\]]*(?=\s)|\n\n")


def truncate(text: str, limit: int) -> tuple[str, bool]:
    """``text`` cut to at most ``limit`` characters, at a sentence end if one is near.

    Returns:
        The text and whether anything was cut. The cut falls after the last
        sentence end (or paragraph break) in the second half of the limit, else at
        the last white space, else at the limit itself.
    """
    if len(text) <= limit:
        return text, False
    window = text[:limit]
    cut = 0
    for match in _SENTENCE_END.finditer(window):
        cut = match.end()
    if cut < limit // 2:
        space = window.rfind(" ")
        cut = space if space >= limit // 2 else limit
    return window[:cut].rstrip(), True
