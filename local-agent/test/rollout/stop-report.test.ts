/**
 * Workers the agent was told to stop are not reported as ended (RolloutWorkersStatus): the
 * dashboard shows the workers "running, or, in red, how they ended on their own". A heartbeat
 * taken while the agent's own stop (a restart, its shutdown) waited for the group's last poll saw
 * the leader gone and reported the workers as having exited on their own, and kept saying so
 * after the stop. The clock is injected: its poll sleep holds the stop in that window.
 */
import { readFileSync } from "node:fs";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { RolloutWorkers, StartRolloutBody } from "../../src/rollout/workers";
import { groupAlive } from "../../src/runs/process-group";
import { fixtureWorkers } from "../support/dispatcher";
import { ManualClock } from "../support/manual-clock";
import { MemoryLogger } from "../support/logger";
import { tempDir } from "../support/temp";
import { waitUntil } from "../support/wait";

let dir: ReturnType<typeof tempDir>;
let clock: ManualClock;
let w: RolloutWorkers;
let pid: number | null = null;

beforeEach(() => {
  dir = tempDir();
  clock = new ManualClock();
});

afterEach(async () => {
  if (pid !== null && groupAlive(pid)) process.kill(-pid, "SIGKILL");
  // Let a stop still polling finish.
  for (let i = 0; i < 10 && clock.pending.length > 0; i++) await clock.advance(1000);
  dir.remove();
});

const cmd = (job: string): StartRolloutBody => ({ kind: "start_rollout", job_session: job, group_size: 4, restart_training: false });

describe("the heartbeat while the agent stops the rollout workers", () => {
  it("never reports workers the agent is stopping, or has stopped, as ended on their own", { timeout: 20_000 }, async () => {
    const logger = new MemoryLogger();
    w = fixtureWorkers(dir.path, logger, { clock });
    const out = await w.start(cmd("job-1"), 1);
    expect(out?.ok, out?.detail).toBe(true);
    pid = w.status().pid;
    // Its TERM trap must be set before the stop signals it.
    await waitUntil(() => readFileSync(w.logPath, "utf8").includes("worker job=job-1"), "the workers' first line");

    const stopping = w.stop("the agent is shutting down");
    // The workers leave on SIGTERM; the stop's next poll waits on the (manual) clock.
    await waitUntil(() => !groupAlive(pid as number) && readFileSync(w.logPath, "utf8").includes("worker got TERM"), "the workers to leave on SIGTERM");
    // Their leader's exit seen: no longer running.
    await waitUntil(() => !w.status().running, "the leader's exit to be seen");

    // A heartbeat now: the workers are being stopped by the agent, not ended on their own.
    expect(w.report()?.state).not.toBe("exited");

    await clock.advance(100);
    await waitUntil(async () => {
      await clock.advance(100);
      return (await Promise.race([stopping.then(() => true), new Promise((r) => setTimeout(() => r(false), 10))])) as boolean;
    }, "the stop to return");
    // And once the stop is done, nothing is reported: the agent stopped them.
    expect(w.report()).toBeNull();
    expect(logger.has(/rollout workers pid \d+ exited with code 0; see/)).toBe(false);
  });
});
