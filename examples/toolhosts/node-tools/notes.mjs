// notes: an example tool module for corral's Node tool-host runner (host.cjs).
//
// Three tools:
//   add_note / list_notes keep the notes in the host's state, which the client
//     sends with every call and gets back updated (state round-trip);
//   countdown streams one `part` per tick through emit() before its final answer, and
//     is `stateless`: it runs beside the others (calls that may change the state go
//     one at a time);
// and two optional hooks: get_config_schema (the max_notes setting, read by init)
// and format_tool_call_preview (the one-line preview of a call).

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

export const tools = [
  {
    name: "add_note",
    description: "Remember a short note for later in this session.",
    parameters: {
      type: "object",
      properties: {
        text: { type: "string", minLength: 1, description: "the note" },
        tag: { type: "string", description: "an optional tag" },
      },
      required: ["text"],
    },
    execute({ text, tag = null }, { state }) {
      state.notes ??= [];
      if (state.notes.length >= (state.max_notes ?? 20)) {
        // A failure the model should see: the result shape itself.
        return { success: false, error: `there are already ${state.notes.length} notes; that is the limit` };
      }
      state.notes.push({ text, tag });
      return `noted (${state.notes.length} so far)`;
    },
  },
  {
    name: "list_notes",
    description: "List the notes taken so far, optionally only those with one tag.",
    parameters: {
      type: "object",
      properties: { tag: { type: "string", description: "only notes with this tag" } },
    },
    execute({ tag }, { state }) {
      const notes = (state.notes ?? []).filter((n) => tag === undefined || n.tag === tag);
      if (!notes.length) return "no notes";
      return notes.map((n) => `- ${n.text}${n.tag ? ` [${n.tag}]` : ""}`).join("\n");
    },
  },
  {
    name: "countdown",
    description: "Count down, reporting each tick as it happens.",
    // It never touches ctx.state: its calls run beside the others and answer no state.
    stateless: true,
    parameters: {
      type: "object",
      properties: {
        start: { type: "integer", minimum: 1, maximum: 10, default: 3 },
        interval_ms: { type: "integer", minimum: 0, maximum: 1000, default: 200 },
      },
    },
    async execute({ start = 3, interval_ms = 200 }, emit) {
      for (let left = start; left > 0; left--) {
        emit({ left });
        await sleep(interval_ms);
      }
      return "liftoff";
    },
  },
];

// The initial state: no notes yet, and the configured limit.
export function init(config) {
  return { notes: [], max_notes: Number(config.max_notes ?? 20) };
}

// The settings this module reads from the host's config.
export function get_config_schema() {
  return {
    type: "object",
    properties: { max_notes: { type: "integer", minimum: 1, description: "at most this many notes" } },
  };
}

// `add note: "buy milk"` instead of the raw JSON; null leaves other tools alone.
export function format_tool_call_preview(toolName, args) {
  return toolName === "add_note" ? `add note: "${String(args.text ?? "").slice(0, 40)}"` : null;
}

// What a UI may show about this host (corral ext list --json, RPC ext_list).
export function get_ui_elements() {
  return [{ kind: "status", text: "notes live in this session's state" }];
}
