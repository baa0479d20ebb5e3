"""Extension panels through the agent's surfaces: ``corral rpc`` (a real subprocess),
the in-process runtime, ``corral run`` and a chat reading a pipe (which show no panel:
"panel unsupported here", and the session goes on). The chat's drawing is in
``test_cli_tty.py``. Extensions run under bwrap where it is available."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import trio
from helpers.panelkit import panel_ext
from helpers.paths import REPO
from helpers.rpc_harness import Frame, RpcProcess, open_rpc, rpc_env, write_script
from test_runtime import opts

from agent import AgentEvent, ExtPanelClose, ExtPanelOpen, ExtPanelRender
from agent._runtime import open_runtime
from supervisor import UnknownPanel

pytestmark = pytest.mark.usefixtures("no_leaks")

TIMEOUT = 60
E = TypeVar("E")
SANDBOX = ("--sandbox", "auto")


def _add(item: str, call_id: str) -> Frame:
    return {"tool_calls": [{"name": "board_add", "args": {"item": item}, "id": call_id}]}


def _is(kind: str, **fields: Any):  # type: ignore[no-untyped-def]
    def match(frame: Frame) -> bool:
        return frame["type"] == kind and all(frame.get(k) == v for k, v in fields.items())

    return match


class Exchange:
    """A client's view of ``corral rpc``: every frame kept until a test looks for it,
    so an event is found whether it came before or after a command's response."""

    def __init__(self, rpc: RpcProcess) -> None:
        self.rpc = rpc
        self.frames: list[Frame] = []
        self._ids = 0

    async def call(self, kind: str, **fields: Any) -> Frame:
        self._ids += 1
        ident = f"x{self._ids}"
        await self.rpc.send({"id": ident, "type": kind, **fields})
        return await self.event(lambda f: f["type"] == "response" and f.get("id") == ident)

    async def event(self, match: Callable[[Frame], bool]) -> Frame:
        """The first frame ``match`` accepts (taken out of :attr:`frames`)."""
        while True:
            for i, frame in enumerate(self.frames):
                if match(frame):
                    del self.frames[i]
                    return frame
            self.frames.append(await self.rpc.read())


@pytest.mark.parametrize("name", ["board", "board-js"])
async def test_rpc_panel_flow(tmp_path: Path, name: str) -> None:
    ext = str(panel_ext(tmp_path / "exts", name))
    script = write_script(tmp_path, _add("third", "c1"), {"text": "added"})
    with trio.fail_after(TIMEOUT):
        async with open_rpc(tmp_path, script, *SANDBOX, exts=(ext,)) as rpc:
            x = Exchange(rpc)
            opened = await x.call("ext_command", name="board")
            assert opened["success"] is True
            data = opened["data"]
            assert (data["action"], data["error"], data["extension"]) == ("open_panel", "", name)
            assert data["panel"]["panel_id"] == "board-main"
            assert data["panel"]["lines"][:2] == ["› □ first", "  □ second"]
            # Before or after the response: either order is fine.
            event = await x.event(_is("ext_panel_open", extension=name, panel_id="board-main"))
            assert event["lines"] == data["panel"]["lines"]

            keyed = await x.call("ext_panel_key", extension=name, panel_id="board-main", key="down")
            assert keyed["success"] is True
            await x.call(
                "ext_panel_key", extension=name, panel_id="board-main", key="rune", text="x"
            )
            drawn = await x.event(
                lambda f: f["type"] == "ext_panel_render" and "› ✓ second" in f["lines"]
            )
            assert drawn["title"] == "Board (1/2 done)"
            assert drawn["footer"] == "up/down move - x toggle - q close"

            bad = await x.call("ext_panel_key", extension=name, panel_id="board-main", key="F13")
            assert bad["success"] is False
            assert "unknown key 'F13'" in bad["error"]
            gone = await x.call("ext_panel_key", extension=name, panel_id="nope", key="up")
            assert gone["success"] is False
            assert "no open panel 'nope'" in gone["error"]

            closed = await x.call("ext_panel_close", extension=name, panel_id="board-main")
            assert closed["success"] is True
            await x.event(_is("ext_panel_close", panel_id="board-main", by="host"))
            await x.event(_is("ext_notify", message="closed board-main: "))

            # A tool call renders for a panel that is closed now: dropped, no bad frame.
            x.frames.clear()
            await rpc.send({"id": "p", "type": "prompt", "message": "add one"})
            frames = await rpc.until_done()
            assert not [f for f in frames if f["type"].startswith("ext_panel")]
            result = next(f for f in frames if f["type"] == "tool_result")
            assert result["content"][0]["text"] == "added; 3 items"
            (info,) = (await rpc.call("ext_list"))["data"]["extensions"]
            assert info["sandboxed"] is True
            assert info["stats"]["bad_frames"] == 0


async def _next(events: trio.MemoryReceiveChannel[AgentEvent], kind: type[E]) -> E:
    async for event in events:
        if isinstance(event, kind):
            return event
    raise AssertionError(f"no {kind.__name__}")


async def test_in_process_panel_flow(tmp_path: Path) -> None:
    ext = str(panel_ext(tmp_path / "exts", "sdk-board"))
    options = opts(tmp_path, {"text": "-"}, ext_paths=[ext], sandbox="auto")
    with trio.fail_after(TIMEOUT):
        async with open_runtime(options) as rt:
            with rt.events() as events:
                outcome = await rt.ext_command("/board")
                assert outcome.panel is not None
                assert outcome.panel.title == "SDK board"
                opened = await _next(events, ExtPanelOpen)
                assert (opened.extension, opened.panel_id) == ("sdk-board", "sdk-board")
                await rt.ext_panel_key("sdk-board", "sdk-board", "rune", "k")
                drawn = await _next(events, ExtPanelRender)
                assert drawn.lines[-1] == "keys: k"
                await rt.ext_panel_close("sdk-board", "sdk-board")
                closed = await _next(events, ExtPanelClose)
                assert closed.by == "host"
                with pytest.raises(UnknownPanel):
                    await rt.ext_panel_key("sdk-board", "sdk-board", "up")


async def _corral(tmp_path: Path, *args: str, stdin: bytes = b"") -> tuple[int, str, str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    code = "import sys; from agent._cli.main import main; sys.exit(main())"
    env = rpc_env(home, NO_COLOR="1")
    env.pop("CORRAL_RPC_TOKEN", None)
    done = await trio.run_process(
        [sys.executable, "-c", code, *args],
        stdin=stdin,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        env=env,
        cwd=str(REPO),
    )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


async def test_run_drops_stray_renders_and_the_prompt_goes_on(tmp_path: Path) -> None:
    ext = str(panel_ext(tmp_path / "exts", "board"))
    script = write_script(tmp_path, _add("third", "c1"), {"text": "all done"})
    with trio.fail_after(TIMEOUT):
        status, out, err = await _corral(
            tmp_path, "run", "--no-extensions", *SANDBOX, "--provider", "scripted",
            "--script", script, "-e", ext, "--json", "add an item",
        )  # fmt: skip
    assert status == 0, err
    assert '"text":"added; 3 items"' in out
    assert "all done" in out
    assert "ext_panel" not in out
    assert "bad_frame" not in err


async def test_a_chat_without_a_screen_answers_panel_unsupported_here(tmp_path: Path) -> None:
    ext = str(panel_ext(tmp_path / "exts", "board"))
    script = write_script(tmp_path, {"text": "still here"})
    with trio.fail_after(TIMEOUT):
        status, out, err = await _corral(
            tmp_path, "chat", "--no-extensions", *SANDBOX, "--provider", "scripted",
            "--script", script, "-e", ext,
            stdin=b"/board\nhello\n",
        )  # fmt: skip
    assert status == 0, err
    assert "[board] panel unsupported here" in out
    assert "still here" in out  # the chat went on
    # The extension heard it: panel_close with the reason (its log says so).
    (log,) = (tmp_path / "home" / "logs").glob("ext-board*.log")
    assert "panel_close board-main: panel unsupported here" in log.read_text()
    assert "bad_frame" not in err
