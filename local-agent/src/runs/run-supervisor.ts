/**
 * Runs training runs on the GPU host: starts a run's processes in the configured order, each
 * once the previous one is ready (a port open or an HTTP 200, with a deadline, never a fixed
 * sleep); watches them; when one exits, marks the run completed (exit 0) or failed (with the
 * code and its last log lines) and stops the others in reverse order, SIGTERM then SIGKILL;
 * stops a run on request the same way; and after an agent restart finds its runs again
 * through the exchange (D1) and its own notes, adopting or reporting them.
 *
 * Every change is reported to the exchange, which keeps the run's record. Its answer may say
 * the run is over there (stopped by force, or before it started): the run is then stopped here.
 */
import { join } from "node:path";
import type { z } from "zod";
import { MAX_BODY_BYTES } from "../../../src/http/body";
import { jsonBytes, storedJsonTooLarge } from "../../../src/protocol/limits";
import { ACTIVE_RUN_STATUSES, type AgentActiveRunsResponse, MetricsPoint, type RunReport, type RunReportResponse } from "../../../src/protocol/runs";
import type { StartRunCommand } from "../../../src/protocol/commands";
import type { Clock } from "../clock";
import { TemplateError, expandCommand } from "../command-template";
import { privateDir, writePrivateAtomic } from "../host-files";
import { describeError, type Logger } from "../log";
import type { Outcome } from "../outcome-journal";
import { MetricsReader } from "./metrics-reader";
import { hideToken, withAtroposUrl } from "./atropos-url";
import { checkReady, describeReady } from "./readiness";
import { RunProcess } from "./run-process";
import { openJournals, readJournal, runDir, writeJournal, type RunJournal } from "./run-journal";
import type { RunsConfig } from "./runs-config";
import { notedStart, type NotedStart } from "./process-group";

/**
 * The placeholders whose values come from the exchange (the environment, from a catalog the
 * trainer token's holder may post, and the run's id), with the variable each is also in: a
 * command that may run code of its words (sh -c, python3 -c) must read those
 * (command-template.ts expandCommand).
 */
const FROM_EXCHANGE = { env_file: "ROLLOUT_ENV_FILE", env_name: "ROLLOUT_ENV_NAME", env_class: "ROLLOUT_ENV_CLASS", run_id: "ROLLOUT_RUN_ID" } as const;

export type ReportInput = z.input<typeof RunReport>;

/** The most metrics points the exchange takes in one report (RunReport's metrics). */
export const MAX_REPORT_METRICS = 500;

/**
 * The most bytes of JSON one report may take. The exchange refuses a body over MAX_BODY_BYTES,
 * status and all; half of it leaves a wide margin and still holds the largest point the
 * exchange stores (MAX_STORED_BYTES of values) with the run's processes.
 */
export const MAX_REPORT_BYTES = MAX_BODY_BYTES / 2;

/** The exchange refused a report, with this HTTP status; the reporter has logged why. */
export type ReportRefused = { refused: number };

/** How the supervisor talks to the exchange; each retries until it gets an answer (or a refusal) or the agent stops, null without one. */
export type RunReporter = {
  report(runId: string, report: ReportInput): Promise<RunReportResponse | ReportRefused | null>;
  activeRuns(): Promise<AgentActiveRunsResponse | null>;
};

type Run = {
  id: string;
  dir: string;
  procs: RunProcess[];
  metrics: MetricsReader;
  /** Points read and not yet reported. */
  unsent: MetricsPoint[];
  /** What the exchange last heard of the run while it was alive: the status of reports that only carry metrics. */
  said: "starting" | "running";
  phase: "starting" | "running" | "stopping" | "over";
  /** Aborted when the run must stop: wakes the startup's and the monitor's waits. */
  halt: AbortController;
  /** The startup or the monitor, whichever is running; stop() waits for it to let go. */
  task: Promise<void>;
  stopping: Promise<Outcome> | null;
};

export class RunSupervisor {
  private run: Run | null = null;

  constructor(
    private readonly d: {
      config: RunsConfig;
      reporter: RunReporter;
      clock: Clock;
      logger: Logger;
      agentId: string;
      stop: AbortSignal;
      /** The engine's name and its Atropos API with this agent's token (atropos-url.ts), when known. */
      atropos?: { engine: string; url: string };
    },
  ) {}

  /** A run's process commands and logs as the exchange may see them: without this agent's token, which a process may print (ROLLOUT_ATROPOS_URL, its config). */
  private readonly reported = (text: string): string => (this.d.atropos === undefined ? text : hideToken(text, this.d.atropos.url));

  /** The run this host is running, if any. */
  get current(): { run_id: string; phase: Run["phase"] } | null {
    return this.run === null ? null : { run_id: this.run.id, phase: this.run.phase };
  }

  /** The current run's process logs, which the agent rotates (they grow while the run does). */
  get logPaths(): string[] {
    return this.run?.procs.map((p) => p.logPath) ?? [];
  }

  /**
   * Resolves once the current run (if any) is over, for tests and shutdown, or once its work here
   * is: after the agent's stop, a run's processes outlive it, and the run stays current.
   */
  async settled(): Promise<void> {
    for (let run = this.run; run !== null; run = this.run) {
      const waited = run.stopping ?? run.task;
      await waited;
      // Still current with nothing new to wait for (its monitor let go at the agent's stop).
      if (this.run === run && (run.stopping ?? run.task) === waited) return;
    }
  }

  /** Null when the agent's shutdown comes first: nothing is started, and the command, not acked, goes to its next start. */
  async start(cmd: z.infer<typeof StartRunCommand>): Promise<Outcome | null> {
    if (this.d.stop.aborted) return null;
    const busy = this.run;
    if (busy !== null) {
      if (busy.id === cmd.run_id) return { ok: true, detail: `run ${cmd.run_id} is already ${busy.phase} on this host` };
      const detail = `another run (${busy.id}) is still ${busy.phase} on this host`;
      await this.d.reporter.report(cmd.run_id, { status: "failed", detail, agent_id: this.d.agentId });
      return { ok: false, detail };
    }
    const dir = runDir(this.d.config.runsDir, cmd.run_id);
    const configPath = join(dir, "config.yaml");
    const metricsPath = join(dir, "metrics.jsonl");
    const values: Record<string, string> = {
      config: configPath,
      env_file: cmd.environment.file_path,
      env_name: cmd.environment.name,
      env_class: cmd.environment.class_name,
      run_id: cmd.run_id,
      python: this.d.config.python,
      work_dir: this.d.config.workDir ?? dir,
      run_dir: dir,
      metrics_file: metricsPath,
    };
    let procs: RunProcess[];
    try {
      procs = this.d.config.processes.map((p, i) => new RunProcess(p.name, i, expandCommand(p.argv, values, FROM_EXCHANGE), join(dir, `${p.name}.log`), this.d.clock, this.reported));
    } catch (e) {
      if (!(e instanceof TemplateError)) throw e;
      return this.refuseStart(cmd.run_id, `the runs config's commands: ${e.message}`);
    }
    if (procs.length === 0) return this.refuseStart(cmd.run_id, "this host's runs config lists no processes to start");
    try {
      privateDir(this.d.config.runsDir, this.d.logger);
      privateDir(dir, this.d.logger);
      // Owner-only: it holds the trainer token, in the Atropos URL.
      writePrivateAtomic(configPath, this.d.atropos === undefined ? cmd.config_yaml : withAtroposUrl(cmd.config_yaml, this.d.atropos.engine, this.d.atropos.url));
    } catch (e) {
      // Refused, not thrown: a throw leaves the start unacked, handed out again after each lease (a full disk).
      return this.refuseStart(cmd.run_id, `cannot write ${configPath}: ${describeError(e)}`);
    }
    const run: Run = { id: cmd.run_id, dir, procs, metrics: new MetricsReader(metricsPath, () => this.d.clock.now(), this.d.logger), unsent: [], said: "starting", phase: "starting", halt: new AbortController(), task: Promise.resolve(), stopping: null };
    this.run = run;
    const first = await this.send(run, "starting", `starting ${procs.length} processes: ${procs.map((p) => p.name).join(", ")}`);
    // Stopping with the exchange not told: started now, the processes would belong to a run it has pending, which no agent adopts.
    if (first === null && this.d.stop.aborted) {
      this.finish(run);
      return null;
    }
    if (first?.must_stop) {
      this.finish(run);
      return { ok: true, detail: `run ${run.id} was stopped before it started; nothing was started` };
    }
    const atroposEnv: Record<string, string> = this.d.atropos === undefined ? {} : { ROLLOUT_ATROPOS_URL: this.d.atropos.url };
    const env = cmd.environment;
    run.task = this.startup(run, {
      ROLLOUT_RUN_ID: run.id,
      ROLLOUT_RUN_CONFIG: configPath,
      ROLLOUT_RUN_METRICS: metricsPath,
      ROLLOUT_ENV_FILE: env.file_path,
      ROLLOUT_ENV_NAME: env.name,
      ROLLOUT_ENV_CLASS: env.class_name,
      ...atroposEnv,
    });
    return { ok: true, detail: `starting run ${run.id}: ${procs.map((p) => p.name).join(" -> ")}; output in ${dir}` };
  }

  async stop(runId: string, reason: string): Promise<Outcome> {
    const run = this.run;
    if (run === null || run.id !== runId) return this.stopLeftovers(runId, reason);
    run.stopping ??= (async () => {
      this.d.logger.info(`run ${run.id}: stopping (${reason})`);
      run.phase = "stopping";
      run.halt.abort();
      await run.task;
      await this.stopAll(run);
      const detail = `stopped (${reason}): ${[...run.procs].reverse().filter((p) => p.pid !== null).map((p) => `${p.name} ${p.detail || p.howItEnded()}`).join("; ") || "nothing was running"}`;
      await this.send(run, "stopped", detail, true);
      this.finish(run);
      return { ok: true, detail };
    })();
    return run.stopping;
  }

  /** After an agent restart: adopt the runs that still run here, report the ones that do not. */
  async reattach(): Promise<void> {
    const active = await this.d.reporter.activeRuns();
    if (active === null) {
      // Without the exchange's word a run left here may well be one to adopt: its processes
      // (a training on the GPUs) and notes stay as they are, for the next agent start.
      const left = openJournals(this.d.config.runsDir).map((j) => j.run_id);
      if (left.length > 0) this.d.logger.warn(`could not learn which runs are active; left the processes of ${left.join(", ")} running as they are`);
      return;
    }
    const known = new Set<string>();
    for (const r of active.runs) {
      known.add(r.run_id);
      if (r.status === "pending") continue; // its start command is still to come
      if (!(ACTIVE_RUN_STATUSES as readonly string[]).includes(r.status)) {
        // A status a newer exchange added: this agent cannot tell what it asks of the processes
        // (a training on the GPUs), so it leaves them as they are rather than stop them.
        this.d.logger.warn(`run ${r.run_id}: the exchange says it is "${r.status}", which this agent does not know (the agent may need upgrading); its processes are left as they are`);
        continue;
      }
      const journal = readJournal(this.d.config.runsDir, r.run_id);
      // The exchange's started_at is the agent's clock just after the spawn: a start to check the pid against, where the note has none.
      const reportedStart = (pid: number): NotedStart => {
        const at = r.processes.find((p) => p.pid === pid)?.started_at;
        return at === null || at === undefined ? null : at * 1000;
      };
      const pids =
        journal?.processes.map((p) => ({ ...p, startedAt: notedStart(p.proc_started_at, reportedStart(p.pid)) })) ??
        r.processes.flatMap((p) => (p.pid === null ? [] : [{ name: p.name, pid: p.pid, order: p.order, startedAt: reportedStart(p.pid) }]));
      const dir = runDir(this.d.config.runsDir, r.run_id);
      const procs = pids.map((p) => RunProcess.adopt(p.name, p.order, p.pid, p.startedAt, join(dir, `${p.name}.log`), this.d.clock, this.reported)).sort((a, b) => a.order - b.order);
      const run: Run = { id: r.run_id, dir, procs, metrics: new MetricsReader(join(dir, "metrics.jsonl"), () => this.d.clock.now(), this.d.logger), unsent: [], said: r.status === "starting" ? "starting" : "running", phase: "running", halt: new AbortController(), task: Promise.resolve(), stopping: null };
      const dead = procs.find((p) => p.ended());
      if (r.status === "running" && procs.length > 0 && dead === undefined && this.run === null) {
        this.run = run;
        this.d.logger.info(`run ${r.run_id}: adopted ${procs.map((p) => `${p.name} (pid ${p.pid})`).join(", ")}, left running by a previous agent`);
        const answer = await this.send(run, "running", "reattached after an agent restart");
        run.task = answer?.must_stop ? Promise.resolve() : this.monitor(run);
        if (answer?.must_stop) await this.stop(run.id, "the exchange considers this run over");
        continue;
      }
      run.phase = "stopping";
      const detail =
        r.status === "starting"
          ? "the agent restarted while the run was starting; its processes were stopped"
          : r.status === "stopping"
            ? "stopped after an agent restart"
            : dead !== undefined
              ? `${dead.name} (pid ${dead.pid}) ended while the agent was not running; the others were stopped`
              : "the agent restarted and found no process of this run";
      await this.stopAll(run);
      await this.send(run, r.status === "stopping" ? "stopped" : "failed", detail, true);
      this.closeJournal(run);
    }
    // Processes of runs the exchange no longer counts as active (force-stopped while no agent ran)
    // must not keep GPUs busy; they are stopped as every stop does, a trainer given its grace to save.
    for (const j of openJournals(this.d.config.runsDir)) {
      if (known.has(j.run_id) || j.run_id === this.run?.id) continue;
      await this.stopNoted(j.run_id, j);
    }
  }

  // ---------------------------------------------------------------- internals

  private async refuseStart(runId: string, detail: string): Promise<Outcome> {
    this.d.logger.error(`run ${runId}: ${detail}`);
    await this.d.reporter.report(runId, { status: "failed", detail, agent_id: this.d.agentId });
    return { ok: false, detail };
  }

  private async startup(run: Run, env: Record<string, string>): Promise<void> {
    for (const [i, proc] of run.procs.entries()) {
      if (run.halt.signal.aborted) return;
      const spec = this.d.config.processes[i]!;
      const problem = await proc.spawn({ cwd: spec.cwd ?? this.d.config.workDir, env: { ...spec.env, ...env } });
      this.note(run);
      if (problem !== null) return this.fail(run, proc, `${proc.name} could not start: ${problem}`);
      this.d.logger.info(`run ${run.id}: started ${proc.name} (pid ${proc.pid}); waiting until ${describeReady(spec.ready)}`);
      const answer = await this.send(run, "starting", `waiting for ${proc.name}: ${describeReady(spec.ready)} (deadline ${spec.readyTimeoutSeconds} s)`);
      if (answer?.must_stop) return void this.stop(run.id, "the exchange considers this run over");
      const deadline = this.d.clock.now() + spec.readyTimeoutSeconds * 1000;
      for (;;) {
        if (run.halt.signal.aborted) return;
        // Any process started so far: one already ready may die while a later one gets ready.
        const gone = run.procs.slice(0, i + 1).find((p) => p.ended());
        if (gone !== undefined) return this.fail(run, gone, `${gone.name} ${gone.howItEnded()} while ${gone === proc ? "starting" : `${proc.name} was starting`}`);
        if (spec.ready === undefined || (await checkReady(spec.ready))) break;
        if (this.d.clock.now() >= deadline) {
          proc.state = "failed";
          proc.detail = `not ready after ${spec.readyTimeoutSeconds} s (${describeReady(spec.ready)} never happened)`;
          return this.fail(run, proc, `${proc.name} was ${proc.detail}`);
        }
        await this.d.clock.sleep(this.d.config.pollSeconds * 1000, run.halt.signal);
      }
      proc.state = "ready";
      proc.readyAt = this.d.clock.now();
    }
    run.phase = "running";
    this.d.logger.info(`run ${run.id}: all ${run.procs.length} processes ready`);
    const answer = await this.send(run, "running", `all ${run.procs.length} processes ready`);
    if (answer?.must_stop) return void this.stop(run.id, "the exchange considers this run over");
    run.task = this.monitor(run);
  }

  /** Watches a running run: the first process to exit ends it; new metrics are reported as they come. */
  private async monitor(run: Run): Promise<void> {
    while (!run.halt.signal.aborted && !this.d.stop.aborted) {
      const gone = run.procs.find((p) => p.ended());
      if (gone !== undefined) {
        const clean = gone.exit?.code === 0;
        gone.state = "exited";
        const detail = `${gone.name} ${gone.howItEnded()}`;
        this.d.logger[clean ? "info" : "warn"](`run ${run.id}: ${detail}; stopping the others`);
        run.phase = "stopping";
        await this.stopAll(run);
        await this.send(run, clean ? "completed" : "failed", `${detail}; the other processes were stopped`, true);
        this.finish(run);
        return;
      }
      this.collect(run);
      if (run.unsent.length > 0) {
        const answer = await this.send(run, "running", "");
        if (answer?.must_stop) return void this.stop(run.id, "the exchange considers this run over");
      }
      await this.d.clock.sleep(this.d.config.pollSeconds * 1000, run.halt.signal);
    }
  }

  private async fail(run: Run, culprit: RunProcess, detail: string): Promise<void> {
    this.d.logger.error(`run ${run.id}: ${detail}`);
    if (culprit.ended() && culprit.state !== "failed") culprit.state = "exited";
    culprit.detail ||= detail;
    run.phase = "stopping";
    await this.stopAll(run);
    if (culprit.state === "stopped") culprit.state = "failed";
    await this.send(run, "failed", detail, true);
    this.finish(run);
  }

  /** Stops every started process in reverse start order; one that ended has its group stopped, for what it left there. */
  private async stopAll(run: Run): Promise<void> {
    for (const p of [...run.procs].reverse()) {
      if (p.pid === null) continue;
      await p.stop(this.d.config.stopGraceSeconds * 1000);
    }
  }

  /** A stop_run for a run not running here: stop whatever its note says is left, and say so. */
  private async stopLeftovers(runId: string, reason: string): Promise<Outcome> {
    const procs = await this.stopNoted(runId, readJournal(this.d.config.runsDir, runId));
    const detail = procs.length ? `stopped ${procs.length} leftover processes of run ${runId} (${reason})` : `run ${runId} was not running on this host`;
    await this.d.reporter.report(runId, { status: "stopped", detail, processes: procs.map((p) => p.report(true)), agent_id: this.d.agentId });
    return { ok: true, detail };
  }

  /** The processes a run's note lists that are still ours, stopped in reverse start order (SIGTERM, then SIGKILL after the grace); the note closed. */
  private async stopNoted(runId: string, journal: RunJournal | null): Promise<RunProcess[]> {
    const dir = runDir(this.d.config.runsDir, runId);
    const procs = (journal?.processes ?? []).map((p) => RunProcess.adopt(p.name, p.order, p.pid, notedStart(p.proc_started_at), join(dir, `${p.name}.log`), this.d.clock, this.reported)).filter((p) => !p.gone);
    for (const p of procs.reverse()) await p.stop(this.d.config.stopGraceSeconds * 1000);
    if (journal !== null) this.noted(runId, () => writeJournal(this.d.config.runsDir, { ...journal, closed: true }));
    return procs;
  }

  /**
   * Reports the run with the metrics not sent yet, in reports the exchange takes (at most
   * MAX_REPORT_METRICS points and MAX_REPORT_BYTES): a refused final report would leave the run
   * active there for ever. The status goes with the last of them, so a run ends there with all
   * its metrics; should that one still be refused for what it holds, the status goes alone.
   */
  private async send(run: Run, status: ReportInput["status"], detail: string, withLogTails = false): Promise<RunReportResponse | null> {
    // A run's first metrics may come with its end: read them before the last report.
    if (status !== "running") this.collect(run);
    const live = status === "starting" || status === "running";
    if (live) run.said = status;
    // The end goes with the file's last lines, which the reader hands over a few MB at a time.
    const more = (): boolean => !live && run.metrics.behind;
    const report = (last: boolean, metrics: MetricsPoint[]): ReportInput => ({
      status: last ? status : run.said,
      detail: last ? detail : "",
      processes: run.procs.map((p) => p.report(last && withLogTails)),
      metrics,
      agent_id: this.d.agentId,
    });
    // The end's report (its log tails read from disk) is made once, for every chunk's size.
    const end = report(true, []);
    for (;;) {
      while (run.unsent.length <= MAX_REPORT_METRICS && more()) this.collect(run);
      const points = run.unsent.slice(0, fitting(run.unsent, jsonBytes(end)));
      const last = points.length === run.unsent.length && !more();
      let answer = await this.d.reporter.report(run.id, last ? { ...end, metrics: points } : report(false, points));
      run.unsent.splice(0, points.length);
      if (last && points.length > 0 && refusedForContent(answer)) answer = await this.d.reporter.report(run.id, end);
      // Refused (the reporter said why), or the agent is stopping: the points are not sent again,
      // or a point the exchange will not take would hold back every later report, the end's too.
      if (answer === null || "refused" in answer) {
        if (last) return null;
        continue;
      }
      // A live run the exchange wants stopped: the rest goes with the stop's own report.
      if (last || (answer.must_stop && run.said === status)) return answer;
    }
  }

  /** Takes the run's new metrics lines; one the exchange cannot store or take would have every report it goes in refused. */
  private collect(run: Run): void {
    for (const point of run.metrics.read()) {
      const line = `line ${point.index + 1} of ${run.metrics.path}`;
      const checked = MetricsPoint.safeParse(point);
      const why = checked.success ? storedJsonTooLarge(line, point.values) : `${line}: ${checked.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ")}`;
      if (why === null) run.unsent.push(point);
      else this.d.logger.warn(`run ${run.id}: dropped a metrics line the exchange cannot store: ${why}`);
    }
  }

  private note(run: Run): void {
    this.noted(run.id, () =>
      writeJournal(this.d.config.runsDir, {
        run_id: run.id,
        closed: false,
        processes: run.procs.flatMap((p) => (p.pid === null ? [] : [{ name: p.name, pid: p.pid, order: p.order, ...(p.procStartedAt === null ? {} : { proc_started_at: p.procStartedAt }) }])),
      }),
    );
  }

  private closeJournal(run: Run): void {
    const j = readJournal(this.d.config.runsDir, run.id);
    if (j !== null) this.noted(run.id, () => writeJournal(this.d.config.runsDir, { ...j, closed: true }));
  }

  /**
   * A run's note is for adopting its processes after an agent restart, not a gate: a write the
   * disk refuses (a run that filled it with checkpoints) is warned about, and the run goes on or
   * ends as it would. Thrown, it rejected the run's task, which nobody awaits: the agent exited.
   */
  private noted(runId: string, write: () => void): void {
    try {
      write();
    } catch (e) {
      this.d.logger.warn(`run ${runId}: cannot write its note in ${runDir(this.d.config.runsDir, runId)} (${describeError(e)}): an agent restarted meanwhile may not adopt or close its processes`);
    }
  }

  private finish(run: Run): void {
    run.phase = "over";
    this.closeJournal(run);
    if (this.run === run) this.run = null;
  }
}

/**
 * How many of `points`, from the first, go in a report that takes `reportBytes` without them:
 * at most MAX_REPORT_METRICS and MAX_REPORT_BYTES, but at least one, which alone is storable
 * (collect) and so fits the exchange's request limit.
 */
function fitting(points: MetricsPoint[], reportBytes: number): number {
  let bytes = reportBytes;
  let n = 0;
  for (; n < Math.min(points.length, MAX_REPORT_METRICS); n++) {
    bytes += jsonBytes(points[n]) + 1; // and its comma
    if (n > 0 && bytes > MAX_REPORT_BYTES) break;
  }
  return n;
}

/** A refusal of what a report holds: too large (413) or not valid (422), which its points may be. */
const refusedForContent = (answer: RunReportResponse | ReportRefused | null): boolean =>
  answer !== null && "refused" in answer && (answer.refused === 413 || answer.refused === 422);
