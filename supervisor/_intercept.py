"""The intercept chain: subscribers consulted one after another, in load order.

Each subscriber gets ``intercept_timeout`` seconds. A timeout, a crash, or a
malformed reply counts as "allow" (the seed's default), so an unresponsive
extension can delay the agent but never stall or break it. The first ``block``
wins; ``modified_args`` and ``replace_text`` chain, each subscriber seeing the
previous one's output. ``modified_args`` that is not a JSON object is dropped and
logged.

Blocking or rewriting a call of one of the agent's *built-in* tools (``read``,
``write``, ``edit``, ``bash``, and any later one) acts with the host's own
privileges, so it is a permission the manifest declares
(``permissions.intercept_builtin``). Without it the block or rewrite is ignored:
the chain goes on as if the extension had allowed the call unchanged, the first
attempt is logged with the extension's name, and every attempt is reported in
:attr:`InterceptOutcome.interventions` with ``applied=False`` (the agent audits
them). The extension still observes the call. ``turn_start`` and
``assistant_message`` interception, and interception of extension tools, need no
permission (the seed's behaviour).
"""

from __future__ import annotations

from collections.abc import MutableSet, Sequence
from typing import Any, Protocol

import trio

from sandbox.log import get_logger

from . import _frames as f
from ._api import InterceptOutcome, Intervention, InterventionKind
from ._calls import Reply
from ._exceptions import SupervisorError
from ._manifest import ExtensionSpec
from ._requests import Intercept

__all__ = ["Subscriber", "may_intervene", "run_chain"]

log = get_logger(__name__)


class Subscriber(Protocol):
    """What the chain needs of an extension."""

    @property
    def name(self) -> str: ...

    @property
    def spec(self) -> ExtensionSpec: ...

    def intercept(
        self,
        req: Intercept,
        args: dict[str, Any] | None,
        text: str | None,
        reply: Reply[Any],
    ) -> None: ...


def may_intervene(spec: ExtensionSpec, req: Intercept) -> bool:
    """Whether the extension of ``spec`` may block or rewrite the event ``req``.

    Only built-in tool calls are guarded: they need ``intercept_builtin`` naming the
    tool or ``"*"``.
    """
    if req.event != "tool_call" or not req.builtin:
        return True
    granted = spec.manifest.permissions.intercept_builtin
    return "*" in granted or req.tool_name in granted


def _ignored(
    ext: Subscriber, req: Intercept, kind: InterventionKind, warned: MutableSet[str]
) -> None:
    if ext.name in warned:
        return
    warned.add(ext.name)
    log.warning(
        "intercept_ignored",
        extension=ext.name,
        tool=req.tool_name,
        action=kind.value,
        why=f"permissions.intercept_builtin does not grant {req.tool_name!r}",
    )


async def run_chain(
    req: Intercept, subscribers: Sequence[Subscriber], warned: MutableSet[str]
) -> InterceptOutcome:
    """Fold the answers of ``subscribers`` to one intercept request.

    Each subscriber's deadline (``intercept_timeout``) is enforced by the
    supervisor: a late one fails with ``CallTimeout``, which counts as allow here.

    Args:
        req: the event.
        subscribers: the extensions intercepting it, in load order.
        warned: names of extensions whose ignored intervention was already logged;
            updated here, so each is logged once.

    Cancellation: stops at the current subscriber (its pending call is forgotten);
    later subscribers are not consulted.
    """
    args: dict[str, Any] | None = req.tool_args
    text = req.text
    rewritten = False
    consulted: list[str] = []
    done: list[Intervention] = []
    for ext in subscribers:
        consulted.append(ext.name)
        reply: Reply[f.EventInterceptResponse] = Reply()
        ext.intercept(req, args, text, reply)
        try:
            answer = await reply.wait()
        except SupervisorError as exc:
            log.warning("intercept_allowed", extension=ext.name, why=str(exc))
            continue
        except trio.Cancelled:
            reply.abandon()
            raise
        allowed = may_intervene(ext.spec, req)
        if answer.block:
            reason = answer.reason or f"blocked by extension {ext.name}"
            block = Intervention(
                extension=ext.name, kind=InterventionKind.BLOCK, applied=allowed, reason=reason
            )
            done.append(block)
            if not allowed:
                _ignored(ext, req, InterventionKind.BLOCK, warned)
                continue
            log.info("intercept_blocked", extension=ext.name, intercept=req.event, reason=reason)
            return InterceptOutcome(
                block=True,
                reason=reason,
                blocked_by=ext.name,
                args=args,
                text=text if rewritten else None,
                consulted=consulted,
                interventions=done,
            )
        if req.event == "tool_call" and answer.modified_args is not None:
            if not isinstance(answer.modified_args, dict):
                log.warning(
                    "intercept_args_dropped",
                    extension=ext.name,
                    why="modified_args is not a JSON object",
                )
            elif answer.modified_args != args:
                done.append(
                    Intervention(
                        extension=ext.name,
                        kind=InterventionKind.REWRITE,
                        applied=allowed,
                        args=answer.modified_args,
                    )
                )
                if allowed:
                    args = answer.modified_args
                else:
                    _ignored(ext, req, InterventionKind.REWRITE, warned)
        if (
            req.event == "assistant_message"
            and answer.replace_text is not None
            and answer.replace_text != text
        ):
            text = answer.replace_text
            rewritten = True
            done.append(Intervention(extension=ext.name, kind=InterventionKind.REWRITE, text=text))
    return InterceptOutcome(
        block=False,
        args=args,
        text=text if rewritten else None,
        consulted=consulted,
        interventions=done,
    )
