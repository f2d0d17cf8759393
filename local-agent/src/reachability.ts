/**
 * Whether the Worker currently answers, shared by every loop that talks to it. An outage is
 * logged once when it starts, with a progress line every 30 s while it lasts, and once when it
 * ends: a Worker that is down for an hour with 500 acks waiting does not produce 500 lines a
 * second, and the operator still sees that the agent is alive and waiting.
 *
 * It is also the loops' shared wake-up: each loop backs off on its own (up to 30 s), so without
 * it a poll could sleep out its backoff long after the heartbeat got through. A wait begun
 * through `pause` ends as soon as any request is answered again. An agent's first request after
 * an outage is still jittered by its own backoff, so a fleet that lost the Worker together does
 * not come back together.
 *
 * A 429's Retry-After is the exception: the exchange limits requests per token, so every loop's,
 * and asks that none come back before then. A wait for it is not cut short by another request's
 * answer, and a loop whose own request failed otherwise meanwhile waits it out too.
 */
import { ExchangeError } from "../../src/client";
import type { Clock } from "./clock";
import { describeError, type Logger } from "./log";

const PROGRESS_EVERY_MS = 30_000;
/** Loops held back by one Retry-After wake spread over up to this much more, not all at once. */
const RETRY_AFTER_SPREAD_MS = 1_000;

export class Reachability {
  private downSince: number | null = null;
  private lastProgress = 0;
  private failures = 0;
  /** Aborted when the current (or next) outage ends, then replaced. */
  private recovery = new AbortController();
  /** Before this (the clock's ms) the exchange asked for no request: the latest Retry-After's end. */
  private notBefore = Number.NEGATIVE_INFINITY;

  constructor(
    private readonly logger: Logger,
    private readonly clock: Clock,
    private readonly exchange: string,
  ) {}

  get down(): boolean {
    return this.downSince !== null;
  }

  /** Aborts once the exchange answers a request again; taken while it answers, at the end of the next outage. */
  get recovered(): AbortSignal {
    return this.recovery.signal;
  }

  /**
   * Sleeps a backoff wait (or until `stop`) after `err`, cut short when the exchange is reachable
   * again; while a Retry-After runs (`err`'s or another loop's), until its end instead.
   */
  pause(ms: number, stop: AbortSignal, err?: unknown): Promise<void> {
    const now = this.clock.now();
    if (err instanceof ExchangeError && err.retryAfterSeconds !== null) this.notBefore = Math.max(this.notBefore, now + err.retryAfterSeconds * 1000);
    if (this.notBefore > now) return this.clock.sleep(this.notBefore - now + Math.random() * Math.min(ms, RETRY_AFTER_SPREAD_MS), stop);
    return this.clock.sleep(ms, AbortSignal.any([stop, this.recovery.signal]));
  }

  failed(what: string, err: unknown): void {
    const now = this.clock.now();
    this.failures++;
    if (this.downSince === null) {
      this.downSince = now;
      this.lastProgress = now;
      this.logger.warn(`cannot reach the exchange at ${this.exchange} (${what}: ${describeError(err)}); retrying with backoff`);
    } else if (now - this.lastProgress >= PROGRESS_EVERY_MS) {
      this.lastProgress = now;
      this.logger.warn(
        `the exchange has been unreachable for ${Math.round((now - this.downSince) / 1000)} s (${this.failures} failed requests; last: ${what}: ${describeError(err)}); still retrying`,
      );
    }
  }

  succeeded(): void {
    if (this.downSince === null) return;
    const secs = ((this.clock.now() - this.downSince) / 1000).toFixed(1);
    this.logger.info(`the exchange is reachable again after ${secs} s; resuming where the agent left off`);
    this.downSince = null;
    this.failures = 0;
    const woken = this.recovery;
    this.recovery = new AbortController();
    woken.abort();
  }
}
