"""Handshake and ready: refusals are bounded, explained, killed, and isolated."""

from __future__ import annotations

import pytest
import trio
from helpers.paths import EXAMPLES
from helpers.procs import alive
from helpers.supkit import CYCLE, Kit, capture_logs

from supervisor import ExtensionInfo, SupervisorClient


async def _infos(client: SupervisorClient) -> dict[str, ExtensionInfo]:
    return {i.name: i for i in await client.list_extensions()}


async def _healthy(client: SupervisorClient) -> None:
    out = await client.call_tool("chaos_echo", {"text": "ok"})
    assert out.extension == "healthy"
    assert out.content[0].text == "echo: ok"  # type: ignore[union-attr]


@pytest.mark.slow
async def test_no_hello_within_deadline_is_refused_and_killed(kit: Kit) -> None:
    silent = kit.chaos("silent", "--no-hello")
    healthy = kit.chaos("healthy")
    cfg = kit.config(handshake_timeout=1.0)
    with trio.fail_after(CYCLE):
        t0 = trio.current_time()
        async with kit.open(healthy, silent, config=cfg) as client:
            # Start-up waited for the refusal, not much longer.
            assert trio.current_time() - t0 < 1.0 + 2.0
            infos = await _infos(client)
            (pid,) = kit.started_pids("silent")
            assert not alive(pid)
            await _healthy(client)
    assert infos["silent"].state == "failed"
    assert "no hello within 1 s" in infos["silent"].problem
    assert infos["silent"].pid is None
    assert infos["healthy"].state == "running"
    assert "no hello" in kit.log_text("silent")


async def test_wrong_name_is_refused(kit: Kit) -> None:
    impostor = kit.chaos("named", "--wrong-name")
    healthy = kit.chaos("healthy")
    with trio.fail_after(CYCLE):
        async with kit.open(impostor, healthy) as client:
            infos = await _infos(client)
            (pid,) = kit.started_pids("named")
            assert not alive(pid)
            await _healthy(client)
            assert [t.extension for t in client.tools()] == ["healthy"]
    assert infos["named"].state == "failed"
    assert "named-impostor" in infos["named"].problem
    assert infos["named"].tools == []


async def test_exit_before_hello_is_refused_with_reason(kit: Kit) -> None:
    early = kit.chaos("early", "--exit-on-start", "7", restart="never")
    healthy = kit.chaos("healthy")
    with trio.fail_after(CYCLE):
        async with kit.open(early, healthy) as client:
            infos = await _infos(client)
            await _healthy(client)
    info = infos["early"]
    assert info.state in ("failed", "stopped")
    assert info.pid is None
    # The reason says what happened: before hello, and how it exited.
    assert "hello" in info.problem
    assert "exit status 7" in info.problem
    assert "chaos: exiting on start" in kit.log_text("early")


async def test_bad_first_frame_is_refused(kit: Kit) -> None:
    ext = kit.inline(
        "rude",
        """\
        emit({"type": "register_tool", "name": "t", "schema": {"type": "object"}})
        for msg in frames():
            pass
        """,
    )
    garbage = kit.inline(
        "garbled",
        """\
        sys.stdout.write("this is not json\\n"); sys.stdout.flush()
        for msg in frames():
            pass
        """,
    )
    with trio.fail_after(CYCLE):
        async with kit.open(ext, garbage) as client:
            infos = await _infos(client)
    assert infos["rude"].state == "failed"
    assert "hello" in infos["rude"].problem
    assert "RegisterTool" in infos["rude"].problem or "register_tool" in infos["rude"].problem
    assert infos["garbled"].state == "failed"
    assert "this is not json" in infos["garbled"].problem


async def test_slow_hello_within_deadline_works(kit: Kit) -> None:
    slow = kit.chaos("healthy", "--hello-delay", "0.5")
    with trio.fail_after(CYCLE):
        async with kit.open(slow, config=kit.config(handshake_timeout=3.0)) as client:
            infos = await _infos(client)
            await _healthy(client)
    assert infos["healthy"].state == "running"
    assert infos["healthy"].problem == ""


async def test_ready_frame(kit: Kit) -> None:
    ext = kit.chaos("healthy")
    with capture_logs() as logs, trio.fail_after(CYCLE):
        async with kit.open(ext) as client:
            await _healthy(client)
    (ready,) = [e for e in logs if e["event"] == "extension_ready"]
    assert ready["how"] == "ready frame"
    assert ready["extension"] == "healthy"
    assert ready["tools"] == ["chaos_echo"]


async def test_no_ready_frame_uses_quiet_period(kit: Kit) -> None:
    lazy = kit.chaos("lazy", "--no-ready")
    with capture_logs() as logs, trio.fail_after(CYCLE):
        async with kit.open(
            lazy, EXAMPLES / "hello-py", EXAMPLES / "clock", config=kit.config(ready_cap=5.0)
        ) as client:
            infos = await _infos(client)
            assert {c.name: c.extension for c in client.commands()} == {
                "chaos": "lazy",
                "hellopy": "hello-py",
                "clock": "clock",
                "stopwatch": "clock",
            }
            shown = await client.invoke_command("clock")
    assert shown.action == "display"
    assert shown.display.endswith("Z")
    assert all(i.state == "running" for i in infos.values())
    how = {e["extension"]: e["how"] for e in logs if e["event"] == "extension_ready"}
    assert how == {"lazy": "quiet period", "hello-py": "quiet period", "clock": "quiet period"}


CHATTY = """\
import threading, time
emit({"type": "hello", "name": NAME, "version": "1.0.0"})
def register_forever():
    i = 0
    while True:
        i += 1
        emit({"type": "register_tool", "name": f"t{i}", "schema": {"type": "object"}})
        time.sleep(0.02)
threading.Thread(target=register_forever, daemon=True).start()
for msg in frames():
    if msg["type"] == "shutdown":
        break
"""


async def test_ready_cap_bounds_an_extension_that_keeps_registering(kit: Kit) -> None:
    chatty = kit.inline("chatty", CHATTY)
    healthy = kit.chaos("healthy")
    cfg = kit.config(ready_quiet=0.2, ready_cap=0.6)
    with capture_logs() as logs, trio.fail_after(CYCLE):
        t0 = trio.current_time()
        async with kit.open(chatty, healthy, config=cfg) as client:
            elapsed = trio.current_time() - t0
            await _healthy(client)
            infos = await _infos(client)
            first = {t.name for t in client.tools() if t.extension == "chatty"}
            # Registrations after ready keep arriving and are announced.
            events = client.subscribe()
            with trio.fail_after(5):
                async for _ in events:
                    later = {t.name for t in client.tools() if t.extension == "chatty"}
                    if later > first:
                        break
    assert elapsed < 0.6 + 2.0  # the cap, not the quiet period, ended the wait
    assert infos["chatty"].state == "running"
    how = {e["extension"]: e["how"] for e in logs if e["event"] == "extension_ready"}
    assert how["chatty"] == "cap"
    assert first


@pytest.mark.slow
async def test_refusals_do_not_delay_or_break_healthy_extensions(kit: Kit) -> None:
    paths = [
        kit.chaos("silent", "--no-hello"),
        kit.chaos("named", "--wrong-name"),
        kit.chaos("early", "--exit-on-start", "2", restart="never"),
        kit.chaos("healthy"),
    ]
    cfg = kit.config(handshake_timeout=1.0)
    with trio.fail_after(CYCLE):
        async with kit.open(*paths, config=cfg) as client:
            infos = await _infos(client)
            for _ in range(3):
                await _healthy(client)
    assert infos["healthy"].state == "running"
    assert {n: i.state for n, i in infos.items() if n != "healthy"}.keys() == {
        "silent",
        "named",
        "early",
    }
    assert all(i.state != "running" for n, i in infos.items() if n != "healthy")


async def test_oversize_first_frame_is_refused(kit: Kit) -> None:
    ext = kit.inline(
        "huge",
        """\
        emit({"type": "hello", "name": NAME, "version": "x" * 200_000})
        for msg in frames():
            pass
        """,
    )
    with trio.fail_after(CYCLE):
        async with kit.open(ext, config=kit.config(max_frame_bytes=64 * 1024)) as client:
            (info,) = await client.list_extensions()
    assert info.state == "failed"
    assert "larger than 65536 bytes" in info.problem


async def test_second_hello_is_a_bad_frame(kit: Kit) -> None:
    ext = kit.inline(
        "twice",
        """\
        emit({"type": "hello", "name": NAME})
        emit({"type": "register_command", "name": "again"})
        emit({"type": "ready"})
        for msg in frames():
            if msg["type"] == "command_invoked":
                emit({"type": "hello", "name": "someone-else"})
                emit({"type": "command_response", "id": msg["id"], "action": "noop"})
        """,
    )
    with trio.fail_after(CYCLE):
        async with kit.open(ext) as client:
            await client.invoke_command("again")
            (info,) = await client.list_extensions()
    assert info.state == "running"
    assert info.stats.bad_frames == 1


async def test_unexecutable_exec_is_refused_with_the_os_error(kit: Kit) -> None:
    d = kit.write("noexec", "./run.sh")
    (d / "run.sh").write_text("#!/bin/sh\nexit 0\n")  # not chmod +x
    healthy = kit.chaos("healthy")
    with trio.fail_after(CYCLE):
        async with kit.open(d, healthy) as client:
            infos = await _infos(client)
            await _healthy(client)
    assert infos["noexec"].state == "failed"
    assert "cannot start" in infos["noexec"].problem
    assert str(d / "run.sh") in infos["noexec"].problem
    assert "ermission denied" in infos["noexec"].problem
