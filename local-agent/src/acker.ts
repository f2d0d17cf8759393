/**
 * Acknowledges finished commands to the engine, retrying until the engine has the ack.
 * Outcomes go to the journal first (see outcome-journal.ts), so neither a Worker outage nor an
 * agent restart can lose one or cause its command to be executed twice.
 */
import { ExchangeError } from "../../src/client";
import { Backoff, type BackoffOptions } from "./backoff";
import { isTransient, type EngineLink } from "./engine-link";
import { InFlight } from "./in-flight";
import { describeError, type Logger } from "./log";
import { commandKey, type Incarnation, type Outcome, type OutcomeJournal } from "./outcome-journal";
import type { Reachability } from "./reachability";

export type AckerDeps = {
  link: EngineLink;
  journal: OutcomeJournal;
  reach: Reachability;
  logger: Logger;
  backoff: BackoffOptions;
  stop: AbortSignal;
};

export class Acker {
  /** By commandKey: one engine name's seqs repeat across its incarnations. */
  private readonly sending = new Set<string>();
  private readonly inflight = new InFlight();
  /** Why the journal last could not be written (its error code), null while it can: said once, not per command. */
  private journalFailing: string | null = null;

  constructor(private readonly d: AckerDeps) {}

  /** Records the outcome of a command of `incarnation` durably (if the disk lets it), then acks it. */
  finish(seq: number, incarnation: Incarnation, outcome: Outcome): Promise<void> {
    this.journaled(() => this.d.journal.record(seq, incarnation, outcome), "finished commands are acked without it (one whose ack a crash loses runs again)");
    return this.send(seq, incarnation, outcome);
  }

  /** Acks an outcome until the engine has it (or the agent stops; the journal keeps it then). */
  send(seq: number, incarnation: Incarnation, outcome: Outcome): Promise<void> {
    const key = commandKey(seq, incarnation);
    if (this.sending.has(key)) return Promise.resolve();
    this.sending.add(key);
    return this.inflight.track(this.loop(seq, incarnation, outcome).finally(() => this.sending.delete(key)));
  }

  /**
   * After a restart: acks whose outcome was recorded but never confirmed. `settled` resolves
   * once each has been answered (or given up), which is when polling may start.
   */
  resendJournal(): { count: number; settled: Promise<void> } {
    const pending = this.d.journal.unacked();
    // Each with its own incarnation: an outcome owed to an engine deleted since is refused 404 and dropped.
    const sends = pending.map((o) => this.send(o.seq, o.incarnation, o.outcome));
    return { count: pending.length, settled: Promise.allSettled(sends).then(() => undefined) };
  }

  get pending(): number {
    return this.sending.size;
  }

  /** Resolves once every ack under way has been sent or given up. */
  async drain(): Promise<void> {
    while (this.inflight.size > 0) await this.inflight.settled();
  }

  private async loop(seq: number, incarnation: Incarnation, outcome: Outcome): Promise<void> {
    const backoff = new Backoff(this.d.backoff);
    let refusedFor: string | null = null;
    while (!this.d.stop.aborted) {
      let firstAck: boolean;
      try {
        // Null (an outcome of no known incarnation) is left out, and the engine takes the ack unchecked.
        firstAck = (await this.d.link.client.ackCommand({ seq, ok: outcome.ok, detail: outcome.detail, ...(incarnation === null ? {} : { incarnation }) })).first_ack;
      } catch (e) {
        if (this.d.stop.aborted) return;
        if (isTransient(e)) {
          this.d.reach.failed(`acking command ${seq}`, e);
        } else {
          const why = e instanceof ExchangeError ? e.message : describeError(e);
          if (refusedForGood(e)) {
            this.d.logger.error(`the exchange refused the ack of command ${seq} (${why}) and can never take it; dropping it`);
            this.journaled(() => this.d.journal.acked(seq, incarnation), DONE_UNJOURNALED);
            return;
          }
          // Logged once per reason: the ack is retried (and kept in the journal) until it is taken.
          if (refusedFor !== why) this.d.logger.error(`the exchange refused the ack of command ${seq} (${why}); keeping it and retrying, check the engine name and the trainer token`);
          refusedFor = why;
        }
        await this.d.reach.pause(backoff.next(), this.d.stop, e);
        continue;
      }
      this.d.reach.succeeded();
      // Outside the try: the exchange took the ack, and a local disk error is not an exchange outage.
      this.journaled(() => this.d.journal.acked(seq, incarnation), DONE_UNJOURNALED);
      if (!firstAck) this.d.logger.info(`command ${seq} had already been acked; the engine ignored the repeat`);
      else if (refusedFor !== null) this.d.logger.info(`the exchange took the ack of command ${seq} it had refused`);
      return;
    }
  }

  /**
   * The journal is a safeguard against a crash, not a gate: a write it cannot make (a full disk)
   * does not hold an ack back, which would leave the engine waiting out the command's lease. Said
   * once per kind of failure, and once more when the journal can be written again.
   */
  private journaled(write: () => void, consequence: string): void {
    try {
      write();
    } catch (e) {
      const kind = (e as NodeJS.ErrnoException).code ?? describeError(e);
      if (this.journalFailing !== kind) this.d.logger.warn(`cannot write ${this.d.journal.path} (${describeError(e)}): ${consequence}; free space on that disk`);
      this.journalFailing = kind;
      return;
    }
    if (this.journalFailing !== null) this.d.logger.info(`${this.d.journal.path} can be written again`);
    this.journalFailing = null;
  }
}

/** Why a failed "acked" line does no harm. */
const DONE_UNJOURNALED = "acks the engine took are not noted (after a restart they are sent again, and ignored)";

/**
 * Whether the engine said an ack (or another report of the agent's) can never be taken, so that
 * keeping it would only retry for ever. Dropping one forgets the command's outcome (it is marked acked in the journal), so a
 * command handed out again later runs again: a delivered result would reach a runner that no
 * longer listens and be counted undeliverable. Hence only:
 *
 * - 404 `unknown_command`: the engine has no command with that seq and never will (seqs only
 *   grow; one acked and deleted since is answered `first_ack: false`, not 404), or the ack names
 *   another incarnation of the engine, one deleted since whose name was used again;
 * - 400, 413, 422: the ack itself is malformed or too large; the same ack is refused again.
 *
 * Everything else stays pending and is retried with backoff, as the command loop keeps polling:
 * 401 and 403 (a token revoked or being replaced; a restart with the new one re-sends the ack
 * from the journal), 404 for the engine itself (a wrong or not yet re-made engine name), 409 (a
 * conflict with the engine's state, which passes), and any 4xx this rule does not know.
 */
export function refusedForGood(e: unknown): boolean {
  if (!(e instanceof ExchangeError)) return false;
  if (e.status === 404) return e.code === "unknown_command";
  return e.status === 400 || e.status === 413 || e.status === 422;
}
