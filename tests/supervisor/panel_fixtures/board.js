// A panel extension written to the reference implementation's shapes in Node (raw
// frames, no SDK): the same board as board.py.
const readline = require("node:readline");

const NAME = process.env.CORRAL_EXT_NAME;
const PANEL = "board-main";
const FOOTER = "up/down move - x toggle - q close";
const items = [{ text: "first", done: false }, { text: "second", done: false }];
const state = { cursor: 0, typed: "", last: "" };

const emit = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");
const lines = () => [
  ...items.map((it, i) => (i === state.cursor ? "› " : "  ") + (it.done ? "✓" : "□") + " " + it.text),
  "typed: " + state.typed,
  "last: " + state.last,
];
const title = () => `Board (${items.filter((i) => i.done).length}/${items.length} done)`;
const render = () =>
  emit({ type: "panel_render", panel_id: PANEL, title: title(), lines: lines(), footer: FOOTER });

emit({ type: "hello", name: NAME, version: "0.1.0", capabilities: ["commands", "tools", "panels"] });
emit({ type: "register_command", name: "board", description: "open the board panel" });
emit({
  type: "register_tool",
  name: "board_add",
  description: "add an item",
  schema: { type: "object", properties: { item: { type: "string" } }, required: ["item"] },
});
emit({ type: "ready" });
render();

const rl = readline.createInterface({ input: process.stdin });
rl.on("line", (raw) => {
  if (!raw.trim()) return;
  const frame = JSON.parse(raw);
  switch (frame.type) {
    case "command_invoked":
      emit({
        type: "command_response",
        id: frame.id,
        action: "open_panel",
        open_panel: { id: PANEL, title: title(), lines: lines(), footer: FOOTER },
      });
      break;
    case "tool_call":
      items.push({ text: (frame.args || {}).item || "?", done: false });
      emit({ type: "tool_result", id: frame.id, content: [{ type: "text", text: `added; ${items.length} items` }] });
      render();
      break;
    case "panel_key": {
      if (frame.panel_id !== PANEL) break;
      const { key, text = "" } = frame;
      state.last = key + (text ? ":" + text : "");
      if (key === "up") state.cursor = Math.max(0, state.cursor - 1);
      else if (key === "down") state.cursor = Math.min(items.length - 1, state.cursor + 1);
      else if (key === "rune" && text === "x") items[state.cursor].done = !items[state.cursor].done;
      else if (key === "rune" && text === "q") {
        emit({ type: "panel_close", panel_id: PANEL });
        break;
      } else if (key === "rune") state.typed += text;
      else if (key === "backspace") state.typed = state.typed.slice(0, -1);
      render();
      break;
    }
    case "panel_close":
      emit({ type: "notify", level: "info", message: `closed ${frame.panel_id}: ${frame.reason || ""}` });
      break;
    case "shutdown":
      emit({ type: "shutdown_ack" });
      rl.close();
      process.exit(0);
  }
});
rl.on("close", () => process.exit(0));
