"""Soak: 2,000 pipelined prompts in one ``corral rpc`` session, memory and descriptors flat.

A leak check, not a speed test: the prompts go in four batches of 500 (one write
each), every tenth calls a tool in an extension, and the transcript is cleared
after each batch so that what is kept on purpose does not grow. RSS and open
descriptors of the server are measured after each batch; the first two batches
are the warm-up, the last must not have grown past a small tolerance.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psutil
import pytest
import trio
from helpers.procs import spawned_by
from helpers.rpc_harness import chaos_ext, open_rpc, write_script

BATCHES = 4
PER_BATCH = 500
#: RSS growth allowed between the end of the warm-up and the end of the soak.
RSS_TOLERANCE = 6 * 1024 * 1024
TIMEOUT = 240

pytestmark = pytest.mark.usefixtures("no_leaks")


def soak_script(tmp_path: Path) -> str:
    turns: list[dict[str, Any]] = []
    for n in range(BATCHES * PER_BATCH):
        if n % 10 == 0:
            call = {"name": "chaos_echo", "args": {"text": f"n{n}"}, "id": f"c{n}"}
            turns.append({"tool_calls": [call]})
        turns.append({"text": f"answer {n}"})
    return write_script(tmp_path, *turns)


@pytest.mark.slow
async def test_two_thousand_prompts_keep_memory_and_descriptors_flat(tmp_path: Path) -> None:
    script = soak_script(tmp_path)
    with trio.fail_after(TIMEOUT):
        async with open_rpc(tmp_path, script, exts=(chaos_ext(tmp_path),)) as rpc:
            server = psutil.Process(rpc.proc.pid)
            samples: list[tuple[int, int]] = []
            for batch in range(BATCHES):
                base = batch * PER_BATCH
                await rpc.send(
                    *(
                        {"id": base + n, "type": "prompt", "message": f"q{base + n}"}
                        for n in range(PER_BATCH)
                    )
                )
                frames = await rpc.until_done(PER_BATCH)
                responses = [f for f in frames if f["type"] == "response"]
                assert [r["id"] for r in responses] == list(range(base, base + PER_BATCH))
                shown = [f for f in frames if f["type"] == "assistant_message"]
                texts = [b["text"] for f in shown for b in f["content"] if b["type"] == "text"]
                assert texts == [f"answer {n}" for n in range(base, base + PER_BATCH)]
                results = [f for f in frames if f["type"] == "tool_result"]
                assert len(results) == PER_BATCH // 10
                assert all(not r["is_error"] for r in results)
                assert (await rpc.call("clear"))["success"] is True
                rpc.frames.clear()  # the test's own memory stays flat too
                rpc.raw.clear()
                samples.append((server.memory_info().rss, server.num_fds()))
                if batch == 0:
                    extension_pids = {p.pid for p in spawned_by(server)}
                    assert len(extension_pids) == 1
            state = (await rpc.call("get_state"))["data"]
            assert (state["busy"], state["message_count"]) == (False, 0)
            assert {p.pid for p in spawned_by(server)} == extension_pids
            print("rss, fds after each batch:", samples)
            (warm_rss, warm_fds), (last_rss, last_fds) = samples[1], samples[-1]
            assert last_fds == warm_fds, samples
            assert last_rss - warm_rss < RSS_TOLERANCE, samples
