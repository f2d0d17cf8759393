/**
 * Recorded calls the shipper could not send before the agent stopped, kept in the state
 * directory for the next start to send: an agent restarted while the exchange is down (an
 * upgrade, a host reboot in an outage) lost every call its queue held, up to 64 MiB of
 * trajectories. Only a stop writes the file (a SIGKILLed agent's queue is lost with its memory),
 * and the next start of the same engine takes it whole and removes it. The exchange records a
 * call once by its id, so a call sent again (one of a batch in flight at the stop) is counted a
 * duplicate, not stored twice.
 *
 * As the outcome journal does, every line names its engine by base URL, and one state directory
 * may serve one engine, then another: a start takes its own engine's lines and leaves the others'.
 * An engine deleted and made again under the same name and server takes the old one's calls;
 * the exchange stores them under claims it never had, where retention removes them.
 *
 * One JSON line a call: `{"engine": ..., "record": CallRecord, "bytes": n, "media": [[sha256, data], ...]}`.
 */
import { existsSync, readFileSync, unlinkSync } from "node:fs";
import { join } from "node:path";
import type { CallRecord } from "../../../src/protocol/ledger";
import { writePrivateAtomic } from "../host-files";
import { describeError, type Logger } from "../log";
import type { MediaSet } from "./media";

/** A call as the shipper queued it: its record, the record's bytes, and the media it names. */
export type SpooledCall = { record: CallRecord; bytes: number; media: MediaSet };

type Line = { engine: string; record: CallRecord; bytes: number; media: [string, string][] };

const isLine = (v: unknown): v is Line => {
  if (typeof v !== "object" || v === null) return false;
  const l = v as Partial<Line>;
  return (
    typeof l.engine === "string" &&
    typeof l.record === "object" &&
    l.record !== null &&
    typeof l.record.call_id === "string" &&
    typeof l.bytes === "number" &&
    Array.isArray(l.media) &&
    l.media.every((m) => Array.isArray(m) && m.length === 2 && typeof m[0] === "string" && typeof m[1] === "string")
  );
};

export class LedgerSpool {
  readonly path: string;

  constructor(
    stateDir: string,
    /** The engine the calls were recorded for: its base URL, as the outcome journal names it. */
    private readonly engine: string,
    private readonly logger: Logger,
  ) {
    this.path = join(stateDir, "ledger-spool.jsonl");
  }

  /** This engine's calls kept by the last stop, oldest first; the file keeps only other engines' after this. */
  take(): SpooledCall[] {
    if (!existsSync(this.path)) return [];
    let text: string;
    try {
      text = readFileSync(this.path, "utf8");
    } catch (e) {
      this.logger.warn(`ledger: could not read ${this.path} (${describeError(e)}): the recorded calls it keeps wait there`);
      return [];
    }
    const ours: SpooledCall[] = [];
    const others: string[] = [];
    let unreadable = 0;
    for (const lineText of text.split("\n")) {
      if (lineText === "") continue;
      let line: unknown;
      try {
        line = JSON.parse(lineText);
      } catch {
        line = null;
      }
      if (!isLine(line)) unreadable++;
      else if (line.engine !== this.engine) others.push(lineText);
      else ours.push({ record: line.record, bytes: line.bytes, media: new Map(line.media) });
    }
    if (unreadable > 0) this.logger.warn(`ledger: ${unreadable} line${unreadable === 1 ? "" : "s"} of ${this.path} could not be read and were dropped`);
    try {
      if (others.length === 0) unlinkSync(this.path);
      else writePrivateAtomic(this.path, others.join("\n") + "\n");
    } catch (e) {
      // Sent again at the next start rather than never: the exchange counts them duplicates.
      this.logger.warn(`ledger: could not rewrite ${this.path} (${describeError(e)}): its calls are sent now and may be sent again at the next start`);
    }
    return ours;
  }

  /** Adds `calls` to the file for the next start of this engine; false (said in the log) when they cannot be kept. */
  keep(calls: readonly SpooledCall[]): boolean {
    if (calls.length === 0) return true;
    try {
      const before = existsSync(this.path) ? readFileSync(this.path, "utf8") : "";
      const added = calls.map((c) => JSON.stringify({ engine: this.engine, record: c.record, bytes: c.bytes, media: [...c.media] } satisfies Line)).join("\n");
      writePrivateAtomic(this.path, `${before}${before === "" || before.endsWith("\n") ? "" : "\n"}${added}\n`);
      return true;
    } catch (e) {
      this.logger.warn(`ledger: could not keep ${calls.length} recorded call${calls.length === 1 ? "" : "s"} in ${this.path} for the next start (${describeError(e)}): they are lost`);
      return false;
    }
  }
}
