/**
 * Relayed calls that failed as their clients got them (refused at admission, the gateway not
 * reached or refusing, the model failing or too slow), counted in the Worker and sent to their
 * engine. The engine counts the calls it admits; without these, calls whose gateway could not be
 * reached read in its overview as calls served. Sent at most once per SEND_MS per engine and
 * isolate, and only when some failed: a relay that works sends nothing more. An isolate keeps
 * one tally per engine beside its claim gate (claim-gates.ts).
 */
import { headOf } from "../protocol/limits";
import { countFailures, type OpenAIError, type RelayFailureReport } from "../protocol/relay";

/** How long failures gather before they go to the engine. */
export const SEND_MS = 1_000;
/** Kinds of failure one report names; past it, the rest count as "other". */
const MAX_KINDS = 32;

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
    const kind = headOf(`${status} ${error.error.code ?? error.error.type}`, 80);
    countFailures(this.counts, kind, 1, MAX_KINDS);
    this.last = { kind, message: headOf(error.error.message, 500), at };
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
      for (const [kind, n] of Object.entries(counts)) countFailures(this.counts, kind, n, MAX_KINDS);
      this.last ??= last;
    }
  }
}
