// JavaScript tool module (CommonJS) for the runner tests: one tool, no hooks.
module.exports = {
  tools: [
    {
      name: "plain",
      description: "Says what it got.",
      parameters: { type: "object", properties: { x: { oneOf: [{ type: "integer" }, { type: "string" }] } } },
      execute: (args) => `plain got ${JSON.stringify(args.x)}`,
    },
  ],
};
