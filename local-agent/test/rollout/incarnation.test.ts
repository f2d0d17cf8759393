/**
 * An engine deleted and made again under the same name counts its commands from 1 again
 * (docs/agent.md). A start_rollout with restart_training of the new engine that carried the seq
 * of the start that launched the running workers was taken for a redelivery of that start ("already
 * running ..., started by this same command"), and the old job's workers kept running. The
 * workers now remember the incarnation of the command that started them, in their pid file too.
 */
import { readFileSync } from "node:fs";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { Command } from "../../../src/protocol";
import { RolloutCommands } from "../../src/rollout/rollout-commands";
import { RolloutWorkers, type StartRolloutBody } from "../../src/rollout/workers";
import { fixtureWorkers, recordingDispatcher } from "../support/dispatcher";
import { MemoryLogger } from "../support/logger";
import { tempDir } from "../support/temp";
import { waitUntil } from "../support/wait";


let dir: ReturnType<typeof tempDir>;
let workers: RolloutWorkers;
const stop = new AbortController();

beforeEach(() => {
  dir = tempDir();
});

afterEach(async () => {
  await workers?.stop("test cleanup");
  dir.remove();
});

describe("start_rollout across engine incarnations", () => {
  it("restarts the workers for a restart_training of a re-made engine whose seq equals the deleted engine's start", { timeout: 30_000 }, async () => {
    const logger = new MemoryLogger();
    workers = fixtureWorkers(dir.path, logger);
    // Nothing journaled: each command is new to this agent.
    const { dispatcher, acked: outcomes } = recordingDispatcher({
      logger,
      delivery: { timeoutMs: 1000, attempts: 1, concurrency: 1 },
      stop: stop.signal,
      rollout: new RolloutCommands({ workers, inferenceAdminUrl: null, logger, stop: stop.signal }),
    });
    const submit = (seq: number, incarnation: string, body: StartRolloutBody): void => {
      const command: Command = { seq, attempt: 1, created_at: Date.now() / 1000, body };
      dispatcher.submit({ ok: true, command, incarnation });
    };
    const log = (): string => readFileSync(workers.logPath, "utf8");

    // The deleted engine's start_rollout, seq 2.
    submit(2, "incarnation-old", { kind: "start_rollout", job_session: "job-old", group_size: 4, restart_training: false });
    await waitUntil(() => outcomes.length === 1, "the first start's ack");
    expect(outcomes[0]?.outcome.ok).toBe(true);
    await waitUntil(() => log().includes("worker job=job-old"), "the old job's workers");
    const oldPid = workers.status().pid;

    // The engine was deleted and made again: its commands count from 1 again, and its seq 2 is a new start.
    submit(2, "incarnation-new", { kind: "start_rollout", job_session: "job-new", group_size: 8, restart_training: true });
    await waitUntil(() => outcomes.length === 2, "the second start's ack", 20_000);
    expect(outcomes[1]?.outcome.detail).not.toContain("started by this same command");
    expect(workers.status()).toMatchObject({ running: true, job_session: "job-new", group_size: 8 });
    expect(workers.status().pid).not.toBe(oldPid);
  });
});
