"""When a process started: what tells a live process from a later one with its pid."""

from __future__ import annotations

__all__ = ["start_time"]


def start_time(pid: int | str) -> int | None:
    """When ``pid`` (or ``"self"``) started, in clock ticks since boot
    (``/proc/<pid>/stat`` field 22); None when there is no such process (or no
    ``/proc``). A pid is reused only by a process started later."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2 :].split()  # the name (field 2) may hold anything
    return int(fields[19]) if len(fields) > 19 else None
