"""Tool hosts through the supervisor, beside an extension in the same run.

Run from the repository root::

    python bench/bench_toolhost.py [--quick] [--json-out PATH]   # or: python bench/run.py

1. **Call round trips**: ``SupervisorClient.call_tool`` of an echo tool, one call at
   a time and from 32 concurrent callers, into a Python tool host (corral's runner,
   a typed tool), a Node tool host (corral's runner) and an extension (the
   stdlib-only SDK, ``concurrent=True``), all in one supervisor, repetitions
   alternating. Target: a tool host within 1.5x of the extension.
2. **Spawn-to-ready through the supervisor**: entering ``open_supervisor`` with one
   tool host until it is ready (manifest, plan, spawn, ``get_config_schema``,
   ``init``, ``get_tool_schemas`` ...), against a bare ``python -c pass`` /
   ``node -e 0`` started and reaped the same way. Target: within 1.3x. The Python
   runner with a hand-written tool (``corral_tools`` only) and with a typed one
   (its module imports msgspec); ``--sandbox off`` (the target) and, for scale,
   under bwrap. The lean SDK extension is started the same way: what the
   supervisor's own start path costs every kind of child alike.

Figures are medians; the compared variants alternate so load from elsewhere hits
each alike. No bench figure is asserted anywhere in the tests.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec
import trio
from _common import Row, Rows, main, median
from _exts import child_env
from bench_toolkit import JS_MODULE, LEAN_EXT, RAW_MODULE, TYPED_MODULE

from agent._cli.logs import configure_logging
from supervisor import SupervisorClient, SupervisorConfig, TextBlock, open_supervisor

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


async def spawns(
    root: Path, sizes: Sizes, with_node: bool, with_bwrap: bool
) -> dict[str, list[float]]:
    hosts = {
        "extension": extension(root),
        "python raw": py_host(root, typed=False),
        "python typed": py_host(root, typed=True),
    }
    bare = {"python": [sys.executable, "-c", "pass"]}
    if with_node:
        hosts["node"] = js_host(root)
        bare["node"] = [shutil.which("node") or "node", "-e", "0"]
    modes = ["off", "auto"] if with_bwrap else ["off"]
    samples: dict[str, list[float]] = {}
    for path in hosts.values():  # warm the page cache and the bytecode
        await ready_s(path, root, "off")
    for _ in range(sizes.spawn_reps):
        for name, argv in bare.items():
            samples.setdefault(f"bare {name}", []).append(bare_s(argv))
        for what, path in hosts.items():
            for mode in modes:
                key = f"{what} ({'bwrap' if mode == 'auto' else 'no sandbox'})"
                samples.setdefault(key, []).append(await ready_s(path, root, mode))
    return samples


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
            ms = {k: median(v) * 1000 for k, v in samples.items()}
            for key, value in ms.items():
                rows.add(f"ready.{key.replace(' ', '_')}", value, "ms")
            for key, value in ms.items():
                if key.startswith(("bare", "extension")) or "bwrap" in key:
                    continue
                base = ms["bare node" if key.startswith("node") else "bare python"]
                ratio = value / base
                rows.add(
                    f"ready.{key.split(' (')[0].replace(' ', '_')}_vs_bare",
                    ratio,
                    "x",
                    target="<= 1.3x",
                    ok=ratio <= 1.3,
                    note="through the supervisor, --sandbox off",
                )
    return rows.rows


if __name__ == "__main__":
    main(measure)
