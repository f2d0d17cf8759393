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
 * Seqs are per engine (every engine's queue counts from 1), and one state directory may serve
 * one engine, then another: so every line names the engine it belongs to, as its base URL
 * (`<server>/e/<name>`, EngineLink.baseUrl; two deployments may both have a "default"). A
 * journal opened for one engine applies only that engine's lines and keeps the others' pending
 * outcomes in the file untouched, for when the host serves that engine again. Lines written
 * before the journal named engines cannot be proven to belong to any: they are ignored and
 * dropped on open (`ignoredUnkeyed` counts them). Such a command runs again, as it would have
 * without the journal; answering another engine's command with it would be worse, as that
 * engine would count a result delivered that its runner never got.
 *
 * Not covered: an engine deleted and made again under the same name (and server) restarts its
 * seqs too, and nothing the agent can read tells the two apart (the poll answer carries
 * commands only, and the gateway secret is derived from the name), so its journal is that of
 * the earlier engine: its pending acks would go to the new one. The operator who re-makes an
 * engine removes the file (docs/agent.md); a token swap, which also restarts the agent with a
 * new token, must keep it (acker.ts), so the token cannot stand in for the incarnation.
 *
 * An append-only file of JSON lines: `{"seq":1,"ok":true,"detail":"...","engine":"..."}` when
 * a command finishes and `{"acked":1,"engine":"..."}` once the engine confirmed the ack.
 * appendFileSync reaches the kernel before it returns, so a SIGKILL of the agent right after
 * loses nothing (a host crash could; then the command is simply executed again). Rewritten
 * compactly on open and whenever it has grown past a threshold.
 */
import { appendFileSync, mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";

export type Outcome = { ok: boolean; detail: string };

const COMPACT_AFTER_LINES = 10_000;
/** Acked outcomes remembered; far more than one poll's worth of commands (100) can be crossing their acks. */
const REMEMBER_ACKED = 10_000;

type Line = { seq: number; ok: boolean; detail: string; engine: string };

export class OutcomeJournal {
  private readonly pending = new Map<number, Outcome>();
  /** Other engines' pending outcomes, kept in the file as they were. */
  private readonly others = new Map<string, Line>();
  /** Recently acked outcomes, oldest first. */
  private readonly ackedRecently = new Map<number, Outcome>();
  private readonly path: string;
  private linesSinceCompact = 0;
  /** Pending outcomes of lines that name no engine, found on open and dropped. */
  readonly ignoredUnkeyed: number;

  constructor(
    stateDir: string,
    /** The engine whose commands this agent runs: its base URL, EngineLink.baseUrl. */
    private readonly engine: string,
  ) {
    mkdirSync(stateDir, { recursive: true });
    this.path = join(stateDir, "outcomes.jsonl");
    this.ignoredUnkeyed = this.load();
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
    this.append({ seq, ok: outcome.ok, detail: outcome.detail, engine: this.engine });
  }

  /** The engine has the ack: the outcome is no longer needed. */
  acked(seq: number): void {
    const outcome = this.pending.get(seq);
    if (outcome === undefined) return;
    this.pending.delete(seq);
    this.ackedRecently.set(seq, outcome);
    if (this.ackedRecently.size > REMEMBER_ACKED) this.ackedRecently.delete(this.ackedRecently.keys().next().value as number);
    this.append({ acked: seq, engine: this.engine });
  }

  private append(entry: object): void {
    appendFileSync(this.path, JSON.stringify(entry) + "\n");
    if (++this.linesSinceCompact >= COMPACT_AFTER_LINES) this.compact();
  }

  /** Reads the file; returns how many pending outcomes named no engine. */
  private load(): number {
    let text: string;
    try {
      text = readFileSync(this.path, "utf8");
    } catch {
      return 0;
    }
    const unkeyed = new Set<number>();
    for (const line of text.split("\n")) {
      if (line.trim() === "") continue;
      let e: { seq?: unknown; ok?: unknown; detail?: unknown; acked?: unknown; engine?: unknown };
      try {
        e = JSON.parse(line) as typeof e;
      } catch {
        continue; // a torn last line from a crash mid-write: that outcome is re-executed
      }
      if (typeof e.engine !== "string") {
        if (typeof e.acked === "number") unkeyed.delete(e.acked);
        else if (typeof e.seq === "number") unkeyed.add(e.seq);
        continue;
      }
      const mine = e.engine === this.engine;
      if (typeof e.acked === "number") {
        if (mine) this.pending.delete(e.acked);
        else this.others.delete(`${e.engine}\n${e.acked}`);
      } else if (typeof e.seq === "number" && typeof e.ok === "boolean") {
        const outcome = { ok: e.ok, detail: typeof e.detail === "string" ? e.detail : "" };
        if (mine) this.pending.set(e.seq, outcome);
        else this.others.set(`${e.engine}\n${e.seq}`, { seq: e.seq, ...outcome, engine: e.engine });
      }
    }
    return unkeyed.size;
  }

  private compact(): void {
    const tmp = `${this.path}.tmp`;
    const lines: Line[] = [...this.others.values(), ...[...this.pending].map(([seq, o]) => ({ seq, ok: o.ok, detail: o.detail, engine: this.engine }))];
    writeFileSync(tmp, lines.map((l) => JSON.stringify({ seq: l.seq, ok: l.ok, detail: l.detail, engine: l.engine }) + "\n").join(""));
    renameSync(tmp, this.path);
    this.linesSinceCompact = 0;
  }
}
