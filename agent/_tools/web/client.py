"""One guarded HTTP request: every hop checked, the body read up to a byte cap.

:func:`fetch_checked` pre-flights the URL with the network guard,
sends it on a guarded client (so the address is checked again at dial time),
follows redirects itself, pre-flighting each hop, and reads the body as a stream
until it ends or reaches the cap; the rest is never downloaded. The body is
decompressed here, chunk by chunk and bounded by the same cap, so a small
compressed response cannot expand into gigabytes in memory; only gzip and
deflate are asked for and accepted.
"""

from __future__ import annotations

import zlib
from collections.abc import Awaitable, Callable

import httpx
import msgspec

from supervisor import NetGuard

from ..._providers.http import finish_chain
from .errors import FetchFailed
from .guard import check_url, redirect_target

__all__ = ["ACCEPT_ENCODING", "Fetched", "fetch_checked", "read_capped"]

#: Request headers dropped when a redirect leaves the origin.
_ORIGIN_BOUND = ("authorization", "cookie", "proxy-authorization")
#: The only content codings :func:`fetch_checked` can decode within the cap.
ACCEPT_ENCODING = "gzip, deflate"


class Fetched(msgspec.Struct, frozen=True, kw_only=True):
    """A response, read."""

    #: The final URL, after redirects.
    url: str
    status: int
    reason: str
    #: Response headers, lower-case names, in order.
    headers: list[tuple[str, str]]
    #: The decoded body, at most the cap.
    body: bytes
    #: True when the body was longer than the cap and was cut.
    truncated: bool = False
    #: URLs redirected to, in order.
    redirects: list[str] = []

    @property
    def content_type(self) -> str:
        """The ``Content-Type`` header, or ``""``."""
        return next((v for k, v in self.headers if k == "content-type"), "")


async def read_capped(response: httpx.Response, cap: int) -> tuple[bytes, bool]:
    """A streamed response's body, decoded, at most ``cap`` bytes, and whether it was cut.

    Raises:
        FetchFailed: an unsupported or corrupt content encoding.

    Cancellation: reading stops; the caller closes the response.
    """
    coding = response.headers.get("content-encoding", "identity").strip().lower()
    if coding in ("", "identity"):
        inflater = None
    elif coding in ("gzip", "x-gzip", "deflate"):
        inflater = zlib.decompressobj(32 + zlib.MAX_WBITS)  # gzip or zlib header
    else:
        raise FetchFailed(str(response.url), f"unsupported content encoding {coding!r}")
    body = bytearray()
    chunks = response.aiter_raw()
    try:
        async for raw in chunks:
            if inflater is None:
                body += raw[: cap + 1 - len(body)]
            else:
                try:
                    data = raw
                    while data and len(body) <= cap:
                        body += inflater.decompress(data, cap + 1 - len(body))
                        data = inflater.unconsumed_tail
                except zlib.error as exc:
                    raise FetchFailed(str(response.url), f"corrupt {coding} body: {exc}") from exc
            if len(body) > cap:
                return bytes(body[:cap]), True
    finally:
        # Stopping early leaves httpx's generator chain suspended; finish it.
        await finish_chain(chunks)
    return bytes(body), False


def _describe(exc: httpx.HTTPError) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return f"timed out ({type(exc).__name__})"
    if isinstance(exc, httpx.ConnectError):
        return f"cannot connect: {exc}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


async def fetch_checked(
    client: httpx.AsyncClient,
    guard: NetGuard,
    url: str,
    *,
    max_bytes: int,
    max_redirects: int = 5,
    method: str = "GET",
    headers: dict[str, str] | None = None,
    content: bytes | None = None,
    on_redirect: Callable[[str], Awaitable[None]] | None = None,
) -> Fetched:
    """Send one request through ``guard`` and read its response up to ``max_bytes``.

    Redirects are followed by this function, at most ``max_redirects``, each hop
    pre-flighted (and dial-time checked) like the first. 303, and 301/302 after a
    POST, continue as GET without a body, as browsers do.

    Args:
        client: a client from :func:`~.guard.open_client`.
        guard: the guard behind ``client``.
        url: where to send it.
        max_bytes: decoded body bytes kept; reading stops there.
        max_redirects: hops followed at most.
        method: the HTTP method.
        headers: extra request headers.
        content: request body.
        on_redirect: awaited with each new URL before it is requested.

    Raises:
        BlockedTarget: the guard refused the URL or a hop.
        FetchFailed: invalid URL, unresolvable host, connection failure, timeout,
            too many redirects, or an undecodable body.

    Cancellation: the response is closed and the request abandoned.
    """
    current = await check_url(guard, url)
    hops: list[str] = []
    send_headers = {"accept-encoding": ACCEPT_ENCODING}
    send_headers.update({k.lower(): v for k, v in (headers or {}).items()})
    while True:
        try:
            request = client.build_request(method, current, headers=send_headers, content=content)
            response = await client.send(request, stream=True)
            try:
                target = redirect_target(
                    current, response.status_code, response.headers.get("location")
                )
                if target is None:
                    body, truncated = await read_capped(response, max_bytes)
                    return Fetched(
                        url=str(current),
                        status=response.status_code,
                        reason=response.reason_phrase,
                        headers=[(k.lower(), v) for k, v in response.headers.multi_items()],
                        body=body,
                        truncated=truncated,
                        redirects=hops,
                    )
            finally:
                await response.aclose()
        except httpx.HTTPError as exc:
            raise FetchFailed(str(current), _describe(exc)) from exc
        if len(hops) >= max_redirects:
            raise FetchFailed(url, f"more than {max_redirects} redirects (last: {target})")
        if response.status_code == 303 or (response.status_code in (301, 302) and method == "POST"):
            method, content = "GET", None
        if (target.scheme, target.host, target.port) != (
            current.scheme,
            current.host,
            current.port,
        ):
            # As browsers do: credentials meant for one origin never follow to another.
            for name in _ORIGIN_BOUND:
                send_headers.pop(name, None)
        current = await check_url(guard, target)
        hops.append(str(current))
        if on_redirect is not None:
            await on_redirect(str(current))
