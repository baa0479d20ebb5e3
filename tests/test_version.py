"""The version is written twice (see ``supervisor/_version.py``): both agree with the build."""

from __future__ import annotations

import importlib.metadata

import supervisor
from agent._version import __version__


def test_the_supervisor_and_the_cli_state_the_installed_version() -> None:
    installed = importlib.metadata.version("corral")
    assert supervisor.VERSION == __version__ == installed
