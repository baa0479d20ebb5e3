"""Draw the README's screenshots: ``python docs/screenshots.py`` writes docs/*.png.

corral runs in a real pseudo-terminal (pexpect); pyte emulates the terminal; Pillow
draws pyte's screen, cell by cell, in DejaVu Sans Mono. Needs the ``test`` and
``bench`` extras (pexpect, pyte, Pillow) and that font.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

import pexpect
import pyte
from PIL import Image, ImageDraw, ImageFont

ROOT = Path(__file__).resolve().parents[1]
FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf"
BOLD = "/usr/share/fonts/truetype/dejavu/DejaVuSansMono-Bold.ttf"
BG, FG = (30, 30, 36), (220, 220, 220)
#: What the scripted model answers in the chat screenshot.
ANSWER = "## Berlin\n\n- **16°C**, fog\n- take a coat\n\n```python\nprint('done')\n```\n"
NAMED = {
    "black": (40, 40, 40),
    "red": (235, 90, 90),
    "green": (120, 200, 120),
    "brown": (220, 190, 90),
    "yellow": (220, 190, 90),
    "blue": (110, 150, 240),
    "magenta": (200, 120, 220),
    "cyan": (90, 200, 210),
    "white": (230, 230, 230),
}


def _rgb(name: str, default: tuple[int, int, int]) -> tuple[int, int, int]:
    if name == "default":
        return default
    if name.replace("bright", "") in NAMED:
        return NAMED[name.replace("bright", "")]
    if len(name) == 6:
        return (int(name[0:2], 16), int(name[2:4], 16), int(name[4:6], 16))
    return default


def draw(screen: pyte.Screen, path: Path, rows: int) -> None:
    """``screen``'s first ``rows`` lines as a PNG."""
    font, bold = ImageFont.truetype(FONT, 15), ImageFont.truetype(BOLD, 15)
    cw, ch = 9, 19
    image = Image.new("RGB", (screen.columns * cw + 24, rows * ch + 24), BG)
    pen = ImageDraw.Draw(image)
    for y in range(rows):
        line = screen.buffer[y]
        for x in range(screen.columns):
            cell = line[x]
            fg, bg = _rgb(cell.fg, FG), _rgb(cell.bg, BG)
            if cell.reverse:
                fg, bg = bg, fg
            left, top = 12 + x * cw, 12 + y * ch
            if bg != BG:
                pen.rectangle([left, top, left + cw, top + ch], fill=bg)
            if cell.data.strip():
                pen.text((left, top), cell.data, font=bold if cell.bold else font, fill=fg)
    image.save(path)


def record(args: list[str], keys: list[tuple[float, str]], cols: int, rows: int) -> pyte.Screen:
    """Run ``corral ARGS`` on a terminal, typing ``keys`` (after a pause each)."""
    screen = pyte.Screen(cols, rows)
    stream = pyte.ByteStream(screen)
    env = {**os.environ, "TERM": "xterm-256color", "PYTHONPATH": str(ROOT)}
    env.pop("NO_COLOR", None)
    code = "import sys; from agent._cli.main import main; sys.exit(main())"
    child = pexpect.spawn(sys.executable, ["-c", code, *args], env=env, dimensions=(rows, cols))

    def pump(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                data = child.read_nonblocking(65536, timeout=0.1)
            except pexpect.TIMEOUT:
                continue
            except pexpect.EOF:
                return
            stream.feed(data)
            if b"\x1b[6n" in data:
                child.send(f"\x1b[{screen.cursor.y + 1};{screen.cursor.x + 1}R")

    for pause, text in keys:
        pump(pause)
        child.send(text)
    pump(3)
    child.terminate(force=True)
    return screen


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="corral-shots-") as tmp:
        os.environ["CORRAL_HOME"] = tmp
        demo = record(["demo"], [(40, "")], cols=110, rows=200)
        used = max(y for y in range(200) if "".join(demo.display[y]).strip()) + 1
        first = next(y for y in range(used) if "A tool call" in demo.display[y])
        shot = pyte.Screen(110, 34)
        for y in range(34):
            shot.buffer[y] = demo.buffer[first - 2 + y]
        draw(shot, ROOT / "docs" / "demo.png", 34)
        script = Path(tmp) / "turns.jsonl"
        turns = [
            {
                "text": "Checking the **weather** first.",
                "tool_calls": [{"name": "weather", "args": {"city": "Berlin"}}],
            },
            {"text": ANSWER},
        ]
        script.write_text("\n".join(json.dumps(t) for t in turns) + "\n")
        ext = str(ROOT / "examples" / "extensions" / "weather")
        chat = record(
            ["chat", "--no-extensions", "-e", ext, "--script", str(script)],
            [(6, "what's the weather in Berlin?\r"), (6, "/he")],
            cols=100,
            rows=26,
        )
        draw(chat, ROOT / "docs" / "chat.png", 26)


if __name__ == "__main__":
    main()
