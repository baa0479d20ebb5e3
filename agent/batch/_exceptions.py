"""Exceptions of the batch runner.

::

    AgentError                      (agent's base)
    └── BatchError
        ├── TaskError       one task line is invalid: file, line, field, why
        ├── TasksInvalid    the tasks file has bad lines; the batch does not start
        ├── OutputError     the results file cannot be used (locked, damaged, unwritable)
        └── BackendError    the backend cannot run (ray missing, no cluster)

A task that fails while it runs is not an exception: it is a result with
``status: "error"`` (or ``timeout``), and the batch goes on.
"""

from __future__ import annotations

from .._exceptions import AgentError

__all__ = ["BackendError", "BatchError", "OutputError", "TaskError", "TasksInvalid"]


class BatchError(AgentError):
    """Base of the batch runner's errors."""


class TaskError(BatchError):
    """One task is invalid.

    Attributes:
        source: the tasks file (``"<tasks>"`` for tasks given in Python).
        line: 1-based line number (the task's position for tasks given in Python).
        field: the field at fault (``"id"``, ``"extensions[1]"``), or ``""`` for the
            line as a whole.
        reason: what is wrong with it.
    """

    def __init__(self, source: str, line: int, field: str, reason: str) -> None:
        where = f"{source}:{line}"
        super().__init__(f"{where}: field {field}: {reason}" if field else f"{where}: {reason}")
        self.source = source
        self.line = line
        self.field = field
        self.reason = reason


class TasksInvalid(BatchError):
    """The tasks have invalid lines; nothing was started.

    Attributes:
        errors: one :class:`TaskError` per bad line, in line order.
    """

    def __init__(self, errors: list[TaskError]) -> None:
        shown = "\n".join(str(e) for e in errors[:20])
        more = f"\n... and {len(errors) - 20} more" if len(errors) > 20 else ""
        noun = "line is" if len(errors) == 1 else "lines are"
        super().__init__(
            f"{len(errors)} task {noun} invalid; nothing was started "
            f"(--skip-invalid runs the valid ones):\n{shown}{more}"
        )
        self.errors = errors


class OutputError(BatchError):
    """The results file cannot be used.

    Attributes:
        path: the results file.
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class BackendError(BatchError):
    """The backend cannot run the batch (an optional dependency is missing, no cluster)."""
