/**
 * A process that exits while a later one of its run is still being waited for ends the run at
 * once (docs/runs.md, "Processes": the first process to exit ends the run, failed with its code
 * and last lines, the others stopped). Watching only the process being waited for, the
 * supervisor left the run "starting" until the later one's readiness deadline (600 s in the
 * docs' example), and then blamed that one.
 */
import { afterEach, describe, expect, it } from "vitest";
import { RunSupervisor } from "../../src/runs/run-supervisor";
import { groupAlive } from "../../src/runs/process-group";
import { ManualClock } from "../support/manual-clock";
import { MemoryLogger } from "../support/logger";
import { tempDir } from "../support/temp";
import { processAlive, waitUntil } from "../support/wait";
import { RecordingReporter, freePort, killGroups, proc, reportedPids, runsConfig, startCommand } from "./support";

const cleanups: Array<() => void | Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

describe("a process that exits while a later one is being waited for", () => {
  it("ends the run at once, failed with that process's exit code, not at the later one's readiness deadline", async () => {
    const clock = new ManualClock();
    const state = tempDir();
    const p1 = await freePort();
    const config = runsConfig(
      {
        processes: [
          // The trajectory API: ready, then crashes half a second later.
          proc("api", `--listen ${p1} --exit-after 0.5 --code 3`, { ready: { port: p1 } }),
          // The trainer: waits (as a real one would) for something that never comes.
          proc("trainer", "", { ready: { port: 1 }, readyTimeoutSeconds: 600 }),
        ],
      },
      state.path,
    );
    const reporter = new RecordingReporter();
    const stop = new AbortController();
    const sup = new RunSupervisor({ config, reporter, clock, logger: new MemoryLogger(), agentId: "host-1", stop: stop.signal });
    const pids = (): number[] => reportedPids(reporter);
    cleanups.push(() => {
      stop.abort();
      killGroups(pids());
      state.remove();
    });

    await sup.start(startCommand("run_early1"));
    const procs = () => reporter.last("run_early1")?.processes ?? [];
    // api becomes ready in real time; then the trainer is waited for on the manual clock.
    await waitUntil(async () => {
      await clock.advance(50);
      await new Promise((r) => setTimeout(r, 10));
      return procs().find((p) => p.name === "trainer")?.state === "starting" && clock.pending.length > 0;
    }, "the trainer to be waited for");
    const apiPid = procs().find((p) => p.name === "api")!.pid!;
    await waitUntil(() => !processAlive(apiPid), "api to crash");

    // A minute of polls on the agent's clock, a tenth of the trainer's readiness deadline.
    for (let s = 0; s < 60 && sup.current !== null; s++) {
      await clock.advance(1000);
      await new Promise((r) => setTimeout(r, 10));
    }
    expect(reporter.status.get("run_early1")).toBe("failed");
    expect(reporter.last("run_early1")?.detail).toMatch(/api exited with code 3/);
    for (const pid of pids()) expect(groupAlive(pid)).toBe(false);
  }, 60_000);
});
