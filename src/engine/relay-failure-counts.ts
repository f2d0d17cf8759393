/**
 * The relayed calls of this engine that failed as their clients got them, as the Worker's
 * isolates report them (src/relay/relay-failures.ts), since this object started: beside the
 * calls it admitted (RelayAdmission.counts), so an overview tells calls served from calls
 * admitted and then lost (a gateway not reached, a model refusing the trainer's key).
 */
import { countFailures, type RelayFailureReport } from "../protocol/relay";

/** Kinds kept; past it, the rest count as "other" (a report names at most 32). */
const MAX_KINDS = 64;

/** The last failure's message as a token that does not read trajectories sees it. */
export const HIDDEN_WORDS = "[hidden: its words may quote a client's request; roles that read trajectories see them]";

export type RelayFailuresView = { failures: Record<string, number>; last_failure: RelayFailureReport["last"] | null };

export class RelayFailureCounts {
  private readonly counts = new Map<string, number>();
  private last: RelayFailureReport["last"] | null = null;

  add(report: RelayFailureReport): void {
    for (const [kind, n] of Object.entries(report.counts)) {
      if (!Number.isSafeInteger(n) || n <= 0) continue;
      countFailures(this.counts, kind, n, MAX_KINDS);
    }
    // Reports from several isolates arrive in any order: the latest failure is the latest by time.
    if (this.last === null || report.last.at >= this.last.at) this.last = report.last;
  }

  /**
   * `words`: whether the reader sees the last failure's message. An upstream's error may quote
   * the request (vLLM's validation errors quote its messages): the words are for the roles that
   * read every client's prompts in the trajectories, not for clients.
   */
  view(words: boolean): RelayFailuresView {
    const last = this.last === null || words ? this.last : { ...this.last, message: HIDDEN_WORDS };
    return { failures: Object.fromEntries(this.counts), last_failure: last };
  }
}
