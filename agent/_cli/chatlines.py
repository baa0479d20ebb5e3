"""What chat prints about the session: the ``/ext`` listing and the last exchange
of a resumed session. Every line is terminal-safe (the text is an extension's or a
saved session's)."""

from __future__ import annotations

from supervisor import ExtensionInfo

from .._messages import Message, TextContent
from .safe_text import visible

__all__ = ["format_extensions", "last_exchange"]

#: Lines of each message :func:`last_exchange` shows at most.
_EXCHANGE_LINES = 6


def format_extensions(infos: list[ExtensionInfo]) -> list[str]:
    """``/ext``: one block per extension with state, sandbox and stats (terminal-safe)."""
    if not infos:
        return ["no extensions loaded (install some, or pass -e PATH)"]
    lines: list[str] = []
    for info in infos:
        sandbox = f"sandboxed ({info.backend})" if info.sandboxed else "UNSANDBOXED"
        pid = f"pid {info.pid}" if info.pid is not None else "not running"
        head = f"{info.name} {info.version} — {info.state}, {pid}, {sandbox} [{info.source}]"
        lines.append(visible(head))
        if info.tools or info.commands:
            tools = ", ".join(info.tools) or "-"
            commands = ", ".join("/" + c for c in info.commands) or "-"
            lines.append(visible(f"    tools: {tools}; commands: {commands}"))
        st = info.stats
        figures = [f"calls {st.calls}", f"errors {st.errors}", f"timeouts {st.timeouts}"]
        figures += [f"restarts {st.restarts}", f"bad frames {st.bad_frames}"]
        if st.latency_p50_ms is not None:
            figures.append(f"p50 {st.latency_p50_ms:.1f} ms")
        if st.latency_p95_ms is not None:
            figures.append(f"p95 {st.latency_p95_ms:.1f} ms")
        if st.rss_bytes is not None:
            figures.append(f"rss {st.rss_bytes / 2**20:.1f} MiB")
        if st.uptime_s is not None:
            figures.append(f"up {st.uptime_s:.0f} s")
        lines.append("    " + ", ".join(figures))
        if info.problem:
            lines.append(f"    problem: {visible(info.problem)}")
    return lines


def _text(message: Message) -> str:
    return "\n".join(b.text for b in message.content if isinstance(b, TextContent)).strip()


def _clipped(text: str) -> list[str]:
    lines = text.splitlines()
    if len(lines) > _EXCHANGE_LINES:
        lines = [
            *lines[: _EXCHANGE_LINES - 1],
            f"… ({len(lines) - _EXCHANGE_LINES + 1} more lines)",
        ]
    return [visible(line) for line in lines]


def last_exchange(messages: list[Message]) -> list[str]:
    """A resumed session's last exchange: the last prompt and the answer's text after
    it, a few lines of each (terminal-safe); nothing when there is no prompt."""
    for i in range(len(messages) - 1, -1, -1):
        asked = _text(messages[i]) if messages[i].role == "user" else ""
        if asked:
            break
    else:
        return []
    answers = [_text(m) for m in messages[i + 1 :] if m.role == "assistant"]
    answer = next((a for a in reversed(answers) if a), "")
    lines = [
        f"you › {line}" if n == 0 else f"      {line}" for n, line in enumerate(_clipped(asked))
    ]
    return lines + _clipped(answer)
