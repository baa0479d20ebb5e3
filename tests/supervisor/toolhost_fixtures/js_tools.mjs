// JavaScript tool module (ES module) for the runner tests: tools and every optional hook.

const meetings = new Map();

function meeting(n) {
  let m = meetings.get(n);
  if (!m) {
    let open;
    m = { count: 0, ready: new Promise((resolve) => (open = resolve)) };
    m.open = open;
    meetings.set(n, m);
  }
  return m;
}

const object = (properties, required = []) => ({ type: "object", properties, required });

export const tools = [
  {
    name: "echo",
    description: "Echo the text, streaming `parts` parts first.",
    parameters: object({ text: { type: "string" }, parts: { type: "integer" } }, ["text"]),
    stateless: true,
    execute(args, emit) {
      for (let i = 0; i < (args.parts ?? 0); i++) emit({ part: i });
      return args.text;
    },
  },
  {
    name: "count",
    description: "Add one to the state's counter.",
    execute(args, { state }) {
      state.count = (state.count ?? 0) + 1;
      return state.count;
    },
  },
  {
    name: "meet",
    description: "Wait until n calls run at once.",
    parameters: object({ n: { type: "integer" }, tag: { type: "string" } }, ["n", "tag"]),
    stateless: true,
    async execute({ n, tag }) {
      const m = meeting(n);
      if (++m.count >= n) m.open();
      let timer;
      const late = new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error("calls did not overlap")), 20000);
      });
      await Promise.race([m.ready, late]);
      clearTimeout(timer);
      return tag;
    },
  },
  {
    name: "misdeclared",
    description: "Says it is stateless, then reads ctx.state.",
    stateless: true,
    execute: (args, ctx) => ctx.state.count,
  },
  {
    name: "length",
    description: "The length of the text.",
    parameters: object({ text: { type: "string" } }, ["text"]),
    execute: ({ text }) => text.length,
  },
  {
    name: "big",
    description: "A result of `size` bytes.",
    parameters: object({ size: { type: "integer" } }, ["size"]),
    execute: ({ size }) => "x".repeat(size),
  },
  {
    name: "boom",
    description: "Raises.",
    execute() {
      throw new RangeError("kaboom");
    },
  },
  {
    name: "refuse",
    description: "Fails the way the model should see.",
    execute: () => ({ success: false, error: "refused on purpose" }),
  },
  {
    name: "slurp",
    description: "Reads process.stdin to its end: how many bytes it got.",
    execute() {
      return new Promise((resolve) => {
        let n = 0;
        process.stdin.on("data", (chunk) => (n += chunk.length)).on("end", () => resolve(n));
      });
    },
  },
  {
    name: "noisy",
    description: "Writes to stdout every way it can.",
    execute() {
      console.log("noise from console.log");
      console.info("noise from console.info");
      process.stdout.write("noise from process.stdout\n");
      return "quiet";
    },
  },
];

export const init = (config) => ({ count: Number(config.start ?? 0) });
export const get_config_schema = () => object({ start: { type: "integer" } });
export const get_ui_elements = () => [{ kind: "status", text: "js tools" }];
export const get_tags = (config, models) => ["js", ...models.filter((m) => m?.id).map((m) => m.id)];
export const required_tags = () => ["tools"];
export function format_tool_result(result) {
  if (result?.result === "native") {
    return {
      type: "provider_native_tool_result",
      format: "openai.responses",
      content: [{ type: "input_text", text: "native" }],
    };
  }
  return `formatted: ${result?.result}`;
}
export const format_tool_call_preview = (toolName) => `js preview of ${toolName}`;
export const to_display_format = async (text, result, state) => ({ markdown: `**${text}**`, count: state.count });
