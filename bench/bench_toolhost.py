"""Tool hosts through the supervisor, beside an extension in the same run.

Run from the repository root::

    python bench/bench_toolhost.py [--quick] [--json-out PATH]   # or: python bench/run.py

1. **Call round trips**: ``SupervisorClient.call_tool`` of an echo tool, one call at
   a time and from 32 concurrent callers, into a Python tool host (corral's runner,
   a typed tool), a Node tool host (corral's runner) and an extension (the
   stdlib-only SDK, ``concurrent=True``), all in one supervisor, repetitions
   alternating. Target: a tool host within 1.5x of the extension.
2. **Spawn-to-ready**, per host, three ways measured back to back in an order that
   rotates every repetition: through the supervisor (entering ``open_supervisor``
   with the one host until it is ready: manifest, plan, spawn, the start-up
   handshake), the same runner started directly by a minimal client that sends it
   the same handshake (no supervisor), and a bare ``python -c pass`` / ``node -e 0``
   started and reaped. The ratios are paired (median of the per-repetition ratios):
   ``corral_vs_bare`` (target: within 1.3x) splits into ``direct_vs_bare`` (the
   interpreter's imports and the handshake: the runner's own cost) and
   ``corral_vs_direct`` (corral's). The Python runner with a hand-written tool
   (``corral_tools`` only) and with a typed one (its module imports msgspec);
   ``--sandbox off`` (the target) and, for scale, under bwrap. The lean SDK
   extension is started the same way: what the supervisor's start path costs every
   kind of child alike. Where the target is out of reach for a reason outside the
   runner, a ``floor`` is measured in the same rotation: for the typed host the bare
   interpreter importing msgspec (the tool module's own import, the user's cost);
   for Node the least program that does a runner's job (read the handshake, import
   the tool module, answer each line with fd-level I/O, as host.cjs does). The
   1.3x target is the runners' (``python_raw``, ``node``): the typed host's row has
   none, since its tool module's own ``import msgspec`` is above it whoever runs it.

Figures are medians; the compared variants alternate so load from elsewhere hits
each alike. No bench figure is asserted anywhere in the tests.
"""

from __future__ import annotations

import contextlib
import functools
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec
import trio
from _common import Row, Rows, main, median
from _exts import child_env
from bench_toolkit import JS_MODULE, LEAN_EXT, RAW_MODULE, TYPED_MODULE, runner_argv

from agent._cli.logs import configure_logging
from supervisor import SupervisorClient, SupervisorConfig, TextBlock, open_supervisor
from supervisor._hostwire import Method, OkResponse, Request, decode_host_message, encode_request
from supervisor.lowlevel import SDK_DIR

WINDOW = 32
ARGS = {"text": "hi"}


class Sizes(msgspec.Struct, frozen=True, kw_only=True):
    warmup: int
    seq: int
    conc: int
    reps: int
    spawn_reps: int


FULL = Sizes(warmup=300, seq=2000, conc=6400, reps=5, spawn_reps=11)
QUICK = Sizes(warmup=20, seq=100, conc=320, reps=1, spawn_reps=2)


def _write(root: Path, name: str, manifest: dict[str, Any], files: dict[str, str]) -> str:
    d = root / "exts" / name
    d.mkdir(parents=True, exist_ok=True)
    for file, text in files.items():
        (d / file).write_text(text)
    (d / "extension.json").write_bytes(msgspec.json.encode({"name": name, **manifest}))
    return str(d)


def py_host(root: Path, typed: bool) -> str:
    module = TYPED_MODULE if typed else RAW_MODULE
    name = "py-typed" if typed else "py-raw"
    config = {"modules": ["./tools.py"]}
    manifest = {"kind": "tool-host", "runtime": "python", "config": config}
    return _write(root, name, manifest, {"tools.py": module})


def js_host(root: Path) -> str:
    manifest = {"kind": "tool-host", "runtime": "node", "config": {"modules": ["./tools.mjs"]}}
    return _write(root, "js", manifest, {"tools.mjs": JS_MODULE})


def extension(root: Path) -> str:
    return _write(root, "echo", {"exec": "./ext.py"}, {"ext.py": LEAN_EXT})


def _config(root: Path, sandbox: str = "off") -> SupervisorConfig:
    return SupervisorConfig(home=str(root / "home"), sandbox=sandbox)  # type: ignore[arg-type]


# --- 1. round trips ----------------------------------------------------------------------------


async def _per_call_us(n: int, run: Any) -> float:
    t0 = time.perf_counter()
    await run(n)
    return (time.perf_counter() - t0) / n * 1e6


async def round_trips(root: Path, sizes: Sizes, with_node: bool) -> dict[str, dict[str, float]]:
    """Median µs per call of the ``echo`` tool, sequential and concurrent, in each child
    (one supervisor each, all open at once: the repetitions alternate)."""
    paths = {"extension": extension(root), "python host": py_host(root, typed=True)}
    if with_node:
        paths["node host"] = js_host(root)
    async with contextlib.AsyncExitStack() as stack:
        clients: dict[str, SupervisorClient] = {}
        for what, path in paths.items():
            opened = open_supervisor(_config(root / what), ext_paths=[path], discover=False)
            clients[what] = client = await stack.enter_async_context(opened)
            out = await client.call_tool("echo", ARGS)
            if out.is_error or out.content != [TextBlock(text="hi")]:
                raise RuntimeError(f"unexpected echo result from the {what}: {out!r}")

        def runs(client: SupervisorClient) -> tuple[Any, Any]:
            async def sequential(n: int) -> None:
                for _ in range(n):
                    await client.call_tool("echo", ARGS)

            async def concurrent(n: int) -> None:
                async with trio.open_nursery() as nursery:
                    for _ in range(WINDOW):
                        nursery.start_soon(sequential, n // WINDOW)

            return sequential, concurrent

        samples: dict[str, dict[str, list[float]]] = {k: {"seq": [], "conc": []} for k in paths}
        with trio.fail_after(600):
            for client in clients.values():
                seq, conc = runs(client)
                await seq(sizes.warmup)
                await conc(sizes.warmup * 4)
            for _ in range(sizes.reps):
                for what, client in clients.items():
                    seq, conc = runs(client)
                    samples[what]["seq"].append(await _per_call_us(sizes.seq, seq))
                    samples[what]["conc"].append(await _per_call_us(sizes.conc, conc))
    return {k: {m: median(v) for m, v in s.items()} for k, s in samples.items()}


# --- 2. spawn-to-ready -----------------------------------------------------------------------


async def ready_s(path: str, root: Path, sandbox: str) -> float:
    """Seconds to enter ``open_supervisor`` with the one child in ``path`` ready."""
    with trio.fail_after(60):
        t0 = time.perf_counter()
        async with open_supervisor(_config(root, sandbox), ext_paths=[path], discover=False) as c:
            elapsed = time.perf_counter() - t0
            (info,) = await c.list_extensions()
            if info.state != "running":
                raise RuntimeError(f"{info.name} did not start: {info.problem}")
    return elapsed


def bare_s(argv: list[str]) -> float:
    """Seconds to start ``argv`` and reap it."""
    t0 = time.perf_counter()
    subprocess.run(argv, env=child_env(), start_new_session=True, check=True)
    return time.perf_counter() - t0


#: What the supervisor sends one of corral's runners at start, all at once (see
#: supervisor/_toolhost.py): the minimal client of the "direct" rows sends the same.
HANDSHAKE = (
    Method.GET_CONFIG_SCHEMA,
    Method.INIT,
    Method.GET_CONFIG_SCHEMA,
    Method.GET_TOOL_SCHEMAS,
    Method.GET_UI_ELEMENTS,
    Method.GET_TAGS,
    Method.REQUIRED_TAGS,
)
_MODELS = {"models": [{"id": "model", "provider": "offline"}]}


def direct_s(argv: list[str], path: str) -> float:
    """Seconds from starting ``argv`` (a runner) for the host in ``path`` directly (no
    supervisor; the supervisor's environment) until it answered the whole handshake."""
    config = msgspec.json.decode((Path(path) / "extension.json").read_bytes())["config"]
    params = {Method.INIT: {"config": config}, Method.GET_TAGS: {"config": config, **_MODELS}}
    lines = b"".join(
        encode_request(Request(id=str(i), method=m, params=params.get(m, {})))
        for i, m in enumerate(HANDSHAKE)
    )
    env = child_env() | {"PYTHONPATH": SDK_DIR}
    pipe = subprocess.PIPE
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        argv, cwd=path, env=env, stdin=pipe, stdout=pipe, start_new_session=True
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    proc.stdin.write(lines)
    proc.stdin.flush()
    answers = [decode_host_message(proc.stdout.readline()) for _ in HANDSHAKE]
    elapsed = time.perf_counter() - t0
    proc.stdin.close()
    proc.wait(timeout=30)
    proc.stdout.close()
    if not (isinstance(answers[1], OkResponse) and isinstance(answers[3], OkResponse)):
        raise RuntimeError(f"{argv} in {path} did not start: {answers}")
    return elapsed


#: The least a Node tool host does before ready: read the handshake from fd 0, import
#: the tool module at ``init``, write an answer to each line on fd 1. CommonJS, as the
#: runner: an ES module entry would start Node's ES module loader before it is needed.
NODE_FLOOR = """\
const { read, writeSync } = require("node:fs");
let text = "";
const chunk = Buffer.alloc(65536);
async function answer(size) {
  text += chunk.toString("utf8", 0, size);
  let nl;
  while ((nl = text.indexOf("\\n")) >= 0) {
    const msg = JSON.parse(text.slice(0, nl));
    text = text.slice(nl + 1);
    if (msg.method === "init") {
      await import(new URL(msg.params.config.modules[0], `file://${process.cwd()}/`).href);
    }
    writeSync(1, JSON.stringify({ v: 1, id: msg.id, ok: true, result: { value: {} } }) + "\\n");
  }
}
function next() {
  read(0, chunk, 0, chunk.length, null, async (err, size) => {
    if (err || !size) return;
    await answer(size);
    next();
  });
}
next();
"""


class Host(msgspec.Struct, frozen=True):
    path: str
    bare: list[str]  # the interpreter doing nothing
    runner: list[str] | None  # corral's runner started directly; None: an extension
    floor: list[str] | None = None  # the least any runner of this host costs
    floor_answers: bool = False  # the floor answers the handshake (else: started, reaped)


async def spawns(
    root: Path, sizes: Sizes, with_node: bool, with_bwrap: bool
) -> dict[str, dict[str, list[float]]]:
    """Per host: seconds to ready through the supervisor (``corral``, ``--sandbox off``;
    ``bwrap`` for scale), the runner started directly (``direct``) and the bare
    interpreter (``bare``), measured back to back in an order that rotates every
    repetition (so the per-repetition ratios are paired)."""
    python = [sys.executable, "-c", "pass"]
    msgspec_import = [sys.executable, "-c", "import msgspec"]
    py_runner = runner_argv("py")
    hosts = {
        "extension": Host(extension(root), python, None),
        "python raw": Host(py_host(root, typed=False), python, py_runner),
        "python typed": Host(py_host(root, typed=True), python, py_runner, msgspec_import),
    }
    if with_node:
        floor_js = root / "node_floor.cjs"
        floor_js.write_text(NODE_FLOOR)
        node = runner_argv("js")[0]
        hosts["node"] = Host(
            js_host(root), [node, "-e", "0"], runner_argv("js"), [node, str(floor_js)], True
        )
    samples: dict[str, dict[str, list[float]]] = {}
    for host in hosts.values():  # warm the page cache and the bytecode
        await ready_s(host.path, root, "off")
    for rep in range(sizes.spawn_reps):
        for what, host in hosts.items():
            runs: dict[str, Callable[[], Awaitable[float]]] = {
                "bare": functools.partial(trio.to_thread.run_sync, bare_s, host.bare),
                "corral": functools.partial(ready_s, host.path, root, "off"),
            }
            if host.runner is not None:
                runs["direct"] = functools.partial(
                    trio.to_thread.run_sync, direct_s, host.runner, host.path
                )
            if host.floor is not None:
                floor = (
                    functools.partial(direct_s, host.floor, host.path)
                    if host.floor_answers
                    else functools.partial(bare_s, host.floor)
                )
                runs["floor"] = functools.partial(trio.to_thread.run_sync, floor)
            if with_bwrap:
                runs["bwrap"] = functools.partial(ready_s, host.path, root, "auto")
            order = list(runs)
            shift = rep % len(order)
            for kind in order[shift:] + order[:shift]:
                samples.setdefault(what, {}).setdefault(kind, []).append(await runs[kind]())
    return samples


def paired(ours: list[float], theirs: list[float]) -> float:
    """The median of the per-repetition ratios."""
    return median([a / b for a, b in zip(ours, theirs, strict=True)])


_KINDS = {
    "bare": "the bare interpreter, started and reaped",
    "corral": "through the supervisor, --sandbox off, until ready",
    "direct": "the runner started directly, until it answered the start-up handshake",
    "bwrap": "through the supervisor under bwrap, until ready (for scale)",
    "floor": "the least any runner of this host costs (see the module docstring)",
}
_FLOORS = {
    "python typed": "the bare interpreter importing msgspec, which the tool module "
    "imports: the user's own cost",
    "node": "the least Node program that reads the handshake, imports the tool module "
    "and answers each line",
}


# --- measure -------------------------------------------------------------------------------------


def _bwrap_works() -> bool:
    from sandbox import select_sandbox

    try:
        return select_sandbox("auto").backend == "bwrap"
    except Exception:
        return False


async def measure(quick: bool) -> list[Row]:
    configure_logging(level="error")
    sizes = QUICK if quick else FULL
    rows = Rows("toolhost")
    with_node = shutil.which("node") is not None
    with tempfile.TemporaryDirectory(prefix="corral-bench-") as tmp:
        root = Path(tmp)
        with rows.guard("call"):
            trips = await round_trips(root, sizes, with_node)
            ext = trips["extension"]
            for mode, label in (("seq", "sequential"), ("conc", f"{WINDOW} concurrent")):
                rows.add(f"call.extension.{mode}", ext[mode], "µs/call", note=label)
                for host in ("python host", "node host"):
                    if host not in trips:
                        continue
                    key = host.split()[0]
                    value = trips[host][mode]
                    rows.add(f"call.{key}.{mode}", value, "µs/call", note=label)
                    ratio = value / ext[mode]
                    rows.add(
                        f"call.{key}.{mode}_vs_extension",
                        ratio,
                        "x",
                        target="<= 1.5x",
                        ok=ratio <= 1.5,
                    )
        with rows.guard("spawn"):
            samples = await spawns(root / "spawn", sizes, with_node, _bwrap_works())
            reps = f"paired, median of {sizes.spawn_reps} rotating repetitions"
            for what, runs in samples.items():
                key = what.replace(" ", "_")
                for kind, values in runs.items():
                    rows.add(f"ready.{key}.{kind}", median(values) * 1000, "ms", note=_KINDS[kind])
                bare = "bare " + ("node -e 0" if what == "node" else "python -c pass")
                ratio = paired(runs["corral"], runs["bare"])
                # The target is the runners'; a typed tool module's own `import msgspec`
                # is above it by itself (its floor row), whoever runs the module.
                targeted = "direct" in runs and what != "python typed"
                why = "" if what != "python typed" else "; no target: see floor_vs_bare"
                rows.add(
                    f"ready.{key}.corral_vs_bare",
                    ratio,
                    "x",
                    target="<= 1.3x" if targeted else None,
                    ok=ratio <= 1.3 if targeted else None,
                    note=f"through the supervisor (--sandbox off) vs {bare}; {reps}{why}",
                )
                splits = {  # name: (ours, theirs, what the ratio says)
                    "floor_vs_bare": ("floor", "bare", f"{_FLOORS.get(what)} vs {bare}"),
                    "corral_vs_floor": ("corral", "floor", "through the supervisor vs that floor"),
                    "direct_vs_bare": (
                        "direct",
                        "bare",
                        f"the runner's own cost: started directly vs {bare}",
                    ),
                    "corral_vs_direct": (
                        "corral",
                        "direct",
                        "corral's cost: through the supervisor vs started directly",
                    ),
                }
                for name, (ours, theirs, says) in splits.items():
                    if ours in runs and theirs in runs:
                        ratio = paired(runs[ours], runs[theirs])
                        rows.add(f"ready.{key}.{name}", ratio, "x", note=f"{says}; {reps}")
    return rows.rows


if __name__ == "__main__":
    main(measure)
