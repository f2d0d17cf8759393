/**
 * The processes of a run force-stopped while no agent ran (`POST /runs/<id>/stop {"force":
 * true}`) are stopped by the restarted agent as every stop does (docs/runs.md, "Processes":
 * SIGTERM, then SIGKILL after `stopGraceSeconds`), so a trainer can save its checkpoint. They
 * were SIGKILLed at once.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { realClock } from "../../src/clock";
import { RunSupervisor } from "../../src/runs/run-supervisor";
import { groupAlive } from "../../src/runs/process-group";
import { MemoryLogger } from "../support/logger";
import { tempDir } from "../support/temp";
import { waitUntil } from "../support/wait";
import { RecordingReporter, freePort, killGroups, proc, reportedPids, runsConfig, startCommand } from "./support";

const cleanups: Array<() => void | Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

describe("the processes of a run force-stopped while no agent ran", () => {
  it("get SIGTERM first when the restarted agent stops them, as every stop does", async () => {
    const state = tempDir();
    // It says it listens after setting its SIGTERM handler (fixtures/procs/proc.py).
    const config = runsConfig({ processes: [proc("trainer", `--listen ${await freePort()}`)] }, state.path);
    const reporter = new RecordingReporter();
    const stop = new AbortController();
    const first = new RunSupervisor({ config, reporter, clock: realClock, logger: new MemoryLogger(), agentId: "host-1", stop: stop.signal });
    const pids = (): number[] => reportedPids(reporter);
    cleanups.push(() => {
      killGroups(pids());
      state.remove();
    });

    await first.start(startCommand("run_force1"));
    await waitUntil(() => reporter.status.get("run_force1") === "running", "the run to be running");
    const trainer = pids()[0]!;
    const logPath = join(config.runsDir, "run_force1", "trainer.log");
    await waitUntil(() => readFileSync(logPath, "utf8").includes("trainer listening on"), "the trainer to be up, its SIGTERM handler set");
    // The agent goes away; its run keeps running. The operator force-stops the run meanwhile:
    // the exchange no longer lists it among the engine's active runs.
    stop.abort();
    const second = new RunSupervisor({ config, reporter: new RecordingReporter(), clock: realClock, logger: new MemoryLogger(), agentId: "host-1", stop: new AbortController().signal });
    await second.reattach();
    await waitUntil(() => !groupAlive(trainer), "the force-stopped run's trainer to be stopped", 20_000);

    const log = readFileSync(logPath, "utf8");
    expect(log).toContain("trainer got SIGTERM");
  }, 30_000);
});
