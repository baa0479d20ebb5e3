"""What ends or refuses a ``corral run`` / ``chat``: signals, and extensions asked for by path.

* :class:`SignalCancel`: SIGINT, SIGTERM and SIGHUP cancel one scope (the turn is
  aborted, extensions go down the shutdown ladder, nothing is left) and the command
  exits ``128 + signal`` (130, 143, 129). A second signal of the same kind gets
  the default behaviour back.
* :func:`requested_extensions` / :func:`check_started`: an extension named with
  ``-e PATH`` is required. A missing or malformed one fails before anything starts;
  one that did not start fails the command before the prompt, with the reason from
  its log (the exec error, its last stderr lines), not only "exit status 1".
  One that is merely *late* (no ``hello`` yet) is not a failure: it joins or fails
  on its own.
* :func:`broken`: every other extension ``run`` and ``rpc`` would use (installed,
  project-local) that cannot start stops them too, with one line naming it and
  the reason, unless ``--skip-broken-extensions`` says go on without it: the one
  left out may be the guard the user counts on.
"""

from __future__ import annotations

import signal
import typing
from pathlib import Path

import trio

from supervisor import ExtensionSpec, ManifestError, corral_home, load_manifest, log_file

from .._exceptions import ExtensionFailed
from .._host import AgentHost
from .._options import AgentOptions

__all__ = ["SKIP_HINT", "SignalCancel", "broken", "check_started", "requested_extensions"]

#: Extension states that are fine for a required extension once start-up returned.
_STARTED = frozenset({"running", "registering", "starting"})
#: States of an extension that did not start (refused at hello, exited before ready).
#: Not ``quarantined``: corral did not try (a decision of an earlier session, shown
#: as a warning, lifted by ``ext enable``, which an RPC client may send).
_BROKEN = frozenset({"backoff", "failed", "invalid"})
#: What ends each line about a broken extension.
SKIP_HINT = "(--skip-broken-extensions goes on without it)"
#: Bytes of an extension's log read for the reason it did not start.
_LOG_TAIL = 16 * 1024


@typing.final
class SignalCancel:
    """Cancel :attr:`scope` on the first of ``signals``; remember which one it was."""

    def __init__(
        self, signals: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    ) -> None:
        self.signals = signals
        self.scope = trio.CancelScope()
        #: The signal that arrived, if one did.
        self.received: signal.Signals | None = None

    def __repr__(self) -> str:
        return f"<SignalCancel received={self.received}>"

    @property
    def exit_status(self) -> int | None:
        """``128 + signal`` once a signal arrived (the shell's convention)."""
        return None if self.received is None else 128 + self.received.value

    async def watch(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Wait for one signal and cancel :attr:`scope`; start it with ``nursery.start``.

        Cancellation: stops watching; the default handlers come back.
        """
        with trio.open_signal_receiver(*self.signals) as arrivals:
            task_status.started()
            async for signum in arrivals:
                self.received = signal.Signals(signum)
                self.scope.cancel()
                return


def requested_extensions(options: AgentOptions) -> list[ExtensionSpec]:
    """Load the manifest of every ``-e`` path (blocking; run it in a thread).

    Raises:
        ExtensionFailed: a path is missing or its manifest is malformed.
    """
    home = options.home or str(corral_home())
    specs = []
    for path in options.ext_paths:
        try:
            specs.append(load_manifest(Path(path), "cli", home=home))
        except ManifestError as exc:
            raise ExtensionFailed(path, str(exc)) from None
    return specs


def _stderr_of_last_start(path: Path) -> list[str]:
    """The extension's own lines from its last start, from its log (best effort)."""
    try:
        with path.open("rb") as fh:
            size = fh.seek(0, 2)
            fh.seek(max(0, size - _LOG_TAIL))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return []
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("[corral] started pid")]
    if starts:
        lines = lines[starts[-1] + 1 :]
    return [line for line in lines if line.strip() and not line.startswith("[corral]")][-5:]


async def check_started(host: AgentHost, specs: list[ExtensionSpec]) -> None:
    """Fail unless every required extension is running or still starting (late).

    Raises:
        ExtensionFailed: one did not start; the reason includes its last stderr lines.

    Cancellation: the check is abandoned.
    """
    if not specs:
        return
    infos = {info.path: info for info in await host.extensions()}
    for spec in specs:
        info = infos.get(spec.dir)
        if info is None or info.state in _STARTED:
            continue
        reason = info.problem or info.state
        if not info.enabled:
            reason = "disabled in its manifest (enabled: false)"
        tail = await trio.to_thread.run_sync(
            _stderr_of_last_start, log_file(host.home, spec.identity)
        )
        if tail:
            reason += "; its stderr: " + " | ".join(tail)
        raise ExtensionFailed(spec.dir, f"did not start: {reason}")


async def broken(host: AgentHost) -> list[str]:
    """One line per enabled extension that did not start, naming it and the reason.

    Cancellation: the check is abandoned.
    """
    lines = []
    for info in await host.extensions():
        if info.enabled and info.state in _BROKEN:
            reason = info.problem or info.state
            lines.append(f"extension {info.name} ({info.path}) did not start: {reason} {SKIP_HINT}")
    return lines
