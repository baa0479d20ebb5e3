"""The provider factory: :class:`AgentOptions` to a :class:`Provider`.

``offline`` (the default) and ``scripted`` are built in. ``openai`` and
``anthropic`` live in their own modules and are imported only when asked for, so a
missing HTTP stack can never break offline use.
"""

from __future__ import annotations

from .._engine import AgentOptions
from .._exceptions import AgentError
from .base import Provider
from .offline import OfflineProvider
from .scripted import ScriptedProvider, load_script

__all__ = ["PROVIDERS", "UnknownProvider", "make_provider"]

#: Valid ``--provider`` values.
PROVIDERS = ("offline", "scripted", "openai", "anthropic")


class UnknownProvider(AgentError):
    """``--provider`` names no provider corral has, or one that cannot be set up."""


def make_provider(options: AgentOptions) -> Provider:
    """Build the provider ``options.provider`` names.

    Raises:
        UnknownProvider: no such provider (the message lists the valid ones), or
            ``scripted`` without a script.
        ScriptError: the script of ``scripted`` is malformed.
    """
    name = options.provider
    if name == "offline":
        return OfflineProvider(options.model)
    if name == "scripted":
        if not options.script:
            raise UnknownProvider(
                "the scripted provider needs a script: pass --script PATH (JSONL, one model "
                "turn per line; see docs/agent.md)"
            )
        return ScriptedProvider(load_script(options.script), model=options.model)
    if name == "openai":
        # Imported here: the HTTP stack is optional and loaded on demand.
        from .openai import OpenAIProvider  # type: ignore[import-not-found, unused-ignore]

        return OpenAIProvider(
            options.model, options.base_url, options.api_key, settings=options.provider_settings
        )
    if name == "anthropic":
        from .anthropic import AnthropicProvider  # type: ignore[import-not-found, unused-ignore]

        return AnthropicProvider(
            options.model, options.base_url, options.api_key, settings=options.provider_settings
        )
    raise UnknownProvider(f"unknown provider {name!r}; valid providers: {', '.join(PROVIDERS)}")
