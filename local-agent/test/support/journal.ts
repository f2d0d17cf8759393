import { readFileSync } from "node:fs";
import { join } from "node:path";

/** Outcomes an agent's journal (<stateDir>/outcomes.jsonl) holds, read without touching the file. */
export function journaledOutcomes(stateDir: string): number {
  let text = "";
  try {
    text = readFileSync(join(stateDir, "outcomes.jsonl"), "utf8");
  } catch {
    return 0;
  }
  return text.split("\n").filter((l) => l.startsWith('{"seq":')).length;
}
