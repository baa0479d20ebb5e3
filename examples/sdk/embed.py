#!/usr/bin/env python3
"""Embed a corral session in your own program: open it, prompt it, print its events, close it.

    python examples/sdk/embed.py                       # two prompts of its own
    python examples/sdk/embed.py "weather in Lima"     # or yours, one per argument

The session runs in this process: ``agent.open_runtime`` is the embedding API (the
same session ``corral rpc`` serves over pipes, see docs/rpc.md). It uses the offline
provider (deterministic, no network, no key) and the example ``weather`` extension,
which corral starts sandboxed and supervises; no installed extension is loaded.
Each event is printed as the JSON line ``corral rpc`` would write for it, and
extension events (``ext_notify``, ``ext_status``...) as they come. Leaving the
``async with`` block stops the extension and closes the session.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import msgspec
import structlog
import trio

from agent import AgentOptions, ErrorEvent, Runtime, open_runtime

WEATHER = Path(__file__).resolve().parents[1] / "extensions" / "weather"
PROMPTS = ["weather in Oslo", "run `echo hello from the sandbox`"]


def show(event: msgspec.Struct) -> None:
    print(msgspec.json.encode(event).decode(), flush=True)


async def print_extension_events(rt: Runtime) -> None:
    """Extension events belong to no prompt: they come on their own channel."""
    with rt.events() as events:
        async for event in events:
            show(event)


async def main(prompts: list[str]) -> int:
    options = AgentOptions(
        provider="offline",
        ext_paths=[str(WEATHER)],
        discover=False,  # only the extension named here
        mcp_servers=False,
    )
    failed = False
    async with open_runtime(options) as rt, trio.open_nursery() as nursery:
        nursery.start_soon(print_extension_events, rt)
        for text in prompts:
            async for event in rt.prompt(text):  # every event of the prompt, `done` last
                show(event)
                failed |= isinstance(event, ErrorEvent)
        nursery.cancel_scope.cancel()
    return 1 if failed else 0


if __name__ == "__main__":
    # corral logs with structlog; the application decides where to (here: warnings
    # and worse on stderr, so that stdout holds the events alone).
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )
    sys.exit(trio.run(main, sys.argv[1:] or PROMPTS))
