/**
 * What tests that drive the Dispatcher themselves share: one with nothing journaled (each
 * command is new to it) whose acks are recorded rather than sent, and rollout workers of the
 * fixture script (rollout/fixtures/worker.sh) in a temp dir.
 */
import { join } from "node:path";
import type { Acker } from "../../src/acker";
import { realClock } from "../../src/clock";
import { Dispatcher, type DispatcherDeps } from "../../src/dispatcher";
import type { Logger } from "../../src/log";
import type { Incarnation, Outcome, OutcomeJournal } from "../../src/outcome-journal";
import { parseRolloutCommand } from "../../src/rollout/template";
import { RolloutWorkers, type RolloutWorkersOptions } from "../../src/rollout/workers";
import type { TrainerSupervisor } from "../../src/trainer";

export type Acked = { seq: number; incarnation: Incarnation; outcome: Outcome };

/** A Dispatcher whose finished commands land in `acked`, in the order they finished. */
export function recordingDispatcher(o: Pick<DispatcherDeps, "logger" | "delivery" | "stop" | "rollout">): { dispatcher: Dispatcher; acked: Acked[] } {
  const acked: Acked[] = [];
  const acker = {
    finish: async (seq: number, incarnation: Incarnation, outcome: Outcome) => void acked.push({ seq, incarnation, outcome }),
    send: async () => undefined,
  } as unknown as Acker;
  const journal = { get: () => undefined } as unknown as OutcomeJournal;
  return { dispatcher: new Dispatcher({ trainer: {} as TrainerSupervisor, acker, journal, version: "test", ...o }), acked };
}

export const ROLLOUT_WORKER = join(import.meta.dirname, "..", "rollout", "fixtures", "worker.sh");

/** Rollout workers running the fixture with their start's job session, group size and restart flag, their files under `dir`. */
export function fixtureWorkers(dir: string, logger: Logger, over: Partial<RolloutWorkersOptions> = {}): RolloutWorkers {
  return new RolloutWorkers({
    command: parseRolloutCommand(`sh ${ROLLOUT_WORKER} {job_session} {group_size} {restart_training}`),
    cwd: null,
    logDir: join(dir, "logs"),
    stateDir: join(dir, "state"),
    graceMs: 3000,
    placeholders: { engine: "e1", engine_url: "http://127.0.0.1:1/e/e1", facade_url: "http://127.0.0.1:2" },
    env: { ROLLOUT_ENGINE_URL: "http://127.0.0.1:1/e/e1" },
    logger,
    clock: realClock,
    ...over,
  });
}
