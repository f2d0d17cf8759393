/**
 * An agent one version older than its exchange, restarted, reads an active run in a status it
 * does not know (answers read with openEnum): it acts on the statuses it knows, and leaves the
 * processes of that run (a training on the GPUs) as they are.
 */
import { afterEach, describe, expect, it } from "vitest";
import { AgentActiveRunsResponse } from "../../../src/protocol/runs";
import { realClock } from "../../src/clock";
import { RunSupervisor } from "../../src/runs/run-supervisor";
import { groupAlive } from "../../src/runs/process-group";
import { MemoryLogger } from "../support/logger";
import { tempDir } from "../support/temp";
import { waitUntil } from "../support/wait";
import { RecordingReporter, proc, runsConfig, startCommand } from "./support";

const cleanups: Array<() => void> = [];
afterEach(() => {
  for (const c of cleanups.splice(0).reverse()) c();
});

async function restartWith(status: string) {
  const state = tempDir();
  const config = runsConfig({ processes: [proc("api", ""), proc("trainer", "")] }, state.path);
  const reporter = new RecordingReporter();
  const stop = new AbortController();
  const first = new RunSupervisor({ config, reporter, clock: realClock, logger: new MemoryLogger(), agentId: "host-1", stop: stop.signal });
  const pids = (): number[] => [...new Set(reporter.reports.flatMap((r) => (r.processes ?? []).flatMap((p) => (p.pid ? [p.pid] : []))))];
  cleanups.push(() => {
    stop.abort();
    for (const pid of pids()) {
      try {
        process.kill(-pid, "SIGKILL");
      } catch {
        // gone
      }
    }
    state.remove();
  });
  await first.start(startCommand("run_new1"));
  await waitUntil(() => reporter.status.get("run_new1") === "running", "the run to be running");
  const running = pids();
  stop.abort(); // the first agent dies: its processes stay

  // A newer exchange lists the run as active in a status this agent does not know; the agent's schema reads it.
  reporter.active = AgentActiveRunsResponse.parse({
    runs: [{ run_id: "run_new1", environment: "gsm8k", status, detail: "", created_at: 0, started_at: 0, ended_at: null, running_time_seconds: 0, stop_requested: false, command_seq: 1, environment_file: "/opt/envs/gsm8k_server.py", config_yaml: "", processes: [] }],
  });
  const second = new RunSupervisor({ config, reporter, clock: realClock, logger: new MemoryLogger(), agentId: "host-1", stop: new AbortController().signal });
  await second.reattach();
  return { alive: running.map((p) => groupAlive(p)), last: reporter.last("run_new1")?.status };
}

describe("a run status from a newer exchange", () => {
  it("leaves the processes of an active run in a status it does not know running after an agent restart, as it did when it could not read the answer", async () => {
    const r = await restartWith("paused");
    // The training's processes on the GPUs are not stopped, nor the run reported failed, for a status the agent cannot interpret.
    expect(r.alive).toEqual([true, true]);
    expect(r.last).not.toBe("failed");
  }, 60_000);

  it("(control) adopts them, alive, when the status is running", async () => {
    const r = await restartWith("running");
    expect(r.alive).toEqual([true, true]);
  }, 60_000);
});
