"""The terminal-safe text of ``agent._cli.safe_text``: pure functions, no processes."""

from __future__ import annotations

import random
import sys
import unicodedata

import pytest

from agent._cli.logs import terminal_safe
from agent._cli.safe_text import StreamSanitizer, visible, visible_lines

#: Characters left alone although their category is one the sanitiser escapes.
KEPT = {"\t", "\u200c", "\u200d"}
UNSAFE_CATEGORIES = {"Cc", "Cf", "Cs", "Zl", "Zp"}


def unsafe(char: str) -> bool:
    return unicodedata.category(char) in UNSAFE_CATEGORIES and char not in KEPT


@pytest.mark.parametrize(
    ("attack", "shown"),
    [
        ("\x1b]0;owned\x07", "\\x1b]0;owned\\x07"),  # OSC 0: window title
        ("\x1b]2;owned\x1b\\", "\\x1b]2;owned\\x1b\\"),  # OSC 2, ST-terminated
        ("\x1b]52;c;cm0gLXJmIH4K\x07", "\\x1b]52;c;cm0gLXJmIH4K\\x07"),  # clipboard
        ("\x1b[2J\x1b[H", "\\x1b[2J\\x1b[H"),  # clear screen, cursor home
        ("\x1b[1A\x1b[2K", "\\x1b[1A\\x1b[2K"),  # cursor up, erase line
        ("\x9b2J", "\\x9b2J"),  # C1 CSI
        ("\x9d0;t\x9c", "\\x9d0;t\\x9c"),  # C1 OSC ... ST
        ("ok\rFAKE", "ok\\rFAKE"),  # carriage-return overwrite
        ("abc\b\b\bxyz", "abc\\x08\\x08\\x08xyz"),  # backspaces
        ("del\x7f", "del\\x7f"),
        ("\x00nul", "\\x00nul"),
        ("safe \u202etxt.exe", "safe \\u202etxt.exe"),  # RIGHT-TO-LEFT OVERRIDE
        ("\u2066a\u2069", "\\u2066a\\u2069"),  # isolates
        ("ad\u200bmin", "ad\\u200bmin"),  # zero-width space
        ("tag\U000e0041", "tag\\U000e0041"),  # tag character
        ("lone \ud800 surrogate", "lone \\ud800 surrogate"),
        ("line\u2028break", "line\\u2028break"),
        ("a\nb", "a\\nb"),
        ("blank\u3164filler", "blank\\u3164filler"),
    ],
)
def test_attacks_are_made_visible(attack: str, shown: str) -> None:
    assert visible(attack) == shown


@pytest.mark.parametrize(
    "text",
    [
        "",
        "plain ASCII, with punctuation: [a] {b} \\x1b (a literal backslash)",
        "tab\tseparated\tcolumns",
        "Grüße, 東京, Ελληνικά, עברית, العربية",
        "emoji 👩‍💻 and 👍🏽 and a flag 🇩🇪",  # ZWJ sequences and modifiers stay
        "می‌خواهم",  # Persian needs ZERO WIDTH NON-JOINER
        "21°C… — “quoted”",
    ],
)
def test_ordinary_text_is_unchanged(text: str) -> None:
    assert visible(text) == text
    assert visible_lines(text) == [text]


@pytest.mark.slow
def test_every_unsafe_code_point_is_escaped_and_nothing_else() -> None:
    # The character class is spelled out in the module; this checks it against the
    # Unicode database of the running Python.
    everything = "".join(map(chr, range(sys.maxunicode + 1)))
    shown = visible(everything)
    assert not any(unsafe(c) for c in shown)
    shown.encode("utf-8")  # no lone surrogate is left to break the terminal's encoder
    missed = [hex(ord(c)) for c in everything if unsafe(c) and visible(c) == c]
    assert missed == []
    # Besides those, only the blank-looking fillers, the grapheme joiner, and the
    # hieroglyph format controls that Unicode 15 added (unassigned before).
    extra = [ord(c) for c in everything if not unsafe(c) and visible(c) != c]
    newer = [c for c in range(0x13439, 0x13440) if unicodedata.category(chr(c)) == "Cn"]
    assert extra == [0x34F, 0x115F, 0x1160, 0x3164, 0xFFA0, *newer]


def test_total_on_random_text_and_idempotent() -> None:
    rng = random.Random(8)
    pool = [chr(c) for c in range(0x250)] + [chr(c) for c in range(0x2000, 0x2070)]
    pool += ["\ud800", "\udfff", "\U000e0041", "\r\n", "\x1b["]
    for _ in range(300):
        text = "".join(rng.choice(pool) for _ in range(rng.randrange(0, 80)))
        once = visible(text)
        assert visible(once) == once
        assert "\x1b" not in once
        assert "\n" not in once
        once.encode("utf-8")
        for line in visible_lines(text):
            assert "\n" not in line
            assert visible(line) == line


def test_lines() -> None:
    assert visible_lines("") == [""]
    assert visible_lines("one") == ["one"]
    assert visible_lines("one\n") == ["one"]
    assert visible_lines("one\r\ntwo\nthree\n\n") == ["one", "two", "three", ""]
    assert visible_lines("fake\r[other] approved") == ["fake\\r[other] approved"]
    assert visible_lines("a\n\x1b[2Jb") == ["a", "\\x1b[2Jb"]


def test_stream_keeps_line_breaks_and_joins_split_crlf() -> None:
    stream = StreamSanitizer()
    pieces = ["hel", "lo\r", "\nwor", "ld\x1b", "[2J\r", "over", "\r"]
    shown = "".join(stream.feed(p) for p in pieces) + stream.flush()
    assert shown == "hello\nworld\\x1b[2J\\rover\\r"
    assert stream.flush() == ""


def test_log_processor_escapes_every_value() -> None:
    event = {
        "event": "bad_frame",
        "excerpt": '{"type":"\x1b]0;owned\x07"}',
        "names": ["\x1b[2J"],
        "count": 3,
        "exception": "Traceback:\n  line\x1b[2J\n",
    }
    safe = terminal_safe(None, "warning", event)
    assert safe["excerpt"] == '{"type":"\\x1b]0;owned\\x07"}'
    assert safe["count"] == 3
    assert safe["names"] == ["\x1b[2J"]  # its repr, shown by the renderer, is safe already
    assert safe["exception"] == "Traceback:\n  line\\x1b[2J"

    class Sneaky:
        def __repr__(self) -> str:
            return "\x1b]0;owned\x07"

    assert terminal_safe(None, "info", {"event": "x", "obj": Sneaky()})["obj"] == (
        "\\x1b]0;owned\\x07"
    )
