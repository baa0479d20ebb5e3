"""``host_environment``: the allowlist and the names asked for, read at every call."""

from __future__ import annotations

import os

import pytest

from sandbox import host_environment
from sandbox._environ import ALLOWED_ENV


def test_it_is_the_allowlist_and_the_names_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LC_TIME", "C")
    monkeypatch.setenv("LC_SECRET_SAUCE", "x")  # an LC_* name not in the list
    monkeypatch.setenv("API_TOKEN", "t0k")
    monkeypatch.delenv("LANGUAGE", raising=False)
    env = host_environment(["API_TOKEN", "UNSET_NAME_29H"])
    want = {n: os.environ[n] for n in (*ALLOWED_ENV, "API_TOKEN") if n in os.environ}
    assert env == want
    assert env["LC_TIME"] == "C"
    assert env["API_TOKEN"] == "t0k"
    assert "LC_SECRET_SAUCE" not in env
    assert "LANGUAGE" not in env
    assert "API_TOKEN" not in host_environment()


def test_a_change_to_the_environment_is_seen_by_the_next_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TERM", "before")
    assert host_environment()["TERM"] == "before"
    monkeypatch.setenv("TERM", "after")
    assert host_environment()["TERM"] == "after"
    monkeypatch.delenv("TERM")
    assert "TERM" not in host_environment()


def test_undecodable_bytes_read_as_os_environ_reads_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(os.environb, b"LANG", b"caf\xe9")  # not UTF-8
    assert host_environment()["LANG"] == os.environ["LANG"] == os.fsdecode(b"caf\xe9")
