// A TypeScript tool module (erasable types only: what Node's type stripping runs).

interface Args {
  text: string;
  times?: number;
}

type State = { said?: number };

function repeat(text: string, times: number): string {
  return Array.from({ length: times }, () => text).join(" ");
}

export const tools = [
  {
    name: "say",
    description: "Say the text, `times` times.",
    parameters: {
      type: "object",
      properties: { text: { type: "string" }, times: { type: "integer" } },
      required: ["text"],
    },
    execute(args: Args, ctx: { state: State }): string {
      ctx.state.said = (ctx.state.said ?? 0) + 1;
      return `${repeat(args.text, args.times ?? 1)} (${ctx.state.said})`;
    },
  },
];

export function init(config: Record<string, unknown>): State {
  return { said: Number(config.said ?? 0) };
}
