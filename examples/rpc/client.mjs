#!/usr/bin/env node
// A corral RPC client for Node (no dependencies): child_process.spawn + readline.
//
//   node examples/rpc/client.mjs [--script SCRIPT.jsonl] [PROMPT ...]
//
// Spawns `corral rpc` (the scripted provider with SCRIPT, the offline model without),
// says hello (with $CORRAL_RPC_TOKEN when set), sends one prompt, prints the events
// until `done`, asks for the state, then closes stdin and waits for the exit.
// $CORRAL overrides the command that starts corral (default: corral).
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";

const argv = process.argv.slice(2);
let script = null;
const words = [];
for (let i = 0; i < argv.length; i++) {
  if (argv[i] === "--script") script = argv[++i];
  else words.push(argv[i]);
}
const prompt = words.join(" ") || "Summarise the README.";

// $CORRAL may be a command with arguments; split it on whitespace (no quoting).
const [command, ...prefix] = (process.env.CORRAL || "corral").trim().split(/\s+/);
const args = [...prefix, "rpc"];
if (script) args.push("--provider", "scripted", "--script", script);
const corral = spawn(command, args, { stdio: ["pipe", "pipe", "inherit"] });
const exited = new Promise((resolve) => corral.on("close", (code) => resolve(code)));

// One async iterator over corral's stdout lines, parsed.
const lines = createInterface({ input: corral.stdout })[Symbol.asyncIterator]();
async function nextFrame() {
  const { value, done } = await lines.next();
  return done ? null : JSON.parse(value);
}

let ids = 0;
async function call(type, fields = {}) {
  const id = ++ids;
  corral.stdin.write(JSON.stringify({ id, type, ...fields }) + "\n");
  for (let frame = await nextFrame(); frame; frame = await nextFrame()) {
    if (frame.type === "response" && frame.id === id) {
      if (!frame.success) throw new Error(`${type} failed: ${frame.error}`);
      return frame.data;
    }
    show(frame);
  }
  throw new Error(`corral exited before answering ${type}`);
}

function show(frame) {
  switch (frame.type) {
    case "text_delta":
      process.stdout.write(frame.delta);
      break;
    case "assistant_start":
      process.stdout.write("assistant: ");
      break;
    case "assistant_message":
      process.stdout.write("\n");
      break;
    case "tool_call":
      console.log(`  -> ${frame.name} ${JSON.stringify(frame.args)}`);
      break;
    case "tool_result": {
      const text = frame.content.map((b) => b.text ?? `<${b.type}>`).join(" ");
      console.log(`  <- ${frame.is_error ? "error" : "ok"}: ${JSON.stringify(text.slice(0, 200))}`);
      break;
    }
    case "turn_end":
      console.log(`[turn_end ${frame.stop}${frame.error ? ` (${frame.error})` : ""}]`);
      break;
    case "turn_start":
    case "user_message":
      break;
    default: {
      const { type, ...rest } = frame;
      console.log(Object.keys(rest).length ? `[${type}] ${JSON.stringify(rest)}` : `[${type}]`);
    }
  }
}

const token = process.env.CORRAL_RPC_TOKEN;
const hello = await call("hello", token ? { token } : {});
console.log(`connected: corral ${hello.version}, ${hello.provider}/${hello.model}`);
await call("prompt", { message: prompt });
for (let frame = await nextFrame(); frame; frame = await nextFrame()) {
  show(frame);
  if (frame.type === "done") break;
}
const state = await call("get_state");
console.log(`messages: ${state.message_count}, tokens out: ${state.usage.output}`);
// End of input: corral finishes what is queued, stops its extensions and exits 0.
corral.stdin.end();
for (let frame = await nextFrame(); frame; frame = await nextFrame()) show(frame);
const status = await exited;
console.log(`corral exited with ${status}`);
process.exit(status ?? 1);
