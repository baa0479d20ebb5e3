"""The intercept chain: subscribers consulted one after another, in load order.

Each subscriber gets ``intercept_timeout`` seconds. A timeout, a crash, or a
malformed reply counts as "allow" (the seed's default), so an unresponsive
extension can delay the agent but never stall or break it. The first ``block``
wins; ``modified_args`` and ``replace_text`` chain, each subscriber seeing the
previous one's output. ``modified_args`` that is not a JSON object is dropped and
logged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import structlog
import trio

from . import _frames as f
from ._api import Intercept, InterceptOutcome, Reply
from ._exceptions import SupervisorError

__all__ = ["Subscriber", "run_chain"]

log = structlog.get_logger("corral.supervisor")


class Subscriber(Protocol):
    """What the chain needs of an extension."""

    name: str

    def call(
        self,
        kind: str,
        what: str,
        frame_for: Any,
        reply: Reply[Any],
    ) -> None: ...


async def run_chain(req: Intercept, subscribers: Sequence[Subscriber]) -> InterceptOutcome:
    """Fold the answers of ``subscribers`` to one intercept request.

    Each subscriber's deadline (``intercept_timeout``) is enforced by the
    supervisor: a late one fails with ``CallTimeout``, which counts as allow here.

    Cancellation: stops at the current subscriber (its pending call is forgotten);
    later subscribers are not consulted.
    """
    args: dict[str, Any] | None = req.tool_args
    text = req.text
    rewritten = False
    consulted: list[str] = []
    what = f"intercept {req.event}"
    for ext in subscribers:
        consulted.append(ext.name)
        reply: Reply[f.EventInterceptResponse] = Reply()
        current_args, current_text = args, text

        def frame_for(
            rid: str, a: dict[str, Any] | None = current_args, t: str | None = current_text
        ) -> f.EventIntercept:
            return f.EventIntercept(
                id=rid,
                event=req.event,
                step=req.step,
                tool_id=req.tool_id,
                tool_name=req.tool_name,
                tool_args=a,
                text=t,
            )

        ext.call("intercept", what, frame_for, reply)
        try:
            answer = await reply.wait()
        except SupervisorError as exc:
            log.warning("intercept_allowed", extension=ext.name, why=str(exc))
            continue
        except trio.Cancelled:
            reply.give_up(None)
            raise
        if answer.block:
            reason = answer.reason or f"blocked by extension {ext.name}"
            log.info("intercept_blocked", extension=ext.name, intercept=req.event, reason=reason)
            return InterceptOutcome(
                block=True,
                reason=reason,
                blocked_by=ext.name,
                args=args,
                text=text if rewritten else None,
                consulted=consulted,
            )
        if req.event == "tool_call" and answer.modified_args is not None:
            if isinstance(answer.modified_args, dict):
                args = answer.modified_args
            else:
                log.warning(
                    "intercept_args_dropped",
                    extension=ext.name,
                    why="modified_args is not a JSON object",
                )
        if req.event == "assistant_message" and answer.replace_text is not None:
            text = answer.replace_text
            rewritten = True
    return InterceptOutcome(
        block=False, args=args, text=text if rewritten else None, consulted=consulted
    )
