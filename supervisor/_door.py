"""What the supervisor asks of one supervised child: tool calls, commands, intercepts.

:class:`Door` is the request side of an :class:`~supervisor._extension.Extension`
(its base class): each method turns a request into a line for the incarnation
serving now (through its :class:`~supervisor._seams.Talk`), never blocks, and
answers the :class:`~supervisor._calls.Reply` at once when the child cannot take
it (stopping, restarting, not running), with the same counters either way. The
owner task keeps the state these methods read (its lifecycle, the incarnation and
its talk, the registrations); they never change it.

``call_tool`` is the hot path: ``_opened``, ``_send`` and the request id inlined
(see docs/architecture.md, "The hot path", and its parity test).
"""

from __future__ import annotations

from typing import Any

from . import _frames as f
from ._calls import REQUEST_IDS, CallKind, PendingCalls, Reply
from ._exceptions import ExtensionGone, ExtensionStopping, UnknownPanel
from ._incarnation import Incarnation
from ._lifecycle import SERVING, ExtensionState, Lifecycle
from ._panels import key_problem
from ._protocol import ExtensionProtocol, Registrations
from ._requests import CallTool, ClosePanel, Intercept, InvokeCommand, PanelInput, PreviewToolCall
from ._seams import Talk

__all__ = ["Door"]

S = ExtensionState


class Door:
    """The requests one child answers (the base of :class:`~supervisor._extension.Extension`)."""

    # Kept by the owner task (see Extension):
    _calls: PendingCalls
    _lifecycle: Lifecycle
    #: The serving incarnation and the protocol it speaks (None between them).
    _inc: Incarnation | None
    _talk: Talk | None
    _regs: Registrations
    #: Why it is not running, or its last exit.
    _problem: str
    _stop_requested: bool

    @property
    def name(self) -> str:
        """The child's name (the owner's)."""
        raise NotImplementedError

    def call_tool(self, req: CallTool, reply: Reply[Any]) -> None:
        """Send ``tool_call`` and answer ``reply`` with a :class:`ToolOutcome`.

        Never blocks: failures answer the reply at once. The deadline
        (``tool_timeout``) starts now, so it covers writing the request, and is
        enforced by the owner's timer task rather than by a cancel scope in the caller.
        """
        # _opened and _send, inlined (the hot path); a fresh reply, kind TOOL.
        reply.name = req.name
        counts = self._calls.counts
        counts["calls"] += 1
        talk = self._talk
        if self._lifecycle.state not in SERVING:
            error: ExtensionGone = self._unavailable(reply.what)
        elif talk is None:
            error = ExtensionGone(self.name, reply.what, "the extension is not running")
        else:
            rid = f"t{next(REQUEST_IDS)}"  # (PendingCalls.new_id, inlined)
            problem = talk.send_tool(rid, req, reply)
            if problem is None:
                return
            error = ExtensionGone(self.name, reply.what, problem)
        counts["errors"] += 1
        reply.fail(error)

    def preview_tool_call(self, req: PreviewToolCall, reply: Reply[str | None]) -> None:
        """Answer ``reply`` with the tool host's one-line preview of a call, or None."""
        talk = self._talk
        if talk is None or self._lifecycle.state not in SERVING:
            reply.set(None)
        else:
            talk.preview(req, reply)

    def invoke_command(self, req: InvokeCommand, reply: Reply[Any]) -> None:
        """Send ``command_invoked`` and answer ``reply`` with a :class:`CommandOutcome`."""
        if self._opened(reply, CallKind.COMMAND, req.name):
            rid = PendingCalls.new_id(CallKind.COMMAND)
            frame = f.CommandInvoked(id=rid, name=req.name, args=req.args.strip())
            self._send(rid, f.encode_frame(frame), reply)

    def intercept(
        self,
        req: Intercept,
        args: dict[str, Any] | None,
        text: str | None,
        reply: Reply[Any],
    ) -> None:
        """Send ``event_intercept`` with the chain's current ``args`` and ``text``; the
        reply gets the extension's :class:`~supervisor._frames.EventInterceptResponse`."""
        if self._opened(reply, CallKind.INTERCEPT, req.event):
            rid = PendingCalls.new_id(CallKind.INTERCEPT)
            frame = f.EventIntercept(
                id=rid,
                event=req.event,
                step=req.step,
                tool_id=req.tool_id,
                tool_name=req.tool_name,
                tool_args=args,
                text=text,
            )
            self._send(rid, f.encode_frame(frame), reply)

    def panel_request(self, req: PanelInput | ClosePanel, reply: Reply[None]) -> None:
        """Send a key to the open panel, or close it; answered at once (one-way frames)."""
        talk = self._talk
        panels = talk.panels if isinstance(talk, ExtensionProtocol) else None
        if panels is None or not panels.has(req.panel_id):
            reply.fail(UnknownPanel(self.name, req.panel_id))
            return
        if isinstance(req, ClosePanel):
            panels.close(req.panel_id, req.reason)
            reply.set(None)
            return
        problem = key_problem(req.key, req.text)
        if problem is not None:
            reply.fail(ValueError(problem))
            return
        error = panels.key(req.panel_id, req.key, req.text)
        if error is None:
            reply.set(None)
        else:
            reply.fail(ExtensionGone(self.name, f"panel {req.panel_id!r}", error))

    def _opened(self, reply: Reply[Any], kind: CallKind, name: str) -> bool:
        """Count a call; False (and ``reply`` answered) when it cannot be sent now."""
        if reply.done:
            return False
        reply.kind, reply.name = kind, name
        counts = self._calls.counts
        counts["calls"] += 1
        if self._lifecycle.state not in SERVING:
            counts["errors"] += 1
            reply.fail(self._unavailable(reply.what))
            return False
        return True

    def _send(self, rid: str, line: bytes, reply: Reply[Any]) -> None:
        talk = self._talk
        if talk is None or not line:
            error: str | None = "the extension is not running"
        else:
            error = talk.call(rid, line, reply)
        if error is not None:
            self._calls.counts["errors"] += 1
            reply.fail(ExtensionGone(self.name, reply.what, error))

    def send_event(self, frame: f.Event) -> None:
        """Queue a one-way lifecycle event if the extension subscribed to it."""
        if (
            self._inc is not None
            and self._lifecycle.state in SERVING
            and frame.event in self._regs.events
        ):
            self._inc.send(f.encode_frame(frame))

    def _unavailable(self, what: str) -> ExtensionGone:
        state = self._lifecycle.state
        if state is S.STOPPING or self._stop_requested:
            return ExtensionStopping(self.name, what, "the extension is being stopped")
        if state in (S.BACKOFF, S.STARTING):
            why = f" (last exit: {self._problem})" if self._problem else ""
            return ExtensionGone(self.name, what, f"the extension is restarting{why}")
        return ExtensionGone(self.name, what, f"the extension is {state.value}")

    @property
    def calls(self) -> PendingCalls:
        """Its calls in flight, counters and latencies (read them; never change them)."""
        return self._calls
