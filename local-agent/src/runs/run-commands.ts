/**
 * The agent's handlers for the training-runs commands (scan_environments, start_run,
 * stop_run, test_inference), for the dispatcher. Each answers with an Outcome for the command's
 * ack; the state itself goes to the exchange through reports, so a lost ack loses nothing.
 *
 * Runs need a runs config on this host (ROLLOUT_RUNS_CONFIG); without one every runs command
 * is answered with that reason, and a run asked for is reported failed rather than left pending.
 */
import { readFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { RunsClient } from "../../../src/client";
import type { CommandBody } from "../../../src/protocol/commands";
import type { ModelResult } from "../../../src/protocol/runs";
import type { Clock } from "../clock";
import { privateDir } from "../host-files";
import { describeError, type Logger } from "../log";
import type { Reachability } from "../reachability";
import type { Outcome } from "../outcome-journal";
import { ExchangeReporter } from "./exchange-reporter";
import { testModel } from "./inference-test";
import { RunSupervisor } from "./run-supervisor";
import { parseRunsConfig, type RunsConfig } from "./runs-config";
import { ScanError, scanEnvironments } from "./scanner";

export const RUNS_CONFIG_ENV = "ROLLOUT_RUNS_CONFIG";

export const RUN_COMMAND_KINDS = ["scan_environments", "start_run", "stop_run", "test_inference"] as const;
export type RunCommand = Extract<CommandBody, { kind: (typeof RUN_COMMAND_KINDS)[number] }>;

export const isRunCommand = (body: CommandBody): body is RunCommand => (RUN_COMMAND_KINDS as readonly string[]).includes(body.kind);

export type RunCommandsDeps = {
  /** The runs config, or why there is none. */
  config: { ok: true; config: RunsConfig } | { ok: false; errors: string[] };
  client: RunsClient;
  clock: Clock;
  /** Cuts the reporter's retry waits short once the exchange answers again. */
  reach: Reachability;
  logger: Logger;
  agentId: string;
  stop: AbortSignal;
  maxBackoffMs: number;
  /** The engine's name and its Atropos API with the agent's token, for run configs and commands. */
  atropos?: { engine: string; url: string };
};

/** Reads the runs config named by ROLLOUT_RUNS_CONFIG; no variable means runs are not set up here. */
export function loadRunsConfig(env: Readonly<Record<string, string | undefined>>, cwd: string, stateDir: string): RunCommandsDeps["config"] {
  const path = env[RUNS_CONFIG_ENV];
  if (path === undefined || path === "") return { ok: false, errors: [`no runs config on this host (set ${RUNS_CONFIG_ENV} to a JSON file; its shape is in docs/runs.md)`] };
  const full = resolve(cwd, path);
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(full, "utf8"));
  } catch (e) {
    return { ok: false, errors: [`${RUNS_CONFIG_ENV}=${full}: ${describeError(e)}`] };
  }
  const parsed = parseRunsConfig(raw, dirname(full), stateDir);
  return parsed.ok ? parsed : { ok: false, errors: parsed.errors.map((e) => `${full}: ${e}`) };
}

type Finished = { detail: string; models: ModelResult[] };

export class RunCommands {
  readonly supervisor: RunSupervisor | null;
  private readonly reporter: ExchangeReporter;
  /**
   * Inference tests whose models were all tested but whose results have not reached the exchange:
   * the command is handed out again, and then only the report is sent again, not minutes of tests.
   */
  private readonly unreported = new Map<string, Finished>();

  constructor(private readonly d: RunCommandsDeps) {
    this.reporter = new ExchangeReporter(d.client, d);
    this.supervisor = d.config.ok ? new RunSupervisor({
          config: d.config.config,
          reporter: this.reporter,
          clock: d.clock,
          logger: d.logger,
          agentId: d.agentId,
          stop: d.stop,
          ...(d.atropos === undefined ? {} : { atropos: d.atropos }),
        }) : null;
  }

  /** Why training runs are off on this host, for the heartbeat (the engine tells callers of the catalog); null when they are on. */
  get offReason(): string | null {
    return this.d.config.ok ? null : this.d.config.errors.join("; ");
  }

  /** At agent start: scan once and find the runs a previous agent left. */
  async startup(): Promise<void> {
    if (!this.d.config.ok) {
      this.d.logger.info(`training runs are off: ${this.d.config.errors.join("; ")}`);
      return;
    }
    // Older agents left it, and the run configs in it (the trainer token), open to every user of the host.
    privateDir(this.d.config.config.runsDir, this.d.logger);
    // Runs first: a run's processes matter more than a fresh catalog, and the scan may take a while.
    await this.supervisor?.reattach();
    await this.scan();
  }

  /** Null when the agent's shutdown came first: not acked, so the command is carried out again. */
  async execute(body: RunCommand): Promise<Outcome | null> {
    const c = this.d.config;
    if (!c.ok) {
      const detail = c.errors.join("; ");
      if (body.kind === "start_run") await this.reporter.report(body.run_id, { status: "failed", detail, agent_id: this.d.agentId });
      if (body.kind === "test_inference") await this.reporter.inferenceTest(body.test_id, { status: "failed", detail });
      return { ok: false, detail };
    }
    const sup = this.supervisor as RunSupervisor;
    switch (body.kind) {
      case "scan_environments":
        return this.scan();
      case "start_run":
        return sup.start(body);
      case "stop_run":
        return sup.stop(body.run_id, body.reason);
      case "test_inference":
        return this.testInference(body, c.config);
    }
  }

  private async scan(): Promise<Outcome | null> {
    if (!this.d.config.ok) return { ok: false, detail: this.d.config.errors.join("; ") };
    let report: Awaited<ReturnType<typeof scanEnvironments>>;
    try {
      report = await scanEnvironments(this.d.config.config, this.d.agentId, this.d.clock, this.d.stop);
    } catch (e) {
      const detail = e instanceof ScanError ? e.message : `the scan failed: ${describeError(e)}`;
      this.d.logger.error(`environment scan: ${detail}`);
      return { ok: false, detail };
    }
    const found = `found ${report.environments.length} environments (${report.environments.map((e) => e.name).join(", ") || "none"}); ${report.problems.length} files could not be read`;
    const sent = await this.reporter.catalog(report);
    if (sent === null && this.d.stop.aborted) return null;
    if (sent === null || "refused" in sent) {
      const why = sent === null ? "the exchange could not be reached (the reporter gave up)" : `the exchange refused it (HTTP ${sent.refused})`;
      const detail = `${found}, but the catalog did not reach the exchange: ${why}; scan again (POST /runs/environments/scan) once it answers`;
      this.d.logger.error(`environment scan: ${detail}`);
      return { ok: false, detail };
    }
    this.d.logger.info(`environment scan: ${found}`);
    return { ok: true, detail: found };
  }

  private async testInference(cmd: Extract<RunCommand, { kind: "test_inference" }>, config: RunsConfig): Promise<Outcome | null> {
    let finished = this.unreported.get(cmd.test_id);
    if (finished === undefined) {
      const results: ModelResult[] = [];
      for (const [i, model] of cmd.models.entries()) {
        // Progress only: a lost one is made good by the next, or by the results.
        await this.d.client.reportInferenceTest(cmd.test_id, { status: "running", detail: `testing ${model.model} (${i + 1} of ${cmd.models.length})`, models: results }).catch(() => undefined);
        results.push(await testModel(cmd, model, config, this.d.clock, this.d.stop));
      }
      const working = results.filter((r) => r.steps_tested > 0).length;
      finished = { detail: `${working} of ${results.length} models produced scored steps`, models: results };
      this.unreported.set(cmd.test_id, finished);
    } else this.d.logger.info(`inference test ${cmd.test_id}: its models were tested already; sending the results again`);
    const sent = await this.reporter.inferenceTest(cmd.test_id, { status: "done", detail: finished.detail, models: finished.models });
    if (sent === null) {
      if (this.d.stop.aborted) return null;
      // Left unacked: the exchange hands the command out again, and the results go then.
      throw new Error(`the results of inference test ${cmd.test_id} did not reach the exchange; they are sent again when the command is handed out again`);
    }
    this.unreported.delete(cmd.test_id);
    if ("refused" in sent) return { ok: false, detail: `${finished.detail}; the exchange refused the results (HTTP ${sent.refused})` };
    return { ok: true, detail: finished.detail };
  }
}
