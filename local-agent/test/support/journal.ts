import { readFileSync } from "node:fs";
import { join } from "node:path";

/** Unacked outcomes an agent's journal (<stateDir>/outcomes.jsonl) holds, of any engine or incarnation, read without touching the file. */
export function journaledOutcomes(stateDir: string): number {
  let text = "";
  try {
    text = readFileSync(join(stateDir, "outcomes.jsonl"), "utf8");
  } catch {
    return 0;
  }
  const pending = new Set<string>();
  for (const line of text.split("\n")) {
    let e: { seq?: unknown; acked?: unknown; engine?: unknown; incarnation?: unknown };
    try {
      e = JSON.parse(line) as typeof e;
    } catch {
      continue; // blank, or torn mid-write
    }
    const engine = typeof e.engine === "string" ? e.engine : "";
    // An ack of one incarnation of the engine does not settle the same seq of another.
    const incarnation = typeof e.incarnation === "string" ? `\n${e.incarnation}` : "";
    if (typeof e.acked === "number") pending.delete(`${engine}\n${e.acked}${incarnation}`);
    else if (typeof e.seq === "number") pending.add(`${engine}\n${e.seq}${incarnation}`);
  }
  return pending.size;
}
