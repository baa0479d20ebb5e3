"""The typed channel API between the agent and the supervisor.

The agent never touches extension processes. It submits request Structs, each
carrying a one-shot :class:`Reply` slot, and receives :data:`SupervisorEvent`
Structs from a trio memory channel it subscribes to. :class:`SupervisorClient`
wraps both in plain async methods.

Requests are routed synchronously on submission rather than through a memory
channel and a router task: routing never blocks (it only queues a frame for an
extension or starts a task in the supervisor's nursery), and on trio one task
switch costs about as much as a whole round trip to a child process
(bench/bench_supervisor.py: a router hop halved tool-call throughput). Work that
waits, such as intercept chains, reloads and stats, runs in the supervisor's own
nursery, never in the caller's task.

Every request is answered exactly once: with a value, or with a
:class:`~supervisor._exceptions.SupervisorError` subclass.
"""

from __future__ import annotations

import enum
import typing
from typing import Any, Generic, Literal, TypeVar

import msgspec
import trio

from ._exceptions import CallTimeout
from ._frames import CommandAction, ContentBlock, NotifyLevel

__all__ = [
    "CallTool",
    "CommandInfo",
    "CommandOutcome",
    "Displayed",
    "EmitEvent",
    "EnableExtension",
    "ExtensionCrashed",
    "ExtensionInfo",
    "ExtensionRestarted",
    "ExtensionStarted",
    "ExtensionStats",
    "ExtensionStopped",
    "Intercept",
    "InterceptKind",
    "InterceptOutcome",
    "Intervention",
    "InterventionKind",
    "InvokeCommand",
    "ListExtensions",
    "Notified",
    "Quarantined",
    "Reload",
    "ReloadStats",
    "Reply",
    "Request",
    "SetHostInfo",
    "SupervisorClient",
    "SupervisorEvent",
    "ToolInfo",
    "ToolOutcome",
    "ToolsChanged",
]

T = TypeVar("T")


@typing.final
class Reply(Generic[T]):
    """A one-shot reply slot: set once by the supervisor, awaited once by the caller.

    Answering twice is a no-op, so a late answer after a timeout or a crash can
    never overwrite the first one. The supervisor binds a hook that it runs when the
    caller gives up (deadline or cancellation), to forget the pending call.
    """

    __slots__ = ("_error", "_event", "_hook", "_value")

    def __init__(self) -> None:
        self._event = trio.Event()
        self._value: T | None = None
        self._error: BaseException | None = None
        self._hook: typing.Callable[[float | None], None] | None = None

    @property
    def done(self) -> bool:
        """True once a value or an error was set."""
        return self._event.is_set()

    def set(self, value: T) -> None:
        """Answer with a value (ignored if already answered)."""
        if not self._event.is_set():
            self._value = value
            self._event.set()

    def fail(self, error: BaseException) -> None:
        """Answer with an error (ignored if already answered)."""
        if not self._event.is_set():
            self._error = error
            self._event.set()

    def bind(self, hook: typing.Callable[[float | None], None]) -> None:
        """Run ``hook(seconds)`` when the caller's deadline passes, ``hook(None)`` on cancel."""
        self._hook = hook

    def give_up(self, seconds: float | None) -> None:
        """The caller stops waiting: its deadline of ``seconds`` passed, or (None) it was
        cancelled. Runs the bound hook once; the hook answers the slot."""
        hook, self._hook = self._hook, None
        if hook is not None and not self.done:
            hook(seconds)
        if not self.done:
            # Not routed yet (or the hook had nothing to forget): answer here.
            self.fail(CallTimeout("", "request", seconds or 0.0))

    async def wait(self) -> T:
        """Wait for the answer and return it, or raise the error it carries.

        Cancellation: abandons the wait; a later answer is dropped.
        """
        await self._event.wait()
        if self._error is not None:
            raise self._error
        return typing.cast(T, self._value)


# --- what the agent sees of extensions -----------------------------------------


class ToolInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A tool an extension registered."""

    name: str
    description: str
    schema: dict[str, Any]
    extension: str


class CommandInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A slash command an extension registered."""

    name: str
    description: str
    extension: str


class ToolOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """Result of a tool call, attributed to the extension that ran it."""

    content: list[ContentBlock]
    is_error: bool
    tool: str
    extension: str


class CommandOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """An extension's answer to a slash command (the seed's four actions)."""

    action: CommandAction
    prompt: str = ""
    insert: str = ""
    display: str = ""
    error: str = ""
    extension: str = ""


class InterventionKind(enum.Enum):
    """What an interceptor did to an event."""

    #: Refused the event (a tool call, a turn, or the assistant text shown).
    BLOCK = "block"
    #: Changed it: ``modified_args`` for a tool call, ``replace_text`` for text.
    REWRITE = "rewrite"


class Intervention(msgspec.Struct, frozen=True, kw_only=True):
    """One interceptor's block or rewrite, applied or ignored: the provenance record.

    Attributes:
        extension: who asked for it.
        kind: block or rewrite.
        applied: False when the supervisor ignored it because the extension lacks
            the ``intercept_builtin`` permission for the built-in tool.
        reason: a block's reason, as the extension gave it.
        args: a tool call's arguments after this rewrite (applied or not).
        text: the user-visible text after this rewrite.
    """

    extension: str
    kind: InterventionKind
    applied: bool = True
    reason: str = ""
    args: dict[str, Any] | None = None
    text: str | None = None


class InterceptOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """The folded answer of an intercept chain.

    Attributes:
        block: some subscriber refused; ``reason`` says why and ``blocked_by`` who.
        args: the tool arguments after every rewrite (``tool_call`` only).
        text: the user-visible text after every rewrite, or None when unchanged
            (``assistant_message`` only).
        consulted: names of the extensions asked, in order.
        interventions: every block and rewrite, in chain order, including those the
            supervisor ignored (``applied=False``).
    """

    block: bool = False
    reason: str = ""
    blocked_by: str = ""
    args: dict[str, Any] | None = None
    text: str | None = None
    consulted: list[str] = []
    interventions: list[Intervention] = []

    @property
    def rewritten_by(self) -> list[str]:
        """Extensions whose rewrites were applied, in chain order."""
        return [
            i.extension
            for i in self.interventions
            if i.applied and i.kind is InterventionKind.REWRITE
        ]


class ReloadStats(msgspec.Struct, frozen=True, kw_only=True):
    """What a reload did; ``ready`` counts only extensions that became ready."""

    stopped: int
    loaded: int
    ready: int
    errors: list[str]


class ExtensionStats(msgspec.Struct, frozen=True, kw_only=True):
    """Counters and process figures of one extension."""

    calls: int = 0
    errors: int = 0
    timeouts: int = 0
    bad_frames: int = 0
    restarts: int = 0
    latency_p50_ms: float | None = None
    latency_p95_ms: float | None = None
    latency_p99_ms: float | None = None
    rss_bytes: int | None = None
    cpu_percent: float | None = None
    open_fds: int | None = None
    uptime_s: float | None = None


class ExtensionInfo(msgspec.Struct, frozen=True, kw_only=True):
    """Status of one extension as the supervisor sees it."""

    name: str
    version: str
    source: str
    path: str
    state: str
    enabled: bool
    pid: int | None = None
    sandboxed: bool = False
    backend: str = "none"
    tools: list[str] = []
    commands: list[str] = []
    problem: str = ""
    stats: ExtensionStats = ExtensionStats()


# --- requests --------------------------------------------------------------------


class CallTool(msgspec.Struct, kw_only=True):
    """Run an extension tool. Fails fast if the owner dies."""

    name: str
    args: dict[str, Any]
    reply: Reply[ToolOutcome]
    call_id: str = ""


class InvokeCommand(msgspec.Struct, kw_only=True):
    """Run an extension slash command; ``args`` is the trimmed rest of the line."""

    name: str
    args: str
    reply: Reply[CommandOutcome]


InterceptKind = Literal["tool_call", "turn_start", "assistant_message"]


class Intercept(msgspec.Struct, kw_only=True):
    """Consult the intercept chain for one event.

    ``builtin`` (``tool_call`` only) says the call runs one of the agent's built-in
    tools: only extensions granted ``intercept_builtin`` for it may block or rewrite
    it. It defaults to True so that a caller who does not say is safe.
    """

    event: InterceptKind
    reply: Reply[InterceptOutcome]
    step: int | None = None
    tool_id: str | None = None
    tool_name: str | None = None
    tool_args: dict[str, Any] | None = None
    text: str | None = None
    builtin: bool = True


class EmitEvent(msgspec.Struct, kw_only=True):
    """One-way lifecycle event for subscribed extensions (no reply)."""

    event: str
    step: int | None = None
    tool_id: str | None = None
    tool_name: str | None = None
    tool_args: Any = None
    stop: str | None = None
    text: str | None = None


class Reload(msgspec.Struct, kw_only=True):
    """Stop everything, re-read manifests, respawn."""

    reply: Reply[ReloadStats]


class ListExtensions(msgspec.Struct, kw_only=True):
    """Status and stats of every known extension."""

    reply: Reply[list[ExtensionInfo]]


class EnableExtension(msgspec.Struct, kw_only=True):
    """Lift a quarantine (or start a stopped extension) in this session."""

    name: str
    reply: Reply[ExtensionInfo]


class SetHostInfo(msgspec.Struct, kw_only=True):
    """Provider, model and cwd sent in later ``hello_ack`` frames."""

    provider: str
    model: str
    cwd: str


Request = (
    CallTool
    | InvokeCommand
    | Intercept
    | EmitEvent
    | Reload
    | ListExtensions
    | EnableExtension
    | SetHostInfo
)


# --- events ---------------------------------------------------------------------


class _Ev(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind"):
    extension: str


class Notified(_Ev, frozen=True, tag="notify"):
    """An extension's ``notify`` frame."""

    level: NotifyLevel
    message: str


class Displayed(_Ev, frozen=True, tag="display"):
    """A ``display`` answer of a command, for the user only."""

    text: str


class ExtensionStarted(_Ev, frozen=True, tag="started"):
    """An extension became ready (first start)."""

    pid: int
    sandboxed: bool
    backend: str
    tools: list[str]
    commands: list[str]
    note: str = ""


class ExtensionRestarted(_Ev, frozen=True, tag="restarted"):
    """A crashed extension is ready again."""

    pid: int
    restarts: int


class ExtensionCrashed(_Ev, frozen=True, tag="crashed"):
    """An extension exited on its own or was refused."""

    returncode: int | None
    signal: str | None
    reason: str
    stderr_tail: list[str]
    restart_in: float | None


class Quarantined(_Ev, frozen=True, tag="quarantined"):
    """An extension crashed too often; it will not be restarted."""

    reason: str
    crashes: int


class ExtensionStopped(_Ev, frozen=True, tag="stopped"):
    """An extension was stopped by the host."""

    returncode: int | None


class ToolsChanged(_Ev, frozen=True, tag="tools_changed"):
    """The set of extension tools or commands changed. ``extension`` is ``"*"``."""

    tools: list[ToolInfo]
    commands: list[CommandInfo]


SupervisorEvent = (
    Notified
    | Displayed
    | ExtensionStarted
    | ExtensionRestarted
    | ExtensionCrashed
    | Quarantined
    | ExtensionStopped
    | ToolsChanged
)


# --- the client --------------------------------------------------------------------


@typing.final
class SupervisorClient:
    """The agent's handle on the supervisor: async methods over typed channels.

    Get one from :func:`supervisor.open_supervisor`. Methods can be called from any
    task; they are safe to call concurrently.
    """

    def __init__(
        self,
        submit: typing.Callable[[Request], None],
        subscribe: typing.Callable[[int], trio.MemoryReceiveChannel[SupervisorEvent]],
        tools: typing.Callable[[], list[ToolInfo]],
        commands: typing.Callable[[], list[CommandInfo]],
    ) -> None:
        self._submit = submit
        self._subscribe = subscribe
        self._tools = tools
        self._commands = commands

    def tools(self) -> list[ToolInfo]:
        """Extension tools currently registered (a snapshot)."""
        return self._tools()

    def commands(self) -> list[CommandInfo]:
        """Extension commands currently registered (a snapshot)."""
        return self._commands()

    def subscribe(self, buffer: int = 256) -> trio.MemoryReceiveChannel[SupervisorEvent]:
        """A new channel receiving every later supervisor event.

        A subscriber that falls ``buffer`` events behind loses the newest ones (they
        are counted and logged); it never slows the supervisor down. Close the
        channel to unsubscribe.
        """
        return self._subscribe(buffer)

    async def _send(self, request: Request) -> None:
        self._submit(request)
        await trio.lowlevel.checkpoint()

    async def _ask(self, request: Request, reply: Reply[T]) -> T:
        # Deadlines are the supervisor's (they are policy); here we only wait.
        self._submit(request)
        try:
            return await reply.wait()
        except trio.Cancelled:
            reply.give_up(None)
            raise

    async def call_tool(self, name: str, args: dict[str, Any], *, call_id: str = "") -> ToolOutcome:
        """Call an extension tool and wait for its result.

        The supervisor applies its tool deadline (60 s by default, covering the write
        of the request) and fails the call at once if the extension dies.

        Raises:
            UnknownTool: no extension offers ``name``.
            ExtensionGone: the extension died or was stopped before answering.
            CallTimeout: the deadline passed.

        Cancellation: the call is abandoned; a late ``tool_result`` is dropped.
        """
        reply: Reply[ToolOutcome] = Reply()
        req = CallTool(name=name, args=args, reply=reply, call_id=call_id)
        return await self._ask(req, reply)

    async def invoke_command(self, name: str, args: str = "") -> CommandOutcome:
        """Run an extension's slash command and return its response.

        Raises:
            UnknownCommand, ExtensionGone, CallTimeout.

        Cancellation: the command is abandoned; a late response is dropped.
        """
        reply: Reply[CommandOutcome] = Reply()
        req = InvokeCommand(name=name, args=args, reply=reply)
        return await self._ask(req, reply)

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
        reply: Reply[InterceptOutcome] = Reply()
        req = Intercept(
            event="tool_call",
            reply=reply,
            tool_id=tool_id,
            tool_name=tool_name,
            tool_args=tool_args,
            builtin=builtin,
        )
        return await self._ask(req, reply)

    async def intercept_turn_start(self, step: int) -> InterceptOutcome:
        """Run the ``turn_start`` intercept chain.

        Cancellation: as :meth:`intercept_tool_call`.
        """
        reply: Reply[InterceptOutcome] = Reply()
        return await self._ask(Intercept(event="turn_start", reply=reply, step=step), reply)

    async def intercept_assistant_message(self, text: str) -> InterceptOutcome:
        """Run the ``assistant_message`` intercept chain.

        Cancellation: as :meth:`intercept_tool_call`.
        """
        reply: Reply[InterceptOutcome] = Reply()
        req = Intercept(event="assistant_message", reply=reply, text=text)
        return await self._ask(req, reply)

    async def emit(self, event: EmitEvent) -> None:
        """Send a one-way lifecycle event to subscribed extensions.

        Cancellation: the event may or may not have been queued.
        """
        await self._send(event)

    async def reload(self) -> ReloadStats:
        """Stop every extension, re-read manifests, respawn, and wait for ready.

        Calls in flight fail cleanly with :class:`ExtensionGone` or complete.

        Cancellation: the reload goes on in the supervisor; only the wait is abandoned.
        """
        reply: Reply[ReloadStats] = Reply()
        return await self._ask(Reload(reply=reply), reply)

    async def list_extensions(self) -> list[ExtensionInfo]:
        """Status and stats of every known extension (psutil figures included).

        Cancellation: the answer is dropped.
        """
        reply: Reply[list[ExtensionInfo]] = Reply()
        return await self._ask(ListExtensions(reply=reply), reply)

    async def enable(self, name: str) -> ExtensionInfo:
        """Lift ``name``'s quarantine and start it again in this session.

        Raises:
            UnknownExtension: no such extension.

        Cancellation: the start goes on; only the wait is abandoned.
        """
        reply: Reply[ExtensionInfo] = Reply()
        return await self._ask(EnableExtension(name=name, reply=reply), reply)

    async def set_host_info(self, provider: str, model: str, cwd: str) -> None:
        """Set what later ``hello_ack`` frames report.

        Cancellation: the update may or may not have been queued.
        """
        await self._send(SetHostInfo(provider=provider, model=model, cwd=cwd))
