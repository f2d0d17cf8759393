/**
 * The run supervisor's line to the exchange: reports and the active-runs list through the
 * typed RunsClient, retried with backoff while the exchange is unreachable (a report must not
 * be lost because the Worker blinked), given up on a refusal (4xx), which is logged.
 */
import { ExchangeError, RunsClient } from "../../../src/client";
import type { AgentActiveRunsResponse, RunReportResponse } from "../../../src/protocol/runs";
import { isTransient } from "../engine-link";
import { describeError, type Logger } from "../log";
import type { Reachability } from "../reachability";
import type { ReportInput, ReportRefused, RunReporter } from "./run-supervisor";

export class ExchangeReporter implements RunReporter {
  constructor(
    readonly client: RunsClient,
    private readonly d: { reach: Reachability; logger: Logger; stop: AbortSignal; maxBackoffMs: number },
  ) {}

  async report(runId: string, report: ReportInput): Promise<RunReportResponse | ReportRefused | null> {
    return this.retrying(`report run ${runId} ${report.status}`, () => this.client.reportRun(runId, report), (e) => ({ refused: e.status }));
  }

  /** Null when the exchange refused or the agent stopped first: unknown, which is not "none". */
  async activeRuns(): Promise<AgentActiveRunsResponse | null> {
    return this.retrying("list this engine's active runs", () => this.client.activeRuns(), () => null);
  }

  /** `call`'s answer; `refused`'s for a refusal; null if the agent stopped before an answer. */
  private async retrying<T, R>(what: string, call: () => Promise<T>, refused: (e: ExchangeError) => R): Promise<T | R | null> {
    let wait = Math.min(500, this.d.maxBackoffMs);
    for (;;) {
      try {
        return await call();
      } catch (e) {
        if (!isTransient(e)) {
          this.d.logger.error(`could not ${what}: ${describeError(e)}`);
          // Only an ExchangeError is ever a refusal (isTransient).
          return e instanceof ExchangeError ? refused(e) : null;
        }
        if (this.d.stop.aborted) return null;
        this.d.logger.warn(`could not ${what} (${describeError(e)}); retrying in ${Math.round(wait / 1000)} s`);
        await this.d.reach.pause(wait, this.d.stop);
        wait = Math.min(wait * 2, this.d.maxBackoffMs);
      }
    }
  }
}
