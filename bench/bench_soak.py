"""Soak: one saved session driven for 10,000 turns through everything that goes wrong.

* the model is a loopback HTTP server speaking the OpenAI streaming format that
  answers 429 or 500 at random (the provider retries them);
* every other turn calls ``chaos_echo`` in examples/extensions/chaos, which crashes on
  every 7th call (and is restarted, or quarantined and brought back by a reload);
* every 250 turns the extensions are reloaded, every third time with a broken
  manifest (restored at the next reload);
* the transcript is compacted whenever it passes 64 KiB.

It checks that every turn ended with ``done`` (and a ``turn_end``), that the session
file holds exactly the transcript (no lost record) and opens again, at every
reload and at the end, and that the host's RSS stays within 10 % of what it was
after the first tenth of the run.

``python bench/bench_soak.py [--quick]`` (``--quick``: 400 turns); ``CORRAL_SOAK_TURNS``
overrides the count.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import psutil
import trio
from _common import ROOT, Row, Rows, main, stopwatch

from agent import AgentOptions, Done, ProviderSettings, Retry, TurnEnd, open_runtime
from agent._cli.logs import configure_logging
from agent._sessions import SessionHeader, SessionStore

CHAOS = ROOT / "examples" / "extensions" / "chaos" / "chaos.py"
RELOAD_EVERY = 250
ERROR_RATE = 0.15


# --- the model: a loopback OpenAI-compatible server ---------------------------------


def _sse(*chunks: dict[str, Any]) -> bytes:
    lines = [json.dumps(c) for c in chunks] + ["[DONE]"]
    return "".join(f"data: {line}\n\n" for line in lines).encode()


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


class FakeModel:
    """Answers each chat request: 429/500 at random, else text or a chaos_echo call."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.requests = 0
        self.failures = 0

    def _answer(self, body: dict[str, Any]) -> tuple[int, bytes, str]:
        self.requests += 1
        if self.rng.random() < ERROR_RATE:
            self.failures += 1
            status = self.rng.choice([429, 500])
            return status, b'{"error": {"message": "soak says no"}}', "application/json"
        last = body["messages"][-1]
        text = last.get("content") if isinstance(last.get("content"), str) else ""
        if last["role"] == "user" and text.startswith("call "):
            call = {
                "index": 0,
                "id": f"c{self.requests}",
                "type": "function",
                "function": {"name": "chaos_echo", "arguments": json.dumps({"text": text})},
            }
            return 200, _sse(_chunk({"tool_calls": [call]}), _chunk({}, "tool_calls")), ""
        answer = f"answer {self.requests}: " + "x" * 200
        return 200, _sse(_chunk({"content": answer}), _chunk({}, "stop")), ""

    async def handle(self, stream: trio.SocketStream) -> None:
        buffer = b""
        try:
            while True:
                while b"\r\n\r\n" not in buffer:
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    buffer += data
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                headers = {
                    k.strip().lower(): v.strip()
                    for k, _, v in (h.partition(":") for h in lines[1:])
                }
                length = int(headers.get("content-length", "0"))
                while len(buffer) < length:
                    buffer += await stream.receive_some(65536)
                body, buffer = buffer[:length], buffer[length:]
                if lines[0].startswith("GET"):  # /models
                    status, payload, kind = 200, b'{"data": [{"id": "soak"}]}', "application/json"
                else:
                    status, payload, kind = self._answer(json.loads(body))
                kind = kind or "text/event-stream"
                extra = "retry-after: 0\r\n" if status == 429 else ""
                await stream.send_all(
                    f"HTTP/1.1 {status} X\r\ncontent-type: {kind}\r\n{extra}"
                    f"content-length: {len(payload)}\r\n\r\n".encode()
                    + payload
                )
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return
        finally:
            await stream.aclose()


# --- the run ------------------------------------------------------------------------


def _chaos_dir(base: Path) -> Path:
    where = base / "chaos"
    where.mkdir()
    shutil.copy2(CHAOS, where / "chaos.py")
    _write_manifest(where, broken=False)
    return where


def _write_manifest(where: Path, *, broken: bool) -> None:
    manifest = {
        "name": "chaos",
        "version": "1.0.0",
        "exec": "./chaos.py",
        "args": ["--crash-after", "7"],
        "language": "python",
    }
    text = json.dumps(manifest)
    (where / "extension.json").write_text(text[:-7] if broken else text)


def _check_file(home: Path, memory: list[Any]) -> bool:
    """The saved session holds exactly the transcript, and loads."""
    store = SessionStore.for_name(home, "soak", SessionHeader(name="soak"))
    return store.load() == memory


def _rss() -> int:
    return int(psutil.Process().memory_info().rss)


async def measure(quick: bool) -> list[Row]:
    configure_logging(level="error")  # crashes and retries are the point: not news
    turns = int(os.environ.get("CORRAL_SOAK_TURNS", "400" if quick else "10000"))
    rows = Rows("soak")
    model = FakeModel(seed=7)
    stats = {"done": 0, "turn_end": 0, "errors": 0, "retries": 0, "reloads": 0, "broken": 0}
    file_ok = True
    samples: list[int] = []
    with tempfile.TemporaryDirectory(prefix="corral-soak-") as tmp:
        base = Path(tmp)
        (base / "work").mkdir()
        ext = _chaos_dir(base)
        settings = ProviderSettings(retries=8, retry_base=0.001, retry_cap=0.005)
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(trio.serve_tcp, model.handle, 0)
            port = listeners[0].socket.getsockname()[1]
            options = AgentOptions(
                provider="openai",
                model="soak",
                base_url=f"http://127.0.0.1:{port}/v1",
                home=str(base / "home"),
                cwd=str(base / "work"),
                ext_paths=[str(ext)],
                discover=False,
                sandbox="off",
                session="soak",
                tools=[],
                provider_settings=settings,
            )
            broken = False
            with stopwatch() as took:
                async with open_runtime(options, compact_threshold=64 * 1024) as rt:
                    for turn in range(1, turns + 1):
                        prompt = f"call chaos {turn}" if turn % 2 else f"say {turn}"
                        events = await rt.prompt(prompt).collect()
                        stats["done"] += isinstance(events[-1], Done)
                        stats["turn_end"] += any(isinstance(e, TurnEnd) for e in events)
                        stats["errors"] += any(
                            isinstance(e, TurnEnd) and e.stop == "error" for e in events
                        )
                        stats["retries"] += sum(isinstance(e, Retry) for e in events)
                        if turn % RELOAD_EVERY == 0:
                            file_ok &= await trio.to_thread.run_sync(
                                _check_file, base / "home", rt.messages()
                            )
                            broken = not broken and stats["reloads"] % 3 == 2
                            stats["broken"] += broken
                            _write_manifest(ext, broken=broken)
                            await rt.ext_reload()
                            stats["reloads"] += 1
                        if turn % max(1, turns // 10) == 0:
                            samples.append(_rss())
                    final = rt.messages()
            nursery.cancel_scope.cancel()
        file_ok &= _check_file(base / "home", final)
        store = SessionStore.for_name(base / "home", "soak", SessionHeader(name="soak"))
        reopened = store.open() == final
        store.close()
    growth = (samples[-1] - samples[0]) / samples[0] * 100 if len(samples) > 1 else 0.0
    rows.add("turns", turns, "turns")
    rows.add("done", stats["done"], "turns", target=f"= {turns}", ok=stats["done"] == turns)
    rows.add(
        "turn_end", stats["turn_end"], "turns", target=f"= {turns}", ok=stats["turn_end"] == turns
    )
    rows.add("turns_error", stats["errors"], "turns", note="retries exhausted")
    rows.add(
        "retries",
        stats["retries"],
        "events",
        note=f"{model.failures} of {model.requests} requests failed",
    )
    rows.add(
        "reloads", stats["reloads"], "reloads", note=f"{stats['broken']} with a broken manifest"
    )
    rows.add("session_file_matches", float(file_ok), "bool", target="1", ok=file_ok)
    rows.add("session_reopens", float(reopened), "bool", target="1", ok=reopened)
    rows.add(
        "rss_growth",
        growth,
        "%",
        target="<= 10",
        ok=abs(growth) <= 10,
        note=f"{samples[0] / 2**20:.1f} -> {samples[-1] / 2**20:.1f} MiB",
    )
    rows.add("wall", took[0], "s", note=f"{took[0] / turns * 1000:.1f} ms/turn")
    print(json.dumps({r.case: r.value for r in rows.rows}), file=sys.stderr)
    return rows.rows


if __name__ == "__main__":
    main(measure)
