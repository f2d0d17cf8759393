/**
 * Supervises the rollout workers that a start_rollout command launches (the seed's
 * launcher.py): one process group, started from the rolloutCommand template, output appended
 * to <logDir>/rollout-workers.log. Process handling is the training runs' RunProcess (own
 * group, log file not pipe, SIGTERM then SIGKILL to the whole group).
 *
 * As in the seed, a start while the workers run is answered "already running" and changes
 * nothing; with restart_training the workers are stopped and started again with the new
 * job session and group size. The pid is kept in <stateDir>/rollout-workers.json so an agent
 * restarted after a SIGKILL finds the workers it left running instead of starting a second set.
 */
import { readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import type { z } from "zod";
import type { StartRolloutCommand } from "../../../src/protocol/commands";
import type { RolloutWorkersStatus } from "../../../src/protocol/agent";
import type { Clock } from "../clock";
import { TemplateError, expandCommand } from "../command-template";
import { InFlight } from "../in-flight";
import type { Logger } from "../log";
import type { Incarnation, Outcome } from "../outcome-journal";
import { groupAlive, notedStart } from "../runs/process-group";
import { RunProcess } from "../runs/run-process";
import { notePid, privateDir } from "../host-files";
import { isDirectory } from "../trainer";
import { headOf } from "../../../src/protocol/limits";

export type StartRolloutBody = z.infer<typeof StartRolloutCommand>;

export type RolloutWorkersOptions = {
  /** The template's words (placeholders unfilled); null when none is configured. */
  command: string[] | null;
  cwd: string | null;
  logDir: string;
  stateDir: string;
  graceMs: number;
  /** {engine}, {engine_url}, {facade_url}. */
  placeholders: Record<string, string>;
  env: Record<string, string>;
  logger: Logger;
  clock: Clock;
};

/** `incarnation`: the engine's whose command started them; undefined for workers adopted from a pid file written without it. */
type Current = { proc: RunProcess; seq: number; incarnation: Incarnation | undefined; jobSession: string; groupSize: number };
/**
 * `proc_started_at`: the workers' start as /proc told it (RunProcess.procStartedAt); absent without /proc and in older notes, whose started_at was taken just after the spawn.
 * `ended`: how the workers ended on their own, kept for the next agent's heartbeat (a repeated start brings them back: docs/buffer.md).
 */
type PidFile = { pid: number; seq: number; incarnation?: Incarnation; job_session: string; group_size: number; started_at: number; proc_started_at?: number; ended?: string };

export class RolloutWorkers {
  private current: Current | null = null;
  /** The last workers that ended on their own (not stopped by the agent), until new ones start. */
  private endedAlone: { pid: number | null; jobSession: string; detail: string } | null = null;
  /** The workers the agent is stopping: their exit is not one of their own. */
  private stopping: Current | null = null;
  /** The agent is shutting down: no new workers, they would outlive it. */
  private closed = false;
  /** Spawns under way, which a shutdown waits out so that it stops what they start. */
  private readonly launching = new InFlight();
  readonly logPath: string;
  private readonly pidFile: string;

  constructor(private readonly o: RolloutWorkersOptions) {
    this.logPath = join(o.logDir, "rollout-workers.log");
    this.pidFile = join(o.stateDir, "rollout-workers.json");
  }

  status(): { running: boolean; pid: number | null; job_session: string | null; group_size: number | null } {
    const c = this.live();
    return { running: c !== null, pid: c?.proc.pid ?? null, job_session: c?.jobSession ?? null, group_size: c?.groupSize ?? null };
  }

  /** For the heartbeat: the running workers, the last ones that ended on their own, or null. */
  report(): RolloutWorkersStatus | null {
    const c = this.live();
    if (c !== null) return { state: "running", pid: c.proc.pid, job_session: headOf(c.jobSession, 256), detail: `running, group size ${c.groupSize}` };
    const e = this.endedAlone;
    // Within the heartbeat's limits whatever the log path: a refused heartbeat would hide the agent.
    return e === null ? null : { state: "exited", pid: e.pid, job_session: headOf(e.jobSession, 256), detail: headOf(`${e.detail}; see ${this.logPath} on the host`, 1000) };
  }

  /**
   * Finds workers left running by a previous agent process, or that ended on their own since a
   * previous agent started them: the heartbeat says so, as that agent's would have.
   */
  adopt(): void {
    let parsed: unknown;
    try {
      parsed = JSON.parse(readFileSync(this.pidFile, "utf8"));
    } catch {
      return;
    }
    const saved = (typeof parsed === "object" && parsed !== null ? parsed : {}) as PidFile;
    const ended = (detail: string): void => {
      if (typeof saved.job_session === "string") this.endedAlone = { pid: typeof saved.pid === "number" ? saved.pid : null, jobSession: saved.job_session, detail };
    };
    if (typeof saved.ended === "string") return ended(saved.ended);
    const proc = typeof saved.pid === "number" && saved.pid > 1 ? RunProcess.adopt("rollout-workers", 0, saved.pid, notedStart(saved.proc_started_at, saved.started_at), this.logPath, this.o.clock) : null;
    // A pid that names another process now (a reboot since) is not the workers: left alone.
    if (proc === null || proc.gone) {
      if (proc !== null) {
        ended("rollout workers ended while no agent was running; their exit status is unknown");
        if (this.endedAlone !== null) return this.noteEnded(saved);
      }
      rmSync(this.pidFile, { force: true });
      return;
    }
    this.o.logger.info(`adopting rollout workers pid ${saved.pid} (job session ${saved.job_session}), left running by a previous agent`);
    this.current = { proc, seq: saved.seq, incarnation: saved.incarnation, jobSession: saved.job_session, groupSize: saved.group_size };
  }

  /** Null when the agent's shutdown came first: not acked, so the next agent carries the command out. */
  async start(cmd: StartRolloutBody, seq: number, incarnation: Incarnation = null): Promise<Outcome | null> {
    const c = this.live();
    if (c !== null) {
      // The same command by its seq and its engine's incarnation: an engine made again under the name counts its commands from 1 again.
      if (c.seq === seq && c.incarnation === incarnation) return { ok: true, detail: `rollout workers already running (pid ${c.proc.pid}), started by this same command` };
      if (!cmd.restart_training) {
        return { ok: true, detail: `rollout workers are already running (pid ${c.proc.pid}, job session ${c.jobSession}, group size ${c.groupSize}); not started again` };
      }
    }
    if (this.o.command === null) return { ok: false, detail: "this agent has no rollout workers configured (set rolloutCommand, e.g. 'python3 launcher.py --job-id {job_session} --rl-group-size {group_size}')" };
    if (this.o.cwd !== null && !isDirectory(this.o.cwd)) return { ok: false, detail: `the rollout workers' working directory ${this.o.cwd} does not exist` };
    let argv: string[];
    try {
      argv = expandCommand(
        this.o.command,
        {
          ...this.o.placeholders,
          job_session: cmd.job_session,
          group_size: String(cmd.group_size),
          restart_training: String(cmd.restart_training),
        },
        // Any string the trainer token's holder sends; the other two are a number and a boolean.
        { job_session: "ROLLOUT_JOB_SESSION" },
      );
    } catch (e) {
      if (e instanceof TemplateError) return { ok: false, detail: `rolloutCommand: ${e.message}` };
      throw e;
    }
    // Refused before the running workers are stopped, as a template error is: spawn would throw.
    if (cmd.job_session.includes("\0")) return { ok: false, detail: "the job session holds a NUL character, which no process argument or environment variable can hold" };
    let restarted = "";
    if (c !== null) {
      await this.stop("restart_training");
      restarted = ` (restart_training: the previous workers, pid ${c.proc.pid}, were stopped)`;
    }
    if (this.closed) return null;
    return this.launching.track(this.launch(cmd, seq, incarnation, argv, restarted));
  }

  private async launch(cmd: StartRolloutBody, seq: number, incarnation: Incarnation, argv: string[], restarted: string): Promise<Outcome> {
    privateDir(this.o.logDir, this.o.logger);
    privateDir(this.o.stateDir, this.o.logger);
    const proc = new RunProcess("rollout-workers", 0, argv, this.logPath, this.o.clock);
    const failed = await proc.spawn({
      cwd: this.o.cwd,
      env: { ...this.o.env, ROLLOUT_JOB_SESSION: cmd.job_session, ROLLOUT_GROUP_SIZE: String(cmd.group_size), ROLLOUT_RESTART_TRAINING: cmd.restart_training ? "1" : "0" },
    });
    if (failed !== null) {
      return { ok: false, detail: `cannot start the rollout workers: ${failed}` };
    }
    const pid = proc.pid as number;
    this.current = { proc, seq, incarnation, jobSession: cmd.job_session, groupSize: cmd.group_size };
    this.endedAlone = null;
    const noted = proc.procStartedAt === null ? {} : { proc_started_at: proc.procStartedAt };
    notePid(this.pidFile, JSON.stringify({ pid, seq, incarnation, job_session: cmd.job_session, group_size: cmd.group_size, started_at: this.o.clock.now(), ...noted } satisfies PidFile), `rollout workers pid ${pid} run`, this.o.logger);
    const detail = `rollout workers started (pid ${pid}, job session ${cmd.job_session}, group size ${cmd.group_size})${restarted}; output in ${this.logPath}`;
    return { ok: true, detail };
  }

  /** The agent's shutdown: stops the workers (those a start is spawning too), and a start still stopping the previous ones starts none. */
  async shutdown(reason: string): Promise<string> {
    this.closed = true;
    // A spawn under way has no `current` yet: without this wait its workers would outlive the agent.
    await this.launching.settled();
    return this.stop(reason);
  }

  /** Stops the workers' whole process group (SIGTERM, SIGKILL after the grace period); no workers is fine. */
  async stop(reason: string): Promise<string> {
    const c = this.current;
    if (c === null) return "no rollout workers were running";
    this.o.logger.info(`stopping rollout workers pid ${c.proc.pid} (${reason})`);
    this.stopping = c;
    try {
      await c.proc.stop(this.o.graceMs);
    } finally {
      if (this.stopping === c) this.stopping = null;
    }
    if (this.current === c) {
      this.current = null;
      rmSync(this.pidFile, { force: true });
    }
    this.o.logger.info(`rollout workers pid ${c.proc.pid}: ${c.proc.detail}`);
    return c.proc.detail;
  }

  /** The current workers if still running; notices (and logs) workers that ended on their own. */
  private live(): Current | null {
    const c = this.current;
    if (c === null) return null;
    if (!c.proc.ended() || (c.proc.pid !== null && groupAlive(c.proc.pid))) return c;
    // Gone because the agent is stopping them: not running, and not ended on their own (stop() clears them).
    if (c === this.stopping) return null;
    this.o.logger.warn(`rollout workers pid ${c.proc.pid} ${c.proc.howItEnded()}; see ${this.logPath}`);
    this.endedAlone = { pid: c.proc.pid, jobSession: c.jobSession, detail: `rollout workers ${c.proc.howItEnded()}` };
    this.current = null;
    this.noteEnded({ pid: c.proc.pid ?? 0, seq: c.seq, ...(c.incarnation === undefined ? {} : { incarnation: c.incarnation }), job_session: c.jobSession, group_size: c.groupSize, started_at: 0 });
    return null;
  }

  /** Keeps how the workers ended (endedAlone) in place of their pid note, for the next agent: a pid in it is never signalled. */
  private noteEnded(saved: PidFile): void {
    const e = this.endedAlone;
    if (e === null) return;
    notePid(this.pidFile, JSON.stringify({ ...saved, ended: e.detail } satisfies PidFile), "how the rollout workers ended", this.o.logger);
  }
}
