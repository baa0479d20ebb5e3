"""NDJSON lines: the one reader and the one writer, over memory streams and real pipes."""

from __future__ import annotations

import os
import socket
from typing import Any

import pytest
import trio
import trio.testing

from supervisor._lines import MORE, Oversize, Unsent
from supervisor.lowlevel import LineReader, LineWriter


async def read_lines(chunks: list[bytes], limit: int) -> list[Any]:
    send, receive = trio.testing.memory_stream_one_way_pair()
    reader = LineReader(receive, limit, chunk=7)
    out: list[Any] = []
    async with trio.open_nursery() as nursery:

        async def feed() -> None:
            for chunk in chunks:
                await send.send_all(chunk)
                await trio.sleep(0)
            await send.aclose()

        nursery.start_soon(feed)
        while (item := await reader.next()) is not None:
            out.append(item if isinstance(item, bytes) else ("oversize", item.size, item.head))
    return out


async def test_line_reader_splits_joins_and_skips_oversize_lines() -> None:
    with trio.fail_after(5):
        got = await read_lines(
            [b"ab", b"c\nde", b"f\n\n", b'{"id":"k","x":"', b"z" * 40, b'"}\nok\nlast'],
            limit=20,
        )
    assert [g if isinstance(g, bytes) else (g[0], g[1], g[2][:15]) for g in got] == [
        b"abc",
        b"def",
        b"",
        ("oversize", 57, b'{"id":"k","x":"'),
        b"ok",
        b"last",
    ]


async def test_line_reader_oversize_at_end_of_input() -> None:
    with trio.fail_after(5):
        got = await read_lines([b"x" * 100], limit=10)
    assert len(got) == 1
    assert got[0][:2] == ("oversize", 100)
    assert got[0][2] == b"x" * 14  # the start is kept (for the id), not the whole line


async def test_a_line_of_exactly_the_limit_is_a_line_and_one_byte_more_is_not() -> None:
    with trio.fail_after(5):
        got = await read_lines([b"x" * 10 + b"\n" + b"y" * 11 + b"\nz\n"], limit=10)
    assert got == [b"x" * 10, ("oversize", 11, b"y" * 11), b"z"]


async def _drain(stream: trio.abc.ReceiveStream) -> bytes:
    out = bytearray()
    while chunk := await stream.receive_some(65536):
        out += chunk
    return bytes(out)


async def test_writer_keeps_order_queued_or_awaited() -> None:
    send, receive = trio.testing.memory_stream_one_way_pair()
    writer = LineWriter(send, backlog=1000)
    lines = [f"{i}\n".encode() for i in range(300)]

    async def run_then_close() -> None:
        await writer.run()
        await send.aclose()

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            for line in lines[:100]:
                assert writer.write_nowait(line) is None  # no fd: all queued, in order
            assert writer.busy
            nursery.start_soon(run_then_close)
            for line in lines[100:]:
                await writer.write(line)
            writer.close()
        got = await _drain(receive)
    assert got == b"".join(lines)
    assert not writer.busy
    assert writer.write_nowait(b"late\n") is Unsent.CLOSED


async def test_writer_fast_path_full_backlog_and_a_broken_pipe() -> None:
    r, w = os.pipe()
    reader = trio.lowlevel.FdStream(r)
    writer = LineWriter(trio.lowlevel.FdStream(w), backlog=2)
    with trio.fail_after(5):
        # Idle and nothing queued: written at once, before any writer task runs.
        assert writer.write_nowait(b"direct\n") is None
        assert not writer.busy
        assert await reader.receive_some(100) == b"direct\n"
        # Nobody reads: the pipe fills, then the backlog does.
        big = b"z" * 65536 + b"\n"
        results = [writer.write_nowait(big) for _ in range(8)]
        assert results[-1] is Unsent.FULL
        assert writer.busy
        await reader.aclose()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer.run)  # its first write fails: the reader is gone
        assert writer.broken
        assert writer.write_nowait(b"more\n") is Unsent.BROKEN
        with pytest.raises(trio.BrokenResourceError):
            await writer.write(b"more\n")


async def test_end_nowait_writes_what_the_pipe_takes_and_returns_the_rest() -> None:
    with trio.fail_after(5):
        # Room in the pipe: all of it goes out, and the writer takes nothing more.
        r, w = os.pipe()
        reader, stream = trio.lowlevel.FdStream(r), trio.lowlevel.FdStream(w)
        writer = LineWriter(stream, backlog=2)
        assert writer.end_nowait(b"bye\n") == b""
        assert writer.write_nowait(b"late\n") is Unsent.CLOSED
        assert await reader.receive_some(100) == b"bye\n"
        # Nobody reads any more: nothing to send, nothing raised.
        await reader.aclose()
        gone = LineWriter(trio.lowlevel.FdStream(os.dup(w)), backlog=2)
        assert gone.end_nowait(b"bye\n") == b""
        await stream.aclose()
        # A full pipe: the rest comes back to the caller, nothing is lost or repeated.
        r, w = os.pipe()
        reader, stream = trio.lowlevel.FdStream(r), trio.lowlevel.FdStream(w)
        full = LineWriter(stream, backlog=2)
        while full.write_nowait(b"z" * 4096 + b"\n") is None and not full.busy:
            pass
        full.cancel()
        assert full.end_nowait(b"bye\n") == b"bye\n"
        await reader.aclose()
        await stream.aclose()


async def test_a_second_reader_may_take_the_bytes_a_waiting_fill_was_woken_for() -> None:
    # A caller spinning for its answer reads the pipe while the reader task waits
    # for it to become readable: the task must neither lose nor repeat a line, and
    # must see the end of the stream even when the other one read it.
    r, w = os.pipe()
    reader = LineReader(trio.lowlevel.FdStream(r), 100)
    got: list[bytes | None] = []

    async def task() -> None:
        while True:
            item = await reader.next()
            assert not isinstance(item, tuple)
            got.append(item)
            if item is None:
                return

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(task)
            await trio.testing.wait_all_tasks_blocked()
            os.write(w, b"one\ntwo\n")
            # The other reader takes both lines before the task runs again.
            assert reader.read_nowait()
            assert reader.next_nowait() == b"one"
            assert reader.next_nowait() == b"two"
            assert reader.read_nowait() is False  # nothing left
            await trio.testing.wait_all_tasks_blocked()
            os.write(w, b"three\n")
            await trio.testing.wait_all_tasks_blocked()
            os.close(w)
            assert reader.read_nowait()  # the end of the stream, read by the other one
            assert reader.eof
    assert got == [b"three", None]


async def test_coalesced_lines_of_one_pass_go_out_in_one_write() -> None:
    # A SOCK_SEQPACKET pair keeps each write a record of its own: one receive is
    # one write of the writer.
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    writer = LineWriter(trio.lowlevel.FdStream(os.dup(a.fileno())), backlog=100)
    a.close()
    lines = [f"line {i}\n".encode() for i in range(10)]
    with b, trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer.run)
            await trio.testing.wait_all_tasks_blocked()
            for line in lines:  # callers of one scheduler pass
                assert writer.write_nowait(line, coalesce=True) is None
            assert writer.busy
            await trio.testing.wait_all_tasks_blocked()
            assert b.recv(65536) == b"".join(lines)  # one record: one system call
            assert writer.write_nowait(b"alone\n") is None  # not coalesced: at once
            assert not writer.busy
            assert b.recv(65536) == b"alone\n"
            writer.close()


async def test_lines_nowait_takes_every_whole_line_and_leaves_the_rest() -> None:
    send, receive = trio.testing.memory_stream_one_way_pair()
    reader = LineReader(receive, limit=8)

    async def feed(data: bytes) -> None:
        await send.send_all(data)
        await reader.fill()

    with trio.fail_after(5):
        await feed(b"one\ntwo\n\nthree")
        assert reader.lines_nowait() == [b"one", b"two", b""]
        assert reader.lines_nowait() == []
        assert reader.next_nowait() is MORE  # "three" waits for its newline
        await feed(b"\nfour\n")
        assert reader.lines_nowait() == [b"three", b"four"]
        # A line over the limit among them: none is taken at once; next_nowait skips it.
        await feed(b"ok\nmuch too long\nfine\n")
        assert reader.lines_nowait() == []
        items = [reader.next_nowait() for _ in range(3)]
    assert items[0] == b"ok"
    assert items[1] == Oversize(13, b"much too long")
    assert items[2] == b"fine"


async def test_a_writer_run_in_a_nursery_starts_its_task_only_when_a_line_must_wait() -> None:
    r, w = os.pipe()
    reader, out, out2 = (trio.lowlevel.FdStream(fd) for fd in (r, w, os.dup(w)))
    writer = LineWriter(out, backlog=100)
    big = b"z" * 65536 + b"\n"  # more than the pipe holds: the rest must wait
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            writer.run_in(nursery)
            assert writer.write_nowait(b"direct\n") is None
            assert nursery.child_tasks == frozenset()  # straight to the pipe
            assert writer.write_nowait(big) is None
            assert writer.write_nowait(b"after\n") is None  # queued behind the rest
            assert [t.name.rsplit(".", 1)[-1] for t in nursery.child_tasks] == ["run"]
            got = b""
            while not got.endswith(b"after\n"):
                got += await reader.receive_some(1 << 20)
            assert got == b"direct\n" + big + b"after\n"  # in order, nothing lost
            writer.close()  # the task ends by itself
        assert writer.write_nowait(b"late\n") is Unsent.CLOSED
        # Never needed: no task ever ran, and cancel() ends the writer all the same,
        # before its nursery closes (so a late line never starts a task there).
        idle = LineWriter(out2, backlog=100)
        async with trio.open_nursery() as nursery:
            idle.run_in(nursery)
            assert idle.write_nowait(b"one\n") is None
            idle.cancel()
            assert idle.write_nowait(b"two\n") is Unsent.CLOSED
            assert idle.write_nowait(big) is Unsent.CLOSED
            assert nursery.child_tasks == frozenset()
        assert await reader.receive_some(100) == b"one\n"
        for stream in (reader, out, out2):
            await stream.aclose()
