"""The provider factory."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.agentkit import script

from agent import (
    PROVIDERS,
    AgentError,
    AgentOptions,
    OfflineProvider,
    ScriptedProvider,
    ScriptError,
    UnknownProvider,
    make_provider,
)


def test_offline_is_the_default() -> None:
    provider = make_provider(AgentOptions())
    assert isinstance(provider, OfflineProvider)
    assert provider.name == "offline"


def test_scripted_needs_a_valid_script(tmp_path: Path) -> None:
    with pytest.raises(UnknownProvider, match="needs a script"):
        make_provider(AgentOptions(provider="scripted"))
    good = script(tmp_path, {"text": "hi"})
    provider = make_provider(AgentOptions(provider="scripted", script=good, model="m"))
    assert isinstance(provider, ScriptedProvider)
    assert provider.models()[0].id == "m"
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{oops\n")
    with pytest.raises(ScriptError, match=r"bad\.jsonl:1:"):
        make_provider(AgentOptions(provider="scripted", script=str(bad)))


def test_unknown_provider_lists_the_valid_ones() -> None:
    with pytest.raises(UnknownProvider) as info:
        make_provider(AgentOptions(provider="gemini"))
    assert isinstance(info.value, AgentError)
    assert "unknown provider 'gemini'" in str(info.value)
    for name in PROVIDERS:
        assert name in str(info.value)


@pytest.mark.parametrize("name", ["openai", "anthropic"])
def test_http_providers_are_built_lazily(name: str) -> None:
    provider = make_provider(
        AgentOptions(provider=name, model="m1", base_url="http://127.0.0.1:9", api_key="k")
    )
    assert provider.name == name
