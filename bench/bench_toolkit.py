"""The typed tool builder and the two tool-host runners, measured raw (no supervisor).

Run from the repository root::

    python bench/bench_toolkit.py [--quick] [--json-out PATH]   # or: python bench/run.py

1. **Repair-aware decoding on valid input**: ``Tool.decode`` against plain
   ``msgspec.json.decode(raw, type=Args)`` (JSON text) and ``msgspec.convert``
   (an already parsed dict, what a tool host receives). Target: under 2 µs added
   per call. The cost of one actual repair is shown for scale.
2. **Spawn-to-ready**: from starting a runner to its answer to ``init`` (which
   imports the tool module), against a bare ``python -c pass`` / ``node -e 0`` on
   the same interpreter. Target: within 1.3x. The Python runner is shown with a
   hand-written tool (``corral_tools`` only) and a typed one (which imports
   msgspec, so it has no target: it is shown against ``python -c "import msgspec"``,
   its floor), started with ``-m`` from bytecode as the SDK's extension module is
   (``PYTHONDONTWRITEBYTECODE`` set, SDK bytecode compiled beforehand). Module
   import times (``python -X importtime``) are shown for the runner and the
   extension SDK side by side.
3. **Round trips**: ``execute_tool`` of an echo tool, one call at a time and 32 in
   flight, through each runner over plain pipes, beside an extension ``tool_call``
   to the same echo tool through the extension SDK (``corral_ext``, a thread per
   call like the runner). The issue's 1.5x target is for calls through the
   supervisor (``bench/bench_toolhost.py``); these rows show the runners' own share.

Children run in their own session with corral's small environment; repetitions
of the compared variants alternate so load from elsewhere hits each alike, and
figures are medians.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import msgspec
from _common import Row, Rows, main, median
from _exts import child_env

from supervisor._frames import decode_ext_frame
from supervisor._hostwire import (
    OkResponse,
    Request,
    decode_execute_value,
    decode_host_message,
    encode_request,
)
from supervisor._sdk.corral_tools import tool
from supervisor._spawn import PYTHON_RUNNER
from supervisor.lowlevel import SDK_DIR

WINDOW = 32


class Sizes(msgspec.Struct, frozen=True, kw_only=True):
    decode_loops: int
    decode_reps: int
    spawn_reps: int
    seq: int
    batches: int
    rt_reps: int


FULL = Sizes(decode_loops=200_000, decode_reps=7, spawn_reps=15, seq=2000, batches=60, rt_reps=5)
QUICK = Sizes(decode_loops=20_000, decode_reps=3, spawn_reps=3, seq=200, batches=5, rt_reps=1)


# --- 1. decoding ---------------------------------------------------------------------------


class Args(msgspec.Struct, kw_only=True):
    city: str
    days: int = 1
    units: Literal["metric", "imperial"] = "metric"
    note: str | None = None


@tool
def forecast(args: Args) -> str:
    """The bench's tool."""
    return args.city


VALID = b'{"city": "Lyon", "days": 3, "units": "imperial", "note": "bring an umbrella"}'
TRAILING = VALID[:-1] + b",}"


def _per_call_ns(fn: Callable[[], Any], loops: int) -> float:
    t0 = time.perf_counter_ns()
    for _ in range(loops):
        fn()
    return (time.perf_counter_ns() - t0) / loops


def decoding(rows: Rows, sizes: Sizes) -> None:
    """Valid input through the repair-aware path against plain msgspec."""
    as_dict = msgspec.json.decode(VALID)
    cases: dict[str, Callable[[], Any]] = {
        "strict_text": lambda: msgspec.json.decode(VALID, type=Args),
        "tool_text": lambda: forecast.decode(VALID),
        "strict_dict": lambda: msgspec.convert(as_dict, Args),
        "tool_dict": lambda: forecast.decode(as_dict),
        "repaired": lambda: forecast.decode(TRAILING),
    }
    for fn in cases.values():
        _per_call_ns(fn, sizes.decode_loops // 10)  # warm-up
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(sizes.decode_reps):
        for name, fn in cases.items():
            loops = sizes.decode_loops // (20 if name == "repaired" else 1)
            times[name].append(_per_call_ns(fn, loops) / 1000)
    us = {name: median(values) for name, values in times.items()}
    for kind, what in (("text", "JSON text"), ("dict", "a parsed dict")):
        base = rows.add(f"decode.strict_{kind}", us[f"strict_{kind}"], "µs", note=what)
        ours = rows.add(f"decode.repair_aware_{kind}", us[f"tool_{kind}"], "µs")
        added = ours - base
        rows.add(
            f"decode.added_{kind}",
            added,
            "µs",
            target="< 2 µs",
            ok=added < 2,
            note="valid input, per call",
        )
    rows.add("decode.one_repair", us["repaired"], "µs", note="a trailing comma, repaired")


# --- 2. spawn-to-ready -----------------------------------------------------------------------

RAW_MODULE = """\
from corral_tools import raw_tool

@raw_tool(schema={"type": "object", "properties": {"text": {"type": "string"}}})
def echo(args):
    return args["text"]
"""
TYPED_MODULE = """\
import msgspec
from corral_tools import tool

class Args(msgspec.Struct):
    text: str

@tool
def echo(args: Args) -> str:
    return args.text
"""
JS_MODULE = """\
export const tools = [{
  name: "echo",
  parameters: { type: "object", properties: { text: { type: "string" } } },
  stateless: true,
  execute: (args) => args.text,
}];
"""
LEAN_EXT = """\
import corral_ext
ext = corral_ext.Extension("echo", "1")

@ext.tool("echo", "echo", {"type": "object", "properties": {"text": {"type": "string"}}},
          concurrent=True)
def echo(args):
    return args["text"]

ext.run()
"""


def write_modules(root: Path) -> None:
    (root / "raw_tools.py").write_text(RAW_MODULE)
    (root / "typed_tools.py").write_text(TYPED_MODULE)
    (root / "tools.mjs").write_text(JS_MODULE)
    (root / "lean_ext.py").write_text(LEAN_EXT)


def runner_argv(lang: str) -> list[str]:
    if lang == "js":
        return [_node(), str(Path(SDK_DIR) / "host.cjs")]
    return [sys.executable, *PYTHON_RUNNER]


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        raise RuntimeError("node is not installed")
    return node


def start(argv: list[str], root: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        argv,
        cwd=root,
        env=child_env() | {"PYTHONPATH": SDK_DIR},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )


def init_line(module: str) -> bytes:
    return encode_request(Request(id="0", method="init", params={"config": {"modules": [module]}}))


def ready_seconds(lang: str, module: str, root: Path) -> float:
    """Start a runner, send ``init``, time until its answer; then stop it."""
    t0 = time.perf_counter()
    proc = start(runner_argv(lang), root)
    assert proc.stdin is not None
    assert proc.stdout is not None
    proc.stdin.write(init_line(module))
    proc.stdin.flush()
    answer = decode_host_message(proc.stdout.readline())
    elapsed = time.perf_counter() - t0
    if not isinstance(answer, OkResponse):
        raise RuntimeError(f"init failed: {answer}")
    proc.stdin.close()
    proc.wait(timeout=30)
    proc.stdout.close()
    return elapsed


def bare_seconds(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, env=child_env(), start_new_session=True, check=True, timeout=30)
    return time.perf_counter() - t0


def import_us(module: str) -> float:
    """Cumulative import time of ``module`` in a fresh interpreter (``-X importtime``)."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"],
        env=child_env() | {"PYTHONPATH": SDK_DIR},
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    last = [ln for ln in proc.stderr.splitlines() if ln.rstrip().endswith(f"| {module}")][-1]
    return float(last.split("|")[1])


def spawning(rows: Rows, sizes: Sizes, root: Path) -> None:
    variants: dict[str, Callable[[], float]] = {
        "bare_python": lambda: bare_seconds([sys.executable, "-c", "pass"]),
        "bare_python_msgspec": lambda: bare_seconds([sys.executable, "-c", "import msgspec"]),
        "py_runner_raw_tool": lambda: ready_seconds("py", "raw_tools.py", root),
        "py_runner_typed_tool": lambda: ready_seconds("py", "typed_tools.py", root),
        "bare_node": lambda: bare_seconds([_node(), "-e", "0"]),
        "js_runner": lambda: ready_seconds("js", "./tools.mjs", root),
    }
    for run in variants.values():
        run()  # warm-up: page cache, bytecode of the tool modules' imports
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(sizes.spawn_reps):
        for name, run in variants.items():
            times[name].append(run())
    ms = {name: median(values) * 1000 for name, values in times.items()}
    for name, value in ms.items():
        rows.add(f"ready.{name}", value, "ms")
    for name, base in (("py_runner_raw_tool", "bare_python"), ("js_runner", "bare_node")):
        ratio = ms[name] / ms[base]
        rows.add(f"ready.{name}_vs_bare", ratio, "x", target="≤ 1.3x", ok=ratio <= 1.3)
    # The typed tool module imports msgspec itself: that import alone is above 1.3x of
    # a bare interpreter, whoever runs the module, so this row has no target.
    typed = ms["py_runner_typed_tool"]
    rows.add(
        "ready.py_runner_typed_tool_vs_bare",
        typed / ms["bare_python"],
        "x",
        note="no target: the module's own import msgspec is above 1.3x (see _vs_floor)",
    )
    rows.add(
        "ready.py_runner_typed_tool_vs_floor",
        typed / ms["bare_python_msgspec"],
        "x",
        note="vs python -c 'import msgspec', the least any runner of this module costs",
    )
    imports: dict[str, list[float]] = {"corral_ext": [], "corral_toolhost": [], "msgspec": []}
    for _ in range(max(3, sizes.spawn_reps // 3)):
        for module, values in imports.items():
            values.append(import_us(module))
    for module, values in imports.items():
        rows.add(f"import.{module}", median(values) / 1000, "ms", note="python -X importtime")


# --- 3. round trips ----------------------------------------------------------------------------


class Driver:
    """One child over blocking pipes: write request lines, read answer lines."""

    def __init__(self, proc: subprocess.Popen[bytes], kind: str) -> None:
        assert proc.stdin is not None
        assert proc.stdout is not None
        self.proc, self.kind = proc, kind
        self._in, self._out = proc.stdin, proc.stdout
        self._n = 0

    def _request(self) -> bytes:
        self._n += 1
        if self.kind == "ext":
            frame = {
                "type": "tool_call",
                "id": str(self._n),
                "name": "echo",
                "args": {"text": "hi"},
            }
            return msgspec.json.encode(frame) + b"\n"
        params = {"tool_name": "echo", "arguments": {"text": "hi"}}
        return encode_request(Request(id=str(self._n), method="execute_tool", params=params))

    def _check(self, line: bytes) -> None:
        if self.kind == "ext":
            decode_ext_frame(line)
            return
        msg = decode_host_message(line)
        if not isinstance(msg, OkResponse) or decode_execute_value(msg.result.value).result != "hi":
            raise RuntimeError(f"bad answer: {line[:200]!r}")

    def batch(self, n: int) -> None:
        self._in.write(b"".join(self._request() for _ in range(n)))
        self._in.flush()
        for _ in range(n):
            self._check(self._out.readline())

    def close(self) -> None:
        self._in.close()
        self.proc.wait(timeout=30)
        self._out.close()


def open_driver(kind: str, root: Path) -> Driver:
    if kind == "ext":
        proc = start([sys.executable, "lean_ext.py"], root)
        driver = Driver(proc, kind)
        while b'"ready"' not in driver._out.readline():
            pass
        return driver
    module = "./tools.mjs" if kind == "js" else "typed_tools.py"
    proc = start(runner_argv(kind), root)
    assert proc.stdin is not None
    assert proc.stdout is not None
    proc.stdin.write(init_line(module))
    proc.stdin.flush()
    decode_host_message(proc.stdout.readline())
    return Driver(proc, kind)


def round_trips(rows: Rows, sizes: Sizes, root: Path) -> None:
    drivers = {kind: open_driver(kind, root) for kind in ("py", "js", "ext")}
    try:
        for d in drivers.values():
            d.batch(1)
            d.batch(WINDOW)
        seq: dict[str, list[float]] = {k: [] for k in drivers}
        conc: dict[str, list[float]] = {k: [] for k in drivers}
        for _ in range(sizes.rt_reps):
            for kind, d in drivers.items():
                t0 = time.perf_counter()
                for _ in range(sizes.seq):
                    d.batch(1)
                seq[kind].append((time.perf_counter() - t0) / sizes.seq)
                t0 = time.perf_counter()
                for _ in range(sizes.batches):
                    d.batch(WINDOW)
                conc[kind].append((time.perf_counter() - t0) / (sizes.batches * WINDOW))
    finally:
        for d in drivers.values():
            d.close()
    us = {f"{k}.seq": median(v) * 1e6 for k, v in seq.items()}
    us |= {f"{k}.concurrent32": median(v) * 1e6 for k, v in conc.items()}
    notes = {"py": "Python runner", "js": "Node runner", "ext": "corral_ext extension"}
    for key, value in us.items():
        kind = key.split(".")[0]
        rows.add(f"rt.{key}", value, "µs/call", note=notes[kind])
    for kind in ("py", "js"):
        for mode in ("seq", "concurrent32"):
            ratio = us[f"{kind}.{mode}"] / us[f"ext.{mode}"]
            rows.add(f"rt.{kind}.{mode}_vs_ext", ratio, "x", note="raw pipes, no supervisor")


def measure(quick: bool) -> list[Row]:
    """Every figure of the module."""
    sizes = QUICK if quick else FULL
    rows = Rows("toolkit")
    with rows.guard("decode"):
        decoding(rows, sizes)
    with tempfile.TemporaryDirectory(prefix="corral-bench-toolkit-") as tmp:
        root = Path(tmp)
        write_modules(root)
        with rows.guard("ready"):
            spawning(rows, sizes, root)
        with rows.guard("rt"):
            round_trips(rows, sizes, root)
    return rows.rows


if __name__ == "__main__":
    main(measure)
