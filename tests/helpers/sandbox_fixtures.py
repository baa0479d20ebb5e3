"""The fixtures the sandbox and security tests share: who the host runs as, a fake
host (``world``) and a user's machine for the trust tests (``site``).

Each folder's ``conftest.py`` imports them by name, which is how pytest finds them.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from helpers.sandbox_harness import IDENTITIES, Identity, World, find_identity, make_world
from helpers.trust_harness import Site, make_site


@pytest.fixture(scope="session", params=IDENTITIES)
def who(request: pytest.FixtureRequest) -> Identity:
    """The user the host runs as."""
    return find_identity(request.param)


@pytest.fixture
def world(who: Identity) -> Iterator[World]:
    """A fresh fake host for one test."""
    w = make_world(who)
    try:
        yield w
    finally:
        shutil.rmtree(w.base, ignore_errors=True)


@pytest.fixture
def site(who: Identity) -> Iterator[Site]:
    """A fresh user's machine for the trust tests; nothing of it may outlive the test."""
    s = make_site(who)
    try:
        yield s
        assert s.leftovers() == []
    finally:
        shutil.rmtree(s.base, ignore_errors=True)
