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
 * An engine deleted and made again under the same name (and server) restarts its seqs too: it
 * is told apart by its incarnation, which each poll answer names (protocol/commands.ts). Every
 * outcome is journaled with the incarnation of the answer that handed its command out, answers
 * a command handed out again only when that command comes with the same incarnation, and is
 * acked naming it: the engine refuses an ack of another incarnation as an unknown command
 * (404 `unknown_command`), so an outcome owed to a deleted engine is dropped (acker.ts) rather
 * than taken as the answer to the new engine's command of that seq. The incarnation cannot be
 * had from anything else the agent holds: the gateway secret is derived from the name, and a
 * token swap, which restarts the agent with a new token, must keep the journal (acker.ts).
 *
 * Lines without an incarnation (written by an agent before this field, or for a poll answer of
 * a Worker before it: `incarnation` null here) belong to this engine's name but to no known
 * incarnation. They never answer a command of a Worker that names incarnations (its commands
 * always carry one, "" included); their acks are still re-sent, without an incarnation, which
 * the engine takes unchecked. That is what an agent upgraded over a journal needs (its owed
 * acks are the running engine's, unless it was re-made before the upgrade without removing
 * the file, as docs/agent.md then said to), and dropping them instead would run every such
 * command again.
 *
 * An append-only file of JSON lines: `{"seq":1,"ok":true,"detail":"...","engine":"...","incarnation":"..."}`
 * when a command finishes and `{"acked":1,"engine":"...","incarnation":"..."}` once the engine
 * confirmed the ack (`incarnation` left out when null).
 * appendFileSync reaches the kernel before it returns, so a SIGKILL of the agent right after
 * loses nothing (a host crash could; then the command is simply executed again). Rewritten
 * compactly on open and whenever it has grown past a threshold.
 *
 * On a full disk the journal is a safeguard that cannot be kept, not a reason to stop: a rewrite
 * that fails leaves the file as it was and the journal appends to it; an append that fails throws
 * (the acker warns and acks anyway) and may leave part of its line, so the next line starts on a
 * line of its own rather than being glued to that part and lost with it.
 */
import { appendFileSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { PRIVATE_FILE_MODE, privateDir, writePrivateAtomic } from "./host-files";
import { describeError, type Logger } from "./log";

export type Outcome = { ok: boolean; detail: string };
/** The engine incarnation a poll answer named; null when it named none (a Worker before the field, or a line journaled before it). */
export type Incarnation = string | null;
/** An outcome the engine has not confirmed yet. */
export type Owed = { seq: number; incarnation: Incarnation; outcome: Outcome };

const COMPACT_AFTER_LINES = 10_000;
/** Acked outcomes remembered; far more than one poll's worth of commands (100) can be crossing their acks. */
const REMEMBER_ACKED = 10_000;

type Line = Owed & { engine: string };

/** A command of this engine's name: its seq is one only within its incarnation. */
export const commandKey = (seq: number, incarnation: Incarnation): string => JSON.stringify([seq, incarnation]);

export class OutcomeJournal {
  private readonly pending = new Map<string, Owed>();
  /** Other engines' pending outcomes, kept in the file as they were. */
  private readonly others = new Map<string, Line>();
  /** Recently acked outcomes, oldest first. */
  private readonly ackedRecently = new Map<string, Outcome>();
  readonly path: string;
  private linesSinceCompact = 0;
  /** The file may end in part of a line (a failed append, a crash mid-write): the next append starts a new line. */
  private torn = false;
  /** Pending outcomes of lines that name no engine, found on open and dropped. */
  readonly ignoredUnkeyed: number;

  constructor(
    stateDir: string,
    /** The engine whose commands this agent runs: its base URL, EngineLink.baseUrl. */
    private readonly engine: string,
    private readonly logger?: Logger,
  ) {
    privateDir(stateDir);
    this.path = join(stateDir, "outcomes.jsonl");
    this.ignoredUnkeyed = this.load();
    // Not fatal: an agent that cannot start on a full disk is restarted by systemd in a loop, and serves nobody.
    this.tryCompact("on open");
  }

  /** The outcome of a command of that incarnation this agent finished: not yet acknowledged by the engine, or acknowledged lately. */
  get(seq: number, incarnation: Incarnation): Outcome | undefined {
    const key = commandKey(seq, incarnation);
    return this.pending.get(key)?.outcome ?? this.ackedRecently.get(key);
  }

  unacked(): Owed[] {
    return [...this.pending.values()];
  }

  record(seq: number, incarnation: Incarnation, outcome: Outcome): void {
    this.pending.set(commandKey(seq, incarnation), { seq, incarnation, outcome });
    this.append(lineOf({ seq, incarnation, outcome, engine: this.engine }));
  }

  /** The engine has the ack (or refused it for good): the outcome is no longer needed. */
  acked(seq: number, incarnation: Incarnation): void {
    const key = commandKey(seq, incarnation);
    const owed = this.pending.get(key);
    if (owed === undefined) return;
    this.pending.delete(key);
    this.ackedRecently.set(key, owed.outcome);
    if (this.ackedRecently.size > REMEMBER_ACKED) this.ackedRecently.delete(this.ackedRecently.keys().next().value as string);
    this.append({ acked: seq, engine: this.engine, ...(incarnation === null ? {} : { incarnation }) });
  }

  private append(entry: object): void {
    const line = JSON.stringify(entry) + "\n";
    try {
      appendFileSync(this.path, this.torn ? "\n" + line : line, { mode: PRIVATE_FILE_MODE });
    } catch (e) {
      // What fit may be in the file: load() skips that part, and must not skip the next line with it.
      this.torn = true;
      throw e;
    }
    this.torn = false;
    if (++this.linesSinceCompact >= COMPACT_AFTER_LINES) this.tryCompact(`after ${COMPACT_AFTER_LINES} lines`);
  }

  /** Reads the file; returns how many pending outcomes named no engine. */
  private load(): number {
    let text: string;
    try {
      text = readFileSync(this.path, "utf8");
    } catch {
      return 0;
    }
    this.torn = text !== "" && !text.endsWith("\n");
    const unkeyed = new Set<number>();
    for (const line of text.split("\n")) {
      if (line.trim() === "") continue;
      let e: { seq?: unknown; ok?: unknown; detail?: unknown; acked?: unknown; engine?: unknown; incarnation?: unknown };
      try {
        e = JSON.parse(line) as typeof e;
      } catch {
        continue; // a torn last line from a crash mid-write: that outcome is re-executed
      }
      // Valid JSON that is no object (null, a number) is no outcome either.
      if (typeof e !== "object" || e === null) continue;
      if (typeof e.engine !== "string") {
        if (typeof e.acked === "number") unkeyed.delete(e.acked);
        else if (typeof e.seq === "number") unkeyed.add(e.seq);
        continue;
      }
      const mine = e.engine === this.engine;
      const incarnation = typeof e.incarnation === "string" ? e.incarnation : null;
      if (typeof e.acked === "number") {
        const key = commandKey(e.acked, incarnation);
        if (mine) this.pending.delete(key);
        else this.others.delete(`${e.engine}\n${key}`);
      } else if (typeof e.seq === "number" && typeof e.ok === "boolean") {
        const owed: Owed = { seq: e.seq, incarnation, outcome: { ok: e.ok, detail: typeof e.detail === "string" ? e.detail : "" } };
        const key = commandKey(e.seq, incarnation);
        if (mine) this.pending.set(key, owed);
        else this.others.set(`${e.engine}\n${key}`, { ...owed, engine: e.engine });
      }
    }
    return unkeyed.size;
  }

  /** Rewrites the file compactly; one that cannot be rewritten (a full disk) is left as it is, which the next lines are appended to. */
  private tryCompact(when: string): void {
    const lines: Line[] = [...this.others.values(), ...[...this.pending.values()].map((o) => ({ ...o, engine: this.engine }))];
    // Tried again only after as many lines more: each try on a full disk writes the whole file for nothing.
    this.linesSinceCompact = 0;
    try {
      writePrivateAtomic(this.path, lines.map((l) => JSON.stringify(lineOf(l)) + "\n").join(""));
    } catch (e) {
      this.logger?.warn(`could not rewrite ${this.path} ${when} (${describeError(e)}); appending to it as it is`);
      return;
    }
    this.torn = false;
  }
}

function lineOf(l: Line): object {
  return { seq: l.seq, ok: l.outcome.ok, detail: l.outcome.detail, engine: l.engine, ...(l.incarnation === null ? {} : { incarnation: l.incarnation }) };
}
