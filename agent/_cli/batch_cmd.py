"""``corral batch TASKS.jsonl -o RESULTS.jsonl``: many sessions, each result once.

The command checks every task line first (a bad line is reported with its number
and field, and nothing starts unless ``--skip-invalid``), opens the results file
(locked; ``--resume`` skips the ids it holds), then runs the sessions on this
machine (``--jobs``) or on a Ray cluster (``--ray``) and appends each result as
it arrives. The first SIGINT, SIGTERM or SIGHUP stops the batch: no task starts,
the running sessions are cancelled (their extensions go down the shutdown ladder)
and their ``cancelled`` results are written; a second one abandons them (they are
still stopped, their results are not written). See docs/scale.md.
"""

from __future__ import annotations

import functools
import os
import signal
from pathlib import Path
from typing import Any

import click
import trio

from ..batch import Backend as BatchBackend
from ..batch import (
    Batch,
    Defaults,
    LocalBackend,
    RayBackend,
    ResultsFile,
    load_tasks,
    run_many,
)
from .agent_cmds import run_trio
from .batch_view import BatchView, Summary
from .helptext import epilog

__all__ = ["batch_cmd"]

_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _size(text: str) -> int:
    units = {"k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
    raw = text.strip().lower().removesuffix("ib").removesuffix("b")
    scale = units.get(raw[-1:], 1)
    number = raw[:-1] if raw[-1:] in units else raw
    try:
        value = float(number) * scale
    except ValueError:
        raise click.BadParameter(f"{text!r}: a size like 2GiB or 512MiB") from None
    return int(value)


class _Stopper:
    """Signals: the first stops the batch (cancelled results written; before the
    batch started, it just ends the command); the second abandons the batch
    (:attr:`scope` cancelled)."""

    def __init__(self) -> None:
        self.scope = trio.CancelScope()
        self.received: signal.Signals | None = None
        self.batch: Batch | None = None
        self.view: BatchView | None = None

    @property
    def exit_status(self) -> int | None:
        """``128 + signal`` once a signal arrived."""
        return None if self.received is None else 128 + self.received.value

    async def watch(self, *, task_status: trio.TaskStatus[None]) -> None:
        """Handle the signals until cancelled (start it with ``nursery.start``).

        Cancellation: stops watching; the default handlers come back.
        """
        with trio.open_signal_receiver(*_SIGNALS) as arrivals:
            task_status.started()
            async for signum in arrivals:
                if self.received is not None or self.batch is None:
                    self.received = self.received or signal.Signals(signum)
                    self.scope.cancel()
                    continue
                self.received = signal.Signals(signum)
                self.batch.stop()
                if self.view is not None:
                    self.view.note(
                        f"{self.received.name}: stopping; the running sessions are cancelled "
                        "and written as such (again to abandon them)"
                    )


async def _run(tasks_path: str, output: str, *args: Any, **kwargs: Any) -> int:
    stopper = _Stopper()
    async with trio.open_nursery() as nursery:
        await nursery.start(stopper.watch)
        with stopper.scope:
            await _batch(tasks_path, output, *args, stopper=stopper, **kwargs)
        nursery.cancel_scope.cancel()
    return stopper.exit_status or 0


async def _batch(
    tasks_path: str,
    output: str,
    defaults: Defaults,
    backend: BatchBackend,
    *,
    resume: bool,
    skip_invalid: bool,
    transcripts: str | None,
    as_json: bool,
    stopper: _Stopper,
) -> None:
    # TasksInvalid, like every agent error, becomes one message without a traceback.
    tasks, invalid = await trio.to_thread.run_sync(
        lambda: load_tasks(tasks_path, defaults=defaults, skip_invalid=skip_invalid)
    )
    results = ResultsFile(output)
    resumed = await trio.to_thread.run_sync(lambda: results.open(resume=resume))
    todo = [t for t in tasks if t.id not in resumed.done]
    summary = Summary(
        total=len(todo),
        skipped=len(tasks) - len(todo),
        invalid=len(invalid),
        output=output,
        transcripts=transcripts,
    )
    view = stopper.view = BatchView(len(todo), as_json=as_json)
    for error in invalid:
        view.note(f"skipped: {error}")
    if resumed.torn_bytes:
        view.note(f"{output}: dropped a torn last line ({resumed.torn_bytes} bytes); it runs again")
    if resumed.cancelled:
        view.note(f"{output}: {resumed.cancelled} cancelled results run again")
    failed = False
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(results.run_syncer)
            async with run_many(todo, backend=backend, transcripts=transcripts) as batch:
                stopper.batch = batch
                async for result in batch:
                    results.append(result)
                    view.result(result)
            nursery.cancel_scope.cancel()
    except Exception:
        failed = True  # the error is the message; no summary before it
        raise
    finally:
        results.close()
        view.close()
        if not failed:  # also when a second signal abandoned the batch
            summary.not_run = summary.total - view.finished
            summary.stopped_by = stopper.received.name if stopper.received else None
            view.finish(summary)


_EXITS = (
    (0, "every task has its result in the output (whatever its status)"),
    (1, "bad task lines, an unusable output or backend: nothing (more) ran"),
    (130, "stopped with Ctrl-C (143 SIGTERM, 129 SIGHUP); --resume continues"),
)


@click.command(
    "batch",
    epilog=epilog(
        examples=[
            ("corral batch tasks.jsonl -o results.jsonl", "one session per CPU, here"),
            ("corral batch tasks.jsonl -o results.jsonl --resume", "go on after a stop"),
            ("corral batch tasks.jsonl -o r.jsonl --jobs 16 --transcripts tr/", "16 at once"),
            ("corral batch tasks.jsonl -o r.jsonl --ray auto", "on the Ray cluster"),
        ],
        exit_codes=_EXITS,
    ),
)
@click.argument("tasks_path", metavar="TASKS.jsonl", type=click.Path(dir_okay=False))
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(dir_okay=False),
    help="Results file (JSON lines, one per task; appended).",
)
@click.option("--resume", is_flag=True, help="Continue OUTPUT: skip the ids it holds.")
@click.option("--skip-invalid", is_flag=True, help="Run the valid tasks despite bad lines.")
@click.option(
    "-j",
    "--jobs",
    type=click.IntRange(min=1),
    help="Sessions at once [default: the CPUs here; with --ray, the cluster's].",
)
@click.option("--ray", "ray_address", metavar="auto|ADDRESS", help="Run on a Ray cluster.")
@click.option(
    "--ray-cpus",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="CPUs each Ray session host declares.",
)
@click.option("--ray-memory", metavar="SIZE", help="Memory each Ray session host declares.")
@click.option(
    "--ray-hosts",
    type=click.IntRange(min=1),
    help="Session hosts (Ray actors) [default: one per --ray-cpus CPUs].",
)
@click.option(
    "--ray-shared-paths",
    is_flag=True,
    help="Every Ray node sees the tasks' paths: send no workspace or extension copies.",
)
@click.option("--transcripts", metavar="DIR", help="Write each session's transcript here.")
@click.option("--json", "as_json", is_flag=True, help="Progress and summary as JSON lines.")
@click.option(
    "-e",
    "--ext",
    "ext_paths",
    multiple=True,
    type=click.Path(file_okay=False),
    help="Load this extension in every session, before the task's own (repeatable).",
)
@click.option(
    "--provider",
    help="Provider of tasks that name none [default: offline, or "
    "scripted for tasks with a script].",
)
@click.option("--model", help="Model of tasks that name none.")
@click.option("--base-url", help="API base URL of tasks that name none (keys: environment).")
@click.option(
    "--tools", "tool_list", metavar="LIST", help="Built-in tools of tasks that name none."
)
@click.option(
    "--sandbox",
    type=click.Choice(["auto", "required", "off"]),
    default="auto",
    show_default=True,
    help="Sandboxing of tasks that say nothing.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=600.0,
    show_default=True,
    help="Seconds per session of tasks that say nothing (0: no limit).",
)
@click.option(
    "--max-steps",
    type=click.IntRange(min=1),
    default=16,
    show_default=True,
    help="Model calls per session of tasks that say nothing.",
)
@click.pass_context
def batch_cmd(
    ctx: click.Context,
    tasks_path: str,
    output: str,
    resume: bool,
    skip_invalid: bool,
    jobs: int | None,
    ray_address: str | None,
    ray_cpus: float,
    ray_memory: str | None,
    ray_hosts: int | None,
    ray_shared_paths: bool,
    transcripts: str | None,
    as_json: bool,
    ext_paths: tuple[str, ...],
    provider: str | None,
    model: str | None,
    base_url: str | None,
    tool_list: str | None,
    sandbox: str,
    timeout: float,
    max_steps: int,
) -> None:
    """Run many sessions from a tasks file, each result once.

    A task line is a JSON object with an "id" and a "prompt", and may set
    "extensions", "tools", "provider"/"model", "script", "workspace", "sandbox",
    "timeout" and "meta" (see docs/scale.md). Progress goes to stderr.
    """
    tools = [t.strip() for t in tool_list.split(",") if t.strip()] if tool_list else None
    defaults = Defaults(
        extensions=[str(Path(p).absolute()) for p in ext_paths],
        tools=tools,
        provider=provider,
        model=model,
        base_url=base_url,
        sandbox=sandbox,  # type: ignore[arg-type]  # click.Choice checked it
        timeout=timeout or None,
        max_steps=max_steps,
    )
    backend: BatchBackend
    if ray_address is not None:
        backend = RayBackend(
            ray_address,
            jobs=jobs,
            hosts=ray_hosts,
            cpus=ray_cpus,
            memory=_size(ray_memory) if ray_memory else None,
            shared_paths=ray_shared_paths,
        )
    else:
        backend = LocalBackend(jobs or os.cpu_count() or 1)
    main = functools.partial(
        _run,
        tasks_path,
        os.path.abspath(output),
        defaults,
        backend,
        resume=resume,
        skip_invalid=skip_invalid,
        transcripts=os.path.abspath(transcripts) if transcripts else None,
        as_json=as_json,
    )
    ctx.exit(run_trio(main))
