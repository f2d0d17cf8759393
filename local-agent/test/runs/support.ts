/**
 * Helpers for the agent's training-runs tests: a reporter that answers as the exchange does
 * (the route's RunReport schema, the same status machine, src/runs/lifecycle.ts) and remembers
 * every report it accepts and why it refused the others, free ports, and
 * runs configs built from the fixture process script.
 */
import { fileURLToPath } from "node:url";
import { applyReport } from "../../../src/runs/lifecycle";
import { RunReport, type AgentActiveRunsResponse, type RunReportResponse, type RunStatus } from "../../../src/protocol/runs";
import { parseRunsConfig, type RunsConfig } from "../../src/runs/runs-config";
import type { ReportInput, ReportRefused, RunReporter } from "../../src/runs/run-supervisor";

export const PROC = fileURLToPath(new URL("./fixtures/procs/proc.py", import.meta.url));
export const ENVS = fileURLToPath(new URL("./fixtures/envs", import.meta.url));

export class RecordingReporter implements RunReporter {
  readonly reports: Array<{ runId: string } & ReportInput> = [];
  readonly status = new Map<string, RunStatus>();
  /** Reports the exchange's route would have refused, each as "<status>: <why>". */
  readonly refused: string[] = [];
  active: AgentActiveRunsResponse = { runs: [] };

  /** A report the route's schema refuses is answered 422, as ExchangeReporter answers one. */
  async report(runId: string, report: ReportInput): Promise<RunReportResponse | ReportRefused> {
    const valid = RunReport.safeParse(report);
    if (!valid.success) {
      this.refused.push(`${report.status}: ${valid.error.issues.map((i) => `${i.path.join(".")} ${i.message}`).join("; ")}`);
      return { refused: 422 };
    }
    this.reports.push({ runId, ...report });
    const out = applyReport(this.status.get(runId) ?? "pending", report.status);
    this.status.set(runId, out.next);
    return { run_id: runId, status: out.next, must_stop: out.mustStop };
  }

  async activeRuns(): Promise<AgentActiveRunsResponse> {
    return this.active;
  }

  statuses(runId: string): string[] {
    return this.reports.filter((r) => r.runId === runId).map((r) => r.status);
  }

  last(runId: string): ({ runId: string } & ReportInput) | undefined {
    return this.reports.filter((r) => r.runId === runId).at(-1);
  }
}

export { freePort } from "../../../scripts/local/free-port";

export function runsConfig(raw: Record<string, unknown>, stateDir: string): RunsConfig {
  const parsed = parseRunsConfig({ pollSeconds: 0.05, stopGraceSeconds: 2, ...raw }, stateDir, stateDir);
  if (!parsed.ok) throw new Error(parsed.errors.join("; "));
  return parsed.config;
}

/** A process entry running the fixture script with `flags`, named `name` (PROC_NAME in its output). */
export const proc = (name: string, flags: string, extra: Record<string, unknown> = {}) => ({ name, command: `python3 ${PROC} ${flags}`, env: { PROC_NAME: name }, ...extra });

export const startCommand = (runId: string, file = "/opt/envs/gsm8k_server.py") => ({
  kind: "start_run" as const,
  run_id: runId,
  environment: { name: "gsm8k", class_name: "GSM8kEnv", file_path: file },
  config_yaml: "env:\n  group_size: 8\n",
});

/** The pids of every process the reports named. */
export const reportedPids = (reporter: RecordingReporter): number[] => [...new Set(reporter.reports.flatMap((r) => (r.processes ?? []).flatMap((p) => (p.pid ? [p.pid] : []))))];

/** SIGKILLs each pid's process group: a test's cleanup of whatever its runs left. */
export function killGroups(pids: readonly number[]): void {
  for (const pid of pids) {
    try {
      process.kill(-pid, "SIGKILL");
    } catch {
      // already gone
    }
  }
}
