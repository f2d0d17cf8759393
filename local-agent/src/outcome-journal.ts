/**
 * Outcomes of commands the agent finished but the engine has not yet heard about.
 *
 * Why it exists: an AgentJet runner stops listening once it has acked a result. If the agent
 * delivered a result and then died (or lost the Worker) before its ack reached the engine,
 * the engine hands the command out again; delivering it a second time would find nobody
 * listening and wrongly report the result undeliverable. So an outcome is appended here the
 * moment it is known, before the ack is sent, and a redelivered command whose outcome is here
 * is answered from the journal instead of being executed again.
 *
 * An acked outcome is still remembered for a while, in memory: a poll answer that left the
 * engine just before the ack landed can reach the agent after the ack's answer, and that
 * command must not run again either. After a restart no such answer is on its way (the
 * dead process's polls died with it), so the file need not keep them.
 *
 * An append-only file of JSON lines: `{"seq":1,"ok":true,"detail":"..."}` when a command
 * finishes and `{"acked":1}` once the engine confirmed the ack. appendFileSync reaches the
 * kernel before it returns, so a SIGKILL of the agent right after loses nothing (a host
 * crash could; then the command is simply executed again). Rewritten compactly on open and
 * whenever it has grown past a threshold.
 */
import { appendFileSync, mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";

export type Outcome = { ok: boolean; detail: string };

const COMPACT_AFTER_LINES = 10_000;
/** Acked outcomes remembered; far more than one poll's worth of commands (100) can be crossing their acks. */
const REMEMBER_ACKED = 10_000;

export class OutcomeJournal {
  private readonly pending = new Map<number, Outcome>();
  /** Recently acked outcomes, oldest first. */
  private readonly ackedRecently = new Map<number, Outcome>();
  private readonly path: string;
  private linesSinceCompact = 0;

  constructor(stateDir: string) {
    mkdirSync(stateDir, { recursive: true });
    this.path = join(stateDir, "outcomes.jsonl");
    this.load();
    this.compact();
  }

  /** The outcome of a command this agent finished: not yet acknowledged by the engine, or acknowledged lately. */
  get(seq: number): Outcome | undefined {
    return this.pending.get(seq) ?? this.ackedRecently.get(seq);
  }

  unacked(): Array<[number, Outcome]> {
    return [...this.pending.entries()];
  }

  record(seq: number, outcome: Outcome): void {
    this.pending.set(seq, outcome);
    this.append({ seq, ok: outcome.ok, detail: outcome.detail });
  }

  /** The engine has the ack: the outcome is no longer needed. */
  acked(seq: number): void {
    const outcome = this.pending.get(seq);
    if (outcome === undefined) return;
    this.pending.delete(seq);
    this.ackedRecently.set(seq, outcome);
    if (this.ackedRecently.size > REMEMBER_ACKED) this.ackedRecently.delete(this.ackedRecently.keys().next().value as number);
    this.append({ acked: seq });
  }

  private append(entry: object): void {
    appendFileSync(this.path, JSON.stringify(entry) + "\n");
    if (++this.linesSinceCompact >= COMPACT_AFTER_LINES) this.compact();
  }

  private load(): void {
    let text: string;
    try {
      text = readFileSync(this.path, "utf8");
    } catch {
      return;
    }
    for (const line of text.split("\n")) {
      if (line.trim() === "") continue;
      let e: { seq?: unknown; ok?: unknown; detail?: unknown; acked?: unknown };
      try {
        e = JSON.parse(line) as typeof e;
      } catch {
        continue; // a torn last line from a crash mid-write: that outcome is re-executed
      }
      if (typeof e.acked === "number") this.pending.delete(e.acked);
      else if (typeof e.seq === "number" && typeof e.ok === "boolean") this.pending.set(e.seq, { ok: e.ok, detail: typeof e.detail === "string" ? e.detail : "" });
    }
  }

  private compact(): void {
    const tmp = `${this.path}.tmp`;
    writeFileSync(tmp, [...this.pending].map(([seq, o]) => JSON.stringify({ seq, ok: o.ok, detail: o.detail }) + "\n").join(""));
    renameSync(tmp, this.path);
    this.linesSinceCompact = 0;
  }
}
