// An extension written to the reference implementation's shapes (no SDK), run
// with "exec": "node" and "language": "javascript" as its clock example is.
const { appendFileSync, readFileSync } = require("node:fs");
const { join } = require("node:path");
const { createInterface } = require("node:readline");

let ack = {};
const send = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");

send({ type: "hello", name: "refnode", version: "1.0.0", capabilities: ["commands"] });
send({ type: "register_command", name: "where", description: "argv and hello_ack" });
send({ type: "register_command", name: "save", description: "append to data_dir" });
send({ type: "ready" });

function command(frame) {
  if (frame.name === "where") {
    // The reference's hello example notifies, then answers: the order is kept.
    send({ type: "notify", level: "info", message: "before the answer" });
    const display = JSON.stringify({ argv: process.argv, execPath: process.execPath, ack });
    send({ type: "command_response", id: frame.id, action: "display", display });
    return;
  }
  try {
    const file = join(ack.data_dir, "notes.txt");
    appendFileSync(file, `${frame.args}\n`);
    send({ type: "command_response", id: frame.id, action: "display", display: readFileSync(file, "utf8") });
  } catch (err) {
    send({ type: "command_response", id: frame.id, action: "noop", error: String(err) });
  }
}

const rl = createInterface({ input: process.stdin, crlfDelay: Infinity });
rl.on("line", (line) => {
  let frame;
  try {
    frame = JSON.parse(line);
  } catch {
    return;
  }
  if (frame.type === "hello_ack") ack = frame;
  else if (frame.type === "command_invoked") command(frame);
  else if (frame.type === "shutdown") {
    send({ type: "shutdown_ack" });
    rl.close();
  }
});
