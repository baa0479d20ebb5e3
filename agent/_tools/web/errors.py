"""Exceptions of the web tools.

::

    ToolError (agent)
    └── WebError            a web tool cannot do what was asked
        ├── BlockedTarget   the network guard refused a URL, host or address
        ├── FetchFailed     the request failed (connection, timeout, HTTP status, size)
        ├── BrowserError    Chromium is missing, would not start, crashed or timed out
        └── WebConfigError  a web setting (environment variable or option) is invalid

The tools turn every one of them into an error result for the model; only
:class:`WebConfigError` reaches the user, when a session is opened.
"""

from __future__ import annotations

from ..._exceptions import ToolError

__all__ = ["BlockedTarget", "BrowserError", "FetchFailed", "WebConfigError", "WebError"]


class WebError(ToolError):
    """Base of the web tools' errors."""


class BlockedTarget(WebError):
    """The network guard refused a target.

    Attributes:
        target: the URL or host name as given.
        address: the offending IP address, when the refusal is about one.
        reason: why, e.g. ``"loopback"`` or ``"scheme 'file' is not http or https"``.
    """

    def __init__(self, target: str, reason: str, *, address: str | None = None) -> None:
        where = f"{target} ({address})" if address and address != target else target
        super().__init__(f"blocked {where}: {reason}")
        self.target = target
        self.address = address
        self.reason = reason


class FetchFailed(WebError):
    """A request failed.

    Attributes:
        url: what was requested.
        status: the HTTP status, when a response arrived.
    """

    def __init__(self, url: str, message: str, *, status: int | None = None) -> None:
        super().__init__(f"{url}: {message}")
        self.url = url
        self.status = status


class BrowserError(WebError):
    """The headless browser could not render a page.

    Attributes:
        stage: what was going on (``"find"``, ``"start"``, ``"render"``).
        detail: the message without the prefix.
    """

    def __init__(self, stage: str, detail: str) -> None:
        super().__init__(f"headless browser ({stage}): {detail}")
        self.stage = stage
        self.detail = detail


class WebConfigError(WebError):
    """A web setting is invalid.

    Attributes:
        setting: the variable or option at fault, e.g. ``"CORRAL_WEB_ALLOW"``.
    """

    def __init__(self, setting: str, message: str) -> None:
        super().__init__(f"{setting}: {message}")
        self.setting = setting
