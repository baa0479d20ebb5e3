"""The ``agent`` package exports exactly what ``__all__`` says (httpx's check).

The facade is lazy (PEP 562): a name is imported on first use. So the check runs
in a fresh interpreter: importing ``agent`` alone loads none of the heavy modules,
and once every name was looked up the module holds exactly ``__all__``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import types

from agent_helpers import REPO

import agent


def test_all_is_what_the_package_exports() -> None:
    for name in agent.__all__:
        getattr(agent, name)
    public = {
        name
        for name, value in vars(agent).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and name not in ("annotations", "importlib", "typing")
    }
    assert public == set(agent.__all__)
    assert agent.__all__ == sorted(agent.__all__, key=lambda n: (not n.isupper(), n))
    assert sorted(dir(agent)) == dir(agent)
    assert set(agent.__all__) <= set(dir(agent))


def test_an_unknown_name_is_an_attribute_error() -> None:
    assert not hasattr(agent, "NoSuchThing")


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


def test_every_export_is_documented() -> None:
    for name in agent.__all__:
        value = getattr(agent, name)
        if isinstance(value, type | types.FunctionType):
            assert (value.__doc__ or "").strip(), name
