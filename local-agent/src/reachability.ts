/**
 * Whether the Worker currently answers, shared by every loop that talks to it. An outage is
 * logged once when it starts, with a progress line every 30 s while it lasts, and once when it
 * ends: a Worker that is down for an hour with 500 acks waiting does not produce 500 lines a
 * second, and the operator still sees that the agent is alive and waiting.
 */
import type { Clock } from "./clock";
import { describeError, type Logger } from "./log";

const PROGRESS_EVERY_MS = 30_000;

export class Reachability {
  private downSince: number | null = null;
  private lastProgress = 0;
  private failures = 0;

  constructor(
    private readonly logger: Logger,
    private readonly clock: Clock,
    private readonly exchange: string,
  ) {}

  get down(): boolean {
    return this.downSince !== null;
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
  }
}
