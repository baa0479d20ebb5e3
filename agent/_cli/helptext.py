"""The parts every ``--help`` ends with: examples, environment variables, exit codes.

Click rewraps help paragraphs; a paragraph that starts with ``\\b`` is kept as
written, which is what tables of commands and variables need.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["AGENT_ENV", "COMMON_ENV", "epilog"]

#: Variables every command reads.
COMMON_ENV: tuple[tuple[str, str], ...] = (
    ("CORRAL_HOME", "corral's state (default ~/.local/state/corral)"),
    ("CORRAL_LOG", "log level: debug, info, warning, error"),
    ("NO_COLOR", "set to anything: no colours (as --color never)"),
)

#: Variables the commands that run an agent read as well.
AGENT_ENV: tuple[tuple[str, str], ...] = (
    *COMMON_ENV,
    ("XDG_CONFIG_HOME", "where your config file is: $XDG_CONFIG_HOME/corral/config.toml"),
    ("CORRAL_PROVIDER", "default for --provider"),
    ("OPENAI_API_KEY", "key of --provider openai (also OPENAI_BASE_URL)"),
    ("ANTHROPIC_API_KEY", "key of --provider anthropic (also ANTHROPIC_BASE_URL)"),
    ("CORRAL_MAX_TOKENS", "default for --max-tokens"),
    ("CORRAL_CONNECT_TIMEOUT", "default for --connect-timeout (seconds)"),
    ("CORRAL_READ_TIMEOUT", "default for --read-timeout (seconds)"),
    ("CORRAL_RETRIES", "default for --retries"),
    ("CORRAL_RETRY_MAX_TIME", "default for --retry-max-time (seconds)"),
    ("CORRAL_MCP_ALLOW", "addresses MCP HTTP servers may use (as --mcp-allow)"),
    ("CORRAL_DYNAMIC_CATALOG", "another dynamic tool catalog (*.json: the JSON store)"),
    ("CORRAL_PROTECT", "more paths bash/write/edit never change (e.g. .envrc:.vscode/)"),
    ("CORRAL_BROWSER_UNSANDBOXED", "1: web_fetch may render without bubblewrap"),
)


def _table(title: str, rows: Sequence[tuple[str, str]]) -> str:
    width = max(len(left) for left, _ in rows)
    body = "\n".join(f"  {left.ljust(width)}  {right}".rstrip() for left, right in rows)
    return f"\b\n{title}:\n{body}"


def epilog(
    *,
    examples: Sequence[tuple[str, str]],
    env: Sequence[tuple[str, str]] = COMMON_ENV,
    exit_codes: Sequence[tuple[int, str]] = ((0, "success"), (1, "failure (one line says why)")),
) -> str:
    """The end of a command's ``--help``.

    Args:
        examples: command lines, each with what it does (shown as a comment above it).
        env: environment variables the command reads, with what for.
        exit_codes: exit statuses and their meaning; 2 (a usage mistake) is added.
    """
    codes = [(str(code), text) for code, text in exit_codes]
    if not any(code == "2" for code, _ in codes):
        codes.append(("2", "usage mistake (unknown option, bad value)"))
    parts = []
    if examples:
        lines = [f"  # {what}\n  {cmd}" if what else f"  {cmd}" for cmd, what in examples]
        parts.append("\b\nExamples:\n" + "\n".join(lines))
    parts.append(_table("Environment", env))
    parts.append(_table("Exit status", sorted(codes, key=lambda c: int(c[0]))))
    return "\n\n".join(parts)
