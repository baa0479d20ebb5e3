"""Extension panels end to end: real extensions (reference shapes in Python and Node,
the SDK's, a hostile one) under bwrap open a panel, get keys, render and close; what
they draw is bounded and terminal-safe, and nothing they send about panels is a bad
frame."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from helpers.panelkit import panel_ext
from helpers.supkit import Kit, require_bwrap, wait_for

from supervisor import (
    ExtensionState,
    Notified,
    PanelClosed,
    PanelOpened,
    PanelRendered,
    SupervisorClient,
    SupervisorEvent,
    UnknownExtension,
    UnknownPanel,
)

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="bwrap backend")

#: Bound on one test (bwrap starts, a few requests, a stop) on a loaded box.
BOUND = 40.0


@asynccontextmanager
async def _supervised(
    kit: Kit, *exts: Path, buffer: int = 4096, **config: Any
) -> AsyncIterator[tuple[SupervisorClient, trio.MemoryReceiveChannel[SupervisorEvent]]]:
    require_bwrap()
    cfg = kit.config(
        sandbox="required", handshake_timeout=20, command_timeout=20, tool_timeout=20, **config
    )
    async with kit.open(*exts, config=cfg) as client:
        for info in await client.list_extensions():
            assert info.state is ExtensionState.RUNNING, info.problem
            assert (info.sandboxed, info.backend) == (True, "bwrap")
        with client.subscribe(buffer) as events:
            yield client, events


async def _bad_frames(client: SupervisorClient, name: str) -> int:
    (info,) = [i for i in await client.list_extensions() if i.name == name]
    return info.stats.bad_frames


@pytest.mark.parametrize("name", ["board", "board-js"])
async def test_reference_shaped_panel_opens_gets_keys_renders_and_closes(
    kit: Kit, name: str
) -> None:
    ext = panel_ext(kit.exts, name)
    with trio.fail_after(BOUND):
        async with _supervised(kit, ext, panels=True) as (client, events):
            # Its render before any panel was open was dropped, not a bad frame.
            out = await client.call_tool("board_add", {"item": "third"})
            assert out.content[0].text == "added; 3 items"  # type: ignore[union-attr]
            outcome = await client.invoke_command("board")
            assert (outcome.action, outcome.error) == ("open_panel", "")
            assert outcome.panel is not None
            assert outcome.panel.panel_id == "board-main"
            assert outcome.panel.title == "Board (0/3 done)"
            assert outcome.panel.lines[:3] == ["› □ first", "  □ second", "  □ third"]
            opened = await wait_for(events, PanelOpened)
            assert opened.panel == outcome.panel
            assert opened.extension == name

            await client.panel_key(name, "board-main", "down")
            await client.panel_key(name, "board-main", "rune", "x")
            await client.panel_key(name, "board-main", "rune", "é")
            drawn = await wait_for(events, PanelRendered, lambda e: "typed: é" in e.panel.lines)
            assert drawn.panel.title == "Board (1/3 done)"
            assert drawn.panel.lines[:2] == ["  □ first", "› ✓ second"]
            assert drawn.panel.footer == "up/down move - x toggle - q close"

            # A tool call renders while the panel is open: the panel follows.
            await client.call_tool("board_add", {"item": "fourth"})
            drawn = await wait_for(events, PanelRendered, lambda e: "  □ fourth" in e.panel.lines)

            # The extension closes it itself ("q").
            await client.panel_key(name, "board-main", "rune", "q")
            closed = await wait_for(events, PanelClosed)
            assert (closed.extension, closed.panel_id) == (name, "board-main")
            assert closed.by == "extension"
            with pytest.raises(UnknownPanel):
                await client.panel_key(name, "board-main", "down")

            # Opened again and closed by the user: the extension is told.
            await client.invoke_command("board")
            await wait_for(events, PanelOpened)
            await client.close_panel(name, "board-main")
            closed = await wait_for(events, PanelClosed)
            assert (closed.by, closed.reason) == ("host", "")
            note = await wait_for(events, Notified)
            assert note.message == "closed board-main: "
            # Renders after the close (the tool renders) are dropped again.
            await client.call_tool("board_add", {"item": "fifth"})
            assert await _bad_frames(client, name) == 0


async def test_keys_are_checked_before_they_reach_the_extension(kit: Kit) -> None:
    ext = panel_ext(kit.exts, "board")
    with trio.fail_after(BOUND):
        async with _supervised(kit, ext, panels=True) as (client, events):
            await client.invoke_command("board")
            for key, text in [
                ("F13", ""),
                ("rune", ""),
                ("rune", "ab"),
                ("rune", "\x1b"),
                ("up", "x"),
            ]:
                with pytest.raises(ValueError, match=r"key|rune"):
                    await client.panel_key("board", "board-main", key, text)
            with pytest.raises(UnknownPanel):
                await client.panel_key("board", "other", "up")
            with pytest.raises(UnknownExtension):
                await client.panel_key("nobody", "board-main", "up")
            await client.panel_key("board", "board-main", "pagedown")
            drawn = await wait_for(events, PanelRendered)
            # The first key the extension saw is the one that was valid.
            assert drawn.panel.lines[-1] == "last: pagedown"


async def test_a_host_without_panels_says_so_and_the_extension_goes_on(kit: Kit) -> None:
    ext = panel_ext(kit.exts, "board")
    with trio.fail_after(BOUND):
        async with _supervised(kit, ext) as (client, events):  # panels off: the default
            outcome = await client.invoke_command("board")
            assert (outcome.action, outcome.error, outcome.panel) == (
                "open_panel",
                "panel unsupported here",
                None,
            )
            # The extension got panel_close with the reason (its notify says so).
            note = await wait_for(events, Notified)
            assert note.message == "closed board-main: panel unsupported here"
            out = await client.call_tool("board_add", {"item": "x"})
            assert out.content[0].text == "added; 3 items"  # type: ignore[union-attr]
            with pytest.raises(UnknownPanel):
                await client.panel_key("board", "board-main", "up")
            assert await _bad_frames(client, "board") == 0


async def test_the_sdk_panel_api(kit: Kit) -> None:
    ext = panel_ext(kit.exts, "sdk-board")
    with trio.fail_after(BOUND):
        async with _supervised(kit, ext, panels=True) as (client, events):
            outcome = await client.invoke_command("board")
            assert outcome.panel is not None
            assert (outcome.panel.title, outcome.panel.lines) == (
                "SDK board",
                ["- first", "keys: "],
            )
            await client.panel_key("sdk-board", "sdk-board", "enter")
            await client.panel_key("sdk-board", "sdk-board", "rune", "z")
            drawn = await wait_for(events, PanelRendered, lambda e: e.panel.lines[-1].endswith("z"))
            # An empty title keeps the one shown (as the reference does).
            assert (drawn.panel.title, drawn.panel.lines[-1]) == ("SDK board", "keys: enter z")
            await client.close_panel("sdk-board", "sdk-board", "the user pressed Esc")
            note = await wait_for(events, Notified)
            assert note.message == "sdk-board closed: the user pressed Esc"
            assert await _bad_frames(client, "sdk-board") == 0


async def test_a_hostile_panel_is_bounded_and_terminal_safe(kit: Kit) -> None:
    ext = panel_ext(kit.exts, "hostile")
    with trio.fail_after(BOUND):
        # A small buffer: the flood below must not push the final render out of it.
        async with _supervised(kit, ext, buffer=32, panels=True) as (client, events):
            outcome = await client.invoke_command("evil")
            panel = outcome.panel
            assert panel is not None
            texts = [panel.title, panel.footer, *panel.lines]
            for text in texts:
                assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in text), text
                assert "\u202e" not in text
            assert panel.title.startswith("\\x1b]0;pwned\\x07T")
            assert len(panel.title) <= 120
            assert panel.title.endswith("…")
            assert len(panel.footer) <= 400
            assert len(panel.lines) == 201
            assert panel.lines[-1] == "… 9800 more lines not shown"
            assert max(len(line) for line in panel.lines) <= 400
            assert panel.lines[2] == "\\u202eevil\\u202c\\r\\nsecond\\x9b31m"

            badid = await client.invoke_command("badid")
            assert badid.panel is None
            assert "panel id" in badid.error

            # A flood of renders, half for a panel that is not open: the last one wins,
            # as bursts become one event each.
            t0 = trio.current_time()
            await client.invoke_command("flood", "3000")
            await wait_for(events, PanelRendered, lambda e: e.panel.lines == ["final"])
            assert trio.current_time() - t0 < BOUND
            # Its ghosts (renders and closes of panels never opened) were no bad frames.
            assert await _bad_frames(client, "hostile") == 0
            await client.panel_key("hostile", "flood", "enter")
            note = await wait_for(events, Notified)
            assert note.message == "key enter"


async def test_the_panel_closes_when_its_extension_goes(kit: Kit) -> None:
    ext = panel_ext(kit.exts, "board")
    with trio.fail_after(BOUND):
        async with _supervised(kit, ext, panels=True) as (client, events):
            await client.invoke_command("board")
            await wait_for(events, PanelOpened)
            stats = await client.reload()
            assert stats.ready == 1
            closed = await wait_for(events, PanelClosed)
            assert (closed.by, closed.reason) == ("exit", "the extension was stopped")
            # The new generation has no panel open.
            with pytest.raises(UnknownPanel):
                await client.panel_key("board", "board-main", "up")
