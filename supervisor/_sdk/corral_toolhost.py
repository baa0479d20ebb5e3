"""corral_toolhost: the Python tool-host runner (tool-host protocol v1, NDJSON over stdio).

Start it as ``python -m corral_toolhost`` with this directory on ``PYTHONPATH``
(``-m`` runs it from its cached bytecode; running the file as a script compiles it
at every start). corral starts it with ``-S`` and an import instead (see
:func:`lean_site`: the site directories without their ``.pth`` files, until a tool
module needs them). The client then sends ``init({"config": {"modules": [...]}})``;
the runner imports each named tool module (a ``.py`` path, relative to the working
directory, or an importable module name) and serves the :mod:`corral_tools` tools
it finds there.

A tool module provides:

* tools: every public module attribute that is a :class:`corral_tools.Tool`, in
  definition order (a later tool with a taken name is skipped and logged);
* optional hooks, module-level functions named after the protocol's methods:
  ``init(config)`` (returns a dict merged into the host's state),
  ``get_config_schema()``, ``get_ui_elements()``, ``get_tags(config, models)``,
  ``required_tags()``, ``format_tool_result(result, state)``,
  ``format_tool_call_preview(tool_name, arguments, state)`` and
  ``to_display_format(text, result, state)``. A hook may declare fewer parameters;
  it gets the ones it names.

How the hooks of several modules combine: ``get_ui_elements`` concatenates,
``get_tags`` / ``required_tags`` unite, ``get_config_schema`` adds the modules'
properties to the runner's own schema (the ``modules`` key; before ``init`` only
that). The three ``format``/``display`` hooks are asked in turn (for a preview, the
tool's own module first, then the others in config order) and the first answer
that is not None wins; when every hook says None the answer is ``null``: "render it
your default way". A method no module provides is answered with an
``UnknownMethod`` error, so the client can stop asking.

Guarantees:

* stdout carries protocol lines only. The runner keeps private copies of its stdin
  and stdout descriptors and points descriptors 0 and 1 at ``/dev/null`` and stderr,
  so ``print()``, ``os.write(1, ...)`` and child processes can neither corrupt the
  stream nor steal requests.
* Every request with a readable id gets exactly one response; ``part`` events of a
  call are all written before its response (a part emitted later is dropped).
* ``execute_tool`` calls run on worker threads, so slow calls overlap (a call never
  waits behind another); every other method runs in order on the reading thread
  (keep hooks quick). Tools share the host's state object only when the request
  carries none. A tool whose function takes no ``state`` is listed as
  ``stateless`` and never answers a state (a state it cannot have changed would
  undo the changes of calls beside it).
* Malformed lines, a wrong ``v``, unknown methods, oversize lines (more than 64 MiB)
  and raising tools are answered with an error when the request's id can be read,
  and logged to stderr otherwise; the runner keeps serving. A response that would
  exceed 16 MiB is replaced by a ``ResultTooLarge`` error.
* End of stdin: the runner lets running calls finish (their answers are still
  written), then exits 0.
"""

from __future__ import annotations

import _thread
import os
import sys

# Start-up is an interpreter's floor plus what it imports before init is answered:
# typing, json (which compiles regular expressions), enum and importlib.util (each
# imports collections and functools), threading and queue are not among it. Lines are
# parsed and written with json's C accelerator (_json); the first call starts the
# worker threads (and imports threading then).
TYPE_CHECKING = False
if TYPE_CHECKING:  # the type checker sees the SDK as part of the supervisor package
    import threading
    from collections.abc import Callable
    from importlib.util import module_from_spec as _module_from_spec
    from importlib.util import spec_from_file_location as _spec_from_file_location
    from queue import SimpleQueue
    from types import ModuleType
    from typing import IO, Any, Final, final

    from supervisor._sdk import corral_tools
else:
    import corral_tools

    try:  # what importlib.util re-exports, loaded at every start already
        from _frozen_importlib import module_from_spec as _module_from_spec
        from _frozen_importlib_external import spec_from_file_location as _spec_from_file_location
    except ImportError:
        from importlib.util import module_from_spec as _module_from_spec
        from importlib.util import spec_from_file_location as _spec_from_file_location

    def final(cls):
        return cls


__all__ = [
    "MAX_REQUEST_BYTES",
    "MAX_RESPONSE_BYTES",
    "PROTOCOL_VERSION",
    "ErrorType",
    "ToolHost",
    "main",
]

PROTOCOL_VERSION: Final = 1
MAX_REQUEST_BYTES: Final = 64 << 20
"""A request line longer than this is discarded (answered ``RequestTooLarge``)."""
MAX_RESPONSE_BYTES: Final = 16 << 20
"""A response longer than this is replaced by a ``ResultTooLarge`` error (the client's cap)."""

_SDK_DIR: Final = os.path.dirname(os.path.abspath(__file__))
_ID_HEAD: Final = 4096  # where an unparseable line's id is looked for
_NO_STATE: Final[Any] = object()
_OPTIONAL: Final = (
    "get_config_schema",
    "get_ui_elements",
    "get_tags",
    "required_tags",
    "format_tool_result",
    "format_tool_call_preview",
    "to_display_format",
)
_RUNNER_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "modules": {
            "type": "array",
            "items": {"type": "string", "minLength": 1},
            "minItems": 1,
            "description": "tool modules: .py paths (relative to the working directory) "
            "or importable module names",
        }
    },
    "required": ["modules"],
}


class ErrorType:
    """The ``error.type`` values the runner itself answers with.

    Plain strings, not an enum: importing enum would cost every start (the client's
    enum is ``supervisor._hostwire.HostErrorType``).
    """

    UNKNOWN_METHOD: Final = "UnknownMethod"  # no such method, or no tool module provides it
    INVALID_REQUEST: Final = "InvalidRequest"  # not JSON, not an object, bad method/params
    UNSUPPORTED_VERSION: Final = "UnsupportedVersion"  # v is not 1
    NOT_INITIALIZED: Final = "NotInitialized"  # a method that needs init came first
    INVALID_CONFIG: Final = "InvalidConfig"  # config.modules missing or wrong
    UNKNOWN_TOOL: Final = "UnknownTool"  # execute_tool for a name no module provides
    INVALID_RESULT: Final = "InvalidResult"  # a tool or hook returned something unusable
    REQUEST_TOO_LARGE: Final = "RequestTooLarge"  # longer than MAX_REQUEST_BYTES
    RESULT_TOO_LARGE: Final = "ResultTooLarge"  # longer than MAX_RESPONSE_BYTES


class _Failure(Exception):
    """Raised by a handler: answer the request with this error."""

    def __init__(self, type_: str, detail: str, stack: str = "") -> None:
        super().__init__(detail)
        self.type = type_
        self.detail = detail
        self.stack = stack


def _failure_from(exc: BaseException, where: str = "") -> _Failure:
    """The error answer for ``exc``; its stack starts at the first frame outside the SDK."""
    import traceback

    tb = exc.__traceback__
    while tb is not None and os.path.dirname(tb.tb_frame.f_code.co_filename) == _SDK_DIR:
        tb = tb.tb_next
    stack = "".join(traceback.format_exception(type(exc), exc, tb or exc.__traceback__))
    stack = stack.rstrip()
    detail = f"{where}: {exc}" if where else str(exc)
    return _Failure(type(exc).__name__, detail, stack)


@final
class _Module:
    __slots__ = ("hooks", "module", "name")

    def __init__(self, name: str, module: ModuleType) -> None:
        self.name = name
        self.module = module
        self.hooks: dict[str, Callable[..., Any]] = {
            hook: fn for hook in ("init", *_OPTIONAL) if callable(fn := getattr(module, hook, None))
        }


def _call_hook(fn: Callable[..., Any], **params: Any) -> Any:
    """Call ``fn`` with the parameters it declares (all of them if it takes ``**kwargs``)."""
    code = getattr(fn, "__code__", None)
    if code is not None and not code.co_flags & 0x08:  # CO_VARKEYWORDS
        names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        params = {k: v for k, v in params.items() if k in names}
    return fn(**params)


def _not_json(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


try:
    import _json

    class _Parsing:  # what the C scanner reads from json.JSONDecoder, without json
        strict = True
        object_hook = object_pairs_hook = None
        parse_float, parse_int = float, int
        parse_constant = {
            "NaN": float("nan"),
            "Infinity": float("inf"),
            "-Infinity": float("-inf"),
        }.__getitem__

    _scan = _json.make_scanner(_Parsing())  # type: ignore[arg-type]  # it reads attributes

    def _loads(line: bytes) -> Any:
        """``json.loads`` of a stripped line: the same value, or the same error."""
        try:
            text = line.decode()
            value, end = _scan(text, 0)
            if end == len(text):
                return value
        except Exception:  # _json's errors need json.decoder imported: json says why
            pass
        import json

        return json.loads(line)  # bad input (or a BOM): json's own answer

    def _dumps(message: Any) -> bytes:
        # A new encoder per message: its circular-reference markers are per message.
        enc = _json.make_encoder(
            {}, _not_json, _json.encode_basestring, None, ":", ",", False, False, False
        )
        return "".join(enc(message, 0)).encode()

    # _json is private: an interpreter whose accelerator differs falls back at start.
    if _loads(_dumps({"a": [1.5, "\u00e9", None, True]})) != {"a": [1.5, "\u00e9", None, True]}:
        raise ImportError("_json behaves differently")

except Exception:  # no accelerator, or not the one this was written against
    import json

    def _loads(line: bytes) -> Any:
        return json.loads(line)

    def _dumps(message: Any) -> bytes:
        text = json.dumps(message, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        return text.encode()


def _sniff_id(head: bytes) -> str | int | None:
    """The request id in the start of a line that could not be parsed, if one is there."""
    import json
    import re

    m = re.search(rb'"id"\s*:\s*("(?:[^"\\]|\\.){0,256}"|-?\d{1,18}\b)', head[:_ID_HEAD])
    if m is None:
        return None
    try:
        value = json.loads(m.group(1))
    except ValueError:
        return None
    return value if isinstance(value, str | int) else None


@final
class _Workers:
    """Threads that run calls; a new one starts only when none is idle.

    A thread per call would cost a start-up handshake with the reading thread for
    every call (about half of a call's round trip, see bench/bench_toolkit.py); this
    keeps the threads of the busiest moment so far. A queued call never waits
    behind a running one: it is queued only for an idle or a new thread.
    """

    def __init__(self, log: Callable[[str], None]) -> None:
        self._log = log
        self._jobs: SimpleQueue[Callable[[], None] | None] | None = None  # at the first job
        self._lock = _thread.allocate_lock()
        self._idle = 0  # threads done with their job and not yet promised another
        self._threads: list[threading.Thread] = []  # only the reading thread appends

    def submit(self, job: Callable[[], None]) -> None:
        with self._lock:
            start = self._idle == 0
            if not start:
                self._idle -= 1  # promised to this job
        if self._jobs is None:
            from queue import SimpleQueue

            self._jobs = SimpleQueue()
        self._jobs.put(job)
        if start:
            import threading

            thread = threading.Thread(target=self._work, name=f"tool-{len(self._threads)}")
            self._threads.append(thread)
            thread.start()

    def _work(self) -> None:
        jobs = self._jobs
        assert jobs is not None  # set before the first thread starts
        while (job := jobs.get()) is not None:
            try:
                job()
            except BaseException as exc:  # calls answer their own errors; this is a bug
                self._log(f"internal error in a call: {type(exc).__name__}: {exc}")
            with self._lock:
                self._idle += 1

    def join(self) -> None:
        """Let queued and running calls finish, then end every thread."""
        for _ in self._threads:
            assert self._jobs is not None  # a thread is started only after it was set
            self._jobs.put(None)
        for thread in self._threads:
            thread.join()


@final
class ToolHost:
    """Serves the tool-host protocol on a pair of binary streams.

    Args:
        out: where protocol lines go (written whole, under a lock, and flushed).
    """

    def __init__(self, out: IO[bytes]) -> None:
        self._out = out
        self._lock = _thread.allocate_lock()
        self._broken = False
        self._modules: list[_Module] | None = None  # None until init succeeded
        self._tools: dict[str, tuple[corral_tools.Tool, _Module]] = {}
        self._config: dict[str, Any] = {}
        self._state: dict[str, Any] = {}
        self._workers = _Workers(self.log)
        self._handlers: dict[str, Callable[[dict[str, Any]], tuple[Any, Any]]] = {
            "init": self._init,
            "get_tool_schemas": self._get_tool_schemas,
            "get_config_schema": self._get_config_schema,
            "get_ui_elements": self._get_ui_elements,
            "get_tags": self._get_tags,
            "required_tags": self._required_tags,
            "format_tool_result": self._format_tool_result,
            "format_tool_call_preview": self._format_tool_call_preview,
            "to_display_format": self._to_display_format,
        }

    def __repr__(self) -> str:
        ready = self._modules is not None
        return f"<ToolHost initialised={ready} tools={len(self._tools)}>"

    # --- the loop -----------------------------------------------------------------

    def serve(self, inp: IO[bytes]) -> None:
        """Answer requests from ``inp`` until end of input, then wait for running calls."""
        while True:
            try:
                raw = inp.readline(MAX_REQUEST_BYTES + 1)
            except (OSError, ValueError) as exc:
                self.log(f"stdin failed, stopping: {exc}")
                break
            if not raw:
                break
            if len(raw) > MAX_REQUEST_BYTES and not raw.endswith(b"\n"):
                self._discard_oversize(raw, inp)
                continue
            line = raw.strip()
            if not line:
                continue
            try:
                self.handle(line)
            except Exception as exc:  # a bug of ours (or no thread left): keep serving
                self.log(f"internal error on a request: {type(exc).__name__}: {exc}")
        self._workers.join()

    def _discard_oversize(self, head: bytes, inp: IO[bytes]) -> None:
        size = len(head)
        while True:  # drop the rest of the line in bounded chunks
            chunk = inp.readline(1 << 20)
            size += len(chunk)
            if not chunk or chunk.endswith(b"\n"):
                break
        detail = f"request line of {size} bytes exceeds the {MAX_REQUEST_BYTES} byte limit"
        self._answer_unparsed(head, ErrorType.REQUEST_TOO_LARGE, detail)

    def _answer_unparsed(self, head: bytes, type_: str, detail: str) -> None:
        rid = _sniff_id(head)
        if rid is None:
            self.log(f"dropping a line without a readable id ({detail}): {head[:80]!r}")
        else:
            self._send_error(rid, type_, detail)

    def handle(self, line: bytes) -> None:
        """Handle one request line (without its newline)."""
        try:
            msg = _loads(line)
        except (ValueError, RecursionError) as exc:
            self._answer_unparsed(line, ErrorType.INVALID_REQUEST, f"not valid JSON: {exc}")
            return
        if not isinstance(msg, dict):
            self.log(f"dropping a line that is not a JSON object: {line[:80]!r}")
            return
        rid = msg.get("id")
        if not isinstance(rid, str | int) or isinstance(rid, bool):
            self.log(f"dropping a request without a usable id: {line[:80]!r}")
            return
        v = msg.get("v")
        if type(v) is not int or v != PROTOCOL_VERSION:
            detail = f"protocol version {v!r} is not supported (this host speaks v1)"
            self._send_error(rid, ErrorType.UNSUPPORTED_VERSION, detail)
            return
        method = msg.get("method")
        params = msg.get("params", {})
        if params is None:
            params = {}
        if not isinstance(method, str) or not isinstance(params, dict):
            detail = "a request needs a string 'method' and an object 'params'"
            self._send_error(rid, ErrorType.INVALID_REQUEST, detail)
            return
        if method == "execute_tool":
            self._start_execute(rid, params)
            return
        handler = self._handlers.get(method)
        if handler is None:
            self._send_error(rid, ErrorType.UNKNOWN_METHOD, f"unknown method {method!r}")
            return
        try:
            value, state = handler(params)
        except _Failure as failure:
            self._send_error(rid, failure.type, failure.detail, failure.stack)
        except Exception as exc:
            wrapped = _failure_from(exc, method)
            self._send_error(rid, wrapped.type, wrapped.detail, wrapped.stack)
        else:
            self._send_ok(rid, value, state)

    # --- output -----------------------------------------------------------------------

    def log(self, message: str) -> None:
        """One line on stderr, which the client keeps in the host's log."""
        try:
            sys.stderr.write(f"[corral_toolhost] {message}\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass  # nowhere left to log to

    def _write(self, data: bytes) -> None:
        """Write one line; the caller holds ``_lock``."""
        if self._broken:
            return
        try:
            self._out.write(data + b"\n")
            self._out.flush()
        except (OSError, ValueError) as exc:  # EPIPE, closed: the client is gone
            self._broken = True
            self.log(f"stdout closed, dropping further responses ({exc})")

    def _encode_response(self, rid: str | int, body: dict[str, Any]) -> bytes:
        message = {"v": PROTOCOL_VERSION, "id": rid, **body}
        try:
            data = _dumps(message)
        except (TypeError, ValueError) as exc:
            detail = f"the answer is not JSON: {exc}"
            data = _dumps(_error_body(rid, ErrorType.INVALID_RESULT, detail))
        if len(data) > MAX_RESPONSE_BYTES:
            detail = f"the answer is {len(data)} bytes, over the {MAX_RESPONSE_BYTES} byte limit"
            data = _dumps(_error_body(rid, ErrorType.RESULT_TOO_LARGE, detail))
        return data

    def _send_ok(self, rid: str | int, value: Any, state: Any = _NO_STATE) -> None:
        result = {"value": value} if state is _NO_STATE else {"value": value, "state": state}
        data = self._encode_response(rid, {"ok": True, "result": result})
        with self._lock:
            self._write(data)

    def _send_error(self, rid: str | int, type_: str, detail: str, stack: str = "") -> None:
        data = _dumps(_error_body(rid, type_, detail, stack))
        with self._lock:
            self._write(data)

    # --- required methods -----------------------------------------------------------------

    def _init(self, params: dict[str, Any]) -> tuple[Any, Any]:
        if self._modules is not None:
            raise _Failure(ErrorType.INVALID_REQUEST, "already initialised; restart the host")
        config = params.get("config", {})
        if not isinstance(config, dict):
            raise _Failure(ErrorType.INVALID_CONFIG, "config must be a JSON object")
        entries = config.get("modules")
        if (
            not isinstance(entries, list)
            or not entries
            or not all(isinstance(e, str) and e for e in entries)
        ):
            detail = "config.modules must be a non-empty list of module paths or names"
            raise _Failure(ErrorType.INVALID_CONFIG, detail)
        modules = [self._load(entry) for entry in entries]
        tools: dict[str, tuple[corral_tools.Tool, _Module]] = {}
        state: dict[str, Any] = {}
        for mod in modules:
            found = [
                v
                for k, v in vars(mod.module).items()
                if isinstance(v, corral_tools.Tool) and not k.startswith("_")
            ]
            if not found and not mod.hooks:
                detail = f"{mod.name}: no corral_tools tools and no hooks found"
                raise _Failure(ErrorType.INVALID_CONFIG, detail)
            for one in found:
                if one.name in tools:
                    owner = tools[one.name][1].name
                    self.log(
                        f"{mod.name}: tool {one.name!r} is already provided by {owner}; skipped"
                    )
                else:
                    tools[one.name] = (one, mod)
            hook = mod.hooks.get("init")
            if hook is not None:
                try:
                    extra = _call_hook(hook, config=config)
                except Exception as exc:
                    raise _failure_from(exc, f"{mod.name}.init") from None
                if extra is not None and not isinstance(extra, dict):
                    detail = f"{mod.name}.init returned {type(extra).__name__}, not a dict or None"
                    raise _Failure(ErrorType.INVALID_RESULT, detail)
                state.update(extra or {})
        self._modules, self._tools, self._config, self._state = modules, tools, config, state
        return state, state

    def _load(self, entry: str) -> _Module:
        try:
            try:
                return self._import(entry)
            except ImportError as exc:
                if not full_site():
                    raise
                self.log(f"{entry}: {exc}; ran the site directories' .pth files, importing again")
                return self._import(entry)
        except _Failure:
            raise
        except Exception as exc:
            raise _failure_from(exc, entry) from None

    def _import(self, entry: str) -> _Module:
        if not (entry.endswith(".py") or "/" in entry):
            __import__(entry)  # importlib.import_module, without importing importlib
            return _Module(entry, sys.modules[entry])
        path = os.path.abspath(entry)
        name = os.path.splitext(os.path.basename(path))[0]
        known = sys.modules.get(name)
        if known is not None:
            if getattr(known, "__file__", None) == path:
                return _Module(name, known)  # loaded by an init that failed later
            detail = f"{entry}: the module name {name!r} is already taken; rename the file"
            raise _Failure(ErrorType.INVALID_CONFIG, detail)
        spec = _spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise _Failure(ErrorType.INVALID_CONFIG, f"{entry}: not a Python module")
        module = _module_from_spec(spec)
        folder = os.path.dirname(path)
        if folder not in sys.path:
            sys.path.insert(0, folder)  # sibling helpers import as usual
        sys.modules[name] = module  # msgspec resolves annotations through it
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
        return _Module(name, module)

    def _need_init(self) -> list[_Module]:
        if self._modules is None:
            raise _Failure(ErrorType.NOT_INITIALIZED, "call init first")
        return self._modules

    def _state_of(self, params: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """The state to use and whether to echo it: the request's own, else the host's."""
        state = params.get("state")
        if state is None:
            return self._state, False
        if not isinstance(state, dict):
            raise _Failure(ErrorType.INVALID_REQUEST, "state must be a JSON object")
        return state, True

    def _get_tool_schemas(self, params: dict[str, Any]) -> tuple[Any, Any]:
        self._need_init()
        state, echo = self._state_of(params)
        specs = [_spec(one) for one, _ in self._tools.values()]
        return specs, state if echo else _NO_STATE

    def _start_execute(self, rid: str | int, params: dict[str, Any]) -> None:
        try:
            self._need_init()
            name = params.get("tool_name")
            entry = self._tools.get(name) if isinstance(name, str) else None
            if entry is None:
                raise _Failure(ErrorType.UNKNOWN_TOOL, f"no tool named {name!r}")
            state, echo = self._state_of(params)
        except _Failure as failure:
            self._send_error(rid, failure.type, failure.detail)
            return
        arguments = {} if params.get("arguments") is None else params["arguments"]
        one = entry[0]
        echo = echo and one.takes_state  # state only from the tools that take it
        self._workers.submit(lambda: self._execute(rid, one, arguments, state, echo))

    def _execute(
        self, rid: str | int, one: corral_tools.Tool, arguments: Any, state: Any, echo: bool
    ) -> None:
        finished = False

        def emit(event: Any) -> None:
            is_event = (
                isinstance(event, dict) and event.get("type") == "part" and "payload" in event
            )
            payload = event["payload"] if is_event else event
            data = _dumps(
                {"v": PROTOCOL_VERSION, "id": rid, "event": {"type": "part", "payload": payload}}
            )  # TypeError/ValueError reach the tool: its payload is not JSON
            if len(data) > MAX_RESPONSE_BYTES:
                raise ValueError(f"part of {len(data)} bytes exceeds {MAX_RESPONSE_BYTES}")
            with self._lock:
                if finished:
                    self.log(f"{one.name}: part emitted after the call ended; dropped")
                    return
                self._write(data)

        try:
            outcome = one.call(arguments, emit=emit, state=state)
        except BaseException as exc:
            # SystemExit / KeyboardInterrupt in a tool's thread end only the call.
            failure = _failure_from(exc, one.name)
            data = _dumps(_error_body(rid, failure.type, failure.detail, failure.stack))
        else:
            if outcome.repairs:
                names = ", ".join(r.value for r in outcome.repairs)
                self.log(f"{one.name}: repaired arguments ({names})")
            result = {"value": outcome.to_wire()}
            if echo:
                result["state"] = state
            data = self._encode_response(rid, {"ok": True, "result": result})
        with self._lock:
            finished = True
            self._write(data)

    # --- optional methods ------------------------------------------------------------------

    def _owners(self, hook: str) -> list[_Module]:
        owners = [m for m in self._need_init() if hook in m.hooks]
        if not owners:
            raise _Failure(ErrorType.UNKNOWN_METHOD, f"no tool module provides {hook!r}")
        return owners

    def _collect(self, hook: str, unite: bool, **params: Any) -> list[Any]:
        items: list[Any] = []
        for mod in self._owners(hook):
            value = _call_hook(mod.hooks[hook], **params)
            if not isinstance(value, list):
                detail = f"{mod.name}.{hook} returned {type(value).__name__}, not a list"
                raise _Failure(ErrorType.INVALID_RESULT, detail)
            items.extend(v for v in value if not unite or v not in items)
        return items

    def _first_answer(self, hook: str, owners: list[_Module], **params: Any) -> Any:
        for mod in owners:
            value = _call_hook(mod.hooks[hook], **params)
            if value is not None:
                return value
        return None

    def _get_config_schema(self, params: dict[str, Any]) -> tuple[Any, Any]:
        schema = _loads(_dumps(_RUNNER_SCHEMA))  # a fresh deep copy
        for mod in self._modules or []:
            hook = mod.hooks.get("get_config_schema")
            extra = None if hook is None else _call_hook(hook)
            if extra is None:
                continue
            if not isinstance(extra, dict) or not isinstance(extra.get("properties", {}), dict):
                detail = f"{mod.name}.get_config_schema did not return an object schema"
                raise _Failure(ErrorType.INVALID_RESULT, detail)
            for key, prop in extra.get("properties", {}).items():
                schema["properties"].setdefault(key, prop)
            required = extra.get("required", [])
            schema["required"] += [r for r in required if r not in schema["required"]]
        return schema, _NO_STATE

    def _get_ui_elements(self, params: dict[str, Any]) -> tuple[Any, Any]:
        return self._collect("get_ui_elements", False), _NO_STATE

    def _get_tags(self, params: dict[str, Any]) -> tuple[Any, Any]:
        config = params.get("config", self._config)
        models = params.get("models", [])
        return self._collect("get_tags", True, config=config, models=models), _NO_STATE

    def _required_tags(self, params: dict[str, Any]) -> tuple[Any, Any]:
        return self._collect("required_tags", True), _NO_STATE

    def _format_tool_result(self, params: dict[str, Any]) -> tuple[Any, Any]:
        owners = self._owners("format_tool_result")
        state, echo = self._state_of(params)
        value = self._first_answer(
            "format_tool_result", owners, result=params.get("result"), state=state
        )
        return value, state if echo else _NO_STATE

    def _format_tool_call_preview(self, params: dict[str, Any]) -> tuple[Any, Any]:
        owners = self._owners("format_tool_call_preview")
        name = params.get("tool_name")
        entry = self._tools.get(name) if isinstance(name, str) else None
        if entry is not None and entry[1] in owners:  # the tool's own module first
            owners = [entry[1], *(m for m in owners if m is not entry[1])]
        state, echo = self._state_of(params)
        value = self._first_answer(
            "format_tool_call_preview",
            owners,
            tool_name=name,
            arguments=params.get("arguments", {}),
            state=state,
        )
        return value, state if echo else _NO_STATE

    def _to_display_format(self, params: dict[str, Any]) -> tuple[Any, Any]:
        owners = self._owners("to_display_format")
        state, echo = self._state_of(params)
        value = self._first_answer(
            "to_display_format",
            owners,
            text=params.get("text", ""),
            result=params.get("result"),
            state=state,
        )
        return value, state if echo else _NO_STATE


def _spec(one: corral_tools.Tool) -> dict[str, Any]:
    """A tool's ``get_tool_schemas`` entry: ``stateless`` when its function takes no
    state, so the client sends its calls without the state, beside the others."""
    spec = one.spec()
    if not one.takes_state:
        spec["stateless"] = True
    return spec


def _error_body(rid: str | int, type_: str, detail: str, stack: str = "") -> dict[str, Any]:
    error = {"type": str(type_), "detail": detail, "stack": stack}
    return {"v": PROTOCOL_VERSION, "id": rid, "ok": False, "error": error}


# --- site-packages, and their .pth files only when a tool module needs them -------------

#: The site directories :func:`lean_site` put on sys.path without running their
#: ``.pth`` files; None when there is nothing left to run.
_skipped_site: list[str] | None = None


def lean_site() -> None:
    """Put the site directories on ``sys.path`` the way :mod:`site` does, minus its code.

    corral starts the runner with ``-S``: running every ``.pth`` file of the
    environment (an editable install's path hook, setuptools' distutils shim) and
    ``sitecustomize`` costs a start about a quarter of the interpreter's own, and a
    tool module rarely needs any of it. The directories are site's own choice (its
    venv, user-site and prefix rules, by its own functions); only adding them skips
    their ``.pth`` files. When a tool module's import then fails, :func:`full_site`
    runs what was skipped and the import is tried once more.
    """
    global _skipped_site
    import site

    added: list[str] = []
    real = site.addsitedir

    def path_only(sitedir: str, known_paths: set[str] | None = None) -> set[str]:
        known = set() if known_paths is None else known_paths
        sitedir, case = site.makepath(sitedir)
        if case not in known:
            sys.path.append(sitedir)
            known.add(case)
        added.append(sitedir)
        return known

    site.addsitedir = path_only  # type: ignore[assignment]  # what site's functions call
    try:
        known = site.removeduppaths()  # then site.main()'s steps that touch sys.path
        site.venv(known)
        if site.ENABLE_USER_SITE is None:
            site.ENABLE_USER_SITE = site.check_enableusersite()
        site.addusersitepackages(known)
        site.addsitepackages(known)
    finally:
        site.addsitedir = real
    _skipped_site = added


def full_site() -> bool:
    """Run what :func:`lean_site` skipped (``.pth`` files, the customize modules).

    Returns:
        False when there was nothing left to run (the interpreter ran :mod:`site`
        itself, or this ran before).
    """
    global _skipped_site
    if _skipped_site is None:
        return False
    import site

    skipped, _skipped_site = _skipped_site, None
    for sitedir in skipped:
        site.addsitedir(sitedir)  # on sys.path already: this runs its .pth files
    site.execsitecustomize()
    if site.ENABLE_USER_SITE:
        site.execusercustomize()
    return True


def _private_stdio() -> tuple[IO[bytes], IO[bytes]]:
    """Take the protocol's stdin/stdout for ourselves; fds 0/1 become /dev/null and stderr."""
    try:
        in_fd, out_fd = os.dup(0), os.dup(1)  # non-inheritable copies
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(2, 1)
        os.close(null)
    except OSError:
        return sys.stdin.buffer, sys.stdout.buffer
    return os.fdopen(in_fd, "rb"), os.fdopen(out_fd, "wb")


def main() -> int:
    """Serve stdin/stdout until end of input; the process's exit status."""
    if sys.flags.no_site:
        lean_site()
    sys.stdout.flush()
    inp, out = _private_stdio()
    sys.stdout = sys.stderr  # print() goes to the log, unbuffered like stderr
    ToolHost(out).serve(inp)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
