"""The provider factory: a session's options to a :class:`Provider`.

``offline`` (the default) and ``scripted`` are built in. ``scripted``, ``openai``
and ``anthropic`` live in their own modules and are imported only when asked for,
so offline use never pays for importing the HTTP stack (or the script reader).
"""

from __future__ import annotations

from typing import Protocol

from .._exceptions import UnknownProvider
from .base import Provider, ProviderSettings
from .offline import OfflineProvider

__all__ = ["PROVIDERS", "ProviderChoice", "make_provider"]

#: Valid ``--provider`` values.
PROVIDERS = ("offline", "scripted", "openai", "anthropic")


class ProviderChoice(Protocol):
    """What the factory reads of a session's options (:class:`~agent.AgentOptions`,
    which stands above the providers: the seam keeps the factory from looking up)."""

    @property
    def provider(self) -> str: ...
    @property
    def model(self) -> str | None: ...
    @property
    def script(self) -> str | None: ...
    @property
    def base_url(self) -> str | None: ...
    @property
    def api_key(self) -> str | None: ...
    @property
    def provider_settings(self) -> ProviderSettings: ...


def make_provider(options: ProviderChoice) -> Provider:
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
        from .scripted import ScriptedProvider, load_script

        return ScriptedProvider(load_script(options.script), model=options.model)
    if name == "openai":
        # Imported here, not at the top: httpx and the HTTP providers take a while to
        # import, and offline use needs neither.
        from .openai import OpenAIProvider

        return OpenAIProvider(
            options.model, options.base_url, options.api_key, settings=options.provider_settings
        )
    if name == "anthropic":
        from .anthropic import AnthropicProvider

        return AnthropicProvider(
            options.model, options.base_url, options.api_key, settings=options.provider_settings
        )
    raise UnknownProvider(f"unknown provider {name!r}; valid providers: {', '.join(PROVIDERS)}")
