"""What is particular to the ``agent`` facade: it is lazy (PEP 562).

A name is imported on first use, so importing ``agent`` alone loads none of the
heavy modules (the check runs in a fresh interpreter). That the facade exports
exactly ``__all__`` is checked for every package in ``tests/test_exports.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys

from helpers.paths import REPO

import agent


def test_an_unknown_name_is_an_attribute_error() -> None:
    assert not hasattr(agent, "NoSuchThing")


def test_dir_lists_every_export_in_order() -> None:
    assert sorted(dir(agent)) == dir(agent)
    assert set(agent.__all__) <= set(dir(agent))


def test_importing_the_facade_loads_nothing_heavy() -> None:
    code = (
        "import json, sys, agent; "
        "print(json.dumps(sorted(m for m in sys.modules "
        "if m.split('.')[0] in ('trio', 'supervisor', 'sandbox', 'structlog', 'httpx', 'rich'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(out) == []
