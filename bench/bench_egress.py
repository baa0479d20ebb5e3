"""What a network list costs: the egress proxy's first byte and throughput, and the spawn.

Run from the repository root::

    python bench/bench_egress.py [--quick] [--json-out PATH]   # or: python bench/run.py

A 10 MiB download from a loopback origin (a separate process), by the same client
program (raw sockets, one ``GET`` per connection), two ways, alternating:

* **direct**: the client runs unconfined and connects to the origin itself;
* **proxied**: the client runs under bwrap with ``network: ["127.0.0.1:<origin>"]``
  (and ``unsafe``), in its own network namespace, and goes through corral's egress
  proxy exactly as shipped: the listener the child made, served by
  :class:`supervisor.Egress` in this (trio) process, which checks the destination
  and relays. ``connect`` tunnels (``CONNECT``, what HTTPS does); ``http`` is plain
  HTTP forwarding.

Time to first byte runs from the client's ``connect`` to the first byte of the
answer; throughput is the whole body over the whole exchange. The overhead of the
first byte is the median of the per-repetition differences, throughput the median
of per-repetition ratios.

The spawn row starts ``true`` under bwrap (the host's guardian, the same backend)
with ``network: false`` and with a list, alternating, from the order to its exit;
the list's cost is the median of the per-pair differences.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio
from _common import Row, main, median, quiet_logging

import sandbox
from sandbox import LaunchRequest, Permissions
from supervisor import NetGuard
from supervisor.lowlevel import Child, Egress, StopLadder, open_child

SIZE = 10 * 1024 * 1024

ORIGIN = """\
import socket, sys, threading
size = int(sys.argv[1])
body = memoryview(b"x" * size)
head = f"HTTP/1.1 200 OK\\r\\nContent-Length: {size}\\r\\nConnection: close\\r\\n\\r\\n".encode()
server = socket.create_server(("127.0.0.1", 0), backlog=64)
print(server.getsockname()[1], flush=True)

def serve(conn):
    with conn:
        got = b""
        while b"\\r\\n\\r\\n" not in got:
            data = conn.recv(65536)
            if not data:
                return
            got += data
        conn.sendall(head)
        conn.sendall(body)

while True:
    conn, _ = server.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""

CLIENT = """\
import json, socket, sys, time
port = int(sys.argv[1])
buf = bytearray(1 << 20)
for line in sys.stdin:
    mode = line.strip()
    start = time.perf_counter()
    if mode == "direct":
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"GET / HTTP/1.1\\r\\nHost: o\\r\\n\\r\\n")
    elif mode == "connect":
        s = socket.create_connection(("127.0.0.1", 3128))
        s.sendall(f"CONNECT 127.0.0.1:{port} HTTP/1.1\\r\\n\\r\\n".encode())
        got = b""
        while b"\\r\\n\\r\\n" not in got:
            got += s.recv(4096)
        assert got.startswith(b"HTTP/1.1 200"), got
        s.sendall(b"GET / HTTP/1.1\\r\\nHost: o\\r\\n\\r\\n")
    else:
        s = socket.create_connection(("127.0.0.1", 3128))
        s.sendall(f"GET http://127.0.0.1:{port}/ HTTP/1.1\\r\\n\\r\\n".encode())
    total = s.recv_into(buf)
    first = time.perf_counter()
    while n := s.recv_into(buf):
        total += n
    end = time.perf_counter()
    s.close()
    print(json.dumps({"ttfb": first - start, "total": end - start, "bytes": total}), flush=True)
"""


class _Client:
    """One client process, asked for one download per line."""

    def __init__(self, proc: Child) -> None:
        self.proc = proc
        self._buf = b""

    async def download(self, mode: str) -> dict[str, float]:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        await self.proc.stdin.send_all(mode.encode() + b"\n")
        while b"\n" not in self._buf:
            data = await self.proc.stdout.receive_some(4096)
            assert data, "the client exited"
            self._buf += data
        line, self._buf = self._buf.split(b"\n", 1)
        result: dict[str, float] = json.loads(line)
        assert result["bytes"] >= SIZE, result
        return result


def _request(base: Path, network: bool | list[str], argv: list[str]) -> LaunchRequest:
    unsafe = network if isinstance(network, list) else []
    perms = sandbox.check_permissions(
        Permissions(network=network, unsafe=unsafe, data_dir=False),
        str(base),
        home="",
        corral_home="",
    ).permissions
    return LaunchRequest(
        name="bench-egress",
        argv=argv,
        env={"PATH": "/usr/bin:/bin"},
        ext_dir=str(base),
        data_dir=None,
        permissions=perms,
        interpreter=argv[0],
    )


async def _downloads(
    base: Path, backend: sandbox.Sandbox, port: int, count: int
) -> dict[str, list[dict[str, float]]]:
    """``count`` alternating downloads each way: direct, connect, http."""
    client = [sys.executable, "-I", "-c", CLIENT, str(port)]
    entry = [f"127.0.0.1:{port}"]
    results: dict[str, list[dict[str, float]]] = {"direct": [], "connect": [], "http": []}
    egress = Egress("bench", entry, NetGuard(), grant="permissions.network")
    # Each child is stopped by closing its stdin (it leaves), then reaped and released.
    ladder = StopLadder(close_grace=10)
    async with (
        open_child(None, _request(base, False, client), ladder=ladder) as direct_child,
        open_child(
            backend, _request(base, entry, client), egress=egress, ladder=ladder
        ) as proxied_child,
    ):
        direct, proxied = _Client(direct_child), _Client(proxied_child)
        for mode in ("direct", "connect", "http"):  # warm-up
            await (direct if mode == "direct" else proxied).download(mode)
        for _ in range(count):
            for mode in ("direct", "connect", "http"):
                who = direct if mode == "direct" else proxied
                results[mode].append(await who.download(mode))
    return results


def _spawn_pairs(base: Path, backend: sandbox.Sandbox, count: int) -> list[tuple[float, float]]:
    """(without a list, with one): seconds from the order to the exit of ``true``."""
    true = shutil.which("true") or "/bin/true"
    pairs: list[tuple[float, float]] = []
    for i in range(count + 3):
        pair = []
        for network in (False, ["api.example.com"]):
            plan = backend.plan(_request(base, network, [true]))
            try:
                start = time.perf_counter()
                child = sandbox.spawn(plan, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
                child.take_listener()  # as the host does: the listener comes with the start
                child.wait()
                pair.append(time.perf_counter() - start)
                child.close()
            finally:
                backend.cleanup(plan)
        if i >= 3:  # warm-up: the guardian, its spares, the page cache
            pairs.append((pair[0], pair[1]))
    return pairs


async def measure(quick: bool) -> list[Row]:
    """The rows (``--quick``: a few repetitions)."""
    quiet_logging()
    backend = sandbox.select_sandbox("auto")
    rows: list[Row] = []
    if backend.backend != "bwrap":
        note = f"no bwrap backend ({backend.backend}): a network list needs it"
        return [Row(bench="egress", case="skipped", value=0.0, unit="", note=note)]
    count = 3 if quick else 30
    base = Path(tempfile.mkdtemp(prefix="corral-bench-egress-"))
    base.chmod(0o755)
    origin = subprocess.Popen(
        [sys.executable, "-I", "-c", ORIGIN, str(SIZE)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert origin.stdout is not None
        port = int(origin.stdout.readline())
        got = await _downloads(base, backend, port, count)
        pairs = await trio.to_thread.run_sync(_spawn_pairs, base, backend, 5 if quick else 40)
    finally:
        origin.kill()
        origin.wait()
        if origin.stdout is not None:
            origin.stdout.close()
        shutil.rmtree(base, ignore_errors=True)
    direct = got["direct"]
    ttfb = median([r["ttfb"] for r in direct]) * 1000
    mbps = median([SIZE / r["total"] for r in direct]) / 1e6
    note = f"{SIZE >> 20} MiB from a loopback origin, unconfined client; {count} repetitions"
    rows.append(Row(bench="egress", case="direct.ttfb_ms", value=ttfb, unit="ms", note=note))
    rows.append(Row(bench="egress", case="direct.MBps", value=mbps, unit="MB/s", note=note))
    for mode, how in (("connect", "CONNECT tunnel"), ("http", "plain HTTP forwarding")):
        runs = got[mode]
        over = median([p["ttfb"] - d["ttfb"] for p, d in zip(runs, direct, strict=True)]) * 1000
        ratio = median([d["total"] / p["total"] for p, d in zip(runs, direct, strict=True)])
        note = f"client under bwrap with a list, through the proxy ({how})"
        rows += [
            Row(bench="egress", case=f"{mode}.ttfb_ms", value=median([r["ttfb"] for r in runs])
                * 1000, unit="ms", note=note),
            Row(bench="egress", case=f"{mode}.MBps", value=median([SIZE / r["total"] for r in runs])
                / 1e6, unit="MB/s", note=note),
            Row(bench="egress", case=f"{mode}.ttfb_overhead_ms", value=over, unit="ms",
                target="< 2", ok=over < 2, note="median of paired differences with direct"),
            Row(bench="egress", case=f"{mode}.throughput_vs_direct", value=ratio, unit="x",
                target=">= 0.5", ok=ratio >= 0.5, note="median of paired ratios"),
        ]  # fmt: skip
    plain = median([a for a, _ in pairs]) * 1000
    listed = median([b for _, b in pairs]) * 1000
    added = median([b - a for a, b in pairs]) * 1000
    note = f"`true` under bwrap, order to exit; {len(pairs)} alternating pairs"
    rows += [
        Row(bench="egress", case="spawn.no_network_ms", value=plain, unit="ms", note=note),
        Row(bench="egress", case="spawn.list_ms", value=listed, unit="ms", note=note),
        Row(bench="egress", case="spawn.list_added_ms", value=added, unit="ms", target="< 5",
            ok=added < 5, note="median of paired differences (the child makes the netns "
            "and the listener; bwrap no longer makes the netns)"),
    ]  # fmt: skip
    return rows


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    main(measure)
