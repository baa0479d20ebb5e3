"""Settings of the web tools, from options or the environment.

============================== ==============================================
``CORRAL_SEARXNG_URL``         SearXNG base URL for ``web_search`` (``--searxng``)
``CORRAL_WEB_ALLOW``           comma- or space-separated exceptions to the network
                               guard: ``127.0.0.1:8080``, ``10.0.0.0/8``,
                               ``[::1]:8080`` (``--web-allow``, repeatable)
``CORRAL_CHROMIUM``            the Chromium binary for rendering, or ``off``
``CORRAL_BROWSER_UNSANDBOXED`` ``1``: render without bubblewrap too (off by
                               default: the page would run as the user)
``CORRAL_WEB_MAX_CHARS``       default cap on ``web_fetch`` output (50000)
============================== ==============================================
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence

import msgspec

from sandbox import AddressPolicy, parse_allowance

from .errors import WebConfigError

__all__ = ["WebConfig"]


class WebConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How ``web_fetch`` and ``web_search`` behave."""

    #: SearXNG base URL (``https://search.example/``); None: ``web_search`` says how to set it.
    searxng_url: str | None = None
    #: Exceptions to the network guard (``127.0.0.1:8080``, ``10.0.0.0/8``, ``[::1]:80``).
    allow: list[str] = []
    #: Default cap on ``web_fetch`` output, in characters (the model may ask for less).
    max_chars: int = 50_000
    #: Bytes of a response body read at most; the rest is never downloaded.
    max_bytes: int = 5 * 1024 * 1024
    #: Redirects followed at most, each one checked like the first request.
    max_redirects: int = 5
    #: Seconds to connect to one address.
    connect_timeout: float = 5.0
    #: Seconds without a byte from the server.
    read_timeout: float = 10.0
    #: Seconds for the whole plain fetch (redirects, body).
    total_timeout: float = 20.0
    #: Chromium binary; None finds one; ``"off"`` never renders.
    chromium: str | None = None
    #: Render also where bubblewrap is not available (the browser then runs as the
    #: user, confined only by corral's request interception and WebRTC being off).
    browser_unsandboxed: bool = False
    #: Seconds the whole browser render may take (start, load, settle, extract).
    browser_timeout: float = 25.0
    #: Seconds to let a page's scripts run after its load event.
    settle: float = 1.5
    #: Seconds a search may take.
    search_timeout: float = 10.0

    def policy(self) -> AddressPolicy:
        """The guard's policy with :attr:`allow` parsed.

        Raises:
            WebConfigError: an entry is not an address or network.
        """
        try:
            return AddressPolicy(parse_allowance(entry) for entry in self.allow)
        except ValueError as exc:
            raise WebConfigError("CORRAL_WEB_ALLOW / --web-allow", str(exc)) from None

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str] | None = None,
        *,
        searxng_url: str | None = None,
        allow: Sequence[str] = (),
    ) -> WebConfig:
        """Settings from ``CORRAL_*`` variables (see the module docstring) and options.

        Args:
            env: the environment (default ``os.environ``).
            searxng_url: ``--searxng``; wins over ``CORRAL_SEARXNG_URL``.
            allow: ``--web-allow`` entries, added to those of ``CORRAL_WEB_ALLOW``.

        Raises:
            WebConfigError: a setting has an invalid value; the message names it.
        """
        env = os.environ if env is None else env
        fields: dict[str, object] = {}
        url = searxng_url or env.get("CORRAL_SEARXNG_URL", "").strip()
        if url:
            fields["searxng_url"] = url
        entries = [e for e in re.split(r"[,\s]+", env.get("CORRAL_WEB_ALLOW", "")) if e]
        fields["allow"] = [*entries, *allow]
        if env.get("CORRAL_CHROMIUM", "").strip():
            fields["chromium"] = env["CORRAL_CHROMIUM"].strip()
        unsandboxed = env.get("CORRAL_BROWSER_UNSANDBOXED", "").strip().lower()
        if unsandboxed in ("1", "true", "yes", "on"):
            fields["browser_unsandboxed"] = True
        elif unsandboxed not in ("", "0", "false", "no", "off"):
            raise WebConfigError("CORRAL_BROWSER_UNSANDBOXED", f"{unsandboxed!r}: use 1 or 0")
        if env.get("CORRAL_WEB_MAX_CHARS", "").strip():
            text = env["CORRAL_WEB_MAX_CHARS"].strip()
            if not text.isdigit() or int(text) < 1:
                raise WebConfigError("CORRAL_WEB_MAX_CHARS", f"{text!r} is not a positive number")
            fields["max_chars"] = int(text)
        config = msgspec.convert(fields, cls)
        config.policy()  # fail now, naming the setting, not at the first fetch
        return config
