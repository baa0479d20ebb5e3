"""Render a JavaScript page in headless Chromium and return its ``innerText``.

One call, one browser: :meth:`PageRenderer.render` starts Chromium with a fresh
profile in a temporary directory, drives it over ``--remote-debugging-pipe``
(:mod:`.cdp`), loads the page, lets its scripts run for a settle period after the
load event, reads ``document.body.innerText``, and then kills the browser's
whole process group (and what left it), reaps it and deletes the profile, whatever
happened (success, error, timeout, cancellation): the browser runs on the
supervisor's child helper (:func:`supervisor.lowlevel.open_child`).

**Every request the page makes goes through the network guard.** The browser
intercepts all requests of all its targets (``Fetch.enable`` on the browser
session: documents, iframes, scripts, XHR, workers) and corral answers each one
itself with :func:`~.client.fetch_checked`, so the same pre-flight and dial-time
checks apply as to the plain fetch, and a refused request fails inside the page
as "blocked by client". The browser needs no network of its own and gets none:

* with bubblewrap it runs in the sandbox with a fresh, empty network namespace
  (the launch request's ``private_network``), the profile as the only writable
  path, and the sandbox's process, memory and file limits. The sandbox's seccomp
  filter is the variant that allows unix sockets, which Chromium needs for its
  own processes; with no network namespace to reach and only the profile and a
  private ``/tmp`` writable, there is nothing for them to reach;
* without bubblewrap (``--sandbox off``, no backend, or another backend such as
  macOS's ``sandbox-exec``, which has not been made to hold Chromium) rendering is
  **refused** unless the user allows it (``CORRAL_BROWSER_UNSANDBOXED=1``,
  :attr:`WebConfig.browser_unsandboxed`); allowed, it runs as a plain process
  group, with its host resolver mapping every name to "not found" and a proxy
  address that refuses every connection, so an HTTP request that escaped
  interception would still fail. ``--sandbox required`` refuses it whatever the
  setting.

**WebRTC is off in every mode.** A page's ``RTCPeerConnection`` sends STUN and
ICE over UDP to any address it names, IP literals included: fetch interception
does not see it, and neither the dead proxy nor the "not found" resolver carries
UDP. The browser is told (command line and the profile's preferences) to use no
UDP but through the proxy (``disable_non_proxied_udp``), so it gathers no
candidate and sends nothing; QUIC is off too.

Chromium's own sandbox is turned off (``--no-sandbox``) inside bubblewrap (which
forbids the nested user namespaces it would need) and when running as root (it
refuses to start otherwise).
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import os
import shutil
import socket
import subprocess
import tempfile
import typing
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import msgspec
import trio

from sandbox import LaunchPlan, LaunchRequest, Limits, Permissions, Sandbox
from sandbox.log import get_logger
from supervisor import NetGuard
from supervisor.lowlevel import open_child

from .cdp import CdpConnection, CdpEvent
from .client import Fetched, fetch_checked
from .config import WebConfig
from .errors import BlockedTarget, BrowserError, WebError
from .guard import open_client

__all__ = ["PageRenderer", "Rendered", "find_chromium"]

log = get_logger()

#: Where Chromium usually lives. Debian's ``/usr/bin/chromium`` is a shell wrapper;
#: the binary behind it starts faster and is what the process group kill sees.
_CANDIDATES = (
    "/usr/lib/chromium/chromium",
    "chromium",
    "chromium-browser",
    "google-chrome-stable",
    "google-chrome",
    "/Applications/Chromium.app/Contents/MacOS/Chromium",
    "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome",
)
_FLAGS = (
    "--headless=new",
    "--remote-debugging-pipe",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-gpu",
    "--disable-extensions",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-default-apps",
    "--disable-sync",
    "--disable-breakpad",
    "--metrics-recording-only",
    "--mute-audio",
    "--hide-scrollbars",
    "--password-store=basic",
    "--use-mock-keychain",
    # WebRTC: no UDP but through the proxy (a dead one), so no candidate is
    # gathered and nothing is sent; the profile's preferences say the same.
    "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--disable-quic",
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--proxy-bypass-list=<-loopback>",
)
#: Response headers that describe the bytes on the wire, not the decoded body we hand over.
_WIRE_HEADERS = frozenset(
    {"content-encoding", "content-length", "transfer-encoding", "connection", "keep-alive"}
)
#: Request headers the guarded client sets itself.
_OWN_HEADERS = frozenset({"host", "accept-encoding", "connection", "content-length"})
_INNER_TEXT = """(() => {
  const body = document.body;
  const text = body ? body.innerText : "";
  return {title: document.title || "", text: text.slice(0, %d), length: text.length};
})()"""
#: Page requests answered at once, and in total.
_PARALLEL = 6
_MAX_REQUESTS = 300
#: Bytes of all sub-resources of one render together.
_MAX_TOTAL_BYTES = 40 * 1024 * 1024
#: Seconds kept back from the render budget for extracting the text.
_EXTRACT_MARGIN = 2.0
_CLOSE_GRACE = 1.0
#: The browser's stderr, inside its profile directory.
_LOG = "chromium.log"
#: Written as the fresh profile's ``Default/Preferences`` before the browser starts.
_WEBRTC = {"ip_handling_policy": "disable_non_proxied_udp", "multiple_routes_enabled": False}
_PREFERENCES = {"webrtc": {**_WEBRTC, "nonproxied_udp_enabled": False}}


def find_chromium(configured: str | None = None) -> str | None:
    """The Chromium binary to use: ``configured`` (a path or a name on PATH), else the first found.

    Returns None when rendering is ``"off"`` or no binary is found.
    """
    if configured is not None:
        if configured.lower() == "off":
            return None
        return shutil.which(configured)
    for candidate in _CANDIDATES:
        found = shutil.which(candidate)
        if found:
            return found
    return None


class Rendered(msgspec.Struct, frozen=True, kw_only=True):
    """What the browser saw."""

    title: str
    text: str
    #: ``innerText`` length before it was cut to the size asked for.
    length: int
    #: Requests the page made (all answered or refused by corral).
    requests: int
    #: Requests the guard refused, as ``"URL: reason"`` (the first few).
    blocked: list[str]
    #: True when the browser ran inside a sandbox backend.
    sandboxed: bool


@contextlib.contextmanager
def _lone_web_error() -> Iterator[None]:
    """Let a web error raised inside a nursery surface as itself, not as a group."""
    try:
        yield
    except BaseExceptionGroup as group:
        leaves: list[BaseException] = []
        pending: list[BaseException] = [group]
        while pending:
            item = pending.pop()
            if isinstance(item, BaseExceptionGroup):
                pending.extend(item.exceptions)
            else:
                leaves.append(item)
        if leaves and all(isinstance(leaf, WebError) for leaf in leaves):
            raise leaves[-1] from None
        raise


def _high_fd(fd: int) -> int:
    """``fd`` moved to 10 or above, inheritable, so the shell can renumber it to 3 or 4."""
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
    os.close(fd)
    return moved


@typing.final
class _Interceptor:
    """Answers the page's paused requests through the guard (one per render)."""

    def __init__(
        self,
        cdp: CdpConnection,
        guard: NetGuard,
        client: httpx.AsyncClient,
        config: WebConfig,
        prefetched: Fetched | None,
        user_agent: str,
    ) -> None:
        self._cdp = cdp
        self._user_agent = user_agent
        self._guard = guard
        self._client = client
        self._config = config
        self._prefetched = prefetched
        self._limiter = trio.CapacityLimiter(_PARALLEL)
        self.requests = 0
        self.bytes = 0
        self.blocked: list[str] = []

    def __repr__(self) -> str:
        return f"<_Interceptor requests={self.requests} blocked={len(self.blocked)}>"

    async def handle(self, params: dict[str, Any]) -> None:
        request_id = str(params.get("requestId", ""))
        request = params.get("request") or {}
        url = str(request.get("url", ""))
        self.requests += 1
        try:
            if self.requests > _MAX_REQUESTS or self.bytes > _MAX_TOTAL_BYTES:
                raise WebError(f"the page exceeded {_MAX_REQUESTS} requests or its byte budget")
            async with self._limiter:
                fetched = await self._fetch(request, url)
            self.bytes += len(fetched.body)
        except BlockedTarget as exc:
            if len(self.blocked) < 10:
                via = "" if exc.target in url else f" (redirected to {exc.target})"
                self.blocked.append(f"{url}{via}: {exc.reason}")
            await self._fail(request_id, "BlockedByClient")
            return
        except WebError as exc:
            log.debug("browser_request_failed", url=url, error=str(exc))
            await self._fail(request_id, "Failed")
            return
        headers = [{"name": k, "value": v} for k, v in fetched.headers if k not in _WIRE_HEADERS]
        with contextlib.suppress(WebError):
            await self._cdp.call(
                "Fetch.fulfillRequest",
                {
                    "requestId": request_id,
                    "responseCode": fetched.status,
                    "responsePhrase": fetched.reason or "OK",
                    "responseHeaders": headers,
                    "body": base64.b64encode(fetched.body).decode("ascii"),
                },
            )

    async def _fetch(self, request: dict[str, Any], url: str) -> Fetched:
        method = str(request.get("method", "GET"))
        prefetched = self._prefetched
        if prefetched is not None and method == "GET" and url == prefetched.url:
            self._prefetched = None  # serve the page we already have, once
            return prefetched
        headers = {
            str(k).lower(): str(v)
            for k, v in (request.get("headers") or {}).items()
            if str(k).lower() not in _OWN_HEADERS
        }
        # Say who is asking, without hiding the browser some sites expect.
        headers["user-agent"] = f"{headers.get('user-agent', '')} {self._user_agent}".strip()
        post = request.get("postData")
        fetched = await fetch_checked(
            self._client,
            self._guard,
            url,
            method=method,
            headers=headers,
            content=str(post).encode() if post is not None else None,
            max_bytes=self._config.max_bytes,
            max_redirects=self._config.max_redirects,
        )
        if fetched.truncated:
            raise WebError(f"{url}: larger than {self._config.max_bytes} bytes")
        return fetched

    async def _fail(self, request_id: str, reason: str) -> None:
        with contextlib.suppress(WebError):
            await self._cdp.call(
                "Fetch.failRequest", {"requestId": request_id, "errorReason": reason}
            )


@typing.final
class PageRenderer:
    """Renders pages in a fresh headless Chromium per call.

    Args:
        guard: the network guard every page request goes through.
        config: limits and timeouts (``chromium``, ``settle``, ``max_bytes`` ...).
        sandbox: the sandbox backend to run the browser in, or None.
        require_sandbox: refuse to render without a sandbox.
        user_agent: appended to the browser's ``User-Agent`` on the page's requests.
    """

    def __init__(
        self,
        guard: NetGuard,
        config: WebConfig,
        *,
        sandbox: Sandbox | None = None,
        require_sandbox: bool = False,
        user_agent: str = "",
    ) -> None:
        self._guard = guard
        self._config = config
        # Only bubblewrap has been made to hold Chromium (a private network namespace
        # with unix sockets); other backends render unsandboxed, or not at all when a
        # sandbox is required.
        self._sandbox = sandbox if sandbox is not None and sandbox.backend == "bwrap" else None
        self._require_sandbox = require_sandbox
        self._user_agent = user_agent
        self.binary = find_chromium(config.chromium)

    def __repr__(self) -> str:
        backend = self._sandbox.backend if self._sandbox else "none"
        return f"<PageRenderer binary={self.binary!r} sandbox={backend}>"

    def check(self) -> str:
        """The binary, when a render can be attempted at all.

        Raises:
            BrowserError: no Chromium was found, or a sandbox is required and missing.
        """
        if self.binary is None:
            raise BrowserError(
                "find",
                "no Chromium found; install it (Debian/Ubuntu: apt-get install chromium) "
                "or point CORRAL_CHROMIUM at the binary",
            )
        if self._sandbox is None and self._require_sandbox:
            raise BrowserError(
                "start", "--sandbox required, but no sandbox backend is available for the browser"
            )
        if self._sandbox is None and not self._config.browser_unsandboxed:
            raise BrowserError(
                "start",
                "rendering is off without bubblewrap (the page would run as you, with only "
                "corral's request interception between it and your network); install "
                "bubblewrap, or allow it with CORRAL_BROWSER_UNSANDBOXED=1",
            )
        return self.binary

    async def render(
        self, url: str, *, max_chars: int, prefetched: Fetched | None = None
    ) -> Rendered:
        """Load ``url``, let it settle, and return its title and ``innerText``.

        Args:
            url: the page (already checked by the caller; every request is checked again).
            max_chars: characters of text returned at most.
            prefetched: the page's response from the plain fetch, served to the
                browser instead of fetching the document again.

        Raises:
            BrowserError: no Chromium, it would not start, crashed, or the page
                could not be loaded.

        Cancellation: the browser's process group is killed and reaped, and its
        profile deleted, before ``Cancelled`` propagates.
        """
        binary = self.check()
        profile = await trio.to_thread.run_sync(_make_profile)
        try:
            timeout = httpx.Timeout(self._config.read_timeout, connect=self._config.connect_timeout)
            async with (
                open_client(self._guard, timeouts=timeout, max_connections=_PARALLEL) as client,
                self._launch(binary, profile) as cdp,
            ):
                with _lone_web_error():
                    async with trio.open_nursery() as nursery:
                        await nursery.start(cdp.run)
                        interceptor = _Interceptor(
                            cdp, self._guard, client, self._config, prefetched, self._user_agent
                        )
                        loaded = trio.Event()
                        nursery.start_soon(self._dispatch, cdp, interceptor, nursery, loaded)
                        title, text, length = await self._load(cdp, url, loaded, max_chars)
                        with trio.move_on_after(_CLOSE_GRACE), contextlib.suppress(WebError):
                            await cdp.call("Browser.close")  # let it tidy up; killed anyway
                        nursery.cancel_scope.cancel()
        except BrowserError as exc:
            raise BrowserError(exc.stage, exc.detail + _tail(profile)) from None
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(lambda: shutil.rmtree(profile, ignore_errors=True))
        return Rendered(
            title=title,
            text=text,
            length=length,
            requests=interceptor.requests,
            blocked=interceptor.blocked,
            sandboxed=self._sandbox is not None,
        )

    async def _dispatch(
        self,
        cdp: CdpConnection,
        interceptor: _Interceptor,
        nursery: trio.Nursery,
        loaded: trio.Event,
    ) -> None:
        event: CdpEvent
        async for event in cdp.events:
            if event.method == "Fetch.requestPaused":
                nursery.start_soon(interceptor.handle, event.params)
            elif event.method == "Page.loadEventFired":
                loaded.set()

    async def _load(
        self, cdp: CdpConnection, url: str, loaded: trio.Event, max_chars: int
    ) -> tuple[str, str, int]:
        await cdp.call("Fetch.enable", {"patterns": [{"urlPattern": "*"}]})
        target = await cdp.call("Target.createTarget", {"url": "about:blank"})
        attached = await cdp.call(
            "Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}
        )
        session = str(attached["sessionId"])
        await cdp.call("Page.enable", session=session)
        navigated = await cdp.call("Page.navigate", {"url": url}, session=session)
        if navigated.get("errorText"):
            raise BrowserError("render", f"cannot load {url}: {navigated['errorText']}")
        # The load event can take long on a heavy page; render what is there by
        # the time the budget runs out.
        wait = self._config.browser_timeout - self._config.settle - _EXTRACT_MARGIN - 3.0
        with trio.move_on_after(max(wait, 1.0)):
            await loaded.wait()
        await trio.sleep(self._config.settle)
        result = await cdp.call(
            "Runtime.evaluate",
            {"expression": _INNER_TEXT % max(max_chars, 1), "returnByValue": True},
            session=session,
        )
        value = (result.get("result") or {}).get("value") or {}
        if not isinstance(value, dict):
            raise BrowserError("render", "the page's text could not be read")
        return str(value.get("title", "")), str(value.get("text", "")), int(value.get("length", 0))

    def _argv(self, binary: str, profile: str, fds: list[int], dead_proxy: int) -> list[str]:
        # Chromium wants the protocol pipe on descriptors 3 and 4 exactly; the shell
        # renumbers the inherited ends, then becomes Chromium.
        read_fd, write_fd = fds
        script = f'exec "$0" "$@" 3<&{read_fd} 4>&{write_fd} {read_fd}<&- {write_fd}>&-'
        flags = [
            *_FLAGS,
            f"--user-data-dir={profile}",
            f"--proxy-server=http://127.0.0.1:{dead_proxy}",
        ]
        if self._sandbox is not None or os.geteuid() == 0:
            flags.append("--no-sandbox")
        return [shutil.which("bash") or "/bin/bash", "-c", script, binary, *flags, "about:blank"]

    def _plan(self, argv: list[str], profile: str, pass_fds: list[int]) -> LaunchPlan:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": profile, "LANG": "C.UTF-8"}
        if self._sandbox is None:
            return LaunchPlan(
                argv=argv, env=env, cwd=profile, backend="none", sandboxed=False, pass_fds=pass_fds
            )
        read_only = [p for p in ("/etc/fonts",) if os.path.isdir(p)]
        request = LaunchRequest(
            name="chromium",
            argv=argv,
            env=env,
            ext_dir=profile,
            data_dir=None,
            permissions=Permissions(
                # So that the seccomp filter lets Chromium create unix sockets, in a
                # network namespace of its own (private_network): no network at all.
                network=True,
                read_only=read_only,
                read_write=[profile],
                data_dir=False,
                limits=Limits(memory_mb=2048, processes=512, open_files=4096, tmp_mb=256),
            ),
            private_network=True,
            pass_fds=pass_fds,
        )
        try:
            return self._sandbox.plan(request)
        except Exception as exc:  # a backend failure becomes an error result
            raise BrowserError("start", f"the sandbox cannot run the browser: {exc}") from exc

    @asynccontextmanager
    async def _launch(self, binary: str, profile: str) -> AsyncIterator[CdpConnection]:
        browser_reads, to_browser = os.pipe()
        from_browser, browser_writes = os.pipe()
        child_fds = [_high_fd(browser_reads), _high_fd(browser_writes)]
        # A port nobody listens on (bound, never listening): connections to it are
        # refused, and no one else can take it while the browser runs.
        dead = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        log_fd = -1
        started = False
        try:
            dead.bind(("127.0.0.1", 0))
            log_fd = await trio.to_thread.run_sync(_open_log, profile)
            argv = self._argv(binary, profile, child_fds, dead.getsockname()[1])
            plan = self._plan(argv, profile, child_fds)
            # On the supervisor's child helper: whatever ends the render, the browser's
            # group and what left it are killed and reaped, and the plan released.
            async with open_child(
                self._sandbox,
                plan,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log_fd,
            ) as child:
                started = True
                for fd in (*child_fds, log_fd):
                    os.close(fd)
                child_fds, log_fd = [], -1
                log.info("browser_started", pid=child.pid, sandbox=plan.backend)
                cdp = CdpConnection(
                    trio.lowlevel.FdStream(to_browser), trio.lowlevel.FdStream(from_browser)
                )
                to_browser = from_browser = -1
                try:
                    yield cdp
                finally:
                    with trio.CancelScope(shield=True):
                        await cdp.aclose()
            log.info("browser_stopped", pid=child.pid, returncode=child.returncode)
        except OSError as exc:
            if started:
                raise
            raise BrowserError("start", f"cannot run {binary}: {exc.strerror}") from exc
        finally:
            dead.close()
            for fd in (*child_fds, log_fd, to_browser, from_browser):
                if fd >= 0:
                    with contextlib.suppress(OSError):
                        os.close(fd)


def _make_profile() -> str:
    """A fresh, private profile directory with WebRTC's UDP turned off."""
    profile = tempfile.mkdtemp(prefix="corral-chromium-")
    try:
        os.mkdir(os.path.join(profile, "Default"), 0o700)
        with open(os.path.join(profile, "Default", "Preferences"), "wb") as fh:
            fh.write(msgspec.json.encode(_PREFERENCES))
    except BaseException:
        shutil.rmtree(profile, ignore_errors=True)
        raise
    return profile


def _open_log(profile: str) -> int:
    """The browser's stderr: a new file in its profile (blocking)."""
    path = os.path.join(profile, _LOG)
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)


def _tail(profile: str, lines: int = 3) -> str:
    """The last lines of the browser's log, as a suffix for an error message."""
    try:
        with open(os.path.join(profile, _LOG), "rb") as log_file:
            log_file.seek(0, os.SEEK_END)
            log_file.seek(max(0, log_file.tell() - 4096))
            text = log_file.read().decode("utf-8", "replace")
    except OSError:
        return ""
    kept = [line for line in text.splitlines() if line.strip() and "dbus" not in line][-lines:]
    return "; browser log: " + " | ".join(kept) if kept else ""
