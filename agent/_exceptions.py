"""Exceptions of the agent package.

::

    AgentError
    ├── ProviderError       a model call failed (HTTP status, broken stream, bad key)
    ├── UnknownProvider     --provider names no provider, or one that cannot be set up
    ├── ScriptError         a scripted-provider script is malformed (names file and line)
    ├── ToolError           a built-in tool refused its arguments (path escapes cwd, ...)
    ├── SessionError        a saved session cannot be read or written
    │   └── SessionLocked   (in _sessions) another process has the session open
    ├── ExtensionFailed     an extension the user asked for (-e PATH) is unusable
    ├── AgentBusy           a prompt or compaction is already running on the loop
    ├── ReasoningRefused    --reasoning asks a model that cannot reason to think
    └── RuntimeClosed       a job was submitted to a runtime that is closing or closed

Errors of the supervisor (:class:`supervisor.SupervisorError`) reach the agent's
callers as they are: "the extension broke" is the supervisor's to say.
"""

from __future__ import annotations

__all__ = [
    "AgentBusy",
    "AgentError",
    "ExtensionFailed",
    "ProviderError",
    "ReasoningRefused",
    "RuntimeClosed",
    "ScriptError",
    "SessionError",
    "ToolError",
    "UnknownProvider",
]


class AgentError(Exception):
    """Base of every agent error."""


class ProviderError(AgentError):
    """A model call failed.

    Attributes:
        provider: provider id.
        status: HTTP status when there was one.
        retryable: a retry might succeed (rate limit, 5xx, broken stream).
        retry_after: seconds the server asked to wait (``Retry-After``), if it did.
    """

    def __init__(
        self,
        provider: str,
        message: str,
        *,
        status: int | None = None,
        retryable: bool = False,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"{provider}: {message}")
        self.provider = provider
        self.status = status
        self.retryable = retryable
        self.retry_after = retry_after


class UnknownProvider(AgentError):
    """``--provider`` names no provider corral has, or one that cannot be set up."""


class ScriptError(AgentError):
    """A script for the scripted provider is malformed."""

    def __init__(self, path: str, line: int, message: str) -> None:
        super().__init__(f"{path}:{line}: {message}")
        self.path = path
        self.line = line


class ToolError(AgentError):
    """A built-in tool cannot run with these arguments."""


class SessionError(AgentError):
    """A saved session cannot be read or written."""


class ExtensionFailed(AgentError):
    """An extension the user asked for by path is missing, malformed or did not start.

    Attributes:
        path: the ``-e`` path.
        reason: what went wrong (the manifest error, or the exit and its stderr).
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"extension {path}: {reason}")
        self.path = path
        self.reason = reason


class AgentBusy(AgentError):
    """A prompt or compaction is already running on this loop."""


class ReasoningRefused(AgentError):
    """``--reasoning`` asks a model that does not reason to think, or names no level
    (the message says which model, and which of the provider's models would)."""


class RuntimeClosed(AgentError):
    """A job was submitted to a runtime that is closing or closed."""
