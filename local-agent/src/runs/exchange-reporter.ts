/**
 * The runs' line to the exchange: run reports, the active-runs list, the environment catalog and
 * inference tests' results, through the typed RunsClient, retried with backoff (backoff.ts) while
 * the exchange is unreachable or answers 5xx (a report must not be lost because the Worker
 * blinked), given up on a refusal (4xx), which is logged.
 *
 * A run's reports are tried until the agent stops: the run goes on meanwhile. The catalog and an
 * inference test's results are what a command waits on, so they are tried a bounded number of
 * times: a long outage must not hold the command's queue, whose command the exchange hands out
 * again anyway.
 */
import type { z } from "zod";
import { ExchangeError, RunsClient } from "../../../src/client";
import type { AgentActiveRunsResponse, CatalogReport, InferenceTestReport, InferenceTestView, RunReportResponse } from "../../../src/protocol/runs";
import { Backoff } from "../backoff";
import { isTransient } from "../engine-link";
import { describeError, type Logger } from "../log";
import type { Reachability } from "../reachability";
import type { ReportInput, ReportRefused, RunReporter } from "./run-supervisor";

/** Tries of a bounded report: about a minute of outage with the default 30 s backoff ceiling. */
export const BOUNDED_REPORT_TRIES = 8;

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

  /** Null when the agent stopped or the tries ran out first. */
  async catalog(report: z.input<typeof CatalogReport>): Promise<{ ok: true } | ReportRefused | null> {
    const sent = await this.retrying("report the environment catalog", () => this.client.reportCatalog(report), (e) => ({ refused: e.status }), BOUNDED_REPORT_TRIES);
    return sent === null || "refused" in sent ? sent : { ok: true };
  }

  /** Null when the agent stopped or the tries ran out first. */
  async inferenceTest(testId: string, report: z.input<typeof InferenceTestReport>): Promise<InferenceTestView | ReportRefused | null> {
    return this.retrying(
      `report inference test ${testId} ${report.status}`,
      () => this.client.reportInferenceTest(testId, report),
      (e) => ({ refused: e.status }),
      BOUNDED_REPORT_TRIES,
    );
  }

  /** `call`'s answer; `refused`'s for a refusal; null if the agent stopped, or `tries` ran out, before an answer. */
  private async retrying<T, R>(what: string, call: () => Promise<T>, refused: (e: ExchangeError) => R, tries = Infinity): Promise<T | R | null> {
    const backoff = new Backoff({ initialMs: Math.min(500, this.d.maxBackoffMs), maxMs: this.d.maxBackoffMs });
    for (let tried = 1; ; tried++) {
      try {
        return await call();
      } catch (e) {
        if (!isTransient(e)) {
          this.d.logger.error(`could not ${what}: ${describeError(e)}`);
          // Only an ExchangeError is ever a refusal (isTransient).
          return e instanceof ExchangeError ? refused(e) : null;
        }
        if (this.d.stop.aborted) return null;
        if (tried >= tries) {
          this.d.logger.error(`could not ${what} (${describeError(e)}); gave up after ${tried} tries`);
          return null;
        }
        const wait = backoff.next();
        this.d.logger.warn(`could not ${what} (${describeError(e)}); retrying in ${Math.round(wait / 1000)} s`);
        await this.d.reach.pause(wait, this.d.stop, e);
      }
    }
  }
}
