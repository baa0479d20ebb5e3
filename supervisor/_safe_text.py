"""Text from others, made safe to show on a terminal.

Everything an extension, a model or a tool says may carry terminal control
sequences (a window title, the clipboard through OSC 52, a cleared screen, a
carriage return that overwrites the line) or invisible formatting characters
(bidi overrides, zero-width spaces) that make text read differently than it is.
Every human output point of the CLI passes foreign text through this module;
JSON outputs never do (escaping is JSON's job there, and the data stays exact),
with one exception: an extension's panel (:mod:`supervisor._panels`), whose text
exists only to be drawn, is cleaned once where it enters, for every client.

What is neutralised, by replacing each character with a visible escape in
Python's notation (``\\x1b``, ``\\x9b``, ``\\u202e``, ``\\r``, ``\\n``):

* every C0 control but tab, DEL, and every C1 control: ESC and CSI (``\\x9b``)
  start every escape sequence, so none can reach the terminal;
* every format character (Unicode category ``Cf``): bidi embeddings, overrides
  and isolates, zero-width space, word joiner, soft hyphen, tag characters, BOM;
  except ZERO WIDTH (NON-)JOINER, which some scripts and emoji need and which
  cannot reorder or hide text;
* line and paragraph separators (``Zl``, ``Zp``), lone surrogates (``Cs``, which
  could not even be encoded), and the blank-looking Hangul fillers and the
  combining grapheme joiner.

Tabs are kept (a tab only moves right, to tab stops the text cannot set).
Newlines are escaped by :func:`visible` (one line, for table cells and one-line
reports) and split on by :func:`visible_lines`, so that a caller can put its own
prefix (``[extension]``) on every line; ``\\r\\n`` counts as one line break. Both
functions are total: any ``str`` in, no exception out.
"""

from __future__ import annotations

import re
import typing

__all__ = ["StreamSanitizer", "visible", "visible_lines"]

# The class is spelled out rather than built from ``unicodedata`` at import (a scan
# of all code points costs a tenth of a second on every start); a test checks it
# against the running Python's Unicode database.
_UNSAFE = re.compile(
    "[\x00-\x08\x0a-\x1f\x7f-\x9f\xad\u034f\u0600-\u0605\u061c\u06dd\u070f"
    "\u0890\u0891\u08e2\u115f\u1160\u180e\u200b\u200e\u200f\u2028-\u202e"
    "\u2060-\u2064\u2066-\u206f\u3164\ud800-\udfff\ufeff\ufff9-\ufffb\uffa0"
    "\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3"
    "\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]"
)
#: The unsafe characters that ``str.isprintable`` accepts (it rejects all the others).
_PRINTABLE_UNSAFE = "\u034f\u115f\u1160\u3164\uffa0"
_NAMED = {"\n": "\\n", "\r": "\\r"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def visible(text: str) -> str:
    """``text`` on one line, every unsafe character replaced by a visible escape.

    Text without such characters is returned as is.
    """
    # Fast path, several times quicker than the regular expression's scan:
    # printable text only needs checking for the few printable unsafe characters.
    if text.isprintable() and not any(c in text for c in _PRINTABLE_UNSAFE):
        return text
    return _UNSAFE.sub(_escape, text)


def visible_lines(text: str) -> list[str]:
    """The lines of ``text``, each made :func:`visible`.

    Lines end at ``\\n`` or ``\\r\\n``; one line break at the very end does not
    start another (empty) line. A lone ``\\r`` stays in its line, escaped. Always
    at least one line.
    """
    body = text.replace("\r\n", "\n")
    body = body.removesuffix("\n")
    return [visible(line) for line in body.split("\n")]


@typing.final
class StreamSanitizer:
    """:func:`visible_lines` for text that arrives in pieces (streamed model text, a log).

    Newlines are kept as newlines; a ``\\r\\n`` split across two pieces still
    counts as one line break (a ``\\r`` at the end of a piece waits for the next).
    """

    def __init__(self) -> None:
        self._cr = False

    def __repr__(self) -> str:
        return f"<StreamSanitizer pending_cr={self._cr}>"

    def feed(self, piece: str) -> str:
        """The safe form of ``piece``, as far as it can be known now."""
        if self._cr:
            piece = "\r" + piece
        self._cr = piece.endswith("\r")
        if self._cr:
            piece = piece[:-1]
        return "\n".join(visible(line) for line in piece.replace("\r\n", "\n").split("\n"))

    def flush(self) -> str:
        """What is held back (a final ``\\r``), made visible."""
        held, self._cr = ("\\r" if self._cr else ""), False
        return held
