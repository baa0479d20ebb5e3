"""The agent's handle on the supervisor: typed async methods.

Each method builds one request of :data:`~supervisor._requests.Request`, hands it
to the supervisor (which routes it at once and never blocks) and waits for the
:class:`~supervisor._calls.Reply` it gets back. Events come through trio memory
channels from :meth:`SupervisorClient.subscribe`. Every request is answered exactly
once: with a value, or with a :class:`~supervisor._exceptions.SupervisorError`
subclass.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Coroutine
from typing import Any

import trio

from ._api import (
    CommandInfo,
    CommandOutcome,
    ExtensionInfo,
    InterceptOutcome,
    ReloadStats,
    SupervisorEvent,
    ToolInfo,
    ToolOutcome,
)
from ._calls import Reply
from ._exceptions import SupervisorError
from ._manifest import ExtensionSpec
from ._relay import Relay
from ._requests import (
    CallTool,
    ClosePanel,
    EmitEvent,
    EnableExtension,
    Intercept,
    InvokeCommand,
    ListExtensions,
    PanelInput,
    PreviewToolCall,
    Reload,
    Request,
    SetHostInfo,
    StartChild,
    StopChild,
)
from ._seams import Backend

__all__ = ["SupervisorClient"]


@typing.final
class SupervisorClient:
    """The agent's handle on the supervisor: typed async methods, events on channels.

    Get one from :func:`supervisor.open_supervisor`. Methods can be called from any
    task; they are safe to call concurrently.
    """

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self._submit = backend.submit
        self._call_tool = backend.call_tool

    def __repr__(self) -> str:
        return f"<SupervisorClient {self._backend!r}>"

    def tools(self) -> list[ToolInfo]:
        """Extension tools currently registered (a snapshot)."""
        return self._backend.tool_infos()

    def commands(self) -> list[CommandInfo]:
        """Extension commands currently registered (a snapshot)."""
        return self._backend.command_infos()

    def subscribe(self, buffer: int = 256) -> trio.MemoryReceiveChannel[SupervisorEvent]:
        """A new channel receiving every later supervisor event.

        A subscriber that falls ``buffer`` events behind loses the newest ones (they
        are counted and logged); it never slows the supervisor down. Close the
        channel to unsubscribe.
        """
        return self._backend.subscribe(buffer)

    async def _send(self, request: Request) -> None:
        self._submit(request)
        await trio.lowlevel.checkpoint()

    async def _ask(
        self, request: Request, on_part: Callable[[dict[str, Any]], None] | None = None
    ) -> Any:
        # Deadlines are the supervisor's (they are policy); here we only wait (and
        # a cancelled wait abandons the call).
        reply = self._submit(request)
        # Set before the first checkpoint: no part can have arrived yet.
        reply.on_part = on_part
        return await reply.wait()

    def call_tool(
        self,
        name: str,
        args: dict[str, Any],
        *,
        call_id: str = "",
        on_part: Callable[[dict[str, Any]], None] | None = None,
    ) -> Coroutine[Any, Any, ToolOutcome]:
        """Call an extension (or tool host) tool and wait for its result.

        The supervisor applies its tool deadline (60 s by default, covering the write
        of the request) and fails the call at once if the extension dies.

        Args:
            name: the tool.
            args: its arguments.
            call_id: the model's id for the call (logs).
            on_part: receives each streamed chunk of a tool host's call as
                ``{"part": payload}``, in order, before the result (called in the
                supervisor's reading task: it must not block).

        Raises:
            UnknownTool: no extension offers ``name``.
            ExtensionGone: the extension died or was stopped before answering.
            CallTimeout: the deadline passed.

        Returns an awaitable, as a coroutine function would, but the call is routed
        (sent, or failed) when ``call_tool`` is called; awaiting it waits for the
        answer. Await it: one never awaited is only failed by its deadline.

        Cancellation: the call is abandoned; a late ``tool_result`` is dropped.
        """
        # Awaited like a coroutine function's result, but routed at once, and the
        # caller awaits the reply's wait itself: one coroutine frame less to create,
        # suspend and resume per call (routing never raises: failures are answers).
        reply: Reply[ToolOutcome] = self._call_tool(CallTool(name=name, args=args, call_id=call_id))
        reply.on_part = on_part
        return reply.wait()

    async def preview_tool_call(self, name: str, args: dict[str, Any]) -> str | None:
        """The one-line preview of a call its tool host makes, or None (render your own).

        Never raises for the host's faults: a host without the method, a slow or a
        broken one, or a tool of an extension, all give None.

        Cancellation: the answer is dropped.
        """
        try:
            preview: str | None = await self._ask(PreviewToolCall(name=name, args=args))
        except SupervisorError:
            return None
        return preview

    async def invoke_command(self, name: str, args: str = "") -> CommandOutcome:
        """Run an extension's slash command and return its response.

        Raises:
            UnknownCommand, ExtensionGone, CallTimeout.

        Cancellation: the command is abandoned; a late response is dropped.
        """
        outcome: CommandOutcome = await self._ask(InvokeCommand(name=name, args=args))
        return outcome

    async def panel_key(self, extension: str, panel_id: str, key: str, text: str = "") -> None:
        """Send a key to ``extension``'s open panel ``panel_id`` (a ``panel_key`` frame).

        Args:
            extension: the panel's extension (``Panel.extension``).
            panel_id: the panel (``Panel.panel_id``).
            key: ``up``, ``down``, ``left``, ``right``, ``enter``, ``esc``, ``tab``,
                ``backspace``, ``delete``, ``home``, ``end``, ``pageup``, ``pagedown``,
                ``unknown``, or ``rune`` with the character in ``text``.
            text: one printable character, for ``rune`` only.

        Raises:
            UnknownExtension: no running extension of that name.
            UnknownPanel: it has no open panel ``panel_id``.
            ValueError: the key is not one of those, or the text does not fit it.
            ExtensionGone: the frame could not be sent (its stdin is full or closed).

        Cancellation: the key may or may not have been sent.
        """
        await self._ask(PanelInput(extension=extension, panel_id=panel_id, key=key, text=text))

    async def close_panel(self, extension: str, panel_id: str, reason: str = "") -> None:
        """Close ``extension``'s open panel ``panel_id`` (the user closed it): the
        extension gets ``panel_close``, subscribers ``PanelClosed``.

        Raises:
            UnknownExtension, UnknownPanel: as :meth:`panel_key`.

        Cancellation: the panel may or may not have been closed.
        """
        await self._ask(ClosePanel(extension=extension, panel_id=panel_id, reason=reason))

    async def intercept_tool_call(
        self, tool_id: str, tool_name: str, tool_args: dict[str, Any], *, builtin: bool = True
    ) -> InterceptOutcome:
        """Run the ``tool_call`` intercept chain. Never raises for extension faults.

        Args:
            tool_id: the model's call id.
            tool_name: the tool called.
            tool_args: the arguments as the model wrote them.
            builtin: the call runs a built-in tool of the agent; then a block or
                rewrite counts only from an extension whose ``intercept_builtin``
                permission names the tool (or ``"*"``). Others are ignored, logged
                once per extension and reported with ``applied=False``.

        Cancellation: the chain stops where it is; subscribers not yet asked are not.
        """
        req = Intercept(
            event="tool_call",
            tool_id=tool_id,
            tool_name=tool_name,
            tool_args=tool_args,
            builtin=builtin,
        )
        outcome: InterceptOutcome = await self._ask(req)
        return outcome

    async def intercept_turn_start(self, step: int) -> InterceptOutcome:
        """Run the ``turn_start`` intercept chain.

        Cancellation: as :meth:`intercept_tool_call`.
        """
        outcome: InterceptOutcome = await self._ask(Intercept(event="turn_start", step=step))
        return outcome

    async def intercept_assistant_message(self, text: str) -> InterceptOutcome:
        """Run the ``assistant_message`` intercept chain.

        Cancellation: as :meth:`intercept_tool_call`.
        """
        req = Intercept(event="assistant_message", text=text)
        outcome: InterceptOutcome = await self._ask(req)
        return outcome

    async def emit(self, event: EmitEvent) -> None:
        """Send a one-way lifecycle event to subscribed extensions.

        Cancellation: the event may or may not have been queued.
        """
        await self._send(event)

    async def reload(self) -> ReloadStats:
        """Re-read manifests, start the new versions beside the running ones, swap.

        The registry and the interception chain switch in one step once every new
        version is ready or has given up; a new version that did not start leaves
        the running one in place (:attr:`ReloadStats.kept_old`). Calls in flight on a
        replaced extension complete or fail cleanly with :class:`ExtensionStopping`.

        Cancellation: the reload goes on in the supervisor; only the wait is abandoned.
        """
        stats: ReloadStats = await self._ask(Reload())
        return stats

    async def list_extensions(self) -> list[ExtensionInfo]:
        """Status and stats of every known extension (psutil figures included).

        Cancellation: the answer is dropped.
        """
        infos: list[ExtensionInfo] = await self._ask(ListExtensions())
        return infos

    async def enable(self, name: str) -> ExtensionInfo:
        """Lift ``name``'s quarantine and start it again in this session.

        Raises:
            UnknownExtension: no such extension.

        Cancellation: the start goes on; only the wait is abandoned.
        """
        info: ExtensionInfo = await self._ask(EnableExtension(name=name))
        return info

    async def start_child(self, spec: ExtensionSpec) -> Relay:
        """Supervise a child declared at run time (a stdio MCP server) like an extension.

        Returns once it runs (or has given up) with the :class:`Relay` that follows
        its incarnations; it is listed (``list_extensions``) until :meth:`stop_child`.

        Raises:
            SupervisorError: a child of that name is already supervised.

        Cancellation: the start goes on; only the wait is abandoned.
        """
        relay: Relay = await self._ask(StartChild(spec=spec))
        return relay

    async def stop_child(self, name: str) -> None:
        """Stop a child :meth:`start_child` started (its ladder) and forget it.

        Cancellation: the stop goes on; only the wait is abandoned.
        """
        await self._ask(StopChild(name=name))

    async def set_host_info(self, provider: str, model: str, cwd: str) -> None:
        """Set what later ``hello_ack`` frames report.

        Cancellation: the update may or may not have been queued.
        """
        await self._send(SetHostInfo(provider=provider, model=model, cwd=cwd))
