"""``corral rpc`` (also ``corral --rpc``): serve one agent session as NDJSON on stdin/stdout.

The protocol is in ``docs/rpc.md``. Standard input and output belong to the
protocol alone: the command takes private copies of descriptors 0 and 1, then
points 0 at ``/dev/null`` and 1 at standard error, so a stray ``print`` or a child
process that inherits them can never corrupt the stream. Logs go to standard error.

The token comes from ``CORRAL_RPC_TOKEN`` or, for embedders written for the seed,
its alias ``ZOTCORE_RPC_TOKEN``; both are removed from the environment at start-up.
"""

from __future__ import annotations

import os
import signal
import sys

import click
import trio

from sandbox.log import get_logger

from .._options import AgentOptions
from .._rpc.server import DEFAULT_LINE_LIMIT, SEED_TOKEN_ENV, TOKEN_ENV, serve_rpc
from .._runtime import open_runtime
from .agent_cmds import refuse_untrusted, run_trio
from .errors import CLIError
from .flags import agent_options, skip_broken_option
from .helptext import AGENT_ENV, epilog
from .lifecycle import broken
from .logs import configure_logging, logging_configured

__all__ = ["rpc_cmd", "run_rpc"]

log = get_logger(__name__)


def _claim_stdio() -> tuple[int, int]:
    # Private copies for the protocol; the public descriptors are redirected so
    # nothing else can read commands or write into the response stream.
    proto_in, proto_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(devnull, 0)
    finally:
        os.close(devnull)
    os.dup2(2, 1)
    return proto_in, proto_out


def _take_token() -> str | None:
    # Both popped, whatever happens next: no child process may inherit either.
    found = {name: os.environ.pop(name, None) for name in (TOKEN_ENV, SEED_TOKEN_ENV)}
    for name, value in found.items():
        if value is not None and not value:
            raise CLIError(f"{name} is set but empty; give it a value or unset it")
    ours, seed = found[TOKEN_ENV], found[SEED_TOKEN_ENV]
    if ours is not None and seed is not None and ours != seed:
        raise CLIError(
            f"{TOKEN_ENV} and {SEED_TOKEN_ENV} are both set, to different tokens; "
            f"set only {TOKEN_ENV}"
        )
    if ours is None and seed is not None:
        log.info("rpc_token_from_seed_variable", variable=SEED_TOKEN_ENV)
    return ours if ours is not None else seed


#: Seconds the jobs have to tell the client how they ended after SIGINT or SIGTERM.
STOP_GRACE = 2.0


async def run_rpc(
    options: AgentOptions,
    in_fd: int,
    out_fd: int,
    token: str | None = None,
    line_limit: int = DEFAULT_LINE_LIMIT,
    skip_broken: bool = False,
) -> int:
    """Open the session for ``options`` and serve it on the descriptors ``in_fd``/``out_fd``.

    Takes ownership of both descriptors (they are closed on return).

    Returns:
        The exit status (see :func:`~agent._rpc.server.serve_rpc`), or 128 + the signal
        number after SIGINT or SIGTERM.

    Raises:
        AgentError: the session could not be opened (bad options, provider, script).
        CLIError: an extension did not start (unless ``skip_broken``).

    Cancellation: serving stops, the running job is aborted and every extension is
    stopped before this returns. SIGINT or SIGTERM stops reading commands and aborts
    every job; the client still gets each job's ending and ``done`` (for at most
    ``STOP_GRACE`` seconds, or until a second signal), then the same happens.
    """
    stdin = trio.lowlevel.FdStream(in_fd)
    stdout = trio.lowlevel.FdStream(out_fd)
    status = 1
    signals: list[int] = []
    stop = trio.Event()
    async with stdin, stdout, open_runtime(options) as runtime, trio.open_nursery() as nursery:
        if not skip_broken and (lines := await broken(runtime.host)):
            raise CLIError("\n".join(lines))
        await nursery.start(_stop_on_signal, stop, nursery.cancel_scope, signals)
        status = await serve_rpc(
            runtime, stdin, stdout, token=token, line_limit=line_limit, stop=stop
        )
        nursery.cancel_scope.cancel()
    return 128 + signals[0] if signals else status


async def _stop_on_signal(
    stop: trio.Event,
    scope: trio.CancelScope,
    seen: list[int],
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    # SIGINT or SIGTERM ends the session cleanly: the jobs are aborted and say so to
    # the client, then the extensions are stopped. A second signal, or STOP_GRACE
    # seconds, and serving is cancelled at once.
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        task_status.started()
        async for signum in signals:
            name = signal.Signals(signum).name
            log.warning("rpc_signal", signal=name)
            print(f"corral rpc: {name}: stopping", file=sys.stderr, flush=True)
            seen.append(signum)
            stop.set()
            break
        with trio.move_on_after(STOP_GRACE):
            async for signum in signals:
                name = signal.Signals(signum).name
                print(f"corral rpc: {name} again: stopping now", file=sys.stderr, flush=True)
                break
    scope.cancel()


@click.command(
    "rpc",
    epilog=epilog(
        examples=[
            ("""echo '{"id":"1","type":"prompt","message":"hi"}' | corral rpc""", ""),
            ("CORRAL_RPC_TOKEN=s3cret corral rpc", "the first command must be hello"),
        ],
        env=(*AGENT_ENV, ("CORRAL_RPC_TOKEN", "shared secret (alias ZOTCORE_RPC_TOKEN)")),
        exit_codes=(
            (0, "stdin closed and the work done, or stdout closed by the client"),
            (1, "unusable setup"),
            (130, "SIGINT"),
            (143, "SIGTERM"),
        ),
    ),
)
@agent_options
@click.option(
    "--line-limit",
    type=click.IntRange(min=1024),
    default=DEFAULT_LINE_LIMIT,
    show_default=True,
    help="Longest accepted input line in bytes.",
)
@skip_broken_option
@click.pass_context
def rpc_cmd(ctx: click.Context, options: AgentOptions, line_limit: int, skip_broken: bool) -> None:
    """Serve one agent session as JSON lines.

    Commands on stdin, responses and events on stdout, logs on stderr; the protocol
    is in docs/rpc.md.
    """
    if not logging_configured():
        configure_logging(0)  # run on its own (not under the corral group)
    token = _take_token()
    refuse_untrusted(options, skip_broken=skip_broken)
    in_fd, out_fd = _claim_stdio()
    status = run_trio(run_rpc, options, in_fd, out_fd, token, line_limit, skip_broken)
    sys.stderr.flush()
    ctx.exit(status)
