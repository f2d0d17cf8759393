/**
 * A start_run the agent takes while it is being stopped, the Worker not answering the run's first
 * report: nothing is started, and the command is not acked (null), so the exchange hands it to the
 * agent's next start. Started, the processes would belong to a run the exchange has pending (it
 * never heard "starting"), which a restarted agent does not adopt or stop: it waits for the start
 * command, which, acked, would never come again (docs/runs.md, "Restarts").
 */
import { afterEach, describe, expect, it } from "vitest";
import { realClock } from "../../src/clock";
import { RunSupervisor, type ReportInput, type ReportRefused, type RunReporter } from "../../src/runs/run-supervisor";
import { readJournal } from "../../src/runs/run-journal";
import type { AgentActiveRunsResponse, RunReportResponse } from "../../../src/protocol/runs";
import { MemoryLogger } from "../support/logger";
import { tempDir } from "../support/temp";
import { killGroups, proc, runsConfig, startCommand } from "./support";

const cleanups: Array<() => void | Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** The Worker is down and the agent is being stopped: every report ends without an answer (ExchangeReporter's null). */
class NoAnswer implements RunReporter {
  readonly reports: Array<{ runId: string } & ReportInput> = [];
  /** `onReport`: what happens while a report waits (the agent told to stop). */
  constructor(private readonly onReport: () => void = () => undefined) {}
  async report(runId: string, report: ReportInput): Promise<RunReportResponse | ReportRefused | null> {
    this.reports.push({ runId, ...report });
    this.onReport();
    return null;
  }
  async activeRuns(): Promise<AgentActiveRunsResponse | null> {
    return null;
  }
}

describe("a start_run taken while the agent stops and the Worker does not answer", () => {
  it("starts nothing and leaves the command unacked, for the agent's next start", async () => {
    const state = tempDir();
    const config = runsConfig({ processes: [proc("trainer", "")] }, state.path);
    const noted = (): number[] => readJournal(config.runsDir, "run_pend01")?.processes.map((p) => p.pid) ?? [];
    cleanups.push(() => {
      killGroups(noted());
      state.remove();
    });

    // Stopping (SIGTERM) already: nothing is started, not even a report sent.
    const stopped = new AbortController();
    stopped.abort();
    const early = new NoAnswer();
    const before = new RunSupervisor({ config, reporter: early, clock: realClock, logger: new MemoryLogger(), agentId: "host-1", stop: stopped.signal });
    expect(await before.start(startCommand("run_pend01"))).toBeNull();
    expect({ reports: early.reports.length, current: before.current, noted: noted() }).toEqual({ reports: 0, current: null, noted: [] });

    // Stopped while the run's first report waits for the Worker, which never answers.
    const stop = new AbortController();
    const silent = new NoAnswer(() => stop.abort());
    const during = new RunSupervisor({ config, reporter: silent, clock: realClock, logger: new MemoryLogger(), agentId: "host-1", stop: stop.signal });
    expect(await during.start(startCommand("run_pend01"))).toBeNull();
    expect({ reports: silent.reports.map((r) => r.status), current: during.current, noted: noted() }).toEqual({ reports: ["starting"], current: null, noted: [] });
  }, 30_000);
});
