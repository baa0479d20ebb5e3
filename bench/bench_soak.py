"""Soak: one ``corral rpc`` session driven as a user would, for 3,000 prompts, through faults.

The host is a real ``corral rpc`` process (``--sandbox auto``: bwrap where there is
one), with a saved session and the default compaction threshold (400 kB), driven
over its pipes one prompt at a time:

* the model is a loopback HTTP server speaking the OpenAI streaming format, strict
  as the real API (``tests/helpers/http_fakes.py``: a request holding a tool call
  without its result is refused with a 400, counted in ``refused``). It answers
  with text (about 1.5 kB) or with tool calls (``read``, ``bash``, the chaos
  extension's ``chaos_echo``, or several at once), and with faults: 429 with
  ``Retry-After`` (2 %), 500 (1.5 %), a stream cut mid-way (2 %), a slow stream
  (3 %);
* the chaos extension (sandboxed) crashes on every 7th call and is restarted;
* about 3 % of the prompts are aborted: just after a ``tool_call`` (the window of
  issue 32), after the first text, or at once;
* every 100 prompts, ``ext_reload`` is sent while a prompt runs; every third one
  with a broken manifest (the running extension is kept; restored at the next).

Every 100 prompts it samples the host's RSS, open descriptors and threads (one
``sample.pN`` row each). The RSS slope is the least-squares line through the
samples after the warm-up (the first sixth of the run); ``rss_growth`` is that
line's rise over the rest of the run (target: within 2 %). It checks that each
prompt got exactly one ``done``, that the session file holds every tool call
answered and every user turn since the last compaction, and that a new process
resuming the session is answered.

``python bench/bench_soak.py [--quick]`` (``--quick``: 60 prompts, a sample every
20); ``CORRAL_SOAK_PROMPTS`` sets the count. ``CORRAL_SOAK_TRACE=DIR`` runs the
host under ``tracemalloc`` (25 frames) and dumps a snapshot at every sample into
DIR (``python bench/soak_trace.py DIR`` compares them by traceback).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import trio
from _common import ROOT, Row, Rows, main, stopwatch

sys.path.append(str(ROOT / "tests"))  # the test suite's strict API double and file reader
from helpers import http_fakes as fx
from helpers.cancelkit import written_messages
from helpers.http_fakes import Recorded, Reply, open_fake_server

from agent._exchanges import tool_call_problems
from agent._messages import text_of
from agent._transcript import COMPACT_SYSTEM, SUMMARY_PREFIX

CHAOS = ROOT / "examples" / "extensions" / "chaos" / "chaos.py"
HOST = Path(__file__).resolve().parent / "_soak_host.py"
#: ``corral`` itself, as the console script runs it.
CORRAL = "from agent._cli.main import main; main()"
KINDS = [("text", 50), ("read", 15), ("bash", 10), ("chaos", 15), ("several", 10)]
ABORT_RATE = 0.03
ANSWER = "The answer, with enough words to make a transcript grow. " * 26  # ~1.5 kB


# --- the model ----------------------------------------------------------------------


def _calls(kind: str, n: int) -> list[tuple[str, dict[str, Any]]]:
    read = ("read", {"path": "notes.md"})
    bash = ("bash", {"command": f"echo soak {n} && wc -c notes.md"})
    chaos = ("chaos_echo", {"text": f"soak {n}"})
    return {"read": [read], "bash": [bash], "chaos": [chaos], "several": [read, chaos, bash]}.get(
        kind, []
    )


@dataclass
class Model:
    """Answers each chat request by its last message, with faults drawn at random."""

    rng: random.Random
    counts: dict[str, int] = field(default_factory=dict)

    def _count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1

    def __call__(self, request: Recorded) -> Reply:
        if request.method == "GET":  # /models: never taken here (the server answers)
            return fx.json_reply(200, {"data": [{"id": "soak"}]})
        self._count("requests")
        draw = self.rng.random()
        if draw < 0.02:
            self._count("fault_429")
            doc = {"error": {"message": "slow down", "type": "rate_limit_error"}}
            reply = fx.json_reply(429, doc)
            reply.headers.update({"retry-after": "1", "retry-after-ms": "40"})
            return reply
        if draw < 0.035:
            self._count("fault_500")
            return fx.json_reply(500, {"error": {"message": "oops", "type": "server_error"}})
        body = request.body
        messages = body["messages"]
        last = messages[-1]
        n = self.counts["requests"]
        if messages[0]["role"] == "system" and messages[0]["content"] == COMPACT_SYSTEM:
            self._count("compactions")
            sse = fx.openai_sse(fx.oa(f"Summary {n}: " + ANSWER[:600]), fx.oa(finish="stop"))
        elif last["role"] == "user" and isinstance(last["content"], str):
            kind = last["content"].split(" ", 1)[0]
            calls = [
                fx.oa_call(i, json.dumps(args), id=f"call_{n}_{i}", name=name)
                for i, (name, args) in enumerate(_calls(kind, n))
            ]
            if calls:
                sse = fx.openai_sse(
                    fx.oa("Let me look."), fx.oa(calls=calls), fx.oa(finish="tool_calls")
                )
            else:
                sse = fx.openai_sse(fx.oa(ANSWER[:700]), fx.oa(ANSWER[700:]), fx.oa(finish="stop"))
        else:  # tool results: answer them
            sse = fx.openai_sse(fx.oa(f"Done ({n}). " + ANSWER[:400]), fx.oa(finish="stop"))
        if draw < 0.055:
            self._count("fault_cut")
            return Reply(chunks=[sse[: len(sse) // 2]], end="break")
        if draw < 0.085:
            self._count("fault_slow")
            return Reply(chunks=fx.split(sse, max(1, len(sse) // 8)), pace=0.02)
        return Reply(chunks=[sse])


# --- the host -----------------------------------------------------------------------


def _manifest(where: Path, *, broken: bool) -> None:
    manifest = {
        "name": "chaos",
        "version": "1.0.0",
        "exec": "./chaos.py",
        "args": ["--crash-after", "7"],
        "language": "python",
    }
    text = json.dumps(manifest)
    (where / "extension.json").write_text(text[:-7] if broken else text)


def _argv(base_url: str, work: Path, ext: Path, trace: str | None) -> list[str]:
    head = [sys.executable, str(HOST)] if trace else [sys.executable, "-c", CORRAL]
    return [
        *head,
        "rpc",
        *("--provider", "openai", "--model", "soak", "--base-url", base_url),
        *("--api-key", "sk-soak", "--session", "soak", "--cwd", str(work)),
        *("--no-extensions", "-e", str(ext), "--sandbox", "auto"),
        *("--retries", "6", "--retry-max-time", "60"),
    ]


class Host:
    """One ``corral rpc`` process and its frames."""

    def __init__(self, proc: trio.Process) -> None:
        self.proc = proc
        self._buf = bytearray()
        self.ids = 0

    async def send(self, frame: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        await self.proc.stdin.send_all(json.dumps(frame).encode() + b"\n")

    async def read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        while (newline := self._buf.find(b"\n")) < 0:
            data = await self.proc.stdout.receive_some(1 << 16)
            if not data:
                raise EOFError("the host closed its stdout")
            self._buf += data
        line = bytes(self._buf[:newline])
        del self._buf[: newline + 1]
        frame: dict[str, Any] = json.loads(line)
        return frame


@dataclass
class Tally:
    prompts: int = 0
    one_done: int = 0
    stray_done: int = 0
    aborts: int = 0
    aborted_turns: int = 0
    retries: int = 0
    turn_errors: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    #: ext_status events by status (crashed, restarted, quarantined, kept, ...).
    ext: dict[str, int] = field(default_factory=dict)
    #: The prompts that began with a compaction.
    compactions: list[int] = field(default_factory=list)
    reloads: int = 0
    reloads_broken: int = 0
    reload_failures: int = 0
    users: list[str] = field(default_factory=list)
    samples: list[tuple[int, int, int, int]] = field(default_factory=list)


async def _prompt(host: Host, tally: Tally, n: int, rng: random.Random, reload: bool) -> None:
    """One prompt until its ``done``, with an ``ext_reload`` sent while it runs."""
    kind = rng.choices([k for k, _ in KINDS], [w for _, w in KINDS])[0]
    text = f"{kind} {n}: please do the thing"
    abort_on = None
    if rng.random() < ABORT_RATE:
        # With tool calls: just after the model's message (its text is streamed, the
        # calls are not announced yet: issue 32's window), or once a tool runs.
        moments = ["text_delta", "assistant_message", "tool_call"] if _calls(kind, n) else []
        abort_on = rng.choice(moments or ["text_delta", "response"])
    await host.send({"id": n, "type": "prompt", "message": text})
    tally.prompts += 1
    reload_id = None
    if reload:
        reload_id = f"reload{n}"
        await host.send({"id": reload_id, "type": "ext_reload"})
    dones = 0
    answered_reload = reload_id is None
    while dones == 0 or not answered_reload:
        frame = await host.read()
        kind_ = frame["type"]
        if kind_ == abort_on:
            abort_on = None
            tally.aborts += 1
            await host.send({"id": f"abort{n}", "type": "abort"})
        if kind_ == "done":
            dones += 1
        elif kind_ == "response" and frame.get("id") == reload_id:
            answered_reload = True
            tally.reload_failures += not frame["success"]
        elif kind_ == "user_message":  # the prompt entered the transcript
            tally.users.append(text)
        elif kind_ == "retry":
            tally.retries += 1
        elif kind_ == "turn_end":
            tally.turn_errors += frame["stop"] == "error"
            tally.aborted_turns += frame["stop"] == "aborted"
        elif kind_ == "tool_call":
            tally.tool_calls += 1
        elif kind_ == "tool_result":
            tally.tool_errors += frame["is_error"]
        elif kind_ == "compact_done":
            tally.compactions.append(n)
        elif kind_ == "ext_status":
            status = frame["status"]
            tally.ext[status] = tally.ext.get(status, 0) + 1
    tally.one_done += dones == 1
    tally.stray_done += max(0, dones - 1)


def _sample(proc: psutil.Process, prompts: int, trace: bool) -> tuple[int, int, int, int]:
    if trace:  # a snapshot now (the host's SIGUSR1 handler)
        proc.send_signal(signal.SIGUSR1)
    return prompts, proc.memory_info().rss, proc.num_fds(), proc.num_threads()


def _slope(points: list[tuple[int, int]]) -> tuple[float, float]:
    """Least-squares line through (x, y): slope, intercept."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else 0.0
    return slope, my - slope * mx


def _check_session(home: Path, users: list[str]) -> tuple[bool, bool, int]:
    """The file as written (not repaired by a load): every call answered, and every
    user turn since the last summary, in order."""
    messages = written_messages(home, "soak")
    texts = [text_of(m) for m in messages if m.role == "user"]
    kept = [t for t in texts if not t.startswith(SUMMARY_PREFIX)]
    turns_ok = bool(kept) and kept == users[len(users) - len(kept) :]
    return tool_call_problems(messages) == [], turns_ok, len(messages)


async def _run(
    prompts: int, every: int, base: Path, trace: str | None
) -> tuple[Tally, dict[str, Any]]:
    rng = random.Random(32)
    work, home, ext = base / "work", base / "home", base / "chaos"
    for where in (work, home, ext):
        where.mkdir()
    (work / "notes.md").write_text("notes\n" + "a line of notes to read back\n" * 70)
    shutil.copy2(CHAOS, ext / "chaos.py")
    _manifest(ext, broken=False)
    env = {**os.environ, "CORRAL_HOME": str(home), "PYTHONPATH": str(ROOT)}
    env.pop("OPENAI_API_KEY", None)
    if trace:
        env["CORRAL_SOAK_TRACE"] = trace
    tally, facts = Tally(), {}
    async with open_fake_server() as server:
        model = Model(rng=random.Random(7))
        server.responder = model
        server.models = ["soak"]
        argv = _argv(f"{server.url}/v1", work, ext, trace)
        stderr = (base / "host.log").open("wb")
        with stopwatch() as took:
            proc = await trio.lowlevel.open_process(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=env
            )
            host, ps = Host(proc), psutil.Process(proc.pid)
            broken = False
            for n in range(1, prompts + 1):
                reload = n % every == 0  # every 100 prompts (20 with --quick)
                if reload:
                    broken = not broken and (n // every) % 3 == 0
                    tally.reloads += 1
                    tally.reloads_broken += broken
                    _manifest(ext, broken=broken)
                await _prompt(host, tally, n, rng, reload)
                if n % every == 0:
                    tally.samples.append(await trio.to_thread.run_sync(_sample, ps, n, bool(trace)))
                    print(
                        f"soak: {n} prompts, rss/fds/threads {tally.samples[-1][1:]}",
                        file=sys.stderr,
                        flush=True,
                    )
            assert proc.stdin is not None
            with stopwatch() as exit_took:
                await proc.stdin.aclose()
                while True:
                    try:
                        await host.read()
                    except EOFError:
                        break
                facts["exit_status"] = await proc.wait()
        facts["exit_s"] = exit_took[0]
        facts["wall"] = took[0]
        facts["requests"] = dict(model.counts)
        facts["refused"] = len(server.refused)
        facts["refusals"] = [p.message for _, p in server.refused[:3]]
        facts["pairing_ok"], facts["turns_ok"], facts["messages"] = _check_session(
            home, tally.users
        )
        # A new process resuming the session is answered by the strict API.
        proc = await trio.lowlevel.open_process(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=env
        )
        host = Host(proc)
        await host.send({"id": "again", "type": "prompt", "message": "text again"})
        stops = []
        while (frame := await host.read())["type"] != "done":
            if frame["type"] == "turn_end":
                stops.append(frame["stop"])
        assert proc.stdin is not None
        await proc.stdin.aclose()
        await proc.wait()
        facts["resumed_ok"] = stops == ["end_turn"]
        stderr.close()
    facts["log_tail"] = (base / "host.log").read_text(errors="replace")[-1500:]
    return tally, facts


def _rows(tally: Tally, facts: dict[str, Any], prompts: int) -> list[Row]:
    rows = Rows("soak")
    rows.add("prompts", prompts, "prompts")
    rows.add(
        "done_exactly_once",
        tally.one_done,
        "prompts",
        target=f"= {prompts}",
        ok=tally.one_done == prompts and tally.stray_done == 0,
        note=f"{tally.stray_done} stray done",
    )
    requests = facts["requests"]
    rows.add(
        "refused",
        facts["refused"],
        "requests",
        target="= 0",
        ok=facts["refused"] == 0,
        note="400s from the strict API double " + "; ".join(facts["refusals"])[:200],
    )
    rows.add("aborts", tally.aborts, "prompts", note=f"{tally.aborted_turns} turns ended aborted")
    faults = ", ".join(
        f"{k.removeprefix('fault_')} {v}"
        for k, v in sorted(requests.items())
        if k.startswith("fault_")
    )
    rows.add(
        "retries",
        tally.retries,
        "events",
        note=f"{requests.get('requests', 0)} model requests; faults: {faults}",
    )
    rows.add("turns_error", tally.turn_errors, "turns", note="retries exhausted or a cut stream")
    rows.add("tool_calls", tally.tool_calls, "calls", note=f"{tally.tool_errors} error results")
    ext = tally.ext
    rows.add(
        "restarts",
        ext.get("restarted", 0),
        "events",
        note=f"chaos crashes on every 7th call: {ext.get('crashed', 0)} crashes, "
        f"{ext.get('quarantined', 0)} quarantined, {ext.get('kept', 0)} kept by a reload",
    )
    rows.add(
        "reloads",
        tally.reloads,
        "reloads",
        note=f"{tally.reloads_broken} with a broken manifest, {tally.reload_failures} failed",
    )
    rows.add(
        "compactions",
        len(tally.compactions),
        "compactions",
        note="at the default 400 kB, before prompts "
        + ", ".join(map(str, tally.compactions[:12]))
        + (" ..." if len(tally.compactions) > 12 else ""),
    )
    for n, rss, fds, threads in tally.samples:
        rows.add(f"sample.p{n}", rss / 2**20, "MiB", note=f"fds {fds}, threads {threads}")
    warm = [s for s in tally.samples if s[0] > prompts // 6] or tally.samples[-1:]
    slope, start = _slope([(n, rss) for n, rss, _, _ in warm])
    first, last = warm[0][0], warm[-1][0]
    growth = slope * (last - first) / (start + slope * first) * 100 if warm else 0.0
    rows.add(
        "rss_slope",
        slope * 100 / 1024,
        "KiB/100 prompts",
        note=f"least squares after the warm-up (prompts {first}-{last})",
    )
    rows.add(
        "rss_growth",
        growth,
        "%",
        target="<= 2",
        ok=abs(growth) <= 2,
        note=f"{warm[0][1] / 2**20:.1f} -> {warm[-1][1] / 2**20:.1f} MiB sampled",
    )
    half = len(warm) // 2 or 1
    fds_early, fds_late = max(s[2] for s in warm[:half]), max(s[2] for s in warm[half:] or warm)
    threads = [s[3] for s in warm]
    rows.add(
        "fds_growth",
        fds_late - fds_early,
        "fds",
        target="<= 0",
        ok=fds_late <= fds_early,
        note=f"most open in the 2nd half of the samples after the warm-up, minus in the 1st "
        f"({min(s[2] for s in warm)}-{fds_late}: an extension restarting has none open)",
    )
    rows.add(
        "threads_growth",
        max(threads[half:] or threads) - max(threads[:half]),
        "threads",
        note=f"as fds_growth ({min(threads)}-{max(threads)}: worker threads come and go)",
    )
    rows.add(
        "session_pairing",
        float(facts["pairing_ok"]),
        "bool",
        target="1",
        ok=facts["pairing_ok"],
        note="every tool call in the file has one result",
    )
    rows.add(
        "session_user_turns",
        float(facts["turns_ok"]),
        "bool",
        target="1",
        ok=facts["turns_ok"],
        note=f"every user turn since the last summary, in order ({facts['messages']} messages)",
    )
    rows.add(
        "session_resumes",
        float(facts["resumed_ok"]),
        "bool",
        target="1",
        ok=facts["resumed_ok"],
        note="a new process resuming it is answered",
    )
    rows.add("exit", facts["exit_s"], "s", note=f"status {facts['exit_status']} after stdin closed")
    rows.add("wall", facts["wall"], "s", note=f"{facts['wall'] / prompts * 1000:.0f} ms/prompt")
    return rows.rows


async def measure(quick: bool) -> list[Row]:
    prompts = int(os.environ.get("CORRAL_SOAK_PROMPTS", "60" if quick else "3000"))
    every = 20 if quick else 100
    trace = os.environ.get("CORRAL_SOAK_TRACE") or None
    with tempfile.TemporaryDirectory(prefix="corral-soak-") as tmp:
        tally, facts = await _run(prompts, every, Path(tmp), trace)
    rows = _rows(tally, facts, prompts)
    if any(r.ok is False for r in rows):
        print(facts["log_tail"], file=sys.stderr)
    print(json.dumps({r.case: r.value for r in rows}), file=sys.stderr)
    return rows


if __name__ == "__main__":
    main(measure)
