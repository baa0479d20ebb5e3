// host.cjs: corral's Node tool-host runner (tool-host protocol v1, NDJSON over stdio).
//
// Start it as `node host.cjs` (`node host.mjs` runs it too); the client then sends
// init({"config": {"modules": [...]}}) and the runner imports each named tool module
// (a path relative to the working directory, or a package name), ES module or
// CommonJS, or TypeScript (.ts, .mts, .cts) where Node strips types (see TYPESCRIPT),
// with no npm dependencies of its own. It behaves like the Python runner
// (corral_toolhost.py); docs/toolkit.md describes both.
//
// A tool module exports (named exports, or a default export object, which is
// module.exports for CommonJS):
//
//   tools: [{ name, description, parameters, execute(args, ctx) }]
//     `parameters` is the JSON object schema of the arguments (`schema` and
//     `input_schema` are accepted too). `ctx` is the emit function itself (so the
//     seed's `execute(args, emit)` works) and also carries ctx.emit, ctx.state (the
//     state object; mutate it) and ctx.config. `stateless: true` declares a tool that
//     never uses ctx.state: its calls run beside the others and answer no state
//     (calls that may change the state go one at a time). execute returns text, content blocks,
//     any JSON value, or an object with a boolean `success` (the result shape itself,
//     e.g. {success: false, error: "..."} for a failure the model should see). A throw
//     answers the request with an error {type, detail, stack}.
//   init(config)                               -> object merged into the state
//   get_config_schema()                        -> object schema (its properties are
//                                                 added to the runner's own)
//   get_ui_elements()                          -> [object]        (concatenated)
//   get_tags(config, models), required_tags()  -> [string]        (united)
//   format_tool_result(result, state)          -> string | provider-native envelope
//   format_tool_call_preview(tool_name, arguments, state) -> string
//   to_display_format(text, result, state)     -> object
// The last three are asked in turn (a preview asks the tool's own module first);
// the first answer that is not null/undefined wins, else the answer is null. Every
// hook may be async. A method no module provides answers an UnknownMethod error.
//
// Guarantees: stdout carries protocol lines only (process.stdout.write and
// console.log/info/debug go to stderr); the parts a call emits are written before
// its response; requests run in order except execute_tool, which runs concurrently;
// bad lines get an error when their id can be read and are logged otherwise; end
// of stdin lets running calls finish, then exits 0.

// CommonJS, not an ES module: an ES module entry costs Node 20 the start of its ES
// module loader (about a fifth of `node -e 0`, paired), and a tool module that is
// CommonJS, or an ES module on a Node whose require() loads them, never needs it.

"use strict";

const { read, writeSync } = require("node:fs");
const path = require("node:path");
const { pathToFileURL } = require("node:url");

const PROTOCOL_VERSION = 1;
const MAX_REQUEST_BYTES = 64 * 1024 * 1024;
const MAX_RESPONSE_BYTES = 16 * 1024 * 1024;
const ID_HEAD = 4096;
const OPTIONAL = [
  "get_config_schema",
  "get_ui_elements",
  "get_tags",
  "required_tags",
  "format_tool_result",
  "format_tool_call_preview",
  "to_display_format",
];
const HOOKS = ["init", ...OPTIONAL];
// A new object at each call (the modules' properties are added to it).
const runnerSchema = () => ({
  type: "object",
  properties: {
    modules: {
      type: "array",
      items: { type: "string", minLength: 1 },
      minItems: 1,
      description:
        "tool modules: paths (relative to the working directory) or package names",
    },
  },
  required: ["modules"],
});

// --- stdout is the protocol's alone ---------------------------------------------
// The runner reads fd 0 and writes fds 1 and 2 itself, without process.stdin/stdout/
// stderr: creating those streams (net sockets for pipes) is a sizeable share of a
// start. process.stdout is process.stderr for the tools (made when first used), and
// console.log/info/debug write there too.
const stdoutStream = Object.getOwnPropertyDescriptor(process, "stdout").get;
Object.defineProperty(process, "stdout", {
  configurable: true,
  enumerable: true,
  get: () => process.stderr,
});
for (const name of ["log", "info", "debug"]) console[name] = console.error.bind(console);
// fd 0 is the protocol's, read by the runner: a tool that reads process.stdin gets an
// empty, ended stream instead of the requests (the runner's own fallback for a
// non-blocking stdin uses the real one).
const stdinStream = Object.getOwnPropertyDescriptor(process, "stdin").get;
let toolStdin = null;
Object.defineProperty(process, "stdin", {
  configurable: true,
  enumerable: true,
  get: () => {
    if (toolStdin === null) {
      const { Readable } = require("node:stream");
      toolStdin = new Readable({ read() { this.push(null); } });
    }
    return toolStdin;
  },
});
let broken = false;
let protocolStream = null; // fd 1's stream, once a write found fd 1 non-blocking and full
process.on("unhandledRejection", (err) => log(`unhandled rejection in a tool: ${show(err)}`));
process.on("uncaughtException", (err) => log(`uncaught exception in a tool: ${show(err)}`));

// Blocking writes, whole: what process.stdout/stderr do for pipes and files on Linux.
function writeAll(fd, text) {
  const data = Buffer.from(text);
  let done = 0;
  try {
    while (done < data.length) done += writeSync(fd, data, done);
  } catch (err) {
    if (err.code !== "EAGAIN") throw err;
    return data.subarray(done); // a non-blocking descriptor that is full: the rest
  }
  return null;
}

function log(message) {
  try {
    writeAll(2, `[host.cjs] ${message}\n`); // a full non-blocking stderr drops the rest
  } catch {
    // nowhere left to log to
  }
}

function show(err) {
  return err instanceof Error ? (err.stack ?? `${err.name}: ${err.message}`) : String(err);
}

function isObject(value) {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

class Failure extends Error {
  constructor(type, detail, stack = "") {
    super(detail);
    this.type = type;
    this.detail = detail;
    this.stackText = stack;
  }
}

function failureFrom(err, where) {
  if (err instanceof Failure) return err;
  const isError = err instanceof Error;
  const type = isError && err.name ? err.name : "Error";
  const message = isError ? err.message : String(err);
  return new Failure(type, where ? `${where}: ${message}` : message, isError ? (err.stack ?? "") : "");
}

// --- output ------------------------------------------------------------------------

function write(line) {
  if (broken) return;
  if (protocolStream !== null) {
    protocolStream.write(line + "\n"); // after the earlier rest, in order
    return;
  }
  try {
    const rest = writeAll(1, line + "\n");
    if (rest === null) return;
    log("stdout is non-blocking and full: writing through a stream from now on");
    protocolStream = stdoutStream.call(process); // it waits for room; later lines queue behind
    protocolStream.on("error", stopWriting);
    protocolStream.write(rest);
  } catch (err) {
    stopWriting(err);
  }
}

function stopWriting(err) {
  broken = true;
  log(`stdout closed, dropping further responses (${err.message})`);
}

function errorLine(id, type, detail, stack = "") {
  return JSON.stringify({ v: PROTOCOL_VERSION, id, ok: false, error: { type, detail, stack } });
}

function responseLine(id, body) {
  let line;
  try {
    line = JSON.stringify({ v: PROTOCOL_VERSION, id, ...body });
  } catch (err) {
    return errorLine(id, "InvalidResult", `the answer is not JSON: ${err.message}`);
  }
  const size = Buffer.byteLength(line);
  if (size > MAX_RESPONSE_BYTES) {
    const detail = `the answer is ${size} bytes, over the ${MAX_RESPONSE_BYTES} byte limit`;
    return errorLine(id, "ResultTooLarge", detail);
  }
  return line;
}

function sendOk(id, value, state) {
  const result = state === undefined ? { value } : { value, state };
  write(responseLine(id, { ok: true, result }));
}

function sendFailure(id, failure) {
  write(errorLine(id, failure.type, failure.detail, failure.stackText));
}

function sniffId(head) {
  const text = head.subarray(0, ID_HEAD).toString("utf8");
  const m = /"id"\s*:\s*("(?:[^"\\]|\\.){0,256}"|-?\d{1,15}\b)/.exec(text);
  if (!m) return undefined;
  try {
    return JSON.parse(m[1]);
  } catch {
    return undefined;
  }
}

function answerUnparsed(head, type, detail) {
  const id = sniffId(head);
  if (id === undefined) {
    log(`dropping a line without a readable id (${detail}): ${JSON.stringify(head.subarray(0, 80).toString("utf8"))}`);
  } else {
    write(errorLine(id, type, detail));
  }
}

// --- modules and state -----------------------------------------------------------------

let modules = null; // [{name, api, hooks}] once init succeeded
const tools = new Map(); // name -> {tool, mod}
let hostConfig = {};
let hostState = {};

// require() first: a CommonJS module, or an ES module where Node's require() loads
// them (Node >= 22.12), costs no ES module loader; import() for the rest.
const REQUIRE_REFUSED = new Set(["ERR_REQUIRE_ESM", "ERR_REQUIRE_ASYNC_MODULE"]);

// TypeScript modules run where Node strips types: 22.18+ and 23.6+ by default, 22.6+
// with --experimental-strip-types (corral passes it to such a Node when config.modules
// lists one). Elsewhere init refuses them, saying what to do.
const TYPESCRIPT = /\.[cm]?ts$/;

function stripsTypes() {
  const ts = process.features.typescript; // "strip" | "transform" | false, from 22.10
  if (ts !== undefined) return Boolean(ts);
  return process.execArgv.some((a) => /^--experimental-(strip|transform)-types$/.test(a));
}

function typescriptRefused(entry) {
  const js = entry.replace(/\.([cm]?)ts$/, ".$1js");
  return new Failure(
    "InvalidConfig",
    `${entry} is TypeScript, and Node ${process.version} cannot strip its types: that takes ` +
      "Node 22.18+ or 23.6+, or 22.6+ started with --experimental-strip-types (corral passes it). " +
      `Or compile it to JavaScript and list ${js} in config.modules: ` +
      `npx tsc --module nodenext --target es2022 ${entry}, or ` +
      `npx esbuild ${entry} --format=esm --outfile=${js}`,
  );
}

async function loadModule(entry) {
  let file = null;
  if (entry.startsWith(".") || entry.includes("/") || /\.[cm]?[jt]s$/.test(entry)) {
    file = path.resolve(entry);
  } else {
    // A package name: resolve it from the working directory, not from this file.
    try {
      file = require("node:module").createRequire(path.join(process.cwd(), "_")).resolve(entry);
    } catch {
      file = null; // import() tries it (an ES-only package, say)
    }
  }
  if (file !== null) {
    try {
      return moduleApi(entry, require(file));
    } catch (err) {
      if (!REQUIRE_REFUSED.has(err?.code)) throw err;
    }
  }
  return moduleApi(entry, await import(file === null ? entry : pathToFileURL(file).href));
}

// What a loaded module offers: its own exports, or a default export object. A
// CommonJS module.exports that is not an object is its default export, as import()
// would have it.
function moduleApi(entry, loaded) {
  const ns = typeof loaded === "object" && loaded !== null ? loaded : { default: loaded };
  const hasOwn = (obj) => "tools" in obj || HOOKS.some((h) => typeof obj[h] === "function");
  const api = !hasOwn(ns) && isObject(ns.default) ? ns.default : ns;
  const hooks = new Map();
  for (const h of HOOKS) if (typeof api[h] === "function") hooks.set(h, api[h].bind(api));
  return { name: entry, api, hooks };
}

function checkTool(mod, tool, index) {
  const where = `${mod.name}: tools[${index}]`;
  if (!isObject(tool) || typeof tool.name !== "string" || !tool.name) {
    throw new Failure("InvalidConfig", `${where} needs a non-empty string name`);
  }
  if (typeof tool.execute !== "function") {
    throw new Failure("InvalidConfig", `${where} (${tool.name}) needs an execute function`);
  }
  const schema = tool.parameters ?? tool.schema ?? tool.input_schema ?? { type: "object", properties: {} };
  if (!isObject(schema) || schema.type !== "object") {
    throw new Failure("InvalidConfig", `${where} (${tool.name}): parameters must be a JSON object schema`);
  }
  const spec = { name: tool.name, description: String(tool.description ?? ""), parameters: schema };
  // A tool that never touches ctx.state says so: its calls go without the state, beside
  // the others, and answer none (an echo of the state it was sent would undo theirs).
  if (tool.stateless === true) spec.stateless = true;
  return spec;
}

function needInit() {
  if (modules === null) throw new Failure("NotInitialized", "call init first");
  return modules;
}

function stateOf(params) {
  const state = params.state;
  if (state === undefined || state === null) return [hostState, false];
  if (!isObject(state)) throw new Failure("InvalidRequest", "state must be a JSON object");
  return [state, true];
}

// --- methods -----------------------------------------------------------------------------

async function init(params) {
  if (modules !== null) throw new Failure("InvalidRequest", "already initialised; restart the host");
  const config = params.config ?? {};
  if (!isObject(config)) throw new Failure("InvalidConfig", "config must be a JSON object");
  const entries = config.modules;
  if (!Array.isArray(entries) || !entries.length || !entries.every((e) => typeof e === "string" && e)) {
    throw new Failure("InvalidConfig", "config.modules must be a non-empty list of module paths or names");
  }
  const typescript = entries.find((e) => TYPESCRIPT.test(e));
  if (typescript !== undefined && !stripsTypes()) throw typescriptRefused(typescript);
  const loaded = [];
  for (const entry of entries) {
    try {
      loaded.push(await loadModule(entry));
    } catch (err) {
      throw failureFrom(err, entry);
    }
  }
  const found = new Map();
  const state = {};
  for (const mod of loaded) {
    const list = mod.api.tools ?? [];
    if (!Array.isArray(list)) throw new Failure("InvalidConfig", `${mod.name}: tools must be an array`);
    if (!list.length && !mod.hooks.size) {
      throw new Failure("InvalidConfig", `${mod.name}: no tools and no hooks found`);
    }
    list.forEach((tool, index) => {
      const spec = checkTool(mod, tool, index);
      if (found.has(spec.name)) {
        log(`${mod.name}: tool '${spec.name}' is already provided by ${found.get(spec.name).mod.name}; skipped`);
      } else {
        found.set(spec.name, { tool, spec, mod });
      }
    });
    const hook = mod.hooks.get("init");
    if (hook) {
      let extra;
      try {
        extra = await hook(config);
      } catch (err) {
        throw failureFrom(err, `${mod.name}.init`);
      }
      if (extra !== undefined && extra !== null && !isObject(extra)) {
        throw new Failure("InvalidResult", `${mod.name}.init returned ${typeof extra}, not an object`);
      }
      Object.assign(state, extra ?? {});
    }
  }
  modules = loaded;
  for (const [name, entry] of found) tools.set(name, entry);
  hostConfig = config;
  hostState = state;
  return [state, state];
}

async function getToolSchemas(params) {
  needInit();
  const [state, echo] = stateOf(params);
  return [[...tools.values()].map((t) => t.spec), echo ? state : undefined];
}

function owners(hook) {
  const found = needInit().filter((m) => m.hooks.has(hook));
  if (!found.length) throw new Failure("UnknownMethod", `no tool module provides '${hook}'`);
  return found;
}

async function collect(hook, unite, ...args) {
  const items = [];
  for (const mod of owners(hook)) {
    const value = await mod.hooks.get(hook)(...args);
    if (!Array.isArray(value)) {
      throw new Failure("InvalidResult", `${mod.name}.${hook} returned ${typeof value}, not an array`);
    }
    for (const v of value) if (!unite || !items.includes(v)) items.push(v);
  }
  return items;
}

async function firstAnswer(hook, mods, ...args) {
  for (const mod of mods) {
    const value = await mod.hooks.get(hook)(...args);
    if (value !== undefined && value !== null) return value;
  }
  return null;
}

async function getConfigSchema() {
  // Not structuredClone: on Node 20 its first use loads a MessageChannel (~0.4 ms of a start).
  const schema = runnerSchema();
  for (const mod of modules ?? []) {
    const hook = mod.hooks.get("get_config_schema");
    const extra = hook ? await hook() : null;
    if (extra === undefined || extra === null) continue;
    if (!isObject(extra) || !isObject(extra.properties ?? {})) {
      throw new Failure("InvalidResult", `${mod.name}.get_config_schema did not return an object schema`);
    }
    for (const [key, prop] of Object.entries(extra.properties ?? {})) {
      if (!(key in schema.properties)) schema.properties[key] = prop;
    }
    for (const r of extra.required ?? []) if (!schema.required.includes(r)) schema.required.push(r);
  }
  return [schema, undefined];
}

async function formatWith(hook, params, mods, argsOf) {
  const [state, echo] = stateOf(params);
  const value = await firstAnswer(hook, mods, ...argsOf(state));
  return [value, echo ? state : undefined];
}

const handlers = new Map([
  ["init", init],
  ["get_tool_schemas", getToolSchemas],
  ["get_config_schema", getConfigSchema],
  ["get_ui_elements", async () => [await collect("get_ui_elements", false), undefined]],
  [
    "get_tags",
    async (p) => [await collect("get_tags", true, p.config ?? hostConfig, p.models ?? []), undefined],
  ],
  ["required_tags", async () => [await collect("required_tags", true), undefined]],
  [
    "format_tool_result",
    (p) => formatWith("format_tool_result", p, owners("format_tool_result"), (s) => [p.result, s]),
  ],
  [
    "format_tool_call_preview",
    (p) => {
      let mods = owners("format_tool_call_preview");
      const own = tools.get(p.tool_name)?.mod;
      if (own && mods.includes(own)) mods = [own, ...mods.filter((m) => m !== own)];
      return formatWith("format_tool_call_preview", p, mods, (s) => [p.tool_name, p.arguments ?? {}, s]);
    },
  ],
  [
    "to_display_format",
    (p) => formatWith("to_display_format", p, owners("to_display_format"), (s) => [p.text ?? "", p.result, s]),
  ],
]);

// --- execute_tool ---------------------------------------------------------------------

const inflight = new Set();

// What a stateless tool finds as ctx.state: one object per tool that throws when
// used (made once: an accessor defined on every call's ctx costs V8 microseconds).
function noState(entry) {
  entry.noState ??= new Proxy(Object.freeze({}), {
    get(_, key) {
      if (typeof key === "symbol") return undefined; // (inspection, not use)
      throw new Failure("StatelessTool", `${entry.spec.name} is declared stateless: it has no ctx.state`);
    },
    set() {
      throw new Failure("StatelessTool", `${entry.spec.name} is declared stateless: it has no ctx.state`);
    },
  });
  return entry.noState;
}

function toWire(value) {
  if (isObject(value) && typeof value.success === "boolean") return value; // the result shape itself
  return { success: true, result: value ?? "" };
}

function startExecute(id, params) {
  let entry;
  let state;
  let echo;
  try {
    needInit();
    entry = tools.get(params.tool_name);
    if (!entry) throw new Failure("UnknownTool", `no tool named ${JSON.stringify(params.tool_name ?? null)}`);
    [state, echo] = stateOf(params);
  } catch (err) {
    sendFailure(id, failureFrom(err));
    return;
  }
  const stateless = entry.spec.stateless === true;
  if (stateless) echo = false;
  let finished = false;
  const emit = (event) => {
    const isEvent = isObject(event) && event.type === "part" && "payload" in event;
    const payload = isEvent ? event.payload : event;
    const line = JSON.stringify({ v: PROTOCOL_VERSION, id, event: { type: "part", payload } });
    if (Buffer.byteLength(line) > MAX_RESPONSE_BYTES) throw new RangeError("part exceeds 16 MiB");
    if (finished) {
      log(`${entry.spec.name}: part emitted after the call ended; dropped`);
      return;
    }
    write(line);
  };
  const own = stateless ? noState(entry) : state;
  const ctx = Object.assign((event) => emit(event), { emit, state: own, config: hostConfig });
  const run = async () => {
    let args = params.arguments ?? {};
    if (typeof args === "string") {
      try {
        args = JSON.parse(args);
      } catch (err) {
        return { success: false, error: `arguments: not valid JSON (${err.message})` };
      }
    }
    if (!isObject(args)) return { success: false, error: "arguments: expected an object" };
    return toWire(await entry.tool.execute(args, ctx));
  };
  const call = run().then(
    (value) => {
      finished = true;
      write(responseLine(id, { ok: true, result: echo ? { value, state } : { value } }));
    },
    (err) => {
      finished = true;
      sendFailure(id, failureFrom(err, entry.spec.name));
    },
  );
  inflight.add(call);
  call.finally(() => inflight.delete(call));
}

// --- the loop --------------------------------------------------------------------------

async function handleLine(buf) {
  const text = buf.toString("utf8").trim();
  if (!text) return;
  let msg;
  try {
    msg = JSON.parse(text);
  } catch (err) {
    answerUnparsed(buf, "InvalidRequest", `not valid JSON: ${err.message}`);
    return;
  }
  if (!isObject(msg)) {
    log(`dropping a line that is not a JSON object: ${JSON.stringify(text.slice(0, 80))}`);
    return;
  }
  const id = msg.id;
  if (typeof id !== "string" && !Number.isInteger(id)) {
    log(`dropping a request without a usable id: ${JSON.stringify(text.slice(0, 80))}`);
    return;
  }
  if (msg.v !== PROTOCOL_VERSION) {
    const detail = `protocol version ${JSON.stringify(msg.v ?? null)} is not supported (this host speaks v1)`;
    write(errorLine(id, "UnsupportedVersion", detail));
    return;
  }
  const method = msg.method;
  const params = msg.params ?? {};
  if (typeof method !== "string" || !isObject(params)) {
    write(errorLine(id, "InvalidRequest", "a request needs a string 'method' and an object 'params'"));
    return;
  }
  if (method === "execute_tool") {
    startExecute(id, params);
    return;
  }
  const handler = handlers.get(method);
  if (!handler) {
    write(errorLine(id, "UnknownMethod", `unknown method ${JSON.stringify(method)}`));
    return;
  }
  try {
    const [value, state] = await handler(params);
    sendOk(id, value, state);
  } catch (err) {
    sendFailure(id, failureFrom(err, err instanceof Failure ? "" : method));
  }
}

let queue = Promise.resolve();
function enqueue(task) {
  queue = queue.then(task).catch((err) => log(`internal error: ${show(err)}`));
}

let pieces = [];
let pending = 0;
let discarding = null; // the head of an oversize line being dropped

function take(chunk) {
  let start = 0;
  while (start < chunk.length) {
    const nl = chunk.indexOf(10, start);
    const piece = chunk.subarray(start, nl === -1 ? chunk.length : nl);
    pending += piece.length;
    if (discarding === null) {
      pieces.push(piece);
      if (pending > MAX_REQUEST_BYTES) {
        discarding = Buffer.concat(pieces).subarray(0, ID_HEAD);
        pieces = [];
      }
    }
    if (nl === -1) break;
    if (discarding === null) {
      const line = Buffer.concat(pieces, pending);
      enqueue(() => handleLine(line));
    } else {
      const head = discarding;
      const detail = `request line of ${pending} bytes exceeds the ${MAX_REQUEST_BYTES} byte limit`;
      enqueue(() => answerUnparsed(head, "RequestTooLarge", detail));
    }
    pieces = [];
    pending = 0;
    discarding = null;
    start = nl + 1;
  }
}

let ending = false;
function finish() {
  if (ending) return;
  ending = true;
  if (pending && discarding === null) {
    const line = Buffer.concat(pieces, pending);
    enqueue(() => handleLine(line));
  }
  enqueue(async () => {
    await Promise.allSettled([...inflight]);
    process.exit(0);
  });
}

function stdinFailed(err) {
  log(`stdin failed, stopping: ${err.message}`);
  finish();
}

// fd 0 is read on libuv's thread pool (one of its threads waits there). A
// non-blocking stdin (EAGAIN) is handed to process.stdin, which polls it instead.
const READ_SIZE = 64 * 1024;
function readStdin() {
  const chunk = Buffer.allocUnsafe(READ_SIZE);
  read(0, chunk, 0, READ_SIZE, null, (err, size) => {
    if (err && err.code === "EAGAIN") {
      log("stdin is non-blocking: reading it through process.stdin");
      stdinStream.call(process).on("data", take).on("end", finish).on("error", stdinFailed);
    } else if (err && err.code !== "EINTR") {
      stdinFailed(err);
    } else if (size === 0 && !err) {
      finish();
    } else {
      if (!err) take(chunk.subarray(0, size));
      readStdin();
    }
  });
}
readStdin();
