"""Many sessions at once: ``corral batch`` against ``corral run`` processes, Ray against local.

Every session is short and scripted (a call to each of two sandboxed extensions,
``chaos`` and ``weather``, then an answer), so what is measured is what a session
costs to set up and tear down. Whole commands are timed, start-up included.

* ``local.jobs2`` / ``xargs.run_p2``: sessions per second of ``corral batch
  --jobs 2`` and of the same tasks as ``corral run`` processes under ``xargs
  -P2``; ``local_vs_xargs`` is the median of the paired ratios (target ≥ 3);
* ``local.host_cpu`` / ``local.tree_cpu``: CPU per session of the ``corral batch``
  process alone, and of it with every descendant (sandbox guardian, bubblewrap,
  extensions): the host's share of the work;
* ``shape.two_processes``: the same tasks as two ``corral batch --jobs 1``
  processes side by side, each with half of them (the "few worker processes"
  shape), against one process (``shape.two_vs_one``): the figure behind the
  local backend's choice of one process (docs/scale.md);
* ``ray.jobs2`` / ``ray_vs_local``: the Ray backend on a local two-node cluster
  (one CPU each, started once inside private network and pid namespaces by
  ``tests/agent/fixtures/ray_cluster.py``: loopback only) against the local
  backend, paired, alternating, on the same cluster's machine (target ≥ 0.7);
* ``memory.per_session``: host memory per additional concurrent session of the
  local backend: the ``corral batch`` process's peak RSS with 1, 8, 16 and 32
  sessions held open at once (least-squares slope, target ≤ 10 MiB);
  ``memory.base`` is the process with one session, ``memory.tree_per_session``
  adds what each session's extension processes take (informative: they are the
  extensions' own, two Python processes per session here).

The machine has 2 cores shared with other work: every ratio is the median of
paired runs, and the load average is in each note.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
from _common import ROOT, Row, Rows, main, median

CLUSTER = ROOT / "tests" / "agent" / "fixtures" / "ray_cluster.py"
EXTS = [ROOT / "examples" / "extensions" / "chaos", ROOT / "examples" / "extensions" / "weather"]
SCRIPT = [
    {
        "tool_calls": [
            {"name": "chaos_echo", "args": {"text": "x"}},
            {"name": "weather", "args": {"city": "Oslo"}},
        ]
    },
    {"text": "done"},
]


def _load() -> str:
    return "load " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def _bin(name: str) -> str:
    return str(Path(sys.executable).with_name(name))


def _tasks(where: Path, count: int, *, delay: float = 0.0, prefix: str = "t") -> Path:
    script = [SCRIPT[0], {**SCRIPT[1], "delay": delay}]
    path = where / f"{prefix}{count}-{delay}.jsonl"
    with path.open("w") as fh:
        for i in range(count):
            task = {"id": f"{prefix}{i}", "prompt": "go", "script": script}
            task["extensions"] = [str(e) for e in EXTS]
            fh.write(json.dumps(task) + "\n")
    return path


def _batch(tasks: Path, out: Path, *extra: str) -> list[str]:
    return [_bin("corral"), "batch", str(tasks), "-o", str(out), *extra]


def _run(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, env=env, check=True, capture_output=True)
    return time.perf_counter() - started


def _subreaper() -> None:
    """Make this process adopt its descendants' orphans (``PR_SET_CHILD_SUBREAPER``):
    a command's sandbox guardian outlives it for a moment, and only whoever reaps
    it learns the CPU time of the extensions the guardian reaped."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def _reap_all() -> None:
    """Wait for every child and adopted orphan of this process to end."""
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def _cpu(argv: list[str], env: dict[str, str]) -> tuple[float, float, float]:
    """Wall time, CPU seconds of the command's own process (sampled until it exits,
    before it is reaped) and of it with every descendant (everything reaped by the
    time nothing is left: each level reaps its children, this process the orphans)."""
    _subreaper()
    _reap_all()  # orphans of earlier commands are not this one's
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    child = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    watched = psutil.Process(child.pid)
    own = 0.0
    while True:
        times = watched.cpu_times()  # a zombie keeps its figures until reaped
        own = times.user + times.system
        if watched.status() == psutil.STATUS_ZOMBIE:
            break
        time.sleep(0.02)
    _, status = os.waitpid(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - started
    assert child.returncode == 0
    _reap_all()  # the orphans: the guardian, a moment after its host
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    tree = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, own, tree


def _xargs(work: Path, count: int, env: dict[str, str]) -> float:
    script = work / "script.jsonl"
    script.write_text("".join(json.dumps(t) + "\n" for t in SCRIPT))
    args = [_bin("corral"), "run", "--script", str(script), "--no-extensions"]
    for ext in EXTS:
        args += ["-e", str(ext)]
    args += ["--cwd", str(work / "cwd"), "go"]
    (work / "cwd").mkdir(exist_ok=True)
    command = " ".join(shlex.quote(a) for a in args) + " >/dev/null"
    lines = "\n".join(str(i) for i in range(count)) + "\n"
    started = time.perf_counter()
    subprocess.run(
        ["xargs", "-P2", "-I{}", "sh", "-c", command],
        input=lines.encode(),
        env=env,
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - started


def _fresh(out: Path) -> Path:
    out.unlink(missing_ok=True)
    return out


def local_rows(rows: Rows, work: Path, env: dict[str, str], count: int, reps: int) -> None:
    tasks = _tasks(work, count)
    halves = [_tasks(work, count // 2, prefix=p) for p in ("a", "b")]
    ratios, shapes = [], []
    batch_t, xargs_t, two_t = [], [], []
    host_cpu, tree_cpu = [], []
    for _ in range(reps):
        wall, own, tree = _cpu(_batch(tasks, _fresh(work / "r.jsonl"), "--jobs", "2"), env)
        batch_t.append(wall)
        host_cpu.append(own / count * 1000)
        tree_cpu.append(tree / count * 1000)
        xargs_t.append(_xargs(work, count, env))
        started = time.perf_counter()
        procs = [
            subprocess.Popen(
                _batch(h, _fresh(work / f"r{i}.jsonl"), "--jobs", "1"),
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for i, h in enumerate(halves)
        ]
        assert all(p.wait() == 0 for p in procs)
        two_t.append(time.perf_counter() - started)
        ratios.append(xargs_t[-1] / batch_t[-1])
        shapes.append((count // 2 * 2 / two_t[-1]) / (count / batch_t[-1]))
    note = f"{count} sessions, 2 sandboxed extensions each, {reps} paired runs; {_load()}"
    rows.add("local.jobs2", count / median(batch_t), "sessions/s", note=note)
    rows.add("xargs.run_p2", count / median(xargs_t), "sessions/s", note="corral run, xargs -P2")
    rows.add(
        "local.host_cpu",
        median(host_cpu),
        "ms/session",
        note="CPU of the corral batch process itself, per session",
    )
    rows.add(
        "local.tree_cpu",
        median(tree_cpu),
        "ms/session",
        note="CPU of it and every descendant (guardian, bwrap, extensions), per session",
    )
    best = median(ratios)
    rows.add("local_vs_xargs", best, "x", target="≥ 3", ok=best >= 3, note=f"paired; {_load()}")
    rows.add(
        "shape.two_processes",
        (count // 2 * 2) / median(two_t),
        "sessions/s",
        note="two corral batch --jobs 1 processes side by side, half the tasks each",
    )
    rows.add("shape.two_vs_one", median(shapes), "x", note=f"paired with local.jobs2; {_load()}")


def _peak_rss(argv: list[str], env: dict[str, str], count: int) -> tuple[float, float]:
    """Peak RSS (MiB) of the batch process alone, and of its whole tree, while its
    ``count`` sessions are all open (sampled from outside)."""
    proc = psutil.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    host = tree = 0
    while proc.poll() is None:
        try:
            host = max(host, proc.memory_info().rss)
            kids = proc.children(recursive=True)
            tree = max(tree, host + sum(k.memory_info().rss for k in kids))
        except psutil.NoSuchProcess:
            pass
        time.sleep(0.05)
    assert proc.returncode == 0
    return host / 2**20, tree / 2**20


def _slope(xs: list[int], ys: list[float]) -> float:
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )


def memory_rows(rows: Rows, work: Path, env: dict[str, str], quick: bool) -> None:
    counts = [1, 4] if quick else [1, 8, 16, 32]
    hosts, trees = [], []
    for n in counts:
        tasks = _tasks(work, n, delay=3.0, prefix="m")
        host, tree = _peak_rss(_batch(tasks, _fresh(work / "m.jsonl"), "--jobs", str(n)), env, n)
        hosts.append(host)
        trees.append(tree)
    per = _slope(counts, hosts)
    note = ", ".join(f"{n}: {h:.1f}" for n, h in zip(counts, hosts, strict=True))
    rows.add("memory.base", hosts[0], "MiB", note="the corral batch process with one session")
    rows.add(
        "memory.per_session",
        per,
        "MiB",
        target="≤ 10",
        ok=per <= 10,
        note=f"peak RSS (MiB) by sessions open at once: {note}; {_load()}",
    )
    rows.add(
        "memory.tree_per_session",
        _slope(counts, trees),
        "MiB",
        note="with each session's two extension processes (Python, sandboxed)",
    )


def ray_rows(rows: Rows, work: Path, env: dict[str, str], count: int, reps: int) -> None:
    tasks = _tasks(work, count, prefix="r")
    commands: list[dict[str, Any]] = []
    for i in range(reps):
        ray = _batch(tasks, work / f"ray{i}.jsonl", "--ray", "127.0.0.1:6379", "--jobs", "2")
        local = _batch(tasks, work / f"loc{i}.jsonl", "--jobs", "2")
        pair = [("ray", ray), ("local", local)]
        for name, argv in pair if i % 2 == 0 else reversed(pair):
            commands.append({"name": name, "argv": argv})
    (work / "commands.json").write_text(json.dumps(commands))
    # The harness starts Ray only inside private network and pid namespaces.
    argv = [
        sys.executable,
        str(CLUSTER),
        str(work),
        "--commands",
        str(work / "commands.json"),
    ]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    timings = json.loads(done.stdout.strip().splitlines()[-1])["timings"]
    assert all(code == 0 for _, _, code in timings), done.stderr[-2000:]
    by = {"ray": [t for n, t, _ in timings if n == "ray"], "local": []}
    by["local"] = [t for n, t, _ in timings if n == "local"]
    ratios = [loc / ray for ray, loc in zip(by["ray"], by["local"], strict=True)]
    note = f"{count} sessions, two nodes of one CPU, --jobs 2 both; {reps} paired runs; {_load()}"
    rows.add("ray.jobs2", count / median(by["ray"]), "sessions/s", note=note)
    rows.add("ray.local_jobs2", count / median(by["local"]), "sessions/s", note="same machine")
    best = median(ratios)
    rows.add("ray_vs_local", best, "x", target="≥ 0.7", ok=best >= 0.7, note="paired, alternating")


def measure(quick: bool) -> list[Row]:
    rows = Rows("batch")
    count, reps = (10, 1) if quick else (200, 2)
    work = Path(tempfile.mkdtemp(prefix="bench-batch-"))
    env = {**os.environ, "CORRAL_HOME": str(work / "home")}
    try:
        with rows.guard("local"):
            local_rows(rows, work, env, count, reps)
        with rows.guard("memory"):
            memory_rows(rows, work, env, quick)
        with rows.guard("ray"):
            try:
                import ray  # noqa: F401
            except ImportError:
                raise RuntimeError("ray is not installed: pip install 'corral[ray]'") from None
            ray_rows(rows, work, env, count, reps)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rows.rows


if __name__ == "__main__":
    main(measure)
