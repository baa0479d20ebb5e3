"""Many agent sessions at once: the engine of ``corral batch``, for embedders too.

::

    from agent.batch import LocalBackend, Task, run_many

    tasks = [Task(id=f"t{i}", prompt=f"say \\"{i}\\"") for i in range(100)]
    async with run_many(tasks, backend=LocalBackend(jobs=8)) as results:
        async for result in results:
            print(result.id, result.status, result.answer)

Each task is one session with its own supervisor and sandboxed extensions, in a
working directory and corral home of its own. :class:`LocalBackend` runs the
sessions in this process; :class:`RayBackend` on a Ray cluster (``pip install
'corral[ray]'``; ``ray`` is imported only then). Results arrive exactly once per
task id, in the order sessions finish. See docs/scale.md.
"""

from __future__ import annotations

from ._exceptions import BackendError, BatchError, OutputError, TaskError, TasksInvalid
from ._local import LocalBackend
from ._output import ResultsFile, Resumed
from ._ray import RayBackend
from ._results import ExtensionReport, Result, Status, ToolCallRecord
from ._run import Backend, Batch, run_many
from ._tasks import Defaults, Task, check_tasks, load_tasks

__all__ = [
    "Backend",
    "BackendError",
    "Batch",
    "BatchError",
    "Defaults",
    "ExtensionReport",
    "LocalBackend",
    "OutputError",
    "RayBackend",
    "Result",
    "ResultsFile",
    "Resumed",
    "Status",
    "Task",
    "TaskError",
    "TasksInvalid",
    "ToolCallRecord",
    "check_tasks",
    "load_tasks",
    "run_many",
]
