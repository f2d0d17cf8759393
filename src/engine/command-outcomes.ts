/**
 * What an engine remembers of its agent's answers beyond the command queue: the latest
 * refusals (commands acked with ok=false, in the agent's words) for the overview and the
 * dashboard, and where the last environment scan stands, for the training-run catalog (whose
 * environments live in D1, where nothing says a scan was asked for or refused).
 *
 * Both are kept in the engine's kv table and written only when a command is refused or a scan
 * is asked for, answered or reported: never on the ack of a delivered result.
 */
import { MAX_REFUSALS, type CommandRefusal } from "../protocol/agent";
import type { CommandBody } from "../protocol/commands";

/** The last scan asked for: queued or under way, answered, or refused; `reported` once the agent reported a catalog since. */
export type ScanRecord = { seq: number | null; state: "pending" | "done" | "failed" | "reported"; detail: string };

type Kv = { get<T>(k: string): T | null; set(k: string, v: unknown): void };

const REFUSALS = "refusals";
const LAST_SCAN = "last_scan";

export class CommandOutcomes {
  constructor(private readonly kv: Kv) {}

  queued(seq: number, body: CommandBody): void {
    if (body.kind === "scan_environments") this.kv.set(LAST_SCAN, { seq, state: "pending", detail: "" } satisfies ScanRecord);
  }

  acked(seq: number, body: CommandBody, ok: boolean, detail: string, nowMs: number): void {
    if (body.kind === "scan_environments") {
      const last = this.lastScan();
      // A late answer to an older scan leaves a newer scan's record alone.
      if (last === null || last.seq === null || last.seq <= seq) this.kv.set(LAST_SCAN, { seq, state: ok ? "done" : "failed", detail } satisfies ScanRecord);
    }
    // Results the agent could not deliver have their own list (the overview's `undeliverable`);
    // at delivery rates they would crowd every other refusal out of this one.
    if (ok || body.kind === "deliver") return;
    const refusal: CommandRefusal = { seq, kind: body.kind, detail, at: nowMs / 1000 };
    this.kv.set(REFUSALS, [refusal, ...this.refusals()].slice(0, MAX_REFUSALS));
  }

  /** The agent reported a catalog (a scan it ran on its own, at start-up, counts too): whatever failed before is behind it. */
  catalogReported(): void {
    const last = this.lastScan();
    if (last?.state === "pending") return; // the scan asked for is still to answer
    this.kv.set(LAST_SCAN, { seq: last?.seq ?? null, state: "reported", detail: "" } satisfies ScanRecord);
  }

  refusals(): CommandRefusal[] {
    return this.kv.get<CommandRefusal[]>(REFUSALS) ?? [];
  }

  lastScan(): ScanRecord | null {
    return this.kv.get<ScanRecord>(LAST_SCAN);
  }
}
