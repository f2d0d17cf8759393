/**
 * What an engine remembers of its agent's answers beyond the command queue: the latest
 * refusals (commands acked with ok=false, in the agent's words) for the overview and the
 * dashboard; otherwise only the agent's own log would say why it did not do something.
 *
 * Kept in the engine's kv table and written only when a command is refused: never on the ack
 * of a delivered result.
 */
import { MAX_REFUSALS, type CommandRefusal } from "../protocol/agent";
import type { CommandBody } from "../protocol/commands";

type Kv = { get<T>(k: string): T | null; set(k: string, v: unknown): void };

const REFUSALS = "refusals";

export class CommandOutcomes {
  constructor(private readonly kv: Kv) {}

  acked(seq: number, body: CommandBody, ok: boolean, detail: string, nowMs: number): void {
    // Results the agent could not deliver have their own list (the overview's `undeliverable`);
    // at delivery rates they would crowd every other refusal out of this one.
    if (ok || body.kind === "deliver") return;
    const refusal: CommandRefusal = { seq, kind: body.kind, detail, at: nowMs / 1000 };
    this.kv.set(REFUSALS, [refusal, ...this.refusals()].slice(0, MAX_REFUSALS));
  }

  refusals(): CommandRefusal[] {
    return this.kv.get<CommandRefusal[]>(REFUSALS) ?? [];
  }
}
