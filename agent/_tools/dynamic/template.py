"""A ``new_tool`` request, checked, and the standalone program rendered from it.

The agent supplies a :class:`ToolDraft`: a name, a description, an argument schema
(a JSON object schema), the body of a Python function and, as a capability it
asks for (and the user sees), the network destinations its calls may reach. :func:`check_draft`
refuses what cannot become a tool (bad name, oversize or non-object schema, code
with NUL characters or too long), :func:`render` wraps the body in a complete
program around ``corral_tools.run()`` (the seed's ``toolkit.Run``), and
:func:`check_compiles` compiles it without running anything, reporting errors at
the line of the body the agent wrote. The program speaks the seed's protocol::

    python tool.py --describe    -> {"name", "description", "parameters"}
    python tool.py --call        <- arguments (JSON) on stdin
                                 -> {"data": ...} or {"error": "..."}

The body sees ``args`` (a dict, the arguments as the model sent them) and
``ToolError`` (raise it for a failure the model should see); it returns text or
any JSON value. Only the standard library is available.
"""

from __future__ import annotations

import re
import textwrap
from typing import Any

import msgspec

from sandbox import PermissionsError, check_network

from .errors import DraftRejected

__all__ = [
    "MAX_CODE",
    "MAX_DESCRIPTION",
    "MAX_SCHEMA",
    "ToolDraft",
    "check_compiles",
    "check_draft",
    "expected_spec",
    "render",
]

#: Longest function body, in characters.
MAX_CODE = 64 * 1024
#: Longest description, in characters.
MAX_DESCRIPTION = 2000
#: Largest argument schema, in bytes of JSON.
MAX_SCHEMA = 16 * 1024

#: As ``corral_tools``: 1-64 ASCII letters, digits, ``_`` and ``-``, not starting with a digit.
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")

_encoder = msgspec.json.Encoder(order="sorted")

_HEAD = """\
# A dynamic tool written by the agent through corral's new_tool.
# A standalone tool program: `--describe` prints its spec, `--call` runs it
# (arguments as JSON on stdin). Generated: edit the catalog entry, not this file.
import json

from corral_tools import ToolError, raw_tool, run

NAME = {name}
DESCRIPTION = {description}
PARAMETERS = json.loads({parameters})


@raw_tool(schema=PARAMETERS, name=NAME, description=DESCRIPTION)
def tool(args):
"""

_TAIL = """

if __name__ == "__main__":
    run(tool)
"""

#: Line of the program where the body starts (1-based).
_BODY_LINE = _HEAD.count("\n") + 1


class ToolDraft(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What ``new_tool`` is asked to create."""

    #: The tool's name, as the model will call it.
    name: str
    #: What the model is told the tool does.
    description: str
    #: JSON Schema of the arguments; must be an object schema.
    parameters: dict[str, Any]
    #: Body of ``def tool(args):`` (indentation is normalised).
    code: str
    #: Destinations its calls may reach through corral's egress proxy (a network list
    #: of names and public addresses; never a local address); none by default.
    network: list[str] = []


def expected_spec(draft: ToolDraft) -> dict[str, Any]:
    """What the program's ``--describe`` must print."""
    return {"name": draft.name, "description": draft.description, "parameters": draft.parameters}


def check_draft(draft: ToolDraft) -> ToolDraft:
    """``draft`` checked, with its code dedented and its trailing blank lines dropped.

    Raises:
        DraftRejected: naming the field at fault and why.
    """
    name = draft.name
    if not _NAME.match(name):
        raise DraftRejected(
            name, "name", "use 1-64 letters, digits, _ or -, starting with a letter or _"
        )
    description = draft.description.strip()
    if not description:
        raise DraftRejected(name, "description", "must not be empty")
    if len(description) > MAX_DESCRIPTION:
        raise DraftRejected(name, "description", f"longer than {MAX_DESCRIPTION} characters")
    if any(ord(c) < 32 and c not in "\n\t" for c in description):
        raise DraftRejected(name, "description", "contains control characters")
    if draft.parameters.get("type") != "object":
        raise DraftRejected(name, "parameters", 'must be a JSON object schema ("type": "object")')
    size = len(_encoder.encode(draft.parameters))
    if size > MAX_SCHEMA:
        raise DraftRejected(name, "parameters", f"{size} bytes of JSON; at most {MAX_SCHEMA}")
    code = textwrap.dedent(draft.code.replace("\r\n", "\n")).rstrip()
    if not code.strip():
        raise DraftRejected(name, "code", "the function body is empty")
    if len(code) > MAX_CODE:
        raise DraftRejected(name, "code", f"longer than {MAX_CODE} characters")
    if "\x00" in code:
        raise DraftRejected(name, "code", "contains NUL characters")
    try:
        # No unsafe here: the model may not grant itself this machine or its network.
        network, _ = check_network(draft.network, (), "network")
    except PermissionsError as exc:
        raise DraftRejected(name, exc.field, exc.message) from None
    return ToolDraft(
        name=name,
        description=description,
        parameters=draft.parameters,
        code=code,
        network=network if isinstance(network, list) else [],
    )


def render(draft: ToolDraft) -> str:
    """The complete program for a checked ``draft`` (see the module docstring).

    Every value is written as a Python literal (``repr``), so nothing in the name,
    description or schema can become code; the body is indented into the function.
    """
    head = _HEAD.format(
        name=repr(draft.name),
        description=repr(draft.description),
        parameters=repr(_encoder.encode(draft.parameters).decode()),
    )
    body = textwrap.indent(draft.code, "    ", lambda line: True)
    return head + body + "\n" + _TAIL


def check_compiles(draft: ToolDraft, source: str) -> None:
    """Compile ``source`` (nothing runs); errors name the line of the body.

    Raises:
        DraftRejected: a syntax error, or code too deeply nested to compile.
    """
    try:
        compile(source, f"<dynamic tool {draft.name}>", "exec", dont_inherit=True)
    except SyntaxError as exc:
        line = (exc.lineno or _BODY_LINE) - _BODY_LINE + 1
        where = f"line {line}: " if line >= 1 else ""
        raise DraftRejected(draft.name, "code", f"{where}{exc.msg}") from None
    except (ValueError, RecursionError, MemoryError) as exc:
        raise DraftRejected(draft.name, "code", f"does not compile: {exc!r}") from None
