"""Tool hosts supervised like extensions: both runners, real processes, real pipes.

Each test declares a tool host (``"kind": "tool-host"``) running corral's Python or
Node runner on the fixture modules of ``toolhost_fixtures/`` and talks to it
through the supervisor's client, as the agent does.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from helpers.procs import lasting
from helpers.supkit import CYCLE, Kit, wait_for

from supervisor import (
    CallTimeout,
    ExtensionCrashed,
    ExtensionGone,
    ExtensionRestarted,
    ExtensionState,
    HostInfo,
    ImageBlock,
    ProtocolViolation,
    TextBlock,
    ToolsChanged,
    identity_of,
)
from supervisor._manifest import ChildKind
from supervisor.lowlevel import signal_group, ui_file

RUNNERS = {
    "py": ("python", "py_tools.py"),
    "js": ("node", "js_tools.mjs"),
}
#: get_tags answers the model ids; the fixtures require the tag "tools".
TAGGED = HostInfo(provider="offline", model="tools", cwd="/")


@pytest.fixture(params=sorted(RUNNERS))
def lang(request: pytest.FixtureRequest) -> str:
    if request.param == "js" and shutil.which("node") is None:
        pytest.skip("node is not installed")
    return str(request.param)


def host_dir(kit: Kit, lang: str, **config: Any) -> Path:
    runtime, module = RUNNERS[lang]
    return kit.toolhost(f"{lang}-host", runtime, module, config=config)


def texts(outcome: Any) -> str:
    return "".join(b.text for b in outcome.content if isinstance(b, TextBlock))


async def test_a_tool_host_runs_its_tools_with_state_parts_and_renderings(
    kit: Kit, lang: str
) -> None:
    d = host_dir(kit, lang, start=41)
    with trio.fail_after(CYCLE):
        async with kit.open(d, host=TAGGED) as client:
            (info,) = await client.list_extensions()
            assert info.kind is ChildKind.TOOL_HOST
            assert info.state is ExtensionState.RUNNING, info.problem
            assert {"echo", "count", "boom", "refuse"} <= set(info.tools)
            assert info.ui_elements == [{"kind": "status", "text": f"{lang} tools"}]
            # State: init's {count: 41} goes with every call and comes back updated.
            first = await client.call_tool("count", {})
            second = await client.call_tool("count", {})
            assert (texts(first), texts(second)) == ("formatted: 42", "formatted: 43")
            assert second.display == {"markdown": "**formatted: 43**", "count": 43}
            # Parts arrive in order before the result, as {"part": payload}.
            parts: list[dict[str, Any]] = []
            echoed = await client.call_tool(
                "echo", {"text": "hi", "parts": 3}, on_part=parts.append
            )
            assert parts == [{"part": {"part": i}} for i in range(3)]
            assert texts(echoed) == "formatted: hi"
            # The explicit envelope reaches the agent structurally, with a text fallback.
            native = await client.call_tool("echo", {"text": "native"})
            assert native.native is not None
            assert native.native.format == "openai.responses"
            assert native.native.content == [{"type": "input_text", "text": "native"}]
            assert texts(native) == "native"
            assert await client.preview_tool_call("count", {}) == f"{lang} preview of count"
            # Failures: the model sees them, the host keeps serving.
            refused = await client.call_tool("refuse", {})
            assert refused.is_error
            assert texts(refused) == "refused on purpose"
            boom = await client.call_tool("boom", {})
            assert boom.is_error
            assert "kaboom" in texts(boom)
            assert texts(await client.call_tool("length", {"text": "four"})) == "formatted: 4"
            (info,) = await client.list_extensions()
            assert info.stats.calls == 7
            assert info.stats.errors == 2


async def test_tags_decide_which_tools_are_offered(kit: Kit, lang: str) -> None:
    d = host_dir(kit, lang)
    with trio.fail_after(CYCLE):
        async with kit.open(d, host=HostInfo(provider="offline", model="small")) as client:
            (info,) = await client.list_extensions()
            assert info.state is ExtensionState.RUNNING
            assert client.tools() == []  # "tools" is not among this model's tags
            assert "required tags ['tools']" in kit.log_text(f"{lang}-host")
            with client.subscribe() as events:
                await client.set_host_info("offline", "tools", "/")
                changed = await wait_for(events, ToolsChanged)
                assert "count" in [t.name for t in changed.tools]
                await client.set_host_info("offline", "small", "/")
                changed = await wait_for(events, ToolsChanged)
                assert changed.tools == []


@pytest.mark.parametrize(
    ("config", "problem"),
    [
        # The runner's own schema, asked before init.
        ({"modules": "js_tools.mjs"}, "(before init): config.modules: expected array, got"),
        # The modules' settings, which the runner knows once init loaded them.
        ({"start": 2.5}, "(after init): config.start: expected integer, got 2.5"),
    ],
)
async def test_config_is_checked_against_the_hosts_schema(
    kit: Kit, lang: str, config: dict[str, Any], problem: str
) -> None:
    d = host_dir(kit, lang, **config)
    with trio.fail_after(CYCLE):
        async with kit.open(d, host=TAGGED) as client:
            (info,) = await client.list_extensions()
    assert info.state is ExtensionState.FAILED
    assert problem in info.problem
    assert problem in kit.log_text(f"{lang}-host")


async def test_a_runner_that_cannot_init_is_refused_with_its_reason(kit: Kit, lang: str) -> None:
    runtime, _ = RUNNERS[lang]
    d = kit.toolhost("nomod", runtime, config={"modules": ["./missing.py"]})
    with trio.fail_after(CYCLE):
        async with kit.open(d) as client:
            (info,) = await client.list_extensions()
    assert info.state is ExtensionState.FAILED
    assert info.problem.startswith("init failed: ")
    assert "missing" in info.problem


async def test_a_crash_fails_pending_calls_at_once_and_state_survives_the_restart(
    kit: Kit, lang: str
) -> None:
    d = host_dir(kit, lang, start=1)
    with trio.fail_after(CYCLE):
        async with kit.open(d, host=TAGGED, config=kit.config(tool_timeout=60)) as client:
            await client.call_tool("count", {})  # state: count 2
            (info,) = await client.list_extensions()
            assert info.pid is not None
            with client.subscribe() as events:
                async with trio.open_nursery() as nursery:
                    failed: list[BaseException] = []

                    async def waiting() -> None:
                        try:
                            await client.call_tool("meet", {"n": 2, "tag": "never"})
                        except ExtensionGone as exc:
                            failed.append(exc)

                    nursery.start_soon(waiting)
                    await trio.testing.wait_all_tasks_blocked()  # the call is in flight
                    assert (await client.list_extensions())[0].stats.calls == 2
                    started = trio.current_time()
                    signal_group(info.pid, 9)
                await wait_for(events, ExtensionCrashed)
                # Failed when the host died, not at the 60 s deadline.
                assert trio.current_time() - started < 30
                assert len(failed) == 1
                assert "exited" in str(failed[0])
                await wait_for(events, ExtensionRestarted)
            # The restarted host was initialised again, and the calls go on with the
            # state the client held: 2 -> 3.
            assert texts(await client.call_tool("count", {})) == "formatted: 3"


HOSTILE = Path(__file__).parent / "toolhost_fixtures" / "hostile_host.py"


def hostile(kit: Kit, **config: Any) -> Path:
    d = kit.write("hostile", "./host.py", kind="tool-host", language="python", config=config)
    shutil.copy(HOSTILE, d / "host.py")
    return d


async def test_bad_input_is_logged_shown_and_survived(kit: Kit) -> None:
    d = hostile(kit)
    cfg = kit.config(tool_timeout=CYCLE)  # lines over 16 MiB are refused; a 20 MiB one
    # takes a while to write and skip on a busy machine: the deadline is the next test's
    with trio.fail_after(CYCLE * 2):
        async with kit.open(d, config=cfg) as client:
            (info,) = await client.list_extensions()
            assert info.state is ExtensionState.RUNNING
            # Entries whose schema is not an object schema, or whose name is not an
            # identifier, are skipped and named.
            names = sorted(info.tools)
            assert names == [
                "asked",
                "die",
                "garbage",
                "huge",
                "late",
                "ok",
                "shapeless",
                "stranger",
            ]
            log = kit.log_text("hostile")
            assert "'array_schema' skipped" in log
            assert "'no schema' skipped" in log
            assert "'bad name!' skipped: name is not an identifier" in log
            assert info.problem == "tool 'bad name!' skipped: name is not an identifier"
            # A line that is not JSON, then an answer with v 2: the call fails, named.
            with pytest.raises(ProtocolViolation, match="protocol version 2"):
                await client.call_tool("garbage", {})
            # An answer to an id never sent is logged; the real answer still counts.
            assert texts(await client.call_tool("stranger", {})) == "after the stranger"
            # A 20 MiB line fails the call it names, and nothing else.
            with pytest.raises(ProtocolViolation, match="exceeds"):
                await client.call_tool("huge", {})
            with pytest.raises(ProtocolViolation, match="success"):
                await client.call_tool("shapeless", {})
            assert texts(await client.call_tool("ok", {})) == "fine"
            (info,) = await client.list_extensions()
            assert info.state is ExtensionState.RUNNING
            assert info.stats.bad_frames >= 3
            assert "execute_tool value is not" in info.problem  # the last problem
            # Optional methods it answered with an error were asked once each.
            await client.call_tool("ok", {})
            asked = await client.call_tool("asked", {})
    counts = json.loads(texts(asked))
    assert counts["format_tool_result"] == 1
    assert counts["to_display_format"] == 1
    assert counts["get_config_schema"] == 1  # not asked again after init
    log = kit.log_text("hostile")
    for expected in (
        "not valid JSON",
        "protocol version 2",
        "answer to unknown id 'nobody-asked'",
        "exceeds the 16777216-byte limit",
        "format_tool_result answered an error; not asked again",
    ):
        assert expected in log, expected


async def test_a_call_past_its_deadline_fails_and_the_host_keeps_serving(kit: Kit) -> None:
    d = hostile(kit)
    with trio.fail_after(CYCLE):
        async with kit.open(d, config=kit.config(tool_timeout=1.0)) as client:
            with pytest.raises(CallTimeout):
                await client.call_tool("late", {})  # answers after 1.5 s
            assert texts(await client.call_tool("ok", {})) == "fine"
            (info,) = await client.list_extensions()
    assert info.state is ExtensionState.RUNNING
    assert info.stats.timeouts == 1


async def test_a_host_that_never_answers_init_is_refused_in_time(kit: Kit) -> None:
    d = hostile(kit, never_init=True)
    with trio.fail_after(CYCLE):
        async with kit.open(d, config=kit.config(handshake_timeout=1.0)) as client:
            (info,) = await client.list_extensions()
            assert client.tools() == []
    assert info.state is ExtensionState.FAILED
    assert "not done within 1 s" in info.problem


async def test_a_part_event_during_start_up_is_logged_and_start_up_goes_on(kit: Kit) -> None:
    d = hostile(kit, part_in_init=True)
    with trio.fail_after(CYCLE):
        async with kit.open(d) as client:
            (info,) = await client.list_extensions()
            assert texts(await client.call_tool("ok", {})) == "fine"
    assert info.state is ExtensionState.RUNNING
    assert "which no request of start-up has" in kit.log_text("hostile")


async def test_start_up_answers_out_of_order_are_matched_by_id(kit: Kit) -> None:
    # The four requests after init (get_config_schema failed before it) come in one
    # write; the host answers them backwards, each optional one with an error:
    # remembered, not asked again.
    d = hostile(kit, reverse_after_init=4)
    with trio.fail_after(CYCLE):
        async with kit.open(d) as client:
            (info,) = await client.list_extensions()
            assert info.state is ExtensionState.RUNNING
            assert texts(await client.call_tool("ok", {})) == "fine"
            counts = json.loads(texts(await client.call_tool("asked", {})))
    assert "ok" in info.tools
    assert counts["get_tool_schemas"] == 1
    assert counts["get_ui_elements"] == counts["get_tags"] == counts["required_tags"] == 1
    assert counts["format_tool_result"] == 1  # failed for "ok": not asked for "asked"
    assert "no request of start-up" not in kit.log_text("hostile")


async def test_a_host_that_exits_between_start_up_answers_fails_and_leaves_nothing(
    kit: Kit,
) -> None:
    d = hostile(kit, exit_after="get_tool_schemas")  # three answers left unsent
    with trio.fail_after(CYCLE):
        async with kit.open(d) as client:
            (info,) = await client.list_extensions()
            assert client.tools() == []
    assert info.state is not ExtensionState.RUNNING
    assert "exited" in info.problem, info.problem
    assert "answering init" in info.problem, info.problem
    assert lasting() == []


async def test_tool_schemas_that_are_not_a_list_refuse_the_host(kit: Kit) -> None:
    d = hostile(kit, schemas="not a list")
    with trio.fail_after(CYCLE):
        async with kit.open(d) as client:
            (info,) = await client.list_extensions()
    assert info.state is ExtensionState.FAILED
    assert "get_tool_schemas answered str, not a list" in info.problem


async def test_images_in_a_result_become_image_blocks(kit: Kit) -> None:
    d = kit.toolhost("imgs", "python", "py_plain.py")
    (d / "pics.py").write_text(
        "from corral_tools import tool, image_block, text_block\n"
        "@tool\n"
        "def pic() -> list:\n"
        "    '''An image.'''\n"
        "    return [text_block('a dot'), image_block(b'PNG', 'image/png')]\n"
    )
    manifest = (d / "extension.json").read_text().replace('"./py_plain.py"', '"./pics.py"')
    (d / "extension.json").write_text(manifest)
    with trio.fail_after(CYCLE):
        async with kit.open(d) as client:
            outcome = await client.call_tool("pic", {})
    assert outcome.content == [
        TextBlock(text="a dot"),
        ImageBlock(mime_type="image/png", data="UE5H"),
    ]


async def test_the_ui_elements_file_is_rewritten_only_when_they_changed(kit: Kit) -> None:
    d = host_dir(kit, "py")
    ui = ui_file(kit.home, identity_of(d.name, str(d)))
    ui.parent.mkdir(parents=True)
    ui.write_text("[]")  # what an earlier start saw: stale now
    with trio.fail_after(CYCLE):
        async with kit.open(d):
            pass
        kept = ui.read_bytes()
        written = ui.stat().st_mtime_ns
        os.utime(ui, ns=(1, 1))  # a mark that a rewrite would replace
        async with kit.open(d):
            pass
    assert json.loads(kept) == [{"kind": "status", "text": "py tools"}]
    assert written != 1
    assert ui.stat().st_mtime_ns == 1  # the same elements again: not rewritten
    assert ui.read_bytes() == kept


async def test_the_stack_of_an_error_goes_to_the_log_not_to_the_model(kit: Kit, lang: str) -> None:
    d = host_dir(kit, lang)
    name = f"{lang}-host"
    with trio.fail_after(CYCLE):
        async with kit.open(d, host=TAGGED) as client:
            boom = await client.call_tool("boom", {})
    # The model sees the type and the message; the host's log keeps the stack, whose
    # frames name the tool module's file.
    assert boom.is_error
    module = RUNNERS[lang][1]
    assert "kaboom" in texts(boom)
    assert module not in texts(boom)
    log = kit.log_text(name)
    assert "boom: " in log
    assert "kaboom" in log
    assert module in log
