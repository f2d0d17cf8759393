/**
 * Helpers for the training-runs tests: a RunsClient per role against the real Worker, a sample
 * catalog as the agent would report it, and the runs feature's clock.
 */
import { RunsClient, RunsRefusal } from "../../src/client";
import { runsClock } from "../../src/runs/clock";
import type { Role } from "../../src/protocol/admin";
import { ADMIN_TOKEN, ORIGIN, workerFetch, type TestEngine } from "./harness";

export { GSM8K_FIELDS, sampleCatalog } from "./sample-catalog";

export const runsAs = (e: TestEngine, role: Role | "admin"): RunsClient =>
  new RunsClient({ baseUrl: `${ORIGIN}/e/${e.name}`, token: role === "admin" ? ADMIN_TOKEN : e.tokens[role], fetch: workerFetch });

export const runsViaUrl = (e: TestEngine, role: Role): RunsClient => new RunsClient({ baseUrl: `${ORIGIN}/e/${e.name}/t/${e.tokens[role]}`, fetch: workerFetch });

/** Sets the runs clock to a fixed time; returns a setter to move it. */
export function fixRunsClock(start = Date.UTC(2026, 10, 30, 12, 0, 0)): { t: number; advance(ms: number): void } {
  const clock = {
    t: start,
    advance(ms: number) {
      clock.t += ms;
    },
  };
  runsClock.now = () => clock.t;
  return clock;
}

/** Runs `fn` and returns the RunsRefusal it throws (fails the test if it does not). */
export async function refusal(fn: () => Promise<unknown>): Promise<RunsRefusal> {
  try {
    await fn();
  } catch (e) {
    if (e instanceof RunsRefusal) return e;
    throw e;
  }
  throw new Error("expected the exchange to refuse");
}
