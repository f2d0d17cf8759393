/**
 * Acknowledges finished commands to the engine, retrying until the engine has the ack.
 * Outcomes go to the journal first (see outcome-journal.ts), so neither a Worker outage nor an
 * agent restart can lose one or cause its command to be executed twice.
 */
import { ExchangeError } from "../../src/client";
import { Backoff, type BackoffOptions } from "./backoff";
import { isTransient, type EngineLink } from "./engine-link";
import { describeError, type Logger } from "./log";
import type { Outcome, OutcomeJournal } from "./outcome-journal";
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
  private readonly sending = new Set<number>();
  private readonly inflight = new Set<Promise<void>>();

  constructor(private readonly d: AckerDeps) {}

  /** Records a command's outcome durably, then acks it. */
  finish(seq: number, outcome: Outcome): Promise<void> {
    this.d.journal.record(seq, outcome);
    return this.send(seq, outcome);
  }

  /** Acks an outcome until the engine has it (or the agent stops; the journal keeps it then). */
  send(seq: number, outcome: Outcome): Promise<void> {
    if (this.sending.has(seq)) return Promise.resolve();
    this.sending.add(seq);
    const p = this.loop(seq, outcome).finally(() => {
      this.sending.delete(seq);
      this.inflight.delete(p);
    });
    this.inflight.add(p);
    return p;
  }

  /**
   * After a restart: acks whose outcome was recorded but never confirmed. `settled` resolves
   * once each has been answered (or given up), which is when polling may start.
   */
  resendJournal(): { count: number; settled: Promise<void> } {
    const pending = this.d.journal.unacked();
    const sends = pending.map(([seq, outcome]) => this.send(seq, outcome));
    return { count: pending.length, settled: Promise.allSettled(sends).then(() => undefined) };
  }

  get pending(): number {
    return this.sending.size;
  }

  /** Resolves once every ack under way has been sent or given up. */
  async drain(): Promise<void> {
    while (this.inflight.size > 0) await Promise.allSettled([...this.inflight]);
  }

  private async loop(seq: number, outcome: Outcome): Promise<void> {
    const backoff = new Backoff(this.d.backoff);
    while (!this.d.stop.aborted) {
      try {
        const r = await this.d.link.client.ackCommand({ seq, ok: outcome.ok, detail: outcome.detail });
        this.d.reach.succeeded();
        this.d.journal.acked(seq);
        if (!r.first_ack) this.d.logger.info(`command ${seq} had already been acked; the engine ignored the repeat`);
        return;
      } catch (e) {
        if (this.d.stop.aborted) return;
        if (!isTransient(e)) {
          // 4xx: the engine will never take this ack (an unknown seq, a revoked token). Keeping it would retry forever.
          const why = e instanceof ExchangeError ? e.message : describeError(e);
          this.d.logger.error(`the exchange refused the ack of command ${seq} (${why}); dropping it`);
          this.d.journal.acked(seq);
          return;
        }
        this.d.reach.failed(`acking command ${seq}`, e);
        await this.d.reach.pause(backoff.next(), this.d.stop);
      }
    }
  }
}
