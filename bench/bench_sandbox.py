"""What the sandbox adds to starting an extension, against no isolation at all.

Spawn-to-ready (entering ``open_supervisor`` until the extension sent ``ready``)
of the lean SDK extension, one at a time and 10 at once, with:

* ``none``: ``--sandbox off``, the baseline: no bwrap, no seccomp, no cgroup
  (per-process rlimits only);
* ``bwrap``: bubblewrap with seccomp and the capped private /tmp, no cgroup;
* ``auto``: what ``--sandbox auto`` does here: bwrap as above, plus a memory and
  pids cgroup per extension where this process may create one (root here).

Each repetition measures the three variants seconds apart, alternating; the
added cost of a variant is the median of its per-repetition differences to the
baseline (per spawn: divided by 10 for 10 at once). Target: ``auto`` adds at
most 10 ms per spawn.

``corral_share<N>``: what corral's bubblewrap costs beyond bubblewrap itself. In
the same repetitions the lean extensions are also started without corral,
directly and under plain bubblewrap (``_exts.PLAIN_BWRAP``: every namespace, a
read-only root, dying with the parent); the share is the median of the
per-repetition ``(bwrap - none) - (plain bwrap - direct)``, per spawn (issue 29's
target: at most 1 ms). What corral does beyond it: the pinned, per-directory
binds, its own /etc, the capped /tmp and /dev/shm, seccomp, rlimits, and the
plan that opens and checks all of it.

``first1.*``: the first start of one lean extension in a fresh host process,
``--sandbox auto`` against ``off`` (alternating, paired): what a ``corral run``
with extensions pays once, beyond the guardian's start that both pay: the
machine's probe, the ``/etc`` mirror and the mount points made. The warm rows
above never see it.

``first_output.*``: the same comparison with little noise: the time from planning
until the first byte of ``/bin/echo``'s output, through the guardian, many
alternating repetitions of one spawn planned like the lean extension
(interpreter, SDK, extension and data directories), against the same spawn
under plain bubblewrap and under the view; medians of the per-repetition
differences. No interpreter starts, so the figure is bubblewrap's and corral's
alone. It runs first, before the load the ready phases leave (which slowed plain
bubblewrap's spawn more than corral's). Each spawn comes 25 ms after the last one
ended, as spawns outside a burst do: the guardian has parked a spare for each kind
by then (it forks spares once no spawn came for 20 ms), so every kind is measured
from the same start (back to back, which kind found a spare depended on how long
the previous spawn took).

That baseline binds the host's whole root at once: a minimal root (``/usr``, a
dozen /etc entries, the interpreter, the SDK, the extension), what corral shows,
costs bubblewrap a mount, a remount and a read of the mount table per part,
whoever builds it. ``corral_share<N>.view`` measures against plain bubblewrap
showing that view, bound by path (``_exts.VIEW_BWRAP``): what corral's own
mechanisms cost beyond the view itself.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgspec
import trio
from _common import Row, Rows, main, median
from _exts import PLAIN_BWRAP, VIEW_BWRAP, direct_lean, first_start, lean_dirs, wrapped

from agent._cli.logs import configure_logging
from sandbox import LaunchRequest, Sandbox, check_sandbox, select_sandbox, spawn
from supervisor import SupervisorConfig, open_supervisor
from supervisor.lowlevel import SDK_DIR


async def _ready(paths: list[str], home: Path, sandbox: Sandbox) -> float:
    cfg = SupervisorConfig(home=str(home))
    with trio.fail_after(60):
        t0 = time.perf_counter()
        async with open_supervisor(cfg, ext_paths=paths, discover=False, sandbox=sandbox) as c:
            ready = time.perf_counter() - t0
            infos = await c.list_extensions()
    if any(i.state != "running" for i in infos):
        raise RuntimeError(f"not all ready: {[(i.name, i.state, i.problem) for i in infos]}")
    return ready


def _first_start(rows: Rows, paths: list[str], root: Path, reps: int) -> None:
    """``first1.*``: a fresh host's first start, sandbox ``auto`` against ``off``."""
    got: dict[str, list[float]] = {"auto": [], "off": []}
    load = os.getloadavg()[0]
    for i in range(reps):
        for mode in ("auto", "off") if i % 2 else ("off", "auto"):
            got[mode].append(first_start(paths, root, mode) * 1000)
    note = f"paired, median of {reps}; load {load:.2f} before, {os.getloadavg()[0]:.2f} after"
    for mode, what in (("auto", "--sandbox auto"), ("off", "--sandbox off")):
        rows.add(f"first1.{mode}", median(got[mode]), "ms", note=f"fresh host, {what}; {note}")
    added = median([a - b for a, b in zip(got["auto"], got["off"], strict=True)])
    rows.add("first1.added", added, "ms", note=f"the sandbox's one-time cost per host; {note}")


def measure(quick: bool) -> list[Row]:
    """Spawn-to-ready with and without the sandbox, 1 and 10 at once."""
    configure_logging(level="error")
    reps = 5 if quick else 21
    variants: dict[str, Sandbox] = {
        "none": select_sandbox("off"),
        "bwrap": select_sandbox("auto", cgroups=False),
        "auto": select_sandbox("auto"),
    }
    cgroup = next((f for f in check_sandbox().hardening if "cgroup" in f.name), None)
    rows = Rows("sandbox")
    with tempfile.TemporaryDirectory(prefix="corral-bench-sandbox-") as tmp:
        root = Path(tmp)
        paths = lean_dirs(root, [f"sb{i}" for i in range(10)])
        for sb in variants.values():  # warm-up: probes, imports, the guardian
            trio.run(_ready, paths[:1], root / "home", sb)
        if shutil.which("bwrap") and variants["bwrap"].backend == "bwrap":
            # First, while the machine is calm: right after the bursts below, the load
            # they leave slowed plain bwrap's spawn more than corral's (the row read
            # 0.5-1.1 ms there against 2.1-2.2 ms alone).
            _first_output(rows, root, variants["bwrap"], variants["none"], 20 if quick else 200)
        with rows.guard("first1"):
            _first_start(rows, paths[:1], root / "first", 5 if quick else 11)
        for n in (1, 10):
            times: dict[str, list[float]] = {name: [] for name in variants}
            direct: list[float] = []
            plain: list[float] = []
            view: list[float] = []
            load = os.getloadavg()[0]
            for _ in range(reps):
                for name, sb in variants.items():
                    times[name].append(trio.run(_ready, paths[:n], root / "home", sb))
                if shutil.which("bwrap"):
                    direct.append(direct_lean(paths[:n])[0])
                    plain.append(direct_lean(paths[:n], PLAIN_BWRAP)[0])
                    view.append(direct_lean(paths[:n], VIEW_BWRAP)[0])
            load_note = f"load {load:.2f} before, {os.getloadavg()[0]:.2f} after"
            what = f"{n} lean extension{'s' if n > 1 else ''} at once"
            base = median(times["none"]) * 1000
            rows.add(f"ready{n}.none", base, "ms", note=f"no isolation; {what}")
            for name in ("bwrap", "auto"):
                rows.add(f"ready{n}.{name}", median(times[name]) * 1000, "ms", note=what)
                added = median(
                    [(v - b) * 1000 / n for v, b in zip(times[name], times["none"], strict=True)]
                )
                label = "bwrap+seccomp, no cgroup" if name == "bwrap" else "bwrap+seccomp+cgroup"
                if name == "auto":
                    label += f" ({cgroup.detail if cgroup and cgroup.ok else 'no cgroup here'})"
                note = f"{label} vs no isolation, per spawn; paired, median of {reps}; {load_note}"
                targeted = name == "auto" and n == 1
                rows.add(
                    f"added{n}.{name}",
                    added,
                    "ms",
                    target="≤ 10 ms" if targeted else None,
                    ok=added <= 10 if targeted else None,
                    note=note,
                )
            if plain:
                _share(rows, n, times, direct, plain, view, load_note)
    return rows.rows


def _first_output(rows: Rows, root: Path, bwrap: Sandbox, none: Sandbox, reps: int) -> None:
    """Plan to the first byte of ``/bin/echo``'s output through the guardian: corral's
    bwrap, plain bwrap and the view, alternating; paired medians."""
    ext = root / "echo"
    ext.mkdir()
    request = LaunchRequest(
        name="echo",
        argv=["/bin/echo", "ready"],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(SDK_DIR)},
        ext_dir=str(ext),
        data_dir=str(root / "echo-data"),
        runtime_paths=[str(SDK_DIR)],
        interpreter=sys.executable,
        hidden=[str(root / "home")],
    )
    wraps = {"plain": PLAIN_BWRAP, "view": VIEW_BWRAP, "direct": None}

    def once(kind: str) -> float:
        time.sleep(0.025)  # outside a burst: the guardian's spares are parked (see above)
        t0 = time.perf_counter()
        backend = bwrap if kind == "corral" else none
        plan = backend.plan(request)
        if kind in wraps:
            plan = msgspec.structs.replace(plan, argv=[*wrapped(wraps[kind], str(ext)), *plan.argv])
        child = spawn(plan, stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            assert child.stdout is not None
            first = child.stdout.read(1)
            took = time.perf_counter() - t0
            child.stdout.read()
            child.wait()
        finally:
            child.close()
            backend.cleanup(plan)
        if first != b"r":
            raise RuntimeError(f"{kind}: no output from /bin/echo")
        return took * 1000

    kinds = ["corral", "plain", "view", "direct"]
    got: dict[str, list[float]] = {k: [] for k in kinds}
    for k in kinds * 3:  # warm-up: the guardian's spares, the /etc mirror
        once(k)
    load = os.getloadavg()[0]
    for i in range(reps):
        for k in kinds[i % 4 :] + kinds[: i % 4]:
            got[k].append(once(k))
    note = f"paired, median of {reps}; load {load:.2f} before, {os.getloadavg()[0]:.2f} after"
    for k in kinds:
        rows.add(f"first_output.{k}", median(got[k]), "ms", note=f"plan to first output; {note}")
    for a, b, what in (
        ("corral", "plain", "corral's bwrap over plain bwrap of the whole root (issue 29: ≤ 1 ms)"),
        ("corral", "view", "corral's bwrap over plain bwrap showing its view"),
        ("plain", "direct", "plain bwrap over no sandbox"),
    ):
        diff = median([x - y for x, y in zip(got[a], got[b], strict=True)])
        target = (a, b) == ("corral", "plain")
        rows.add(
            f"first_output.{a}_vs_{b}",
            diff,
            "ms",
            target="≤ 1 ms" if target else None,
            ok=diff <= 1 if target else None,
            note=f"{what}; {note}",
        )


def _share(
    rows: Rows,
    n: int,
    times: dict[str, list[float]],
    direct: list[float],
    plain: list[float],
    view: list[float],
    load_note: str,
) -> None:
    """corral's bubblewrap over plain bubblewrap, per spawn (paired): over the whole
    root read-only (the target's baseline), and over the same view bound by path."""
    ours = [(b - z) * 1000 / n for b, z in zip(times["bwrap"], times["none"], strict=True)]
    for name, theirs, what, target in (
        ("plain", plain, "plain bwrap", n == 1),
        ("view", view, "plain bwrap with corral's view (VIEW_BWRAP)", False),
    ):
        added = [(p - d) * 1000 / n for p, d in zip(theirs, direct, strict=True)]
        rows.add(
            f"added{n}.{name}_bwrap",
            median(added),
            "ms",
            note=f"{what} vs direct, per spawn, without corral; {load_note}",
        )
        share = median([a - b for a, b in zip(ours, added, strict=True)])
        rows.add(
            f"corral_share{n}" if name == "plain" else f"corral_share{n}.{name}",
            share,
            "ms",
            target="≤ 1 ms" if target else None,
            ok=share <= 1 if target else None,
            note=f"(bwrap - none) - ({what} - direct), per spawn, paired; {load_note}",
        )


if __name__ == "__main__":
    main(measure)
