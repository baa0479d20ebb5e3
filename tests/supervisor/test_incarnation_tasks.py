"""What one incarnation costs the host while it serves: its tasks, and its stderr.

The reader of an extension's stdout drains its stderr too where one descriptor
can watch both pipes (Linux's epoll), and the writer task starts only once a line
has to wait: a serving extension is its owner task plus one. Elsewhere (and with
``BESIDE`` off, as the tests force) stderr keeps a task of its own. Either way
every byte of stderr reaches the log, before the handshake, after stdout closed
and while a stop waits for the exit.
"""

from __future__ import annotations

import pytest
import trio
from helpers.supkit import CYCLE, Kit

import supervisor._incarnation as incarnation
from supervisor import ExtensionGone

pytestmark = pytest.mark.parametrize("beside", [True, False], ids=["beside", "own-task"])


@pytest.fixture(autouse=True)
def _beside(beside: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if beside and not incarnation.BESIDE:
        pytest.skip("no epoll here")
    monkeypatch.setattr(incarnation, "BESIDE", beside)


def _tasks_under(name: str) -> list[str]:
    """Names of every task below the task called ``name`` (searched from the root)."""

    def below(task: trio.lowlevel.Task) -> list[trio.lowlevel.Task]:
        return [t for n in task.child_nurseries for c in n.child_tasks for t in (c, *below(c))]

    root = trio.lowlevel.current_root_task()
    assert root is not None
    owner = next(t for t in (root, *below(root)) if t.name == name)
    return [t.name.rsplit(".", 1)[-1] for t in below(owner)]


async def test_a_serving_extension_is_its_owner_task_and_one_more(kit: Kit, beside: bool) -> None:
    ext = kit.chaos("lean")
    with trio.fail_after(CYCLE):
        async with kit.open(ext) as client:
            await client.call_tool("chaos_echo", {"text": "hi"})
            tasks = _tasks_under("extension:lean")
    # The reader (and stderr's own drain where the reader cannot serve it) and the
    # calls' deadline timer (a call was made); no writer task: every line (the
    # hello_ack, the call) went straight to the pipe.
    drain = [] if beside else ["_drain_stderr"]
    assert sorted(tasks) == [*drain, "_read_loop", "run_timer"]


async def test_stderr_before_hello_is_drained_while_the_reader_waits(kit: Kit) -> None:
    # 256 KiB before hello: four times what a pipe holds. Undrained, the extension
    # would block in its write and never say hello.
    ext = kit.inline(
        "loud",
        """\
        for i in range(2048):
            sys.stderr.write(f"loud {i:04d} " + "x" * 118 + "\\n")
        sys.stderr.flush()
        emit({"type": "hello", "name": NAME})
        emit({"type": "register_tool", "name": "loud_tool", "schema": {"type": "object"}})
        emit({"type": "ready"})
        for msg in frames():
            if msg["type"] == "shutdown":
                break
        """,
    )
    with trio.fail_after(CYCLE):
        async with kit.open(ext, config=kit.config(handshake_timeout=10.0)) as client:
            assert [t.name for t in client.tools()] == ["loud_tool"]
    log = kit.log_text("loud")
    assert log.count(" loud ") == 2048
    assert "loud 2047 " in log


async def test_stderr_after_stdout_closed_reaches_the_crash_report(kit: Kit) -> None:
    ext = kit.inline(
        "closer",
        """\
        import time
        emit({"type": "hello", "name": NAME})
        emit({"type": "register_tool", "name": "close_tool", "schema": {"type": "object"}})
        emit({"type": "ready"})
        for msg in frames():
            if msg["type"] == "tool_call":
                os.close(1)
                time.sleep(0.1)
                for i in range(1000):
                    sys.stderr.write(f"closer: after stdout {i}\\n")
                sys.stderr.write("closer: last words\\n")
                sys.stderr.flush()
                os._exit(3)
        """,
    )
    with trio.fail_after(CYCLE):
        async with kit.open(ext, config=kit.config(tool_timeout=6.0)) as client:
            with pytest.raises(ExtensionGone) as gone:
                await client.call_tool("close_tool", {})
    assert gone.value.returncode == 3
    assert "closer: last words" in str(gone.value)
    assert kit.log_text("closer").count("closer: after stdout") == 1000


async def test_stderr_written_while_a_stop_waits_is_logged(kit: Kit) -> None:
    # After the goodbye, 256 KiB of stderr before it leaves: the stop waits for an
    # exit that only comes if stderr is drained meanwhile.
    ext = kit.inline(
        "chatty",
        """\
        emit({"type": "hello", "name": NAME})
        emit({"type": "ready"})
        for msg in frames():
            if msg["type"] == "shutdown":
                break
        for i in range(2048):
            sys.stderr.write(f"chatty {i:04d} " + "y" * 116 + "\\n")
        sys.stderr.write("chatty: bye\\n")
        sys.stderr.flush()
        """,
    )
    cfg = kit.config(shutdown_grace=10.0)
    with trio.fail_after(CYCLE):
        async with kit.open(ext, config=cfg) as client:
            assert client.tools() == []
    log = kit.log_text("chatty")
    assert log.count(" chatty ") == 2048
    assert "chatty: bye" in log
    assert "extension_sigterm" not in log
