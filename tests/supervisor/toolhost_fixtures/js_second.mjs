// JavaScript tool module for the runner tests: a second module with its own preview.
export const tools = [{ name: "second", description: "The second module's tool.", execute: () => "second" }];
export const format_tool_call_preview = (toolName) => (toolName === "second" ? "second's own preview" : null);
