"""``corral demo``: an offline tour of corral with the example extensions.

Runs in a temporary ``CORRAL_HOME`` and a temporary working directory, with the
offline model, so it needs no key and no network and never touches the user's
state. It loads ``hello-py``, ``weather``, ``guard``, ``clock`` and ``chaos``
(sandboxed when a backend is available) and walks through: a tool call (two, run
concurrently), a model that thinks before it answers (``--reasoning``), the guard
blocking and rewriting a command, redaction of the assistant's text, extension
commands, an extension crashing mid-call and being restarted while the session
goes on, ``/reload-ext``, and a clean stop. Every step checks what it shows; the
exit status is 1 if one did not go as expected.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import typing
from pathlib import Path
from typing import TextIO

import psutil
import trio

from .._events import (
    AgentEvent,
    AssistantMessage,
    ExtStatus,
    TextDelta,
    ThinkingDelta,
    ToolResultEvent,
)
from .._host import AgentHost, open_agent
from .._messages import TextContent, text_of
from .._options import AgentOptions
from .chat import ChatSession
from .chatlines import format_extensions
from .render import HumanRenderer, text_of_blocks
from .screen import Terminal, make_console
from .term import is_terminal

__all__ = ["DEMO_EXTENSIONS", "default_examples_dir", "missing_examples", "run_demo"]

#: The example extensions the demo loads, in load order.
DEMO_EXTENSIONS = ("hello-py", "weather", "guard", "clock", "chaos")
#: How long the demo waits for the crashed extension to come back.
_RESTART_WAIT = 15.0


def default_examples_dir() -> Path | None:
    """The example extensions: shipped in the package, or in the source tree it runs from."""
    here = Path(__file__).resolve()
    for candidate in (here.parents[1] / "_examples", here.parents[2] / "examples" / "extensions"):
        if not missing_examples(candidate):
            return candidate
    return None


def missing_examples(where: Path) -> list[str]:
    """What the demo needs from ``where`` and does not find there (relative paths)."""
    wanted = [f"{name}/extension.json" for name in DEMO_EXTENSIONS] + ["chaos/chaos.py"]
    return [rel for rel in wanted if not (where / rel).is_file()]


@typing.final
class _Recorder:
    """Renders events and remembers those of the current step."""

    def __init__(self, renderer: HumanRenderer) -> None:
        self.renderer = renderer
        self.events: list[AgentEvent] = []
        self.restarted = trio.Event()

    async def emit(self, event: AgentEvent) -> None:
        self.events.append(event)
        if isinstance(event, ExtStatus) and (event.extension, event.status) == (
            "chaos",
            "restarted",
        ):
            self.restarted.set()
        self.renderer.show(event)

    def take(self) -> list[AgentEvent]:
        events, self.events = self.events, []
        return events


def _results(events: list[AgentEvent]) -> list[ToolResultEvent]:
    return [e for e in events if isinstance(e, ToolResultEvent)]


def _text(result: ToolResultEvent) -> str:
    return " ".join(b.text for b in result.content if isinstance(b, TextContent))


def _chaos_dir(base: Path, examples: Path) -> Path:
    where = base / "chaos"
    where.mkdir()
    # A copy, so a sandbox that shows an extension only its own directory runs it.
    shutil.copy2(examples / "chaos" / "chaos.py", where / "chaos.py")
    manifest = {
        "name": "chaos",
        "version": "1.0.0",
        "exec": "./chaos.py",
        "args": ["--crash-after", "2"],
        "language": "python",
        "description": "crashes on its second tool call (demo copy)",
    }
    (where / "extension.json").write_text(json.dumps(manifest), encoding="utf-8")
    return where


@typing.final
class _Demo:
    def __init__(self, host: AgentHost, rec: _Recorder) -> None:
        self.host = host
        self.rec = rec
        self.r = rec.renderer
        self.failures: list[str] = []
        self.step = 0

    def heading(self, title: str, why: str) -> None:
        self.step += 1
        s = self.r.style
        self.r.line("")
        self.r.line(s(f"━━ {self.step}. {title}", "bold", "cyan") + s(f" — {why}", "dim"))

    def check(self, ok: bool, what: str) -> None:
        s = self.r.style
        if ok:
            self.r.line(s(f"  ✓ {what}", "green"))
        else:
            self.r.line(s(f"  ✗ expected: {what}", "red", "bold"))
            self.failures.append(what)

    async def say(self, prompt: str) -> list[AgentEvent]:
        self.rec.take()
        self.r.line(self.r.style("you ›", "bold", "green") + " " + prompt)
        await self.host.engine.prompt(prompt, [], self.rec.emit)
        return self.rec.take()

    def loaded(self, name: str) -> bool:
        return name in self.host.engine.registry.sources().values() or any(
            c.extension == name for c in self.host.commands()
        )


async def _tour(demo: _Demo) -> None:
    host, r = demo.host, demo.r
    demo.heading("Extensions", "each one a supervised subprocess, sandboxed when possible")
    for line in format_extensions(await host.extensions()):
        r.line("  " + line)

    demo.heading("A tool call", "the offline model asks for two weather lookups; they run at once")
    events = await demo.say("What's the weather in Berlin and Paris?")
    texts = [_text(x) for x in _results(events) if not x.is_error]
    demo.check(len(texts) == 2 and "Berlin" in " ".join(texts), "two weather results")

    demo.heading("Thinking", "with --reasoning low the model thinks first; shown dimmed, apart")
    host.engine.set_reasoning("low")
    events = await demo.say("weather in Rome")
    host.engine.set_reasoning(None)
    thought = "".join(e.delta for e in events if isinstance(e, ThinkingDelta))
    answer = "".join(e.delta for e in events if isinstance(e, TextDelta))
    demo.check(
        "I will call weather" in thought and "I will" not in answer,
        "the thought came as thinking_delta events, never as answer text",
    )

    demo.heading("The guard blocks", "a tool_call interceptor refuses `rm -rf`; bash never runs")
    events = await demo.say("run `rm -rf ./build`")
    blocked = [x for x in _results(events) if x.is_error and "refused" in _text(x)]
    demo.check(bool(blocked), "the call became an error result carrying the guard's reason")

    demo.heading("The guard rewrites", "the model asks for `ls`; bash receives the guard's rewrite")
    events = await demo.say("run `ls -a`")
    demo.check(
        any("GUARDED" in _text(x) for x in _results(events)),
        "bash ran `echo GUARDED: 'ls -a'` (the model's args were rewritten in flight)",
    )

    demo.heading("Redaction", "an assistant_message interceptor rewrites what you see")
    events = await demo.say('say "the launch code is SECRET"')
    shown = [text_of_blocks(e.content) for e in events if isinstance(e, AssistantMessage)]
    kept = text_of(host.engine.messages()[-1])
    r.line(r.style(f"  transcript keeps the model's original: {kept!r}", "dim"))
    demo.check(
        any("[redacted]" in t for t in shown) and "SECRET" in kept,
        "you saw [redacted]; the transcript kept SECRET",
    )

    demo.heading("Extension commands", "/clock displays a note; /hellopy prompts the agent")
    chat = ChatSession(host, r, _NoInput(), emit=demo.rec.emit)
    if demo.loaded("clock"):
        r.line(r.style("you ›", "bold", "green") + " /clock")
        await chat.slash("/clock")
    else:
        r.line(r.style("  (clock needs node; skipped)", "yellow"))
    r.line(r.style("you ›", "bold", "green") + " /hellopy")
    demo.rec.take()
    await chat.slash("/hellopy")
    demo.check(
        any(isinstance(e, AssistantMessage) for e in demo.rec.take()),
        "/hellopy's prompt action ran a turn",
    )

    demo.heading("A crash mid-call", "chaos exits on its 2nd tool call; the supervisor restarts it")
    await demo.say('call chaos_echo {"text": "one"}')
    events = await demo.say('call chaos_echo {"text": "two"}')
    demo.check(
        any(x.is_error for x in _results(events)), "the interrupted call ended with an error result"
    )
    with trio.move_on_after(_RESTART_WAIT):
        await demo.rec.restarted.wait()
    demo.check(demo.rec.restarted.is_set(), "chaos was restarted")
    events = await demo.say('call chaos_echo {"text": "three"}')
    demo.check(
        any(not x.is_error and "three" in _text(x) for x in _results(events)),
        "the session went on: the restarted chaos answered",
    )

    demo.heading("/reload-ext", "re-read manifests, swap in the new versions, keep what fails")
    r.line(r.style("you ›", "bold", "green") + " /reload-ext")
    stats = await host.reload()
    r.line(f"  stopped {stats.stopped}, loaded {stats.loaded}, ready {stats.ready}")
    demo.check(stats.ready == stats.loaded and stats.loaded > 0, "every extension came back")
    events = await demo.say("weather in Tokyo")
    demo.check(any(not x.is_error for x in _results(events)), "tools work after the reload")


@typing.final
class _NoInput:
    async def read(self, prompt: str, default: str = "") -> str | None:
        return None


def _leftovers() -> list[psutil.Process]:
    # The sandbox's guardian (and its spares) live as long as this process.
    from sandbox import guardian_pids

    keep = guardian_pids()
    try:
        found = psutil.Process().children(recursive=True)
        return [p for p in found if p.pid not in keep and p.is_running()]
    except psutil.Error:
        return []


async def run_demo(examples: Path, sandbox: str = "auto", out: TextIO | None = None) -> int:
    """Run the demo; returns 0 when every step went as expected, else 1.

    Cancellation: the tour stops; every extension is stopped and the temporary
    directories are removed.
    """
    out = out or sys.stdout
    renderer = HumanRenderer(Terminal(make_console(out)), markdown=is_terminal(out))
    try:
        return await _run(renderer, examples, sandbox)
    finally:
        renderer.terminal.close()


async def _run(renderer: HumanRenderer, examples: Path, sandbox: str) -> int:
    s = renderer.style
    rec = _Recorder(renderer)
    renderer.line(
        s("corral demo", "bold") + s(" — offline model, no network, temporary home", "dim")
    )
    with tempfile.TemporaryDirectory(prefix="corral-demo-") as tmp:
        base = Path(tmp)
        work = base / "work"
        work.mkdir()
        (work / "notes.txt").write_text("corral demo workspace\n", encoding="utf-8")
        (base / "home").mkdir()
        exts = base / "exts"
        exts.mkdir()
        paths = [str(examples / name) for name in DEMO_EXTENSIONS if name != "chaos"]
        paths.append(str(_chaos_dir(exts, examples)))
        options = AgentOptions(
            provider="offline",
            cwd=str(work),
            ext_paths=paths,
            discover=False,
            sandbox=sandbox,
            home=str(base / "home"),
        )
        async with open_agent(options) as host, trio.open_nursery() as nursery:
            await nursery.start(host.run_forwarder, rec.emit)
            demo = _Demo(host, rec)
            await _tour(demo)
            demo.heading("A clean stop", "shutdown → SIGTERM → SIGKILL ladder; all reaped")
            nursery.cancel_scope.cancel()
        left = await trio.to_thread.run_sync(_leftovers)
        demo.check(not left, f"no extension process left running ({len(left)} found)")
    renderer.line("")
    if demo.failures:
        renderer.line(s(f"demo finished with {len(demo.failures)} unexpected result(s)", "red"))
        return 1
    renderer.line(s("demo finished: every step went as expected", "bold", "green"))
    return 0
