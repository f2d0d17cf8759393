/**
 * Relayed calls that failed as their clients got them (refused at admission, the gateway not
 * reached or refusing, the model failing or too slow), counted in the Worker and sent to their
 * engine. The engine counts the calls it admits; without these, calls whose gateway could not be
 * reached read in its overview as calls served. Sent at most once per SEND_MS per engine and
 * isolate, and only when some failed: a relay that works sends nothing more.
 */
import type { Env } from "../env";
import { engineStub } from "../http/engine-stub";
import type { RelayFailureReport } from "../protocol/relay";
import type { OpenAIError } from "../protocol/relay";

/** How long failures gather before they go to the engine. */
export const SEND_MS = 1_000;
/** Kinds of failure one report names; past it, the rest count as "other". */
const MAX_KINDS = 32;
/** Engines whose failures an isolate keeps; past it the oldest goes, its unsent count lost. */
const MAX_ENGINES = 1_000;

type Background = (work: Promise<unknown>) => void;
type Wait = (ms: number) => Promise<void>;

/** One engine's failures in this isolate since its last report. */
export class FailureTally {
  private counts = new Map<string, number>();
  private last: RelayFailureReport["last"] | null = null;
  private scheduled = false;

  constructor(
    private readonly send: (report: RelayFailureReport) => Promise<unknown>,
    private readonly wait: Wait = (ms) => new Promise((r) => setTimeout(r, ms)),
  ) {}

  /** A call answered `status` with `error`, at `at` (ms); the report goes out within SEND_MS. */
  note(status: number, error: OpenAIError, at: number, background: Background): void {
    const kind = `${status} ${error.error.code ?? error.error.type}`.slice(0, 80);
    const counted = this.counts.has(kind) || this.counts.size < MAX_KINDS ? kind : "other";
    this.counts.set(counted, (this.counts.get(counted) ?? 0) + 1);
    this.last = { kind, message: error.error.message.slice(0, 500), at };
    if (this.scheduled) return;
    this.scheduled = true;
    background(this.wait(SEND_MS).then(() => this.flush()));
  }

  /** Sends what was counted now (nothing when nothing failed); a send that fails keeps the counts for the next. */
  async flush(): Promise<void> {
    this.scheduled = false;
    const last = this.last;
    if (last === null) return;
    const counts = Object.fromEntries(this.counts);
    this.counts = new Map();
    this.last = null;
    try {
      await this.send({ counts, last });
    } catch (e) {
      console.error("relay: sending failed calls' counts to the engine failed", e);
      for (const [kind, n] of Object.entries(counts)) this.counts.set(kind, (this.counts.get(kind) ?? 0) + n);
      this.last ??= last;
    }
  }
}

const tallies = new WeakMap<Env["ENGINE"], Map<string, FailureTally>>();

/** The isolate's tally of an engine's failed calls. */
export function relayFailures(env: Pick<Env, "ENGINE" | "DB">, engine: string): FailureTally {
  let byEngine = tallies.get(env.ENGINE);
  if (byEngine === undefined) tallies.set(env.ENGINE, (byEngine = new Map()));
  let tally = byEngine.get(engine);
  if (tally === undefined) {
    if (byEngine.size >= MAX_ENGINES) byEngine.delete(byEngine.keys().next().value as string);
    tally = new FailureTally(async (report) => {
      const stub = await engineStub(env, engine);
      if (stub !== null) await stub.relayFailures(report);
    });
    byEngine.set(engine, tally);
  }
  return tally;
}

/** Before a read of the engine in this isolate: its failures counted here go first. */
export async function flushRelayFailures(env: Pick<Env, "ENGINE">, engine: string): Promise<void> {
  await tallies.get(env.ENGINE)?.get(engine)?.flush();
}
