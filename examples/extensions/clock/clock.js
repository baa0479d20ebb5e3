#!/usr/bin/env node
// clock: a corral extension in plain Node (no SDK, no dependencies).
//
// Registers two slash commands:
//   /clock      shows the current time (ISO 8601, UTC) as a one-shot note
//   /stopwatch  pushes a notify with the seconds elapsed since the extension
//               started, and answers noop
//
// It deliberately sends no `ready` frame: the host falls back to a quiet period
// after the last registration. stdout carries protocol frames only; diagnostics
// go to stderr, which the host keeps in $CORRAL_HOME/logs/ext-clock.log.
"use strict";

const readline = require("node:readline");

const NAME = "clock";
const VERSION = "1.0.0";
const STARTED_AT = process.hrtime.bigint();

/** Write one frame: one JSON object per line. */
function send(frame, callback) {
  process.stdout.write(JSON.stringify(frame) + "\n", callback);
}

function log(message) {
  process.stderr.write(`[${NAME}] ${message}\n`);
}

function elapsedSeconds() {
  return Number(process.hrtime.bigint() - STARTED_AT) / 1e9;
}

function handleCommand(frame) {
  const id = frame.id ?? "";
  const name = String(frame.name ?? "");
  switch (name) {
    case "clock":
      send({ type: "command_response", id, action: "display", display: new Date().toISOString() });
      return;
    case "stopwatch":
      send({
        type: "notify",
        level: "info",
        message: `stopwatch: ${elapsedSeconds().toFixed(1)}s since start`,
      });
      send({ type: "command_response", id, action: "noop" });
      return;
    default:
      send({ type: "command_response", id, action: "noop", error: `clock: unknown command /${name}` });
  }
}

send({ type: "hello", name: NAME, version: VERSION, capabilities: ["commands"] });
send({ type: "register_command", name: "clock", description: "show the current time (no model call)" });
send({ type: "register_command", name: "stopwatch", description: "seconds since the clock extension started" });

const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });

rl.on("line", (line) => {
  if (line.trim() === "") return;
  let frame;
  try {
    frame = JSON.parse(line);
  } catch (err) {
    log(`skipping malformed line: ${err.message}`);
    return;
  }
  if (frame === null || typeof frame !== "object" || typeof frame.type !== "string") {
    log("skipping line without a string 'type'");
    return;
  }
  switch (frame.type) {
    case "hello_ack":
      log(`connected (protocol ${frame.protocol_version ?? "?"}, model ${frame.model ?? "?"})`);
      break;
    case "command_invoked":
      handleCommand(frame);
      break;
    case "shutdown":
      // Exit only once the ack has left the pipe.
      send({ type: "shutdown_ack" }, () => process.exit(0));
      rl.close();
      break;
    default:
      log(`skipping unknown frame type ${JSON.stringify(frame.type)}`);
  }
});

rl.on("close", () => {
  // End of stdin: the host is done with us. Let pending writes drain, then exit.
  process.stdout.write("", () => process.exit(0));
});

process.stdout.on("error", () => process.exit(0)); // EPIPE: the host is gone
