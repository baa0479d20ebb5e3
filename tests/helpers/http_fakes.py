"""A local HTTP/1.1 server on trio that replays model-API streams and records requests.

The server speaks just enough HTTP/1.1 for httpx: it reads a request (head and a
``Content-Length`` body), answers with the next queued :class:`Reply` as a chunked
body, and keeps the connection alive for the next request. A reply can end
normally, break (close the socket before the terminating chunk, as a dying server
or proxy does), or hang (send its chunks, then wait until the client hangs up,
which sets :attr:`FakeServer.disconnected`).

:func:`openai_sse` and :func:`anthropic_sse` frame bodies in the real wire formats
from ``oa*`` (Chat Completions chunks) and ``an_*`` (Messages events); the
``*_PARTIAL`` and ``*_FULL`` constants are canned streams; :func:`split` cuts a body
into small pieces so that SSE lines and UTF-8 characters straddle chunk boundaries.

The server is *strict*: a ``POST`` to ``…/chat/completions`` or ``…/v1/messages``
whose body the real service would refuse (an unanswered tool call, a result without
its call, roles out of order: :mod:`helpers.api_rules`) is answered 400 with that
service's error document, recorded in :attr:`FakeServer.refused`, and takes no
queued reply. So a transcript bug fails a test instead of a user's session.

Instead of a queue, a :attr:`FakeServer.responder` may answer each (valid) request.
"""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import trio

from helpers.api_rules import (
    Problem,
    anthropic_error,
    anthropic_problem,
    openai_error,
    openai_problem,
)

__all__ = [
    "ANTHROPIC_FULL",
    "ANTHROPIC_PARTIAL",
    "AN_DONE",
    "OPENAI_FULL",
    "OPENAI_PARTIAL",
    "FakeServer",
    "Recorded",
    "Reply",
    "an_block",
    "an_end",
    "an_json",
    "an_start",
    "an_stop",
    "an_text",
    "anthropic_sse",
    "json_reply",
    "oa",
    "oa_call",
    "oa_usage",
    "open_fake_server",
    "openai_sse",
    "refusal",
    "split",
]


@dataclass(frozen=True)
class Recorded:
    """A request the server received."""

    method: str
    path: str
    #: Lower-cased header names.
    headers: dict[str, str]
    body: Any


@dataclass
class Reply:
    """What to answer one request with."""

    status: int = 200
    content_type: str = "text/event-stream"
    #: Extra response headers (e.g. ``retry-after``).
    headers: dict[str, str] = field(default_factory=dict)
    chunks: list[bytes] = field(default_factory=list)
    #: ``complete``: terminate the body; ``break``: close the socket mid-body;
    #: ``hang``: keep the body open until the client disconnects.
    end: Literal["complete", "break", "hang"] = "complete"
    #: Seconds to wait before each chunk (a slow stream).
    pace: float = 0.0


def split(data: bytes, size: int = 7) -> list[bytes]:
    """``data`` in pieces of ``size`` bytes."""
    return [data[i : i + size] for i in range(0, len(data), size)]


def openai_sse(*chunks: dict[str, Any] | str, done: bool = True) -> bytes:
    """A Chat Completions stream: one ``data:`` event per chunk, then ``[DONE]``.

    A ``str`` chunk is sent verbatim as the data (for malformed lines).
    """
    lines = [c if isinstance(c, str) else json.dumps(c) for c in chunks]
    if done:
        lines.append("[DONE]")
    return "".join(f"data: {line}\n\n" for line in lines).encode()


def anthropic_sse(*events: dict[str, Any] | tuple[str, str]) -> bytes:
    """A Messages stream: ``event: <type>`` and ``data:`` per event.

    A ``(name, data)`` tuple is sent verbatim (for malformed lines).
    """
    out = []
    for event in events:
        name, data = event if isinstance(event, tuple) else (event["type"], json.dumps(event))
        out.append(f"event: {name}\r\ndata: {data}\r\n\r\n")
    return "".join(out).encode()


def json_reply(status: int, doc: Any) -> Reply:
    """A plain JSON reply, e.g. an API error."""
    return Reply(status=status, content_type="application/json", chunks=[json.dumps(doc).encode()])


# -- chunk and event builders --------------------------------------------------------------------


def oa(
    content: str | None = None, *, calls: list[Any] | None = None, finish: str | None = None
) -> dict[str, Any]:
    """A ``chat.completion.chunk`` with one choice."""
    delta: dict[str, Any] = {}
    if content is not None:
        delta["content"] = content
    if calls is not None:
        delta["tool_calls"] = calls
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [choice]}


def oa_usage(prompt: int, completion: int, cached: int = 0) -> dict[str, Any]:
    """The usage chunk ``stream_options.include_usage`` asks for (no choices)."""
    usage = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [], "usage": usage}


def oa_call(
    index: int | None, args: str, id: str | None = None, name: str | None = None
) -> dict[str, Any]:
    """One ``delta.tool_calls`` entry; id and name only in a call's first fragment."""
    call: dict[str, Any] = {"function": {"arguments": args}}
    if index is not None:
        call["index"] = index
    if id is not None:
        call |= {"id": id, "type": "function"}
    if name is not None:
        call["function"]["name"] = name
    return call


def an_start(input: int = 10, cache_read: int = 0, cache_write: int = 0) -> dict[str, Any]:
    """``message_start`` with input and cache usage."""
    usage = {
        "input_tokens": input,
        "cache_creation_input_tokens": cache_write,
        "cache_read_input_tokens": cache_read,
        "output_tokens": 1,
    }
    message = {"id": "msg_1", "type": "message", "role": "assistant", "content": [], "usage": usage}
    return {"type": "message_start", "message": message}


def an_block(index: int, kind: str = "text", **fields: Any) -> dict[str, Any]:
    """``content_block_start`` of a text or tool_use block."""
    block = {"type": kind, **({"text": ""} if kind == "text" else {"input": {}}), **fields}
    return {"type": "content_block_start", "index": index, "content_block": block}


def an_text(index: int, text: str) -> dict[str, Any]:
    """A ``text_delta``."""
    delta = {"type": "text_delta", "text": text}
    return {"type": "content_block_delta", "index": index, "delta": delta}


def an_json(index: int, part: str) -> dict[str, Any]:
    """An ``input_json_delta`` carrying a fragment of a tool call's input."""
    delta = {"type": "input_json_delta", "partial_json": part}
    return {"type": "content_block_delta", "index": index, "delta": delta}


def an_stop(index: int) -> dict[str, Any]:
    """``content_block_stop``."""
    return {"type": "content_block_stop", "index": index}


def an_end(reason: str, output: int = 5) -> dict[str, Any]:
    """``message_delta`` with the stop reason and the output tokens."""
    delta = {"stop_reason": reason, "stop_sequence": None}
    return {"type": "message_delta", "delta": delta, "usage": {"output_tokens": output}}


AN_DONE = {"type": "message_stop"}


#: A Chat Completions stream cut after one text delta ("Hel").
OPENAI_PARTIAL = openai_sse(oa("Hel"), done=False)
#: A whole Chat Completions stream answering "ok".
OPENAI_FULL = openai_sse(oa("ok"), oa(finish="stop"))
#: A Messages stream cut after one text delta ("Hel").
ANTHROPIC_PARTIAL = anthropic_sse(an_start(), an_block(0), an_text(0, "Hel"))
#: A whole Messages stream answering "ok".
ANTHROPIC_FULL = anthropic_sse(
    an_start(), an_block(0), an_text(0, "ok"), an_stop(0), an_end("end_turn"), AN_DONE
)

_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    429: "Too Many Requests",
    500: "Internal Server Error",
}


def refusal(method: str, path: str, body: Any) -> tuple[Problem, Reply] | None:
    """The 400 the real service answers to this request, if it refuses it."""
    if method != "POST":
        return None
    if path.endswith("/chat/completions"):
        problem = openai_problem(body)
        return None if problem is None else (problem, json_reply(400, openai_error(problem)))
    if path.endswith("/v1/messages"):
        problem = anthropic_problem(body)
        return None if problem is None else (problem, json_reply(400, anthropic_error(problem)))
    return None


class FakeServer:
    """Replays queued replies in order; records every request."""

    def __init__(self) -> None:
        self.port = 0
        #: TCP connections accepted so far.
        self.connections = 0
        self.requests: list[Recorded] = []
        self.replies: list[Reply] = []
        #: Set when a client hangs up on a ``hang`` reply.
        self.disconnected = trio.Event()
        #: What ``GET …/models`` lists (None: 404). It never takes a queued reply.
        self.models: list[str] | None = None
        #: Requests refused as the real service would, and why.
        self.refused: list[tuple[Recorded, Problem]] = []
        #: Answers each valid request when set (then the queue is not used).
        self.responder: Callable[[Recorded], Reply] | None = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    def queue(self, *replies: Reply) -> None:
        """Answer the next requests with ``replies``."""
        self.replies.extend(replies)

    @property
    def last(self) -> Recorded:
        """The most recent request."""
        return self.requests[-1]

    async def handle(self, stream: trio.SocketStream) -> None:
        """Serve one connection: requests until the client closes it."""
        self.connections += 1
        buffer = bytearray()
        try:
            while True:
                while b"\r\n\r\n" not in buffer:
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    buffer += data
                head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
                request_line, *header_lines = head.decode("latin-1").split("\r\n")
                method, path, _ = request_line.split(" ", 2)
                headers = {}
                for line in header_lines:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
                length = int(headers.get("content-length", "0"))
                buffer = bytearray(rest)
                while len(buffer) < length:
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    buffer += data
                body, buffer = bytes(buffer[:length]), buffer[length:]
                recorded = Recorded(method, path, headers, json.loads(body) if body else None)
                self.requests.append(recorded)
                refused = refusal(method, path, recorded.body)
                if refused is not None:
                    self.refused.append((recorded, refused[0]))
                    reply = refused[1]
                elif method == "GET" and path.endswith("/models"):
                    reply = (
                        json_reply(404, {"error": {"message": "no such route"}})
                        if self.models is None
                        else json_reply(200, {"data": [{"id": m} for m in self.models]})
                    )
                elif self.responder is not None:
                    reply = self.responder(recorded)
                elif self.replies:
                    reply = self.replies.pop(0)
                else:
                    reply = json_reply(599, "no reply queued")
                if not await self._answer(stream, reply):
                    return
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return
        finally:
            await stream.aclose()

    async def _answer(self, stream: trio.SocketStream, reply: Reply) -> bool:
        """Send ``reply``; False when the connection is finished."""
        reason = _REASONS.get(reply.status, "Status")
        head = (
            f"HTTP/1.1 {reply.status} {reason}\r\n"
            f"content-type: {reply.content_type}\r\n"
            + "".join(f"{k}: {v}\r\n" for k, v in reply.headers.items())
            + "transfer-encoding: chunked\r\n\r\n"
        )
        await stream.send_all(head.encode())
        for chunk in reply.chunks:
            if reply.pace:
                await trio.sleep(reply.pace)
            await stream.send_all(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        if reply.end == "break":
            return False
        if reply.end == "hang":
            try:
                while await stream.receive_some(65536):
                    pass
            finally:
                # EOF or a reset (the client closed with unread bytes): either way gone.
                self.disconnected.set()
            return False
        await stream.send_all(b"0\r\n\r\n")
        return True


@asynccontextmanager
async def open_fake_server() -> AsyncIterator[FakeServer]:
    """Serve a :class:`FakeServer` on 127.0.0.1, on a free port, for the block."""
    server = FakeServer()
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, server.handle, 0, host="127.0.0.1")
        )
        server.port = listeners[0].socket.getsockname()[1]
        yield server
        nursery.cancel_scope.cancel()
