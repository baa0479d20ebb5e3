"""``ext list``'s process figures: summed over each extension's whole process tree."""

from __future__ import annotations

import subprocess
import time

import psutil

from supervisor._status import ProcessFigures


def _tree(children: int) -> subprocess.Popen[bytes]:
    script = " ".join(["sleep 30 &"] * children) + " wait"
    proc = subprocess.Popen(["sh", "-c", script])
    deadline = time.monotonic() + 10
    while len(psutil.Process(proc.pid).children(recursive=True)) < children:
        assert time.monotonic() < deadline, "the children did not start"
        time.sleep(0.01)
    return proc


def test_figures_sum_each_tree_and_skip_what_is_gone() -> None:
    one, two = _tree(2), _tree(3)
    gone = subprocess.Popen(["true"])
    gone.wait()
    try:
        figures = ProcessFigures().measure([one.pid, two.pid, gone.pid])
        assert set(figures) == {one.pid, two.pid}
        for proc, size in ((one, 3), (two, 4)):
            tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
            assert len(tree) == size
            assert figures[proc.pid]["fds"] == sum(p.num_fds() for p in tree)
            # RSS moves a little between the two readings; a missing process would not.
            alone = psutil.Process(proc.pid).memory_info().rss
            assert figures[proc.pid]["rss"] > alone + (size - 1) * 100 * 1024
    finally:
        for proc in (one, two):
            for child in psutil.Process(proc.pid).children(recursive=True):
                child.kill()
            proc.kill()
            proc.wait()
